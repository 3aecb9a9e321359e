"""Checks against published deployments: the planner sizes systems whose workload and result are public.

For every deployment in ``examples/published/sources.yaml`` this runs its plan file (the published
throughput as the forecast peak, the published latency constraints as the SLO, the published
hardware, TP and precision as the only candidate, headroom 0, no failover) and compares:

* **GPUs**: the planner's verified minimum for the published throughput vs the GPUs the
  published system used;
* **throughput**: the largest request rate the *published* replica count holds under the same
  SLO in our model (bisection on the rate, every run simulated with the plan's seed and length)
  vs the published rate.

* **offline** (where the deployment lists its Offline run): the steady throughput of the published
  replicas with every request queued at once (the Offline scenario's samples/s), against the
  published one, at the Offline run's batch limit and tokens per sample.

Every metric's error is tabulated per deployment (``metrics_table``). These are checks, not fits:
nothing here tunes the model or the profiles. Prints markdown tables and writes JSON.

    python benchmarks/published_checks.py [--only mlperf-v4.1-h100x8.yaml] [--prompt-tokens 256,1024,fixed:1024]
                                          [--engine-presets] [--seeds 1,2] [--out benchmarks/results/published.json]

``--prompt-tokens`` adds a sensitivity run per value of the mean prompt length, or ``fixed:N``
for every prompt exactly ``N`` tokens (the MLPerf
OpenOrca mean input length is not in any source read for these checks; the plans assume 512);
``--seeds`` reruns each check with other seeds (each count is judged on one seeded run);
``--engine-presets`` reruns each with its deployment's engine preset (``engine`` in sources.yaml).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator import simulate  # noqa: E402
from simulator.planner import load_plan, plan  # noqa: E402
from simulator.planner.config import LoadedPlan  # noqa: E402
from simulator.planner.run import build_tasks, cell_scenario  # noqa: E402
from simulator.planner.search import SearchTask, evaluate  # noqa: E402
from simulator.workload.lengths import make_length  # noqa: E402

PUBLISHED = ROOT / "examples" / "published"


def load_sources(folder: Path = PUBLISHED) -> list[dict[str, Any]]:
    """The deployments registry (``sources.yaml``), each with its plan path resolved."""
    data = yaml.safe_load((folder / "sources.yaml").read_text())
    out = []
    for entry in data["deployments"]:
        out.append({**entry, "plan_path": folder / entry["plan"]})
    return out


def run_at(loaded: LoadedPlan, rate: float, replicas: int) -> dict[str, Any]:
    """One planner verification run: ``replicas`` replicas of the plan's first candidate at
    ``rate`` requests/s (its seed, run length and client network), checked against its SLO."""
    cfg = loaded.config
    template = build_tasks(loaded)[0]
    row = loaded.forecast.iloc[0].to_dict()
    cand = cfg.candidates[0]
    sc = cell_scenario(loaded.candidate_scenarios[cand.name], row, rate, cfg, 0)
    task = SearchTask(quarter=template.quarter, region=template.region, candidate=cand.name, scenario=sc,
                      mixes=template.mixes, slo=template.slo, start=replicas, max_replicas=replicas)
    return evaluate(task, replicas)


def max_rate(loaded: LoadedPlan, replicas: int, guess: float, rel_tol: float = 0.02,
             max_runs: int = 16) -> dict[str, Any]:
    """Largest Poisson rate ``replicas`` replicas of the plan's first candidate hold under its SLO.

    Gallops from ``guess`` (x1.5 up or down) to bracket a pass and a fail, then bisects until the
    bracket is within ``rel_tol``. Each rate is one simulation at the plan's ``num_requests`` and
    seed (common random numbers across rates). Returns the passing rate and the runs.
    """
    runs: dict[float, dict[str, Any]] = {}

    def ok(rate: float) -> bool:
        if rate not in runs:
            runs[rate] = run_at(loaded, rate, replicas)
        return bool(runs[rate]["passed"])

    lo: float | None = None
    hi: float | None = None
    if ok(guess):
        lo = guess
        while hi is None and len(runs) < max_runs:
            rate = lo * 1.5
            if ok(rate):
                lo = rate
            else:
                hi = rate
    else:
        hi = guess
        while lo is None and len(runs) < max_runs:
            rate = hi / 1.5
            if ok(rate):
                lo = rate
            else:
                hi = rate
    while lo is not None and hi is not None and (hi - lo) / lo > rel_tol and len(runs) < max_runs:
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    best = runs[lo] if lo is not None else None
    return {"max_rps": lo, "failing_rps": hi, "simulations": len(runs),
            "at_max": None if best is None else {k: best[k] for k in ("ttft_p99_s", "tpot_p99_s", "batching_factor")},
            "above_max": None if hi is None else
            {k: runs[hi][k] for k in ("ttft_p99_s", "tpot_p99_s", "binding")}}


def offline(entry: dict[str, Any], loaded: LoadedPlan, waves: int = 4) -> dict[str, Any] | None:
    """The published system's Offline throughput in our model: ``waves`` x (replicas x batch limit)
    requests queued at t = 0 on the published replicas (the plan's candidate: hardware, TP,
    precision; the Offline run's batch limit and tokens per sample), the steady rate taken between
    the 25th and 75th percentile of the completion times (the ramp-up and the drain of the last
    batch are not the steady state MLPerf's 200,000-sample runs measure). None without an Offline run."""
    off = entry.get("offline")
    if not off:
        return None
    cfg = loaded.config
    row = {**loaded.forecast.iloc[0].to_dict(), "avg_output_tokens": off["tokens_per_s"] / off["samples_per_s"]}
    n = waves * int(off["replicas"]) * int(off["max_num_seqs"])
    sc = cell_scenario(loaded.candidate_scenarios[cfg.candidates[0].name], row, 1e6, cfg, 0)
    sc = sc.with_overrides({"deployment.replicas": int(off["replicas"]), "num_requests": n, "warmup_s": 0,
                            "scheduler.max_num_seqs": int(off["max_num_seqs"]), "cooldown_s": 0})
    t0 = time.perf_counter()
    res = simulate(sc)
    done = np.sort(res.requests["finish_time"].dropna().to_numpy())
    lo, hi = done[len(done) // 4], done[3 * len(done) // 4]
    sps = (3 * len(done) // 4 - len(done) // 4) / (hi - lo)
    return {"published_samples_per_s": float(off["samples_per_s"]), "samples_per_s": float(sps),
            "error": (sps - off["samples_per_s"]) / off["samples_per_s"], "requests": n,
            "mean_batch": float(res.summary["batch"]["mean_num_seqs"]),
            "result_url": off["result_url"], "wall_s": time.perf_counter() - t0}


def effective_means(loaded: LoadedPlan, n: int = 200_000) -> tuple[float, float]:
    """Sample means of the prompt and output lengths the plan's cell actually draws (truncation
    by resampling makes a truncated lognormal's mean lower than its ``mean`` parameter)."""
    cfg = loaded.config
    row = loaded.forecast.iloc[0].to_dict()
    sc = cell_scenario(loaded.candidate_scenarios[cfg.candidates[0].name], row, float(row["peak_rps"]), cfg, 0)
    rng = np.random.default_rng(0)
    wl = sc.workload
    return tuple(float(make_length(d, sc, f).sample(n, rng).mean())       # type: ignore[return-value]
                 for d, f in ((wl.prompt_tokens, "prompt_tokens"), (wl.output_tokens, "output_tokens")))


def with_engine_preset(raw: dict[str, Any], plan_path: Path, preset: str) -> dict[str, Any]:
    """The plan with its candidates run by engine preset ``preset``: the base scenario's scheduler
    fields that the preset sets are dropped (the preset fills them; the candidates' published
    settings, such as ``max_num_seqs``, still win) and every candidate sets ``engine``."""
    from simulator.scenario.engines import ENGINE_PRESETS

    raw = dict(raw)
    base = raw["scenario"] if isinstance(raw["scenario"], dict) else \
        yaml.safe_load((plan_path.parent / raw["scenario"]).read_text())
    owned = set(ENGINE_PRESETS.lookup(preset).fields)
    base = {**base, "scheduler": {k: v for k, v in base.get("scheduler", {}).items() if k not in owned}}
    raw["scenario"] = base
    raw["candidates"] = [{**c, "set": {**c.get("set", {}), "engine": preset}} for c in raw["candidates"]]
    return raw


def check(entry: dict[str, Any], prompt_tokens: str | None = None, seed: int | None = None,
          workers: int = 1, engine: bool = False) -> dict[str, Any]:
    """Run one deployment's plan and compare; optionally with another prompt length or seed, or
    (``engine``) with the deployment's engine preset (``engine`` in sources.yaml).

    ``prompt_tokens`` is a mean for the base scenario's distribution (``"256"``) or ``"fixed:N"``,
    every prompt exactly ``N`` tokens (``fixed:1024``, the dataset's cap, bounds the prompt load).
    """
    plan_path = Path(entry["plan_path"])
    raw = yaml.safe_load(plan_path.read_text())
    if engine:
        raw = with_engine_preset(raw, plan_path, entry["engine"])
    if prompt_tokens is not None:
        value = float(prompt_tokens.split(":")[-1])
        if prompt_tokens.startswith("fixed:"):
            base = yaml.safe_load((plan_path.parent / raw["scenario"]).read_text())
            base["workload"]["prompt_tokens"] = {"dist": "fixed", "value": int(value)}
            raw["scenario"] = base
        for row in raw["forecast"]:
            row["avg_prompt_tokens"] = value
    if seed is not None:
        raw.setdefault("simulation", {})["seed"] = seed
    loaded = load_plan(raw, base_dir=plan_path.parent)
    eff_prompt, eff_output = effective_means(loaded)
    t0 = time.perf_counter()
    res = plan(loaded, workers=workers)
    ws = res.worksheet.iloc[0]
    tokens_per_sample = entry["tokens_per_s"] / entry["samples_per_s"]
    conv = max_rate(loaded, int(entry["replicas"]), guess=float(entry["samples_per_s"]))
    at_pub = run_at(loaded, float(entry["samples_per_s"]), int(entry["replicas"]))
    off = offline(entry, loaded) if prompt_tokens is None and seed is None else None   # also with the preset
    wall = time.perf_counter() - t0
    pred_gpus = None if ws["status"] != "ok" else int(ws["gpus"])
    max_rps = conv["max_rps"]
    return {
        "deployment": entry["deployment"], "plan": entry["plan"], "hardware": entry["hardware"],
        "software": entry["software"], "result_url": entry["result_url"], "config_url": entry["config_url"],
        "tensor_parallel_size": int(entry["tensor_parallel_size"]), "published_gpus": int(entry["gpus"]),
        "published_samples_per_s": float(entry["samples_per_s"]),
        "published_tokens_per_s": float(entry["tokens_per_s"]),
        "published_ttft_p99_ms": entry.get("measured_ttft_p99_ms"),
        "published_tpot_p99_ms": entry.get("measured_tpot_p99_ms"),
        "tokens_per_sample": tokens_per_sample,
        "avg_prompt_tokens": float(ws["avg_prompt_tokens"]), "avg_output_tokens": float(ws["avg_output_tokens"]),
        "effective_prompt_tokens": eff_prompt, "effective_output_tokens": eff_output,
        "prompt_setting": prompt_tokens or "plan", "seed": int(loaded.config.simulation.seed),
        "engine_preset": entry["engine"] if engine else None,
        "num_requests": int(loaded.config.simulation.num_requests),
        "status": str(ws["status"]), "predicted_gpus": pred_gpus,
        "predicted_replicas": None if pred_gpus is None else int(ws["replicas"]),
        "gpu_error": None if pred_gpus is None else (pred_gpus - entry["gpus"]) / entry["gpus"],
        "predicted_ttft_p99_ms": float(ws["ttft_p99_ms"]), "predicted_tpot_p99_ms": float(ws["tpot_p99_ms"]),
        "batching_factor": float(ws["batching_factor"]), "minus_one_check": str(ws["minus_one_check"]),
        "analytic_estimate_replicas": int(ws["analytic_estimate_replicas"]),
        "plan_simulations": int(ws["simulations"]),
        "max_rps_on_published_gpus": max_rps,
        "max_tokens_per_s_on_published_gpus": None if max_rps is None else max_rps * tokens_per_sample,
        "throughput_error": None if max_rps is None else (max_rps - entry["samples_per_s"]) / entry["samples_per_s"],
        # Little's law on the published run: samples/s x mean end-to-end latency, per replica.
        "published_in_flight_per_replica": None if entry.get("measured_mean_latency_ms") is None else
        entry["samples_per_s"] * entry["measured_mean_latency_ms"] / 1000.0 / entry["replicas"],
        "at_published_point": {"ttft_p99_ms": 1000 * at_pub["ttft_p99_s"], "tpot_p99_ms": 1000 * at_pub["tpot_p99_s"],
                               "batching_factor": at_pub["batching_factor"], "passed": bool(at_pub["passed"])},
        "converse": conv, "offline": off, "wall_s": wall,
    }


def _pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.0f}%"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| deployment | hardware (TP) | published GPUs | published throughput | mean prompt: assumed (drawn) "
            "| seed | predicted GPUs for it | GPU error | predicted max on published GPUs | throughput error |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        pub = f"{r['published_samples_per_s']:.2f} req/s = {r['published_tokens_per_s']:,.0f} output tok/s"
        pred = "infeasible" if r["predicted_gpus"] is None else \
            f"{r['predicted_gpus']} ({r['predicted_replicas']} x TP {r['tensor_parallel_size']})"
        mx = "–" if r["max_rps_on_published_gpus"] is None else \
            f"{r['max_rps_on_published_gpus']:.1f} req/s = {r['max_tokens_per_s_on_published_gpus']:,.0f} tok/s"
        lines.append(f"| {r['deployment']} | {r['hardware']} (TP {r['tensor_parallel_size']}) | {r['published_gpus']} "
                     f"| {pub} | {r['avg_prompt_tokens']:.0f} ({r['effective_prompt_tokens']:.0f}) | {r['seed']} "
                     f"| {pred} | {_pct(r['gpu_error'])} | {mx} "
                     f"| {_pct(r['throughput_error'])} |")
    return "\n".join(lines)


def latency_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| deployment | mean prompt (drawn) | TTFT p99 published / ours (ms) | TPOT p99 published / ours (ms) "
             "| requests in flight per replica: published (Little's law) / ours (mean running batch) |",
             "|---|---|---|---|---|"]
    for r in rows:
        a = r["at_published_point"]
        little = r.get("published_in_flight_per_replica")
        lines.append(f"| {r['deployment']} | {r['effective_prompt_tokens']:.0f} "
                     f"| {r['published_ttft_p99_ms']:.0f} / {a['ttft_p99_ms']:.0f} "
                     f"| {r['published_tpot_p99_ms']:.0f} / {a['tpot_p99_ms']:.0f} "
                     f"| {'–' if little is None else f'{little:.0f}'} / {float(a['batching_factor']):.0f} |")
    return "\n".join(lines)


def metrics_table(rows: list[dict[str, Any]]) -> str:
    """One row per deployment and metric: published, ours, error; then the median |error| per metric."""
    lines = ["| deployment | metric | published | ours | error |", "|---|---|---|---|---|"]
    per: dict[str, list[float]] = {}

    def add(dep: str, metric: str, pub: float | None, ours: float | None, fmt: str) -> None:
        err = None if pub in (None, 0) or ours is None else (ours - pub) / pub
        if err is not None:
            per.setdefault(metric, []).append(abs(err))
        lines.append(f"| {dep} | {metric} | {'–' if pub is None else format(pub, fmt)} "
                     f"| {'–' if ours is None else format(ours, fmt)} | {_pct(err)} |")

    for r in rows:
        dep, a = r["deployment"], r["at_published_point"]
        add(dep, "Server: max rate on the published GPUs (req/s)", r["published_samples_per_s"],
            r["max_rps_on_published_gpus"], ",.2f")
        add(dep, "Server: GPUs for the published rate", r["published_gpus"], r["predicted_gpus"], ",.0f")
        add(dep, "Server: TTFT p99 at the published rate (ms)", r["published_ttft_p99_ms"], a["ttft_p99_ms"], ",.0f")
        add(dep, "Server: TPOT p99 at the published rate (ms)", r["published_tpot_p99_ms"], a["tpot_p99_ms"], ",.0f")
        if r.get("offline"):
            o = r["offline"]
            add(dep, "Offline: throughput (req/s)", o["published_samples_per_s"], o["samples_per_s"], ",.2f")
    lines += ["", "| metric | deployments | median abs error | largest abs error |", "|---|---|---|---|"]
    for metric, errs in per.items():
        lines.append(f"| {metric} | {len(errs)} | {100 * float(np.median(errs)):.0f}% | {100 * max(errs):.0f}% |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="run only this plan file name")
    ap.add_argument("--prompt-tokens", default="", help="comma-separated mean prompt lengths (or fixed:N) "
                    "for a sensitivity run, e.g. 256,1024,fixed:1024")
    ap.add_argument("--seeds", default="", help="comma-separated extra seeds for a sampling-noise run")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--engine-presets", action="store_true",
                    help="also run every check with its deployment's engine preset (sources.yaml: engine)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/published.json"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    entries = [e for e in load_sources() if args.only in (None, e["plan"])]
    if not entries:
        raise SystemExit(f"error: --only = {args.only!r}: no such plan in examples/published/sources.yaml")
    rows = [check(e, workers=args.workers) for e in entries]
    print(table(rows))
    print("\nAt the published operating point (published rate on the published replicas):\n")
    print(latency_table(rows))
    print("\nError per metric (checks, not fits):\n")
    print(metrics_table(rows))
    sens = []
    for p in (x.strip() for x in args.prompt_tokens.split(",") if x.strip()):
        sens += [check(e, prompt_tokens=p, workers=args.workers) for e in entries]
    if sens:
        print("\nSensitivity to the assumed mean prompt length:\n")
        print(table(sens))
        print()
        print(latency_table(sens))
    presets = [check(e, workers=args.workers, engine=True) for e in entries] if args.engine_presets else []
    if presets:
        print("\nWith each deployment's engine preset (" + ", ".join(f"{e['plan']}: {e['engine']}" for e in entries)
              + "):\n")
        print(table(presets))
        print()
        print(latency_table(presets))
        print()
        print(metrics_table(presets))
    noise = []
    for seed in (int(x) for x in args.seeds.split(",") if x.strip()):
        noise += [check(e, seed=seed, workers=args.workers) for e in entries]
    if noise:
        print("\nOther seeds (sampling noise):\n")
        print(table(noise))
    wall = time.perf_counter() - t0
    print(f"\n{len(rows) + len(sens) + len(presets) + len(noise)} checks in {wall:.1f} s wall "
          f"({time.process_time() - cpu0:.1f} CPU s in this process); "
          f"load average {os.getloadavg()[0]:.1f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "checks": rows, "sensitivity": sens, "engine_presets": presets, "seeds": noise, "wall_s": wall,
        "cpu_count": os.cpu_count(),
        "load_average_1min_at_end": os.getloadavg()[0], "python": platform.python_version(),
        "machine": platform.machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }, indent=2, default=float) + "\n")


if __name__ == "__main__":
    main()
