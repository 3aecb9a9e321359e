"""Interactive speed (issue 22): how long a user waits for the CLI, the engine and the planner.

Every measurement runs in a fresh subprocess (``python -m simulator.cli ...``, which runs what the
``llmplan`` command runs, or a short script
that imports the simulator), so start-up costs count and the code under test can be another
checkout (``--baseline PATH`` measures that tree too, interleaved run by run with this one, and
reports the ratio: compare figures measured in one invocation, since a shared machine's load
drifts between invocations). Rows:

* ``--help``, ``from simulator.cli import app``: process wall time (process rows also record CPU time,
  user + system with worker processes: less disturbed by other jobs than wall time).
* ``simulate speed-10k`` (whole process): ``llmplan simulate benchmarks/scenarios/speed-10k.yaml
  --json`` (10k requests, A100-80GB datasheet roofline, Llama 3 8B, fixed 512/128 tokens, Poisson
  5 req/s), and the same with ``--set hardware=a100-80gb`` (the measured kernel-table default).
* engine: simulated requests per wall second of ``simulate()`` alone (imports excluded), on
  speed-10k, on ShareGPT-like traffic (examples/sharegpt-h100.yaml on the h100-sxm-datasheet
  roofline) at 90% of its capacity with 100k requests (10k with ``--quick``; capacity is measured by
  a saturated simulation), on both again with the measured default profiles (a100-80gb, h100-sxm:
  kernel tables), and on 8 round-robin replicas of examples/chat-h100.yaml on the roofline (6,000
  requests at 56 req/s).
* feature cost: CPU time of speed-10k with speculative decoding (draft llama-3.2-1b, k=4,
  acceptance 0.8), chunked prefill (vLLM's default threshold, and 256-token chunks) or prefix
  caching (4 shared 256-token system prompts for 80% of requests, caching on vs off) over the
  same run without it, and of speculative decoding under chunked prefill (as vLLM v1 runs it) over
  chunked prefill alone; the variants run round-robin in one process, median of the repeats.
* ``--plan``: ``llmplan plan examples/plan-fy27.yaml --workers 2`` (long).
* ``--app``: the dashboard's What-if page through streamlit's AppTest in a fresh process, and its
  default scenario run with an empty cache (needs the app extra).

Each tree's ``simulator``, ``app_pages`` and ``app.py`` are byte-compiled first (``python -m
compileall``), as ``pip install`` does: a measured start-up reads the bytecode caches a user's runs
read. Each figure is the median of ``--repeats`` runs (``--plan-repeats`` for the plan); the 1-minute
load average is read before and after every run (``os.getloadavg``) and reported with the row.

    python benchmarks/bench_speed.py [--quick] [--repeats 3] [--plan] [--app] [--baseline PATH]
                                     [--only cli,engine,features,plan,app] [--out benchmarks/results/speed.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LLMPLAN = ("-m", "simulator.cli")
"""The ``llmplan`` command of a tree: ``python -m simulator.cli`` runs what its console script runs."""
SPEED_SCENARIO = ROOT / "benchmarks" / "scenarios" / "speed-10k.yaml"
SHAREGPT = ROOT / "examples" / "sharegpt-h100.yaml"
PLAN = ROOT / "examples" / "plan-fy27.yaml"
CHAT = ROOT / "examples" / "chat-h100.yaml"
MEASURED = "a100-80gb"
"""The measured default profile of the scenario's GPU (kernel tables; the scenario names its datasheet roofline)."""
REPLICAS8 = {"num_requests": 6000, "deployment.replicas": 8, "workload.arrival.rate_per_s": 56.0}
"""Eight round-robin replicas of examples/chat-h100.yaml at 7 req/s each (the planner's kind of run)."""

#: The issue's targets: row key -> (comparison, value, unit).
TARGETS: dict[str, tuple[str, float, str]] = {
    "help": ("<=", 0.4, "s"),
    "whole": ("<=", 0.6, "s"),
    "whole_table": ("<=", 0.6, "s"),
    "engine_sharegpt": (">=", 100_000.0, "req/s"),
    "cost_spec": ("<=", 2.0, "x"),
    "cost_chunked": ("<=", 2.0, "x"),
    "cost_chunked_256": ("<=", 2.0, "x"),
    "cost_chunked_spec": ("<=", 2.0, "x"),
    "cost_prefix": ("<=", 2.0, "x"),
    "plan": ("<=", 20.0, "s"),
    "app_run": ("<=", 1.5, "s"),
}

