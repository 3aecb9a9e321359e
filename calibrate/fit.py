"""``llmplan calibrate --from-observation``: fit a profile's costs to a real engine's observed runs.

A kernel profile (measured torch kernels, imported tables or a datasheet) times the kernels *it*
knows; the engine a user serves runs others (fused, pre-packed, graph-captured) and spends its
own CPU time per step. This module fits the few numbers that close that gap, by simulation:

* every observed run (:mod:`simulator.workload.observation`) is replayed in the simulator (same
  arrivals, same lengths; engine settings from ``--scenario``/``--engine``) on the base profile
  with candidate costs;
* the loss is, per run, the mean over completed requests of the squared log ratio of simulated
  to observed TTFT plus that of TPOT (each ratio clipped at e^3), averaged over runs;
* the costs (:data:`PARAMETERS`): ``step_s`` (the engine's CPU time per step, the profile's
  ``overhead.step_s``), ``kernel_scale`` (one factor on every kernel time of the profile: its
  table's times, or its peak FLOP/s and bandwidth), ``per_token_s`` (time per token computed in a
  step, ``overhead.per_token_s``: input preparation, and whatever makes the engine's prefill cost
  more or less against its decode than the base profile's kernels say), ``frontend_s`` (the API
  server's time per request outside the engine loop: a constant in every TTFT and E2E, none in
  TPOT), optionally ``per_seq_s`` (CPU time per request in a step). Each has a distinct signature
  (a constant per step, a share of a step growing with its batch's kernels, a cost per token, a
  constant per request, a cost per sequence), so the fit is identifiable from runs with different
  batch sizes and prompt lengths: fit on at least two loads, e.g. a light and a heavy one. A cost
  that is a small share of every step (``per_token_s`` under ~10% of a prefill's time) is weakly
  identified: it trades against the others with little change in the loss;
* the optimiser is Nelder-Mead on the parameters' logarithms (written here in numpy; a fixed start
  at the base profile's values, so the same inputs give the same fit, and the simulations are
  seeded), at most ``max_evals`` simulations of every run.

With ``leave_one_out`` (``--leave-one-out``) the fit is repeated without each fitted run, in worker
processes: each cost's range over the refits, each run's error when it was left out, and a warning
naming a run a cost rests on (:func:`_leave_one_out`).

Writes ``DIR/profile.yaml`` (``source: fitted``: the base profile with the fitted overhead and its
kernel times scaled, a scaled ``ops.csv`` for table profiles) whose provenance names the engine
(and its version where the server reported it), the model, the device, the runs used, the fit
error and the error on held-out runs, and ``DIR/fit.json`` (the same, plus every evaluation).
No torch: this path runs wherever the simulator does.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from simulator.cost.op_table import file_sha256
from simulator.errors import ScenarioError
from simulator.run.resolve import model_option
from simulator.scenario.models import ModelSpec
from simulator.scenario.profiles import HardwareProfile, load_profile
from simulator.workload.observation import Observation, read_observation, run_names

from .provenance import git_revision


@dataclass(frozen=True)
class Parameter:
    """One fitted cost: its bounds and how its start is read from the base profile."""

    lo: float
    hi: float
    unit: str
    start: Callable[[HardwareProfile], float]
    doc: str


PARAMETERS: dict[str, Parameter] = {
    "step_s": Parameter(1e-6, 1.0, "s", lambda p: max(p.overhead.step_s, 1e-4),
                        "the engine's CPU time per step (overhead.step_s)"),
    "kernel_scale": Parameter(0.02, 50.0, "x", lambda p: 1.0,
                              "one factor on every kernel time of the base profile"),
    "per_seq_s": Parameter(1e-8, 0.1, "s", lambda p: max(p.overhead.per_seq_s, 1e-6),
                           "CPU time per request in a step (overhead.per_seq_s)"),
    "per_token_s": Parameter(1e-9, 0.01, "s", lambda p: max(p.overhead.per_token_s, 1e-5),
                             "CPU time per token computed in a step (overhead.per_token_s)"),
    "frontend_s": Parameter(1e-5, 1.0, "s", lambda p: max(p.overhead.frontend_s or 0.0, 1e-3),
                            "the front end's time per request outside the engine loop (overhead.frontend_s)"),
}
DEFAULT_PARAMETERS = ("step_s", "kernel_scale", "per_token_s", "frontend_s")
#: Simulations of every run a fit may take: the four default costs from their base values take 300-360 on
#: a fake engine with known costs (recovered to 0.1%); three took ~150.
DEFAULT_MAX_EVALS = 400
#: The fit logs a progress line after every this many evaluations (each simulates every fitted run).
PROGRESS_EVERY = 25
#: Residuals are clipped at this |log ratio| (a request 20x off counts as 20x, not more).
CLIP = 3.0
#: Scenario sections a base scenario lends the fit (the engine as served); the rest is the observation's.
ENGINE_SECTIONS = ("deployment", "scheduler", "engine", "speculative_config", "client", "seed")


@dataclass(frozen=True)
class FitSettings:
    observations: tuple[str, ...]
    model: str
    hardware: str | None = None
    holdout: tuple[str, ...] = ()
    scenario: str | None = None
    engine: str | None = None
    parameters: tuple[str, ...] = DEFAULT_PARAMETERS
    max_evals: int = DEFAULT_MAX_EVALS
    name: str | None = None
    device: str | None = None
    """What the engine ran on (default: the base profile's device)."""
    seed: int = 0
    engine_steps: tuple[str, ...] = ()
    """Server logs of the engine's own step times (:mod:`calibrate.engine_steps`): ``kernel_scale``
    is then regressed on them instead of searched for, and the search fits the other costs."""
    leave_one_out: bool = False
    """Refit once without each fitted run (:func:`_leave_one_out`): how far the costs move with the
    runs chosen, and each run's error when it was not fitted on."""
    workers: int | None = None
    """Processes the leave-one-out refits run in (default: the CPU count; 1: in this process)."""


@dataclass
class _Problem:
    model: ModelSpec
    base: HardwareProfile
    base_data: dict[str, Any]
    base_sections: dict[str, Any]
    work: Path
    table: Any = None
    evals: list[dict[str, Any]] = field(default_factory=list)
    steps_fit: dict[str, Any] | None = None


def check(s: FitSettings) -> None:
    if not s.observations:
        raise ScenarioError("--from-observation", None, "give at least one observation file to fit on")
    if s.engine_steps and "kernel_scale" not in s.parameters:
        raise ScenarioError("--engine-steps", list(s.engine_steps), "fits kernel_scale from the engine's step "
                            "times: keep kernel_scale in --fit")
    unknown = [p for p in s.parameters if p not in PARAMETERS]
    if unknown or not s.parameters or len(set(s.parameters)) != len(s.parameters):
        raise ScenarioError("--fit", ",".join(s.parameters), f"a comma-separated subset of {', '.join(PARAMETERS)}, "
                            "each once")
    if not 1 <= s.max_evals <= 10_000:
        raise ScenarioError("--max-evals", s.max_evals, "must be 1 to 10,000")
    if s.workers is not None:
        from simulator.planner.backends import check_workers

        if not s.leave_one_out:
            raise ScenarioError("--workers", s.workers, "sets the processes of the --leave-one-out refits: give "
                                "--leave-one-out too")
        check_workers(s.workers)
    if s.leave_one_out and len(s.observations) < 3:
        raise ScenarioError("--leave-one-out", list(s.observations), "refits without each fitted run, so each "
                            "refit still sees two or more: give at least 3 --from-observation runs")


def _base(s: FitSettings) -> tuple[HardwareProfile, dict[str, Any], dict[str, Any]]:
    """The base profile (and its raw data) and the engine sections of the base scenario."""
    sections: dict[str, Any] = {}
    hardware = s.hardware
    if s.scenario is not None:
        from simulator.scenario.files import read_yaml

        data = read_yaml(s.scenario, f"--scenario {s.scenario}", what="a scenario file")
        if not isinstance(data, dict):
            raise ScenarioError("--scenario", s.scenario, "must be a YAML mapping (a scenario)")
        sections = {k: data[k] for k in ENGINE_SECTIONS if k in data}
        hardware = hardware or data.get("hardware")
        base_dir = Path(s.scenario).resolve().parent
    else:
        base_dir = Path.cwd()
    if s.engine is not None:
        from simulator.scenario.engines import ENGINE_PRESETS

        if s.engine not in ENGINE_PRESETS:
            raise ScenarioError("--engine", s.engine, f"unknown engine preset; known: {', '.join(ENGINE_PRESETS)}")
        sections["engine"] = {"preset": s.engine}
    engine = sections.get("engine")
    if isinstance(engine, dict) and "overhead" in engine:     # the fitted overhead is the profile's
        sections["engine"] = {k: v for k, v in engine.items() if k != "overhead"}
    if hardware is None:
        raise ScenarioError("--hardware", None, "name the base profile (a profile name or folder), or give a "
                            "--scenario with hardware:")
    if not isinstance(hardware, (str, dict)):
        raise ScenarioError("--hardware", hardware, "a profile name, a profile folder or an inline mapping")
    profile = load_profile(hardware, "--hardware", base_dir=base_dir)
    data = profile.model_dump(mode="json", exclude_none=True)
    return profile, data, sections


def _scaled(pb: _Problem, x: dict[str, float], key: str, table_path: Path | None = None) -> dict[str, Any]:
    """The base profile with the candidate costs: an inline mapping (a table profile's scaled table
    written to ``table_path``, by default ``pb.work/ops-<key>.csv``)."""
    data = json.loads(json.dumps(pb.base_data))
    over = dict(data.get("overhead", {}))
    for p in ("step_s", "per_seq_s", "per_token_s", "frontend_s"):
        if p in x:
            over[p] = x[p]
    data["overhead"] = over
    s = x.get("kernel_scale", 1.0)
    if s != 1.0:
        if data.get("peak_flops"):
            data["peak_flops"] = {k: v / s for k, v in data["peak_flops"].items()}
        if data.get("memory_bandwidth_bytes_per_s"):
            data["memory_bandwidth_bytes_per_s"] /= s
        eff = dict(data.get("efficiency", {}))
        if eff.get("kernel_latency_s"):
            eff["kernel_latency_s"] *= s
            data["efficiency"] = eff
        if data.get("step_time_s"):                  # the constant cost model
            data["step_time_s"] *= s
            data["prefill_time_per_token_s"] = data.get("prefill_time_per_token_s", 0.0) * s
    if pb.table is not None:
        t = pb.table.copy()
        for c in ("median_s", "p10_s", "p90_s", "std_s"):
            if c in t.columns:
                t[c] = t[c] * s
        path = table_path or pb.work / f"ops-{key}.csv"
        t.to_csv(path, index=False, float_format="%.6g")
        data["table"] = str(path)
        data["table_sha256"] = file_sha256(path)    # cost models cache tables by path and checksum
    return data


def scaled_profile(profile: HardwareProfile, costs: dict[str, float], folder: Path) -> dict[str, Any]:
    """``profile`` with ``costs`` (:data:`PARAMETERS` by name) as an inline mapping; a table
    profile's scaled table is written into ``folder``."""
    from simulator.cost.op_table import read_table

    pb = _Problem(ModelSpec(num_layers=1, hidden_size=1, num_attention_heads=1, num_key_value_heads=1,
                            intermediate_size=1, vocab_size=1), profile,
                  profile.model_dump(mode="json", exclude_none=True), {}, Path(folder))
    if profile.table is not None:
        pb.table = read_table(profile.table, sha256=profile.table_sha256)
    return _scaled(pb, costs, "scaled")


def replay_scenario(obs: Observation, model: ModelSpec, hardware: str | dict[str, Any],
                    sections: dict[str, Any] | None = None, seed: int = 0) -> Any:
    """The scenario replaying ``obs`` on ``hardware`` under the engine ``sections`` (a scenario's
    :data:`ENGINE_SECTIONS`): the observation as a trace (a closed loop's requests sent by as many
    clients, each as its last request ends, not at the instants observed), its shared prefixes (from
    its header) as ``workload.prefix``."""
    from simulator.scenario.config import scenario_from_dict

    sections = sections or {}
    trace = {"path": str(Path(obs.path).resolve()), "format": "observation"}
    clients = obs.closed_loop_clients()
    arrival = {"process": "trace", **trace} if clients is None else \
        {"process": "closed_loop", "concurrency": clients, "replay": trace}
    sc: dict[str, Any] = {
        "name": f"fit {Path(obs.path).name}", "seed": seed, "model": model.model_dump(mode="json"),
        "hardware": hardware, **{k: v for k, v in sections.items() if k != "seed"},
        "workload": {"arrival": arrival, "over_length": "error"}}
    if "seed" in sections:
        sc["seed"] = sections["seed"]
    prefix = obs.shared_prefix()
    if prefix is not None:                           # the run's shared prefixes, for the prefix cache
        sc["workload"]["prefix"] = {"prefix_tokens": prefix[0], "num_prefixes": prefix[1]}
    return scenario_from_dict(sc)


def _simulated(pb: _Problem, hardware: dict[str, Any], obs: Observation, seed: int) -> Any:
    from simulator import simulate

    r = simulate(replay_scenario(obs, pb.model, hardware, pb.base_sections, seed))
    req = r.requests.sort_values("request_id").reset_index(drop=True)
    done = obs.completed.reset_index(drop=True)
    if len(req) != len(done):
        raise ScenarioError("--from-observation", obs.path, f"the replay simulated {len(req)} requests, the "
                            f"observation has {len(done)} completed")
    return req


def _residuals(sim: Any, obs: Observation) -> np.ndarray:
    """log(simulated / observed) of each completed request's TTFT and TPOT, clipped to +-CLIP (CLIP where
    the replay has no value). Request by request, except in a burst (:meth:`Observation.burst`), whose
    order at the server the send instants do not give: there the k-th shortest simulated TTFT (TPOT) is
    compared with the k-th shortest observed."""
    done = obs.completed.reset_index(drop=True)
    by_rank = obs.burst()
    out = []
    for col in ("ttft_s", "tpot_s"):
        o, s = done[col].to_numpy(float), sim[col].to_numpy(float)
        use = np.isfinite(o) & (o > 0)
        o, s = o[use], s[use]
        if by_rank:
            o, s = np.sort(o), np.sort(np.where(np.isfinite(s) & (s > 0), s, np.inf))
        r = np.full(len(o), CLIP)
        ok = np.isfinite(s) & (s > 0)
        r[ok] = np.clip(np.log(s[ok] / o[ok]), -CLIP, CLIP)
        out.append(r)
    return np.concatenate(out)


def errors(sim: Any, obs: Observation) -> dict[str, float]:
    """Simulated / observed - 1 of TTFT, TPOT and E2E (p50, p90, p99) and of throughput (completed
    requests over the span from the first send to the last end), and the median |log ratio| of
    each request's TTFT and TPOT."""
    done = obs.completed.reset_index(drop=True)
    out: dict[str, float] = {}
    for col, name in (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("e2e_s", "e2e")):
        o, s = done[col].to_numpy(float), sim[col].to_numpy(float)
        for q in (50, 90, 99):
            ov, sv = np.nanpercentile(o, q) if np.isfinite(o).any() else math.nan, \
                np.nanpercentile(s, q) if np.isfinite(s).any() else math.nan
            out[f"{name}_p{q}"] = float(sv / ov - 1.0) if ov > 0 else math.nan
    span_o = float(np.nanmax(done["send_s"] + done["e2e_s"]) - done["send_s"].min())
    span_s = float(np.nanmax(sim["arrival_time"] + sim["e2e_s"]) - sim["arrival_time"].min())
    out["throughput"] = float(span_o / span_s - 1.0) if span_s > 0 and span_o > 0 else math.nan
    r = np.abs(_residuals(sim, obs))
    out["request_median_abs_log_ratio"] = float(np.median(r)) if len(r) else math.nan
    return out


#: How far the replay's prefix-cache hits or preemptions may stray from the server's own counters
#: before the fit says the engine settings may not be the server's (a real vLLM's preemptions on one
#: load moved from 72 to 82 between repeats; its prefix-cache hits matched the replay's exactly).
COUNTER_BAND = 0.25


def server_counters(sim: Any, obs: Observation, name: str) -> dict[str, Any]:
    """The server's own counts over the run (its Prometheus counters, where it exposed them) beside the
    replay's: prompt tokens the prefix cache hit and preemptions, and under ``warnings`` a sentence for
    each pair further apart than :data:`COUNTER_BAND` (and than 2 preemptions, or a few hundred
    tokens): the replay then scheduled differently from the server, so the engine settings it was
    given (``--scenario``) are not the server's, and the fitted costs absorb the difference."""
    out: dict[str, Any] = {"warnings": []}
    checks = (("prefix_cache_hits_total", "num_cached_tokens", "prefix_cache_hit_tokens", 256.0,
               "the server's prefix cache hit {server:,.0f} prompt tokens, the replay's {replay:,.0f}: are "
               "enable_prefix_caching and block_size in --scenario the server's?"),
              ("num_preemptions_total", "num_preemptions", "preemptions", 2.0,
               "the server preempted {server:,.0f} times, the replay {replay:,.0f}: is the KV cache in "
               "--scenario (num_gpu_blocks_override or gpu_memory_utilization, block_size, max_num_seqs) "
               "the server's?"))
    for counter, column, key, floor, why in checks:
        server = obs.counter(counter)
        if server is None or column not in sim:
            continue
        replay = float(sim[column].sum())
        out[key] = {"server": server, "replay": replay}
        if abs(replay - server) > max(COUNTER_BAND * max(replay, server), floor):
            out["warnings"].append(f"{name}: " + why.format(server=server, replay=replay))
    return out


def _steps_fit(pb: _Problem, s: FitSettings, fit_obs: list[Observation]) -> dict[str, Any]:
    """``kernel_scale`` (and the execute time per step) regressed on the engine's logged steps, with
    the base profile's kernels of the served engine (:mod:`calibrate.engine_steps`); a decode's
    context is the fitting runs' mean prompt plus half their mean answer."""
    from simulator.run.resolve import resolve
    from simulator.run.topology import cost_model

    from .engine_steps import fit_kernel_scale, kernel_times_s, read_engine_steps

    steps = read_engine_steps(s.engine_steps)
    done = [o.completed for o in fit_obs]
    context = float(np.mean(np.concatenate([d["num_prompt_tokens"].to_numpy(float)
                                            + d["num_output_tokens"].to_numpy(float) / 2 for d in done])))
    scenario = replay_scenario(fit_obs[0], pb.model, _scaled(pb, {}, "steps"), pb.base_sections, s.seed)
    recompute = not pb.base_sections.get("speculative_config")    # else extra tokens are verifications
    fit = fit_kernel_scale(kernel_times_s(cost_model(scenario, resolve(scenario)), steps, context,
                                          recompute=recompute), steps)
    fit["decode_context_tokens"] = context
    return fit


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, *, step: float = 0.5, max_evals: int = 60,
                xtol: float = 1e-3, ftol: float = 1e-7) -> tuple[np.ndarray, float, int]:
    """Minimise ``f`` from ``x0`` (standard reflection 1, expansion 2, contraction 0.5, shrink 0.5;
    the initial simplex steps each coordinate by ``step``), restarted with a fresh simplex at the
    best point after each convergence while a restart still improves by more than ``ftol`` (a
    collapsed simplex stops Nelder-Mead short of a minimum; a restart is the usual remedy).
    Deterministic. Returns the best point, its value and the number of evaluations."""
    x, fx, evals = _nelder_mead(f, np.array(x0, float), None, step, max_evals, xtol, ftol)
    while evals < max_evals:
        y, fy, used = _nelder_mead(f, x, fx, step, max_evals - evals, xtol, ftol)
        evals += used
        improved = fy < fx - ftol * (1 + abs(fx))
        if fy < fx:
            x, fx = y, fy
        if not improved:
            break
    return x, fx, evals


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, f0: float | None, step: float,
                 max_evals: int, xtol: float, ftol: float) -> tuple[np.ndarray, float, int]:
    """One Nelder-Mead run from ``x0`` (whose value ``f0`` is known, or None)."""
    n = len(x0)
    pts = [np.array(x0, float)] + [np.array(x0, float) + step * np.eye(n)[i] for i in range(n)]
    vals = [f0 if f0 is not None else f(pts[0])] + [f(p) for p in pts[1:]]
    evals = n + (f0 is None)
    while evals < max_evals:
        order = np.argsort(vals, kind="stable")
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) <= ftol * (1 + abs(vals[0])) and \
                max(np.max(np.abs(p - pts[0])) for p in pts[1:]) <= xtol:
            break
        centroid = np.mean(pts[:-1], axis=0)
        xr = centroid + (centroid - pts[-1])
        fr = f(xr)
        evals += 1
        if fr < vals[0]:
            xe = centroid + 2.0 * (centroid - pts[-1])
            fe = f(xe)
            evals += 1
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * ((xr if fr < vals[-1] else pts[-1]) - centroid)
            fc = f(xc)
            evals += 1
            if fc < min(fr, vals[-1]):
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    pts[i] = pts[0] + 0.5 * (pts[i] - pts[0])
                    vals[i] = f(pts[i])
                    evals += 1
    i = int(np.argmin(vals))
    return pts[i], float(vals[i]), evals


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _run_record(obs: Observation) -> dict[str, Any]:
    h = obs.header
    return {"path": str(obs.path), "sha256": _sha256(obs.path), "source": obs.source,
            "endpoint": h.get("endpoint"), "model": h.get("model"), "date": h.get("date"),
            "engine_version": (h.get("engine") or {}).get("version") if isinstance(h.get("engine"), dict) else None,
            "load": h.get("load"), "requests": int(len(obs.requests)), "completed": int(len(obs.completed)),
            "bunched_share": obs.bunched_share(),
            "host_pauses": None if (pauses := obs.host_pauses()) is None else [list(p) for p in pauses]}


