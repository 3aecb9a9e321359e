"""Latency and throughput statistics from a run's records (pure numpy/pandas, no plotting).

Definitions (per request, seconds):

* ``queue_delay_s`` = first admission into a batch - arrival
* ``ttft_s`` = first token - arrival (the prefill step's end)
* ``tpot_s`` = (finish - first token) / (output tokens - 1), requests with >= 2 output tokens
* ``e2e_s`` = finish - arrival
* ``itl_s``: inter-token latencies; each decode step contributes its duration once per decoding
  request in it (exact except across a preemption's recompute gap)

Latency statistics cover requests that *arrived* in the measurement window
(:func:`measurement_window`: ``[warmup_s, last_arrival - cooldown_s]`` for open-loop arrivals; the
makespan offline; the steady part of a closed loop) and finished; the SLO verdict, attainment and goodput come
from the one judge (:mod:`simulator.slo`), which judges every arrival in that window, dropped ones
included, and from its stability test. Percentiles carry a 95% distribution-free
confidence interval from order statistics (binomial bounds on the rank). Samples from one run are
autocorrelated by the queue, so these intervals are optimistic; independent replications
(:func:`summarize_replications`) give honest intervals.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.cluster.extension import MeasuredRun
from simulator.critical_values import binom_ppf, t_ppf
from simulator.engine.speculative import expected_tokens_per_step
from simulator.errors import ScenarioError
from simulator.scenario.config import ClosedLoopArrival, OfflineArrival
from simulator.slo import has_objectives, judge, per_request_limits_s, sorted_quantile, stability, tasks
from simulator.steady_state import SteadyState, detect

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from simulator.cluster.extension import SummaryBlock
    from simulator.run.records import FrozenStepLog, SimulationResult
    from simulator.run.resolve import ResolvedSystem

PERCENTILES = (50, 90, 95, 99)
LATENCIES = ("ttft_s", "tpot_s", "e2e_s", "queue_delay_s", "ttua_s")
CLIENT_LATENCIES = ("client_ttft_s", "client_e2e_s", "client_ttua_s")


def describe(values: np.ndarray) -> dict[str, Any]:
    """Mean, p50/p90/p95/p99, count and 95% CIs of the mean and of each percentile."""
    x = np.sort(np.asarray(values, dtype=float)[~np.isnan(values)])
    n = len(x)
    if n == 0:
        out: dict[str, Any] = {"n": 0, "mean": None, **{f"p{p}": None for p in PERCENTILES}, "ci95": {}}
        return out
    out = {"n": n, "mean": float(x.mean())}
    for p in PERCENTILES:
        out[f"p{p}"] = sorted_quantile(x, p / 100.0)
    ci: dict[str, list[float] | None] = {}
    half = float(t_ppf(0.975, n - 1) * x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    ci["mean"] = [out["mean"] - half, out["mean"] + half] if n > 1 else None
    for p in PERCENTILES:
        ci[f"p{p}"] = quantile_ci(x, p / 100.0)
    out["ci95"] = ci
    return out


def quantile_ci(sorted_x: np.ndarray, q: float, level: float = 0.95) -> list[float] | None:
    """Distribution-free CI for the ``q`` quantile: order statistics at binomial rank bounds."""
    n = len(sorted_x)
    a = (1 - level) / 2
    lo = int(binom_ppf(a, n, q)) - 1
    hi = int(binom_ppf(1 - a, n, q))
    if lo < 0 or hi >= n:
        return None
    return [float(sorted_x[lo]), float(sorted_x[hi])]


def measurement_window(requests: Mapping[str, Any], warmup_s: float, cooldown_s: float,
                       arrival: Any = None, sessions: Any = None) -> tuple[float, float]:
    """The interval ``[start, end]`` (s) a run is measured over (:func:`steady_window`'s window)."""
    return steady_window(requests, warmup_s, cooldown_s, arrival, sessions)[0]


def steady_window(requests: Mapping[str, Any], warmup_s: float, cooldown_s: float,
                  arrival: Any = None, sessions: Any = None) -> tuple[tuple[float, float], SteadyState]:
    """The interval ``[start, end]`` (s) a run is measured over, by how the load arrives, and the
    steady-state search behind its start.

    Requests that *arrived* in it are the sample (latency statistics, the SLO judge); the
    requests that completed in it, over its length, are the throughput. ``arrival`` is the
    scenario's ``workload.arrival`` (None: open loop).

    * Open loop (poisson, gamma, diurnal, trace): ``[warmup_s, last arrival - cooldown_s]``; for
      stationary load (poisson, gamma) the start moves to the end of the warm-up found in the run's
      own output (:func:`simulator.steady_state.detect`, MSER-5), ``warmup_s`` being a lower bound.
    * ``offline``: ``[0, makespan]``, the makespan being the last request's end (every request
      arrives at 0); ``warmup_s`` and ``cooldown_s`` do not apply.
    * Closed-loop sessions (``sessions``, the scenario's ``workload.sessions``, with ``loop:
      closed``): ``[warmup_s, last session start - cooldown_s]``. New sessions start throughout
      it; later, the sessions still running finish their turns without new ones joining them.
    * ``closed_loop`` of N clients: from the N-th end of a request (the clients' synchronised start
      is over) or ``warmup_s``, whichever is later, to the last send that N more sends follow (the
      requests sent later are served while clients stop sending) or ``last send - cooldown_s``,
      whichever is earlier. All N clients are busy or thinking throughout.

    When ``warmup_s`` and ``cooldown_s`` leave that interval empty, no request is measured: an error
    naming them. Otherwise, where it has no length (every request arrived at one instant; a closed loop
    too short to reach its steady part): the whole run, ``[0, last end]``.

    ``requests`` is the request frame or a run's request columns.

    Raises:
        ScenarioError: ``warmup_s`` and ``cooldown_s`` cover the whole run.
    """
    sent = np.asarray(requests["arrival_time"], dtype=float)
    last = float(sent.max()) if len(sent) else 0.0
    closed = isinstance(arrival, ClosedLoopArrival)
    if not closed and not isinstance(arrival, OfflineArrival):
        what = "arrival"
        if getattr(sessions, "loop", "open") == "closed" and "session" in requests and len(sent):
            starts = sent[np.asarray(requests["session"]) == np.asarray(requests["request_id"])]
            last = float(starts.max()) if len(starts) else last
            what = "session start"
        start, end = warmup_s, last - cooldown_s
        if end > start:
            steady = detect(requests, (start, end), getattr(arrival, "process", "poisson"), warmup_s)
            return (steady.warmup_s, end), steady
        if warmup_s > 0 or cooldown_s > 0:
            raise _empty_window(warmup_s, cooldown_s, f"[warmup_s, last {what} - cooldown_s] = [{start:.4g}, "
                                f"{end:.4g}] s (the last {what} at {last:.4g} s)")
        if last > 0:
            return (0.0, last), _configured(0.0, arrival, "the whole run is measured")
    ends = np.sort(np.asarray(requests["finish_time"], dtype=float))
    ends = ends[~np.isnan(ends)]
    whole = (0.0, max(float(ends[-1]), last) if len(ends) else last)
    if closed and len(ends) >= arrival.concurrency and len(sent) > arrival.concurrency:
        n = arrival.concurrency
        clients = (float(ends[n - 1]), float(np.sort(sent)[-n - 1]))   # the clients' start is over .. they stop
        start, end = max(warmup_s, clients[0]), min(last - cooldown_s, clients[1])
        if end > start:
            return (start, end), _configured(start, arrival, "a closed loop is measured once every client has had "
                                             "an answer, until clients stop sending")
        if clients[1] > clients[0]:
            raise _empty_window(warmup_s, cooldown_s, f"[max(warmup_s, {clients[0]:.4g}), min(last send - "
                                f"cooldown_s, {clients[1]:.4g})] = [{start:.4g}, {end:.4g}] s (the steady part of "
                                f"the closed loop, the last send at {last:.4g} s)")
    return whole, _configured(0.0, arrival, "the whole run is measured")


def _configured(start: float, arrival: Any, why: str) -> SteadyState:
    """The steady state of a run measured over a configured window (no warm-up searched)."""
    process = getattr(arrival, "process", None)
    if process in ("closed_loop", "offline"):
        return detect({}, (start, start), process, start)
    return SteadyState(False, start, start, None, None, 0, "", why)


def _empty_window(warmup_s: float, cooldown_s: float, window: str) -> ScenarioError:
    """The error of a measurement window that ``warmup_s`` and ``cooldown_s`` leave empty."""
    field, value = (("warmup_s", warmup_s) if not cooldown_s else ("cooldown_s", cooldown_s) if not warmup_s
                    else ("warmup_s + cooldown_s", warmup_s + cooldown_s))
    verb = "leave" if "+" in field else "leaves"
    return ScenarioError(field, value, f"{verb} no request to measure: the measurement window {window} is "
                                       "empty; lower warmup_s or cooldown_s, or give more requests")


def in_measurement_window(requests: Mapping[str, Any], warmup_s: float, cooldown_s: float,
                          arrival: Any = None, sessions: Any = None) -> np.ndarray:
    """Which requests arrived inside :func:`measurement_window` (the one filter every report uses),
    as a boolean array in row order."""
    start, end = measurement_window(requests, warmup_s, cooldown_s, arrival, sessions)
    sent = np.asarray(requests["arrival_time"], dtype=float)
    return (sent >= start) & (sent <= end)


def itl_samples(steps: Mapping[str, Any], window: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token latencies as (values, weights): each step's duration, weighted by its decodes.

    ``steps`` is the steps DataFrame or the step log's ``columns()`` (same column names).
    """
    w = np.asarray(steps["num_decode_tokens"])
    keep = w > 0
    if window is not None:
        start = np.asarray(steps["start_time"])
        keep &= (start >= window[0]) & (start <= window[1])
    return np.asarray(steps["duration_s"])[keep], w[keep]


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> list[float]:
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order].astype(float)
    cum = np.cumsum(w)
    return [float(v[min(np.searchsorted(cum, q * cum[-1]), len(v) - 1)]) for q in qs]


def slo_thresholds_s(slo: Any) -> dict[str, float]:
    """``{"ttft_s": 0.5, ...}``: each metric's per-request limit (its tail threshold) that is set."""
    return {f"{metric}_s": limit for metric, limit in per_request_limits_s(slo).items()}


def summarize(result: SimulationResult) -> dict[str, Any]:
    """The run's JSON summary (the CLI's ``--json`` output; see the README for every key).

    The common part reads the request columns as arrays; tiers, sessions and the blocks the run's
    extensions add (``result.summary_blocks``: the request path, regions, pools with the measured
    requests; routing counters and the autoscaler after the run's totals) read the request frame."""
    sc, req, steps = result.scenario, result.records, result.step_log.columns()
    arrival = sc.workload.arrival
    sessions = sc.workload.sessions
    (start, end), steady = steady_window(req, sc.warmup_s, sc.cooldown_s, arrival, sessions)
    status = np.asarray(req["status"]).astype(str)
    sent = np.asarray(req["arrival_time"], dtype=float)
    in_window = (sent >= start) & (sent <= end)
    finished = status == "finished_length_capped"
    measured = in_window & finished
    summary: dict[str, Any] = {"name": sc.name, "seed": sc.seed}
    for metric in LATENCIES:
        summary[metric] = describe(np.asarray(req[metric])[measured])
    if "client_ttft_s" in req:
        for metric in CLIENT_LATENCIES:
            if metric in req:
                summary[metric] = describe(np.asarray(req[metric])[measured])
    values, weights = itl_samples(steps, (start, end))
    itl = {"mean": float(np.average(values, weights=weights)) if len(values) else None}
    if len(values):
        itl.update({f"p{p}": q for p, q in zip(PERCENTILES, weighted_quantiles(values, weights,
                                                                               [p / 100 for p in PERCENTILES]),
                                               strict=True)})
    summary["itl_s"] = itl
    span = end - start
    finish = np.asarray(req["finish_time"], dtype=float)
    done_in_window = finished & (finish >= start) & (finish <= end)
    summary["throughput"] = {
        "requests_per_s": float(done_in_window.sum() / span) if span > 0 else None,
        "output_tokens_per_s": float(np.asarray(req["num_output_tokens"])[done_in_window].sum() / span)
        if span > 0 else None,
        "input_tokens_per_s": float(np.asarray(req["num_prompt_tokens"])[done_in_window].sum() / span)
        if span > 0 else None,
        "window_s": [start, end],
    }
    summary["requests"] = {
        "arrived": len(sent),
        "completed": int(finished.sum()),
        "rejected": int(np.isin(status, ("finished_rejected", "finished_shed")).sum()),
        "in_flight": int((~np.char.startswith(status, "finished")).sum()),
        "measured": int(measured.sum()),
        "preemptions": int(np.asarray(req["num_preemptions"]).sum()),
    }
    summary["requests"].update(_lever_counts(req, status))
    summary["steady_state"] = steady.to_dict()
    summary["stability"] = stability(req, (start, end), arrival=arrival)
    stable = summary["stability"]["stable"]
    summary.update(_slo_summary(sc.slo, req, (start, end), stable))
    if sc.workload.tiers is not None:
        frame = result.requests
        tier = frame["tier"].to_numpy()
        summary["tiers"] = {
            t.name: {"share": t.share, "priority": t.priority,
                     "requests": {"arrived": int((tier == t.name).sum()),
                                  "completed": int((finished & (tier == t.name)).sum())},
                     **{m: describe(frame[m].to_numpy()[measured & (tier == t.name)]) for m in LATENCIES},
                     **_slo_summary(t.slo or sc.slo, frame[tier == t.name], (start, end), stable)}
            for t in sc.workload.tiers}
    if "session" in req:
        summary["tasks"] = _tasks_summary(result.requests, (start, end),
                                          sessions.loop if sessions is not None else "open")
    summary.update(_extension_blocks(result, "requests", measured, in_window))
    summary["batch"] = batch_summary(result.step_log, result.system)
    if isinstance(arrival, OfflineArrival | ClosedLoopArrival):
        summary["benchmark"] = _benchmark_summary(arrival, steps, (start, end), len(sent))
        summary["benchmark"]["every_request"] = every_request_summary(req, steps, finished)
    plan = result.system.kv_plan
    summary["kv_cache"] = {"num_gpu_blocks": plan.num_gpu_blocks, "block_size": plan.block_size,
                           "weights_bytes_per_gpu": plan.weights_bytes,
                           "kv_bytes_per_block": plan.kv_bytes_per_block,
                           **summary["batch"].pop("kv")}
    summary.update(_deployment_summary(result))
    summary["prefix_cache"] = _prefix_cache_summary(result.prefix_cache)
    if sc.scheduler.preemption_mode == "swap":
        summary["requests"]["swap"] = {k: result.engine_stats.get(k, 0)
                                       for k in ("swap_outs", "swap_ins", "swap_recompute_fallbacks")}
    if sc.speculative_config is not None:
        summary["speculative"] = _speculative_summary(sc.speculative_config, result.engine_stats)
    summary["sim_time_s"] = result.sim_time_s
    summary.update(_extension_blocks(result, "run", measured, in_window))
    summary["wall_s"] = result.wall_s
    return summary


def _extension_blocks(result: SimulationResult, section: str, measured: np.ndarray,
                      in_window: np.ndarray) -> dict[str, Any]:
    """The blocks of one section that the run's extensions add, in the run's order
    (:class:`simulator.cluster.extension.SummaryBlock`)."""
    blocks: list[SummaryBlock] = [b for b in result.summary_blocks if b.section == section]
    if not blocks:
        return {}
    run = MeasuredRun(result.requests, measured, in_window, result.sim_time_s)
    return {block.key: block.compute(run) for block in blocks}


def _tasks_summary(req: pd.DataFrame, window: tuple[float, float], loop: str) -> dict[str, Any]:
    """Sessions (agent tasks) that started in the window: outcomes, calls and the task TTUA of the
    completed ones (:func:`simulator.slo.tasks`)."""
    t = tasks(req)
    t = t[((t["start_s"] >= window[0]) & (t["start_s"] <= window[1])).to_numpy()]
    outcome = t["outcome"]
    done = t[outcome == "completed"]
    return {"loop": loop, "started": len(t), "completed": int((outcome == "completed").sum()),
            "failed": int((outcome == "failed").sum()), "unfinished": int((outcome == "unfinished").sum()),
            "calls_per_task": float(t["calls"].mean()) if len(t) else None,
            "turns_per_task": float(t["turns"].mean()) if len(t) else None,
            "task_ttua_s": describe(done["ttua_s"].to_numpy(dtype=float))}


def _benchmark_summary(arrival: Any, steps: Mapping[str, np.ndarray], window: tuple[float, float],
                       num_requests: int) -> dict[str, Any]:
    """How a benchmark mode loaded the engine: the mode, its clients and the running batch it held.

    ``mean_running_batch`` is the mean number of sequences per engine step (weighted by step time)
    over the steps that started in the measurement window: in a closed loop of N clients with no
    think time it approaches N while ``max_num_seqs`` and the KV cache allow.
    """
    start = np.asarray(steps["start_time"])
    keep = (start >= window[0]) & (start <= window[1])
    d = np.asarray(steps["duration_s"])[keep]
    out: dict[str, Any] = {"mode": arrival.process}
    if isinstance(arrival, ClosedLoopArrival):
        out.update(concurrency=arrival.concurrency, think_time_s=arrival.think_time_s,
                   think_time_dist=arrival.think_time_dist)
    else:
        out.update(concurrency=num_requests, makespan_s=window[1])
    out["mean_running_batch"] = float(np.average(np.asarray(steps["num_seqs"])[keep], weights=d)) \
        if d.sum() > 0 else None
    return out


def every_request_summary(req: Mapping[str, Any], steps: Mapping[str, np.ndarray],
                          finished: np.ndarray) -> dict[str, Any]:
    """The run as ``vllm bench serve``, GenAI-Perf and InferenceX summarise a benchmark: every
    completed request counts, the start-up wave included (in a closed loop every client sends at
    once, so the first requests queue behind each other's prefills), and throughput is completed
    requests and output tokens over the time from the first send to the last completion. Beside
    the steady-state summary, which measures a closed loop once every client has had an answer; a
    published benchmark's TTFT tail is this one's."""
    sent = np.asarray(req["arrival_time"], dtype=float)
    finish = np.asarray(req["finish_time"], dtype=float)[finished]
    first = float(sent.min()) if len(sent) else 0.0
    last = float(finish.max()) if len(finish) else first
    span = last - first
    out: dict[str, Any] = {"window_s": [first, last], "completed": int(finished.sum())}
    out["requests_per_s"] = float(finished.sum() / span) if span > 0 else None
    out["output_tokens_per_s"] = float(np.asarray(req["num_output_tokens"])[finished].sum() / span) \
        if span > 0 else None
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        out[metric] = describe(np.asarray(req[metric], dtype=float)[finished])
    values, weights = itl_samples(steps)
    itl: dict[str, Any] = {"mean": float(np.average(values, weights=weights)) if len(values) else None}
    if len(values):
        itl.update({f"p{p}": q for p, q in zip(PERCENTILES, weighted_quantiles(values, weights,
                                                                               [p / 100 for p in PERCENTILES]),
                                               strict=True)})
    out["itl_s"] = itl
    return out


def _lever_counts(req: Mapping[str, Any], status: np.ndarray) -> dict[str, int]:
    """Requests the client abandoned (``client.timeout_s``) and those shed by admission control."""
    aborted = status == "finished_aborted"
    return {"timed_out": int(aborted.sum()),
            "timed_out_waiting": int((aborted & np.isnan(np.asarray(req["first_scheduled_time"], dtype=float))).sum()),
            "shed": int((status == "finished_shed").sum())}


def _deployment_summary(result: SimulationResult) -> dict[str, Any]:
    """GPU count and the model-level levers as served (quantization, KV dtype, TP, PP, EP)."""
    sc, system = result.scenario, result.system
    dep, p, plan = sc.deployment, system.precision, system.kv_plan
    # As provisioned: every region's, pool's (each its own TP), prefill and decode replica, the
    # autoscaler's ceiling (its own block says how many ran).
    replicas, num_gpus = result.num_replicas, result.num_gpus
    # Pipeline, expert and data parallelism are listed only when used (the summary of a TP-only run is
    # unchanged); a replica's data-parallel ranks are replicas of the run (its rows), counted once here.
    split = {f"{kind}_parallel_size": size for kind, size in (("pipeline", dep.pipeline_parallel_size),
                                                              ("expert", dep.expert_parallel_size),
                                                              ("data", dep.data_parallel_size)) if size > 1}
    replicas //= dep.data_parallel_size
    return {
        "num_gpus": num_gpus,
        "deployment": {
            "replicas": replicas, "tensor_parallel_size": dep.tensor_parallel_size, **split,
            "num_gpus": num_gpus,
            "quantization": p.quantization if p is not None else "none",
            "compute_dtype": p.compute_dtype if p is not None else system.model.dtype,
            "kv_cache_dtype": p.kv_cache_dtype if p is not None else system.model.dtype,
            "stream": result.scenario.client.stream,
            # vLLM's "maximum concurrency for max_model_len tokens per request" (of every data-parallel rank)
            "max_concurrency": plan.num_token_slots * dep.data_parallel_size / system.max_model_len,
        },
    }


def _prefix_cache_summary(counters: dict[str, int] | None) -> dict[str, Any] | None:
    """vLLM's prefix-cache metrics over the whole run: ``hit_rate`` = hit tokens / queried tokens
    (prompt tokens, plus generated tokens for re-admissions after a preemption)."""
    if counters is None:
        return None
    q = counters["queries"]
    return {"hit_rate": counters["hit_tokens"] / q if q else None, **counters}


def _speculative_summary(spec: Any, stats: dict[str, float]) -> dict[str, Any]:
    proposed, steps = stats.get("num_draft_tokens", 0), stats.get("num_verify_steps", 0)
    return {
        "method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens,
        "acceptance_rate": spec.acceptance_rate,
        "num_draft_tokens": proposed, "num_accepted_tokens": stats.get("num_accepted_tokens", 0),
        "draft_acceptance_rate": stats.get("num_accepted_tokens", 0) / proposed if proposed else None,
        "mean_tokens_per_step": stats.get("num_emitted_decode_tokens", 0) / steps if steps else None,
        "expected_tokens_per_step": expected_tokens_per_step(spec.acceptance_rate, spec.num_speculative_tokens),
    }


def _slo_summary(slo: Any, requests: Mapping[str, Any], window: tuple[float, float],
                 stable: bool | None) -> dict[str, Any]:
    """The judge's verdict (:func:`simulator.slo.judge`) in the summary's keys."""
    thresholds = slo_thresholds_s(slo)
    if not has_objectives(slo):
        return {"slo_attainment": None, "goodput_requests_per_s": None, "slo": {"thresholds_s": thresholds}}
    verdict = judge(requests, slo, window, stable=stable)
    return {"slo_attainment": verdict.attainment, "goodput_requests_per_s": verdict.goodput_requests_per_s,
            "slo": {"thresholds_s": thresholds, **verdict.to_dict()}}


def batch_summary(step_log: FrozenStepLog, system: ResolvedSystem) -> dict[str, Any]:
    """The summary's ``batch`` part of a run (its step log and resolved system): steps, the running
    batch (mean weighted by step time, and max), busy time and the KV cache's usage (under ``kv``)."""
    steps = step_log.columns()
    return _batch_summary(steps, system.num_gpu_blocks_of(steps["replica"]))


def _batch_summary(steps: Mapping[str, np.ndarray], num_gpu_blocks: Any) -> dict[str, Any]:
    if len(steps["duration_s"]) == 0:
        return {"num_steps": 0, "mean_num_seqs": None, "max_num_seqs": 0,
                "kv": {"mean_usage": None, "max_usage": None}}
    d = steps["duration_s"]
    seqs = steps["num_seqs"]
    usage = steps["kv_blocks_used"] / num_gpu_blocks
    busy = float(d.sum())
    return {
        "num_steps": len(d),
        "mean_num_seqs": float(np.average(seqs, weights=d)) if busy > 0 else None,
        "max_num_seqs": int(seqs.max()),
        "busy_s": busy,
        "kv": {"mean_usage": float(np.average(usage, weights=d)) if busy > 0 else None,
               "max_usage": float(usage.max())},
    }


def summarize_replications(summaries: Sequence[dict[str, Any]], metric: str, stat: str) -> dict[str, float]:
    """Mean and 95% t-interval of one statistic (``"ttft_s"``, ``"p99"``) across replications."""
    xs = np.array([s[metric][stat] for s in summaries], dtype=float)
    n = len(xs)
    mean = float(xs.mean())
    half = float(t_ppf(0.975, n - 1) * xs.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "n": n}


#: Summary keys a sweep row keeps: (metric, statistic).
SWEEP_METRICS = (("e2e_s", "mean"), ("ttft_s", "p50"), ("ttft_s", "p99"), ("tpot_s", "p50"), ("tpot_s", "p99"),
                 ("e2e_s", "p50"), ("e2e_s", "p99"), ("queue_delay_s", "p99"))


def summary_row(result: SimulationResult) -> dict[str, Any]:
    """The flat numbers one run contributes to a study or sweep table (seconds; ``*_p99_s`` etc.).

    Latency columns describe the completed requests; ``slo_met``, ``slo_attainment`` and
    ``goodput_rps`` are the one judge's (:mod:`simulator.slo`: every arrival counts, dropped ones as
    misses; ``None`` without an SLO); ``stable`` is the stability test's verdict.
    """
    s = result.summary
    row: dict[str, Any] = {f"{m.removesuffix('_s')}_{q}_s": s[m][q] for m, q in SWEEP_METRICS}
    slo = s.get("slo") or {}
    row.update(throughput_rps=s["throughput"]["requests_per_s"],
               output_tokens_per_s=s["throughput"]["output_tokens_per_s"],
               goodput_rps=s.get("goodput_requests_per_s"), slo_attainment=s.get("slo_attainment"),
               slo_met=slo.get("passed"), stable=(s.get("stability") or {}).get("stable"),
               completed=s["requests"]["completed"], rejected=s["requests"]["rejected"],
               dropped=slo.get("dropped"), preemptions=s["requests"]["preemptions"],
               mean_batch=s["batch"]["mean_num_seqs"], wall_s=result.wall_s)
    return row