PREFIX = {"num_prefixes": 4, "prefix_tokens": 256, "share": 0.8}
SPEC = {"method": "draft", "draft_model": "llama-3.2-1b", "num_speculative_tokens": 4, "acceptance_rate": 0.8}
#: Feature variants of speed-10k: name -> overrides; ``cost_*`` rows divide a variant by its ``off``.
VARIANTS: dict[str, dict[str, Any]] = {
    "off": {},
    "spec": {"speculative_config": SPEC},
    "chunked": {"scheduler.policy": "chunked_prefill"},
    "chunked_256": {"scheduler.policy": "chunked_prefill", "scheduler.long_prefill_token_threshold": 256},
    "chunked_spec": {"scheduler.policy": "chunked_prefill", "speculative_config": SPEC},
    "prefix_off": {"workload.prefix": PREFIX},
    "prefix": {"workload.prefix": PREFIX, "scheduler.enable_prefix_caching": True},
}
COSTS = {"cost_spec": ("spec", "off"), "cost_chunked": ("chunked", "off"),
         "cost_chunked_256": ("chunked_256", "off"), "cost_prefix": ("prefix", "prefix_off"),
         "cost_chunked_spec": ("chunked_spec", "chunked")}

# A script run in the tree under test: times simulate() for each job, round-robin, and prints JSON.
ENGINE_SCRIPT = r"""
import gc, json, sys, time
from simulator.scenario.config import load_scenario
from simulator.run.simulate import simulate
jobs, repeats = json.loads(sys.argv[1]), int(sys.argv[2])
scenarios = {}
for name, (path, overrides, saturate_rate) in jobs.items():
    sc = load_scenario(path, overrides)
    if saturate_rate:   # run at a fraction of the capacity measured by a saturated simulation
        sat = simulate(sc.with_overrides({"num_requests": 4000, "warmup_s": 0, "cooldown_s": 0,
                                          "workload.arrival.rate_per_s": 1e6}))
        capacity = sat.summary["requests"]["completed"] / sat.sim_time_s
        sc = sc.with_overrides({"workload.arrival.rate_per_s": saturate_rate * capacity})
    scenarios[name] = sc
    simulate(sc.with_overrides({"num_requests": 200, "warmup_s": 0,   # warm caches (profiles, cost tables);
                                "cooldown_s": 0})).summary           # 200 requests end inside a warm-up
out = {name: {"wall_s": [], "cpu_s": []} for name in jobs}
for _ in range(repeats):
    for name, sc in scenarios.items():
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        r = simulate(sc)
        r.summary   # part of every run's result (computed inside simulate() before it was computed on first use)
        out[name]["wall_s"].append(time.perf_counter() - t0)
        out[name]["cpu_s"].append(time.process_time() - c0)
        out[name]["num_requests"] = len(r.requests)
        out[name]["rate_per_s"] = sc.workload.arrival.rate_per_s
        out[name]["num_steps"] = r.step_log.num_steps
        out[name]["num_entries"] = r.step_log.num_entries
print(json.dumps(out))
"""

APP_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.run()
t1 = time.perf_counter()
at.button(key="wi_run").click().run()
t2 = time.perf_counter()
assert not at.exception, [e.message for e in at.exception]
print(json.dumps({"open": t1 - t0, "run": t2 - t1}))
"""


def load1() -> float:
    return os.getloadavg()[0]


def compile_tree(root: Path) -> None:
    """Byte-compile a tree's Python files, as ``pip install`` does for an installed package (and as
    Python does on an editable checkout's first import): a user's runs read the bytecode caches, so a
    measured start-up must not include compiling the simulator's modules from source, which an
    environment with ``PYTHONDONTWRITEBYTECODE`` set would do on every run (0.1-0.15 s here)."""
    paths = [str(p) for p in (root / "simulator", root / "app_pages", root / "app.py") if p.exists()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *paths], check=True, capture_output=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})


def run_process(root: Path, argv: list[str], cwd: Path | None = None) -> tuple[float, float, str]:
    """Wall time and CPU time (user + system, with its worker processes) of one subprocess running
    ``argv`` with ``root`` first on the import path; its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(root)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd or root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