def fit_loss(pb: _Problem, s: FitSettings, runs: list[Observation], x: dict[str, float], key: str) -> float:
    """The fit's loss at the costs ``x``: over ``runs``, the mean of each run's mean squared residual
    (:func:`_residuals`), each run simulated on the base profile with ``x`` (a scaled table named by ``key``)."""
    hw = _scaled(pb, x, key)
    total = 0.0
    for o in runs:
        r = _residuals(_simulated(pb, hw, o, s.seed), o)
        total += float(np.mean(r ** 2)) if len(r) else 0.0
    if hw.get("table"):
        Path(hw["table"]).unlink(missing_ok=True)
    return total / len(runs)


def _search(pb: _Problem, s: FitSettings, runs: list[Observation], names: list[str], fixed: dict[str, float],
            x0: np.ndarray, *, evals: list[dict[str, Any]], log: Callable[[str], None], step: float = 0.5,
            label: str = "", key: str = "") -> tuple[dict[str, float], np.ndarray, float, float, int]:
    """Nelder-Mead over the log costs ``names`` (the rest ``fixed``) from ``x0``, simulating every run of
    ``runs`` per evaluation (each appended to ``evals``). Returns the costs, their logs, the loss there,
    the loss at ``x0`` and the evaluations used. ``label`` names the search in progress lines, ``key``
    its scaled tables' file names."""
    params = [PARAMETERS[n] for n in names]
    lo = np.log([p.lo for p in params])
    hi = np.log([p.hi for p in params])
    started = time.monotonic()

    def at(z: np.ndarray) -> dict[str, float]:
        return {**fixed, **{n: float(math.exp(v)) for n, v in zip(names, np.clip(z, lo, hi), strict=True)}}

    def loss(z: np.ndarray) -> float:
        x = at(z)
        value = fit_loss(pb, s, runs, x, f"{key}{len(evals)}") + \
            float(np.sum(np.maximum(0.0, np.abs(z - np.clip(z, lo, hi)))))
        evals.append({**x, "loss": value})
        if len(evals) % PROGRESS_EVERY == 0:            # a fit takes minutes: say where it is
            best = min(e["loss"] for e in evals)
            log(f"  {label + ': ' if label else ''}{len(evals)} simulations of each run (budget {s.max_evals}), "
                f"best loss {best:.4g}, {time.monotonic() - started:.0f} s")
        return value

    start_loss = loss(x0)
    z, best, n_evals = nelder_mead(loss, x0, step=step, max_evals=s.max_evals) if names else (x0, start_loss, 1)
    return at(z), np.clip(z, lo, hi), best, start_loss, n_evals