class Bench:
    """Collects every run's figures per (tree, row), with the load average around it."""

    def __init__(self, roots: dict[str, Path]) -> None:
        self.roots = roots
        self.rows: dict[str, dict[str, dict[str, Any]]] = {label: {} for label in roots}

    def record(self, label: str, key: str, value: float, loads: tuple[float, float], **extra: Any) -> None:
        row = self.rows[label].setdefault(key, {"values": [], "load1": []})
        row["values"].append(value)
        row["load1"].extend(loads)
        row.update(extra)

    def processes(self, key: str, argv_for: Any, repeats: int, warm: bool = True) -> None:
        """Time a subprocess ``repeats`` times per tree, the trees interleaved run by run, after one
        untimed run per tree (it warms the OS file cache; the trees were byte-compiled first)."""
        for root in self.roots.values():
            if warm:
                run_process(root, argv_for(root))
        for _ in range(repeats):
            for label, root in self.roots.items():
                before = load1()
                wall, cpu, _ = run_process(root, argv_for(root))
                self.record(label, key, wall, (before, load1()))
                self.record(label, key + "_cpu", cpu, (before, load1()))

    def engine(self, jobs: dict[str, tuple[str, dict[str, Any], float]], repeats: int) -> dict[str, dict[str, Any]]:
        """Run ``ENGINE_SCRIPT`` once per tree (each doing ``repeats`` round-robin rounds); per tree, its output."""
        outputs = {}
        for label, root in self.roots.items():
            before = load1()
            _, _, stdout = run_process(root, [sys.executable, "-c", ENGINE_SCRIPT, json.dumps(jobs), str(repeats)])
            outputs[label] = (json.loads(stdout.strip().splitlines()[-1]), (before, load1()))
        return outputs


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="10k ShareGPT requests instead of 100k")
    ap.add_argument("--plan", action="store_true", help="also time the FY27 example plan with 2 workers (long)")
    ap.add_argument("--plan-repeats", type=int, default=1)
    ap.add_argument("--app", action="store_true", help="also time the dashboard's default What-if run, cold")
    ap.add_argument("--baseline", type=Path, help="another checkout to measure the same way, interleaved")
    ap.add_argument("--only", help="comma-separated groups to run: " + ",".join(GROUPS))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "speed.json")
    args = ap.parse_args()
    roots = {"this": ROOT}
    if args.baseline is not None:
        roots = {"baseline": args.baseline.resolve(), "this": ROOT}
    for root in roots.values():
        compile_tree(root)
    bench = Bench(roots)
    py = sys.executable
    groups = set(args.only.split(",")) if args.only else {"cli", "engine", "features"} | (
        {"plan"} if args.plan else set()) | ({"app"} if args.app else set())
    unknown = groups - set(GROUPS)
    if unknown:
        ap.error(f"unknown --only groups {sorted(unknown)}; choose from {', '.join(GROUPS)}")
    started = time.time()
    load_start = os.getloadavg()

    if "cli" in groups:
        bench.processes("help", lambda root: [py, *LLMPLAN, "--help"], args.repeats)
        bench.processes("import", lambda root: [py, "-c", "from simulator.cli import app"], args.repeats)
        bench.processes("whole", lambda root: [py, *LLMPLAN, "simulate", str(SPEED_SCENARIO), "--json",
                                               "--no-progress"], args.repeats)
        bench.processes("whole_table", lambda root: [py, *LLMPLAN, "simulate", str(SPEED_SCENARIO),
                                                     "--json", "--no-progress", "--set", f"hardware={MEASURED}"],
                        args.repeats)

    sharegpt_n = 10_000 if args.quick else 100_000
    sharegpt = {"num_requests": sharegpt_n, "warmup_s": 0, "cooldown_s": 0}
    jobs = {"engine_speed10k": (str(SPEED_SCENARIO), {}, 0.0),
            "engine_speed10k_table": (str(SPEED_SCENARIO), {"hardware": MEASURED}, 0.0),
            "engine_sharegpt": (str(SHAREGPT), {**sharegpt, "hardware": "h100-sxm-datasheet"}, 0.9),
            "engine_sharegpt_table": (str(SHAREGPT), {**sharegpt, "hardware": "h100-sxm"}, 0.9),
            "engine_replicas8": (str(CHAT), {**REPLICAS8, "hardware": "h100-sxm-datasheet"}, 0.0),
            "engine_replicas8_table": (str(CHAT), {**REPLICAS8, "hardware": "h100-sxm"}, 0.0)}
    for label, (out, loads) in (bench.engine(jobs, args.repeats).items() if "engine" in groups else ()):
        for key, fig in out.items():
            for wall in fig["wall_s"]:
                bench.record(label, key, fig["num_requests"] / wall, loads, num_requests=fig["num_requests"],
                             rate_per_s=fig["rate_per_s"], num_steps=fig["num_steps"],
                             num_entries=fig["num_entries"], wall_s=fig["wall_s"])

    if "features" in groups:
        jobs = {name: (str(SPEED_SCENARIO), overrides, 0.0) for name, overrides in VARIANTS.items()}
        for label, (out, loads) in bench.engine(jobs, args.repeats).items():
            for key, (variant, base) in COSTS.items():
                ratios = [v / b for v, b in zip(out[variant]["cpu_s"], out[base]["cpu_s"], strict=True)]
                for r in ratios:
                    bench.record(label, key, r, loads, cpu_s=out[variant]["cpu_s"], base_cpu_s=out[base]["cpu_s"],
                                 num_steps=out[variant]["num_steps"], num_entries=out[variant]["num_entries"],
                                 ratio_of_medians=median(out[variant]["cpu_s"]) / median(out[base]["cpu_s"]))

    if "plan" in groups:
        with tempfile.TemporaryDirectory() as tmp:
            def plan_argv(root: Path) -> list[str]:   # a new folder each run: plan refuses to overwrite one
                return [py, *LLMPLAN, "plan", str(PLAN), "--workers", "2", "--no-progress",
                        "--out", tempfile.mkdtemp(dir=tmp)]
            bench.processes("plan", plan_argv, args.plan_repeats, warm=False)

    if "app" in groups:
        for _ in range(args.repeats):
            for label, root in roots.items():
                before = load1()
                _, _, stdout = run_process(root, [py, "-c", APP_SCRIPT, str(root / "app.py")])
                fig = json.loads(stdout.strip().splitlines()[-1])
                bench.record(label, "app_open", fig["open"], (before, load1()))
                bench.record(label, "app_run", fig["run"], (before, load1()))

    report(bench, args, started, load_start)