#: Leave-one-run-out refits start from the full fit's costs with a simplex this wide (log units: ~20%).
LOO_STEP = 0.2
#: A cost that one run left out moves by more than this factor is named in a warning.
LOO_MOVED = 1.5
#: A refit whose costs fit every run this much better than the fit (relative loss) is named in a warning.
LOO_BETTER = 0.01
#: The figures whose range over the leave-one-run-out refits is reported for each held-out run.
BAND_KEYS = ("ttft_p50", "tpot_p50", "e2e_p50", "ttft_p99", "tpot_p99", "e2e_p99", "throughput")


def _refit(pb: _Problem, s: FitSettings, fit_obs: list[Observation], held: list[Observation], i: int,
           names: list[str], fixed: dict[str, float], z: np.ndarray, label: str,
           log: Callable[[str], None] | None) -> dict[str, Any]:
    """The fit without ``fit_obs[i]`` (from the full fit's log costs ``z``), and its errors on that run
    and on every held-out run. A pure function of its inputs, run in a worker process (``log`` None:
    no progress lines) or in this one."""
    o = fit_obs[i]
    rest = fit_obs[:i] + fit_obs[i + 1:]
    xi, _, best, _, used = _search(pb, s, rest, names, fixed, z, evals=[], log=log or (lambda m: None),
                                   step=LOO_STEP, label=label, key=f"loo{i}-")
    hw = _scaled(pb, xi, f"loo{i}")
    try:
        left = errors(_simulated(pb, hw, o, s.seed), o)
        held_err = {h.path: errors(_simulated(pb, hw, h, s.seed), h) for h in held}
    finally:
        if hw.get("table"):
            Path(hw["table"]).unlink(missing_ok=True)
    return {"left_out": o.path, "parameters": xi, "loss": best, "evaluations": used,
            "loss_all_runs": fit_loss(pb, s, fit_obs, xi, f"loo{i}-all"),
            "left_out_error": left, "holdout_error": held_err}


def _leave_one_out(pb: _Problem, s: FitSettings, fit_obs: list[Observation], held: list[Observation],
                   names: list[str], fixed: dict[str, float], x: dict[str, float], z: np.ndarray, loss: float,
                   names_of: dict[str, str], log: Callable[[str], None]) -> dict[str, Any]:
    """Refit once without each fitted run (from the full fit's costs), then predict the run left out and
    every held-out run with that refit: how far the costs move with the choice of runs (range and
    jackknife standard error of each cost's logarithm), each fitted run's error when it was not fitted
    on, and the range of each held-out run's errors over the refits."""
    from simulator.planner.backends import executor_slots, open_executor

    with open_executor("local", workers=s.workers, max_tasks=len(fit_obs)) as ex:
        slots = executor_slots(ex)
        log(f"leaving out each fitted run in turn: {len(fit_obs)} refits, {slots} at a time")
        inline = log if slots == 1 else None          # a worker process cannot log here
        refits: list[dict[str, Any]] = []

        def report(i: int, r: dict[str, Any]) -> None:
            name = names_of[fit_obs[i].path]
            log(f"without {name}: " + ", ".join(f"{n} = {_fmt(n, v)}" for n, v in r["parameters"].items())
                + f" (loss {r['loss']:.4g} on the other runs, {r['loss_all_runs']:.4g} on all against the fit's "
                f"{loss:.4g}; {r['evaluations']} evaluations); {name} predicted: "
                + _errs_text(r["left_out_error"]))
            refits.append(r)

        futures = []
        for i, o in enumerate(fit_obs):              # in this process a refit runs as it is submitted
            futures.append(ex.submit(_refit, pb, s, fit_obs, held, i, names, fixed, z, f"without {names_of[o.path]}",
                                     inline))
            if inline:
                report(i, futures[-1].result())
        if not inline:
            for i, fut in enumerate(futures):        # in the runs' order, whichever ends first
                report(i, fut.result())
    costs, warnings = leave_one_out_costs(x, refits, [names_of[o.path] for o in fit_obs], loss)
    for w in warnings:
        log("warning: " + w)
    band = {h.path: {key: [float(np.nanmin(v)), float(np.nanmax(v))]
                     for key in BAND_KEYS
                     if np.isfinite(v := np.array([r["holdout_error"][h.path][key] for r in refits], float)).any()}
            for h in held}
    left_err = {r["left_out"]: r["left_out_error"] for r in refits}
    return {"refits": refits, "costs": costs, "left_out_error": left_err,
            "left_out_error_median_abs": _median_abs(left_err), "holdout_band": band, "loss": loss,
            "warnings": warnings}