GROUPS = ("cli", "engine", "features", "plan", "app")

LABELS = {
    "help": "llmplan --help (process)", "import": "from simulator.cli import app (process)",
    "whole": "simulate speed-10k --json (whole process)", "whole_cpu": "  the same, CPU s",
    "whole_table": "  the same on measured a100-80gb (whole process)",
    "engine_speed10k": "engine, speed-10k (simulated req/s)",
    "engine_speed10k_table": "engine, speed-10k on measured a100-80gb (req/s)",
    "engine_sharegpt": "engine, ShareGPT 90% load (simulated req/s)",
    "engine_sharegpt_table": "engine, ShareGPT 90% on measured h100-sxm (req/s)",
    "engine_replicas8": "engine, 8 replicas, chat-h100 (simulated req/s)",
    "engine_replicas8_table": "engine, 8 replicas on measured h100-sxm (req/s)",
    "cost_spec": "speculative decoding / off (CPU)", "cost_chunked": "chunked prefill / off (CPU)",
    "cost_chunked_256": "chunked prefill 256-token chunks / off (CPU)",
    "cost_chunked_spec": "spec decoding + chunked / chunked (CPU)",
    "cost_prefix": "prefix caching on / off (CPU)",
    "plan": "FY27 example plan, 2 workers (process)", "plan_cpu": "  the same, CPU s (all processes)",
    "app_open": "dashboard: open What-if (AppTest, process)",
    "app_run": "dashboard: default What-if run, cold",
}


def verdict(key: str, value: float) -> str:
    if key not in TARGETS:
        return ""
    op, target, unit = TARGETS[key]
    met = value <= target if op == "<=" else value >= target
    return f"{op} {target:g} {unit}: {'met' if met else 'NOT met'}"


def fmt(key: str, value: float) -> str:
    if key.endswith("_cpu"):
        return f"{value:.2f} s"
    if key.startswith("engine"):
        return f"{value:,.0f}"
    if key.startswith("cost"):
        return f"{value:.2f}x"
    return f"{value:.3f} s"


def report(bench: Bench, args: argparse.Namespace, started: float, load_start: tuple[float, float, float]) -> None:
    labels = list(bench.roots)
    keys = [k for k in LABELS if any(k in bench.rows[label] for label in labels)]
    width = max(len(LABELS[k]) for k in keys)
    head = f"{'measurement':<{width}}" + "".join(f" {label + ' (median)':>18}" for label in labels)
    if len(labels) == 2:
        head += f" {'this/baseline':>14}"
    head += f" {'load1 min-max':>14}  target"
    print(head)
    print("-" * len(head))
    summary: dict[str, Any] = {}
    for k in keys:
        line = f"{LABELS[k]:<{width}}"
        meds = {}
        loads: list[float] = []
        for label in labels:
            row = bench.rows[label].get(k)
            if row is None:
                line += f" {'-':>18}"
                continue
            meds[label] = median(row["values"])
            loads += row["load1"]
            row["median"] = meds[label]
            line += f" {fmt(k, meds[label]):>18}"
        if len(labels) == 2:
            line += f" {meds['this'] / meds['baseline']:>14.3f}" if len(meds) == 2 else f" {'-':>14}"
        line += f" {min(loads):>6.2f}-{max(loads):<6.2f}  {verdict(k, meds.get('this', float('nan')))}"
        print(line)
        summary[k] = {label: bench.rows[label].get(k) for label in labels}
    load_end = os.getloadavg()
    print(f"\nload average (1, 5, 15 min): start {tuple(round(x, 2) for x in load_start)}, "
          f"end {tuple(round(x, 2) for x in load_end)}; {os.cpu_count()} CPUs; {time.time() - started:.0f} s in all")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_speed", "date": datetime.date.today().isoformat(), "repeats": args.repeats,
        "quick": args.quick, "roots": {k: str(v) for k, v in bench.roots.items()},
        "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
        "load_average_start": load_start, "load_average_end": load_end,
        "targets": TARGETS, "rows": summary,
        "all_runs": {label: bench.rows[label] for label in labels}}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