def leave_one_out_costs(x: dict[str, float], refits: list[dict[str, Any]], left_out: list[str],
                        loss: float | None = None) -> tuple[dict[str, Any], list[str]]:
    """Each cost's fitted value, range over the ``refits`` (their ``parameters``; ``left_out`` names the
    run each left out) and jackknife standard error of its logarithm; a warning for each cost that one
    run left out moved by more than :data:`LOO_MOVED` times, naming the run it rests on; and one where
    a refit's costs fit every run (``loss_all_runs``) more than :data:`LOO_BETTER` better than the fit
    did (``loss``): the search stopped short of its minimum."""
    k = len(refits)
    costs: dict[str, Any] = {}
    warnings = []
    for n in x:
        logs = np.log([r["parameters"][n] for r in refits])
        se = math.sqrt((k - 1) / k * float(np.sum((logs - logs.mean()) ** 2)))
        costs[n] = {"value": x[n], "min": float(np.exp(logs.min())), "max": float(np.exp(logs.max())),
                    "jackknife_se_log": se}
        moved = np.abs(logs - math.log(x[n]))
        if moved.max() > math.log(LOO_MOVED):
            i = int(np.argmax(moved))
            warnings.append(f"{n} = {_fmt(n, x[n])} rests on {left_out[i]}: without it "
                            f"{_fmt(n, float(np.exp(logs[i])))}. The other runs do not pin it: check {left_out[i]} "
                            "(a machine that stopped, another engine state) and observe more runs like it")
    alls = [r.get("loss_all_runs", math.inf) for r in refits]
    if loss is not None and min(alls) < (1 - LOO_BETTER) * loss:
        i = int(np.argmin(alls))
        warnings.append(f"the search stopped short of the lowest loss: the costs fitted without {left_out[i]} ("
                        + ", ".join(f"{n} = {_fmt(n, v)}" for n, v in refits[i]["parameters"].items())
                        + f") fit all the runs better (loss {alls[i]:.4g} against {loss:.4g}). A larger "
                        "--max-evals may reach it; the profile has the search's costs")
    return costs, warnings


def _median_abs(errs: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each figure's median |error| over runs (NaNs left out)."""
    if not errs:
        return {}
    keys = next(iter(errs.values()))
    return {k: float(np.median(v)) if len(v := [abs(e[k]) for e in errs.values() if math.isfinite(e[k])]) else math.nan
            for k in keys}


def _errs_text(e: dict[str, float]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {100 * e[k]:+.1f}%" for k in ("ttft_p50", "tpot_p50", "e2e_p50", "e2e_p90",
                                                                           "throughput") if math.isfinite(e[k]))


def run_fit(s: FitSettings, out: Path, *, log: Callable[[str], None] = print, command: str = "") -> dict[str, Any]:
    """Fit, write ``out/profile.yaml`` (+ ``ops.csv``) and ``out/fit.json``; returns the fit document.

    Raises:
        ScenarioError: bad settings or inputs (named), or observations the replay cannot match.
    """
    check(s)
    model = model_option(s.model)
    fit_obs = [read_observation(p) for p in s.observations]
    held = [read_observation(p, "--holdout") for p in s.holdout]
    base, data, sections = _base(s)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ScenarioError("--out", str(out), "exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".fit-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    pb = _Problem(model, base, data, sections, work)
    if base.table is not None:
        from simulator.cost.op_table import read_table

        pb.table = read_table(base.table, sha256=base.table_sha256)
    names = list(s.parameters)
    steps_fit = pb.steps_fit = _steps_fit(pb, s, fit_obs) if s.engine_steps else None
    fixed: dict[str, float] = {}
    if steps_fit is not None:
        fixed["kernel_scale"] = steps_fit["kernel_scale"]
        names.remove("kernel_scale")
        log(f"kernel_scale = {fixed['kernel_scale']:.4g} from {steps_fit['steps_used']} of {steps_fit['steps']} "
            f"engine steps (execute time {1e3 * steps_fit['execute_s']:.3g} ms per step + scaled kernels, "
            f"R^2 {steps_fit['r2']:.3f})")
    x0 = np.log([PARAMETERS[n].start(base) for n in names])
    names_of = run_names([o.path for o in fit_obs + held])
    for o in fit_obs:
        log(f"fitting on {o.describe(names_of[o.path])}")
    for o in fit_obs + held:
        for warning in o.warnings():
            log("warning: " + warning)
    try:
        x, z, best, start_loss, n_evals = _search(pb, s, fit_obs, names, fixed, x0, evals=pb.evals, log=log)
        log("fitted: " + ", ".join(f"{n} = {_fmt(n, v)}" for n, v in x.items())
            + f" (loss {start_loss:.4g} at the base profile -> {best:.4g}, {n_evals} evaluations)")
        final = _scaled(pb, x, "final")
        replays = {o.path: _simulated(pb, final, o, s.seed) for o in fit_obs + held}
        fit_err = {o.path: errors(replays[o.path], o) for o in fit_obs}
        held_err = {o.path: errors(replays[o.path], o) for o in held}
        counters = {o.path: server_counters(replays[o.path], o, names_of[o.path]) for o in fit_obs + held}
        for c in counters.values():
            for warning in c.pop("warnings"):
                log("warning: " + warning)
        if pb.table is not None:
            Path(final["table"]).unlink(missing_ok=True)
        loo = _leave_one_out(pb, s, fit_obs, held, names, fixed, x, z, best, names_of, log) if s.leave_one_out \
            else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    profile = _write_profile(pb, x, out, s, fit_obs, held, fit_err, held_err, best, start_loss, n_evals, command,
                             loo)
    doc = {"profile": str(profile), "parameters": x, "loss": best, "loss_at_base": start_loss,
           "engine_steps": steps_fit, "evaluations": pb.evals, "fit_error": fit_err, "holdout_error": held_err,
           "server_counters": counters, "leave_one_out": loo,
           "runs": [_run_record(o) for o in fit_obs], "holdout_runs": [_run_record(o) for o in held]}
    (out / "fit.json").write_text(json.dumps(doc, indent=1, default=float) + "\n")
    return doc


def format_report(doc: dict[str, Any]) -> list[str]:
    """Lines for the terminal: the fitted values and the error of each run, fitted and held out; with
    ``--leave-one-out``, each cost's range over the refits, each fitted run's error when left out and,
    in brackets after a held-out run's errors, their range over the refits."""
    lines = ["fitted " + ", ".join(f"{n} = {_fmt(n, v)}" for n, v in doc["parameters"].items())
             + f"; wrote {doc['profile']}"]
    loo = doc.get("leave_one_out")
    band = (loo or {}).get("holdout_band") or {}
    names_of = run_names([*doc["fit_error"], *doc["holdout_error"]])
    for what, errs in (("fit", doc["fit_error"]), ("held out", doc["holdout_error"])):
        for path, e in errs.items():
            counts = (doc.get("server_counters") or {}).get(path) or {}
            b = band.get(path) or {}
            lines.append(f"  {what:<8} {names_of[path]}: " + ", ".join(
                [f"{k.replace('_', ' ')} {100 * e[k]:+.1f}%"
                 + (f" ({100 * b[k][0]:+.1f} to {100 * b[k][1]:+.1f}%)" if k in b else "")
                 for k in ("ttft_p50", "tpot_p50", "e2e_p50", "e2e_p90", "throughput") if math.isfinite(e[k])]
                + [f"{k.replace('_', ' ')} {c['replay']:,.0f} (server {c['server']:,.0f})"
                   for k, c in counts.items() if c["server"] or c["replay"]]))
    if loo:
        k = len(loo["refits"])
        lines.append(f"leaving out each fitted run in turn ({k} refits): " + ", ".join(
            f"{n} {_fmt(n, c['min'])} to {_fmt(n, c['max'])} (s.e. {100 * c['jackknife_se_log']:.0f}%)"
            for n, c in loo["costs"].items()))
        for path, e in loo["left_out_error"].items():
            lines.append(f"  left out {names_of[path]}: " + _errs_text(e))
        if band:
            lines.append("  (held-out errors in brackets: their range over the refits)")
    return lines


def _fmt(name: str, v: float) -> str:
    return f"{v * 1e3:.4g} ms" if name.endswith("_s") else f"{v:.4g}"


def _engine_of(runs: list[Observation], sections: dict[str, Any]) -> dict[str, Any]:
    versions = sorted({str(v) for o in runs if isinstance(o.header.get("engine"), dict)
                       and (v := o.header["engine"].get("version"))})
    backends = sorted({str(o.header["backend"]) for o in runs if o.header.get("backend")})
    preset = sections.get("engine")
    preset = preset.get("preset") if isinstance(preset, dict) else preset
    return {"preset": preset, "version": versions[0] if len(versions) == 1 else (versions or None),
            "backend": backends or None, "endpoints": sorted({str(o.header.get("endpoint")) for o in runs
                                                              if o.header.get("endpoint")}) or None}


def _write_profile(pb: _Problem, x: dict[str, float], out: Path, s: FitSettings, fit_obs: list[Observation],
                   held: list[Observation], fit_err: dict[str, Any], held_err: dict[str, Any], best: float,
                   start_loss: float, n_evals: int, command: str, loo: dict[str, Any] | None = None) -> Path:
    data = _scaled(pb, x, "out", out / "ops.csv.tmp")
    base = pb.base
    if pb.table is not None:
        os.replace(out / "ops.csv.tmp", out / "ops.csv")
        data["table"] = "ops.csv"
        data["table_sha256"] = file_sha256(out / "ops.csv")
    name = s.name or out.resolve().name
    data.update({"name": name, "source": "fitted", "device": s.device or base.device})
    data["provenance"] = {
        "tool": "llmplan calibrate --from-observation", "command": command,
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "engine": _engine_of(fit_obs + held, pb.base_sections),
        "model": pb.model.name, "model_spec": pb.model.model_dump(mode="json"),
        "device": s.device or base.device,
        "base_profile": {"name": base.name, "source": base.source, "device": base.device,
                         "cost_model": base.cost_model},
        "engine_settings": pb.base_sections,
        "parameters": {n: {"value": v, "unit": PARAMETERS[n].unit, "meaning": PARAMETERS[n].doc} for n, v in x.items()},
        "engine_steps": pb.steps_fit,
        "fit": {"method": "Nelder-Mead on log parameters, simulation of every run per evaluation"
                + ("; kernel_scale by least squares on the engine's logged step times" if pb.steps_fit else ""),
                "objective": "mean over runs of mean over requests of log(sim/obs)^2 for TTFT and TPOT "
                             "(a burst's requests matched by rank)",
                "loss_at_base": start_loss, "loss": best, "evaluations": n_evals, "seed": s.seed},
        "runs": [_run_record(o) for o in fit_obs],
        "holdout_runs": [_run_record(o) for o in held],
        "fit_error": fit_err, "fit_error_median_abs": _median_abs(fit_err),
        "holdout_error": held_err, "holdout_error_median_abs": _median_abs(held_err),
        **({} if loo is None else {"leave_one_out": {          # the summary; fit.json has every refit
            "refits": len(loo["refits"]), "costs": loo["costs"],
            "left_out_error_median_abs": loo["left_out_error_median_abs"], "warnings": loo["warnings"]}}),
        "git_revision": git_revision(),
        "note": "kernel times are the base profile's scaled by kernel_scale; the overhead is fitted to the "
                "engine's observed TTFT and TPOT; valid for the engine settings in engine_settings",
    }
    text = ("# Fitted by `llmplan calibrate --from-observation` to a real engine's observed runs "
            "(docs/calibration.md).\n" + yaml.safe_dump(data, sort_keys=False, width=110))
    tmp = out / "profile.yaml.tmp"
    tmp.write_text(text)
    os.replace(tmp, out / "profile.yaml")
    load_profile(str(out / "profile.yaml"))       # it loads as written
    return out / "profile.yaml"
