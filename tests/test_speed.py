"""Interactive speed (issue 22): what must stay cheap, checked by behaviour rather than timing."""
from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

HEAVY = ("pandas", "pyarrow", "scipy", "plotly", "streamlit", "torch", "simulator.run.simulate", "simpy")


def _modules_after(code: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
                         cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    return set(out.stdout.split())


def test_the_cli_imports_no_heavy_module_until_a_command_needs_it():
    """``llmplan --help`` only builds the command tree: pandas, scipy, the engine stay unloaded."""
    loaded = _modules_after("import simulator.cli.commands")
    assert not {m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY}


def test_the_package_exports_resolve_on_first_use():
    import simulator

    for name in simulator.__all__:
        assert getattr(simulator, name) is not None
    assert set(simulator.__all__) <= set(dir(simulator))


def test_critical_values_agree_with_scipy_stats():
    """The summary's t and binomial quantiles, computed in pure Python (no SciPy import at
    start-up), are scipy.stats' values: the binomial quantile (an integer) exactly, the t
    quantile to 1e-13 relative (so every confidence interval keeps all but its last digits)."""
    from scipy import stats

    from simulator.critical_values import binom_ppf, t_ppf

    for df in [*range(1, 1101), 1234, 9999, 10**5, 10**6, 10**9]:
        for q in (0.9, 0.975, 0.99, 0.995, 0.9999):
            want = float(stats.t.ppf(q, df))
            assert t_ppf(q, df) == pytest.approx(want, rel=1e-13, abs=0)
            assert t_ppf(1 - q, df) == pytest.approx(-want, rel=1e-13, abs=0)
        assert t_ppf(0.5, df) == 0.0
    rng = random.Random(7)
    sizes = [*range(1, 60), 99, 100, 101, 1000, 2999, 10_000, 123_457, 10**6,
             *(rng.randint(60, 300_000) for _ in range(60))]
    for n in sizes:
        for p in (0.01, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999):
            for q in (0.005, 0.025, 0.975, 0.995):
                assert binom_ppf(q, n, p) == float(stats.binom.ppf(q, n, p)), (q, n, p)
    assert (binom_ppf(0.5, 7, 0.0), binom_ppf(0.5, 7, 1.0), binom_ppf(0.5, 0, 0.3)) == (0.0, 7.0, 0.0)
    with pytest.raises(ValueError, match="0 < q < 1"):
        t_ppf(1.0, 5)
    with pytest.raises(ValueError, match="0 <= p <= 1"):
        binom_ppf(0.5, 10, 1.5)


def test_the_summary_path_imports_no_scipy_and_no_pandas():
    """Running a simulation and summarising it loads no SciPy and no pandas (their imports cost a
    sixth and a quarter of a second of every CLI run): the summary reads the request columns, and
    the request frame is built when a caller reads ``result.requests``."""
    run = ("from simulator.scenario.config import load_scenario\n"
           "from simulator.run.simulate import simulate\n"
           f"r = simulate(load_scenario({str(SPEED)!r}, {{'num_requests': 300}}))\nr.summary\n")
    loaded = _modules_after(run)
    assert not {m for m in loaded if m.split(".")[0] in ("scipy", "pandas", "pyarrow")}
    assert "pandas" in _modules_after(run + "r.requests")


@pytest.mark.parametrize("overrides", [
    {},
    {"workload.tiers": [{"name": "gold", "share": 0.3, "priority": 0, "slo": {"ttft_p99_ms": 300}},
                        {"name": "free", "share": 0.7, "priority": 1}], "scheduler.scheduling_policy": "priority"},
    {"client.timeout_s": 2.0, "admission.max_queue_len": 20, "workload.arrival.rate_per_s": 40,
     "slo": {"ttft_p99_ms": 500, "max_drop_fraction": 0.5}},
    {"client.usable_answer_tokens": 20, "warmup_s": 5, "cooldown_s": 5},
    {"client.stream": False, "workload.arrival": {"process": "offline"}},
    {"workload.sessions": {"turns": 3, "turn_gap_s": 1.0}, "slo": {"task_ttua_p90_ms": 9000}},
    {"network": {"clients": [{"rtt_ms": 20}]}},
])
def test_the_summary_from_the_request_columns_is_the_summary_from_the_frame(overrides):
    """The summary read off a run's request columns (no pandas) equals, key for key, the one read
    off its request frame, and the frame built afterwards is the same frame."""
    import pandas as pd

    from simulator import load_scenario, simulate
    sc = load_scenario("examples/chat-h100.yaml", overrides={"num_requests": 800, "warmup_s": 0, "cooldown_s": 0,
                                                            "workload.over_length": "clip", **overrides})
    by_columns, by_frame = simulate(sc), simulate(sc)
    frame = by_frame.requests
    assert isinstance(by_columns.records, pd.DataFrame) == ("network" in overrides)   # client latencies: a frame
    a, b = dict(by_columns.summary), dict(by_frame.summary)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
    pd.testing.assert_frame_equal(by_columns.requests, frame, check_exact=True)


SPEED = ROOT / "benchmarks" / "scenarios" / "speed-10k.yaml"
SPEC = {"method": "draft", "draft_model": "llama-3.2-1b", "num_speculative_tokens": 4, "acceptance_rate": 0.7}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6}


def _same_run(a, b) -> None:
    """Two results are the same run: every request and step column equal bit for bit, same counters."""
    import pandas as pd

    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert a.engine_stats == b.engine_stats
    assert a.prefix_cache == b.prefix_cache


@pytest.mark.parametrize("overrides", [
    {"speculative_config": SPEC},
    {"speculative_config": NGRAM, "deployment.replicas": 2, "deployment.router": "least_outstanding",
     "workload.arrival.rate_per_s": 12},
    {"speculative_config": NGRAM, "scheduler.num_gpu_blocks_override": 300, "workload.arrival.rate_per_s": 20,
     "workload.output_tokens": {"dist": "geometric", "mean": 300, "max": 1000}},   # 317 preemptions
    {"speculative_config": SPEC, "client.timeout_s": 5, "workload.arrival.rate_per_s": 15},   # 65 time out
])
def test_the_verification_fast_path_is_the_step_by_step_loop(overrides, monkeypatch):
    """Speculative steps that end before the next event are planned and applied by
    ``advance_steps`` on plain lists; the result is the same run, bit for bit, as the
    engine loop planning and applying each of them through ``schedule``/``update_from_output``."""
    from simulator import load_scenario, simulate
    from simulator.engine.speculative import SpeculativeScheduler

    sc = load_scenario(SPEED, {"num_requests": 600, **overrides})
    fast = simulate(sc)
    assert fast.engine_stats["num_verify_steps"] > 0
    monkeypatch.setattr(SpeculativeScheduler, "own_steps", lambda self: None)   # no fast path of its own
    _same_run(fast, simulate(sc))


SHAREGPT = ROOT / "examples" / "sharegpt-h100.yaml"
CHUNKED_SHAREGPT = {"hardware": "h100-sxm-datasheet", "num_requests": 700, "workload.arrival.rate_per_s": 4.0,
                    "scheduler.policy": "chunked_prefill", "scheduler.max_num_batched_tokens": 512}
#: Variants of ShareGPT-like traffic under chunked prefill with 512-token steps (requests wait while
#: a long prompt takes the budget): the mixed steps' fast path beside everything that ends it.
CHUNKED_CASES = {
    "one replica": {},
    "prefix caching": {"workload.prefix": {"num_prefixes": 4, "prefix_tokens": 512, "share": 0.8,
                                           "short_prompt": "clip"}, "scheduler.enable_prefix_caching": True},
    "KV pressure": {"scheduler.num_gpu_blocks_override": 2500},
    "priority": {"scheduler.scheduling_policy": "priority", "workload.tiers": [
        {"name": "chat", "share": 0.3, "priority": 0}, {"name": "batch", "share": 0.7, "priority": 1}]},
    "256-token chunks, 1024-token steps": {"scheduler.long_prefill_token_threshold": 256,
                                           "scheduler.max_num_batched_tokens": 1024},
    "timeouts and shedding": {"workload.arrival.rate_per_s": 6.0, "client.timeout_s": 20.0,
                              "admission.max_queue_delay_s": 4.0},
    "three replicas": {"deployment.replicas": 3, "deployment.router": "least_outstanding_tokens",
                       "workload.arrival.rate_per_s": 11.0},
    "vLLM v1 (async scheduling, CUDA graphs)": {"engine": "vllm-v1"},
}


@pytest.mark.parametrize("overrides", CHUNKED_CASES.values(), ids=CHUNKED_CASES)
def test_the_mixed_step_fast_path_is_the_step_by_step_loop(overrides, monkeypatch):
    """Chunked prefill's mixed steps (prompt chunks beside the decodes) that end before the next
    event, and the one that crosses it, are planned and applied by ``advance_steps`` on plain lists,
    also while requests wait for the budget; the result is the same run, bit for bit, as the engine
    loop planning and applying each of them through ``schedule``/``update_from_output``."""
    from simulator import load_scenario, simulate
    from simulator.engine.policies import ChunkedPrefillScheduler

    sc = load_scenario(SHAREGPT, {**CHUNKED_SHAREGPT, **overrides})
    planned = []
    own = ChunkedPrefillScheduler.advance_steps

    def counted(self, t, horizon, cost, log):
        end, done, crossing = own(self, t, horizon, cost, log)
        planned.append((end != t) + (crossing is not None))
        return end, done, crossing

    monkeypatch.setattr(ChunkedPrefillScheduler, "advance_steps", counted)
    fast = simulate(sc)
    assert sum(planned) > 100
    monkeypatch.setattr(ChunkedPrefillScheduler, "own_steps", lambda self: None)   # no fast path of its own
    slow = simulate(sc)
    _same_run(fast, slow)
    if "num_gpu_blocks_override" in overrides:
        assert fast.summary["requests"]["preemptions"] > 0


PREFIX = {"num_prefixes": 4, "prefix_tokens": 512, "share": 0.8, "short_prompt": "clip"}
MANY = {"num_requests": 1500, "deployment.replicas": 4, "workload.arrival.rate_per_s": 20.0,
        "deployment.router": "least_outstanding"}
#: Variants of MANY that run the plain scheduler's rows through every way they come and leave.
PLAIN_BATCH_CASES = [
    {"deployment.replicas": 1, "workload.arrival.rate_per_s": 5.0},
    {"hardware": "h100-sxm", "deployment.router": "round_robin"},          # the measured kernel tables
    {"deployment.router": "round_robin", "scheduler.num_gpu_blocks_override": 6000},   # preemptions
    {"scheduler.num_gpu_blocks_override": 6000, "scheduler.preemption_mode": "swap"},
    {"workload.prefix": PREFIX, "scheduler.enable_prefix_caching": True, "deployment.router": "prefix_affinity"},
    {"client.timeout_s": 20, "scheduler.scheduling_policy": "priority", "scheduler.num_scheduler_steps": 4},
]


@pytest.mark.parametrize("overrides", [
    {},
    {"deployment.router": "round_robin", "scheduler.num_gpu_blocks_override": 6000},   # preemptions
    {"scheduler.policy": "chunked_prefill", "scheduler.long_prefill_token_threshold": 512},
    {"scheduler.policy": "static"},
    {"scheduler.policy": "disaggregated", "deployment.prefill_replicas": 2, "deployment.decode_replicas": 2},
    {"workload.prefix": PREFIX, "scheduler.enable_prefix_caching": True, "deployment.router": "prefix_affinity"},
    {"client.timeout_s": 20, "scheduler.scheduling_policy": "priority", "scheduler.num_scheduler_steps": 4},
])
def test_a_decode_run_that_follows_on_is_the_one_schedule_would_plan(overrides, monkeypatch):
    """After an event that left a replica's batch as it was (an arrival sent to another replica),
    the next decode run is planned from the last one (``plan_decode_continuation``); the run is the
    same, bit for bit, as the one ``schedule`` + ``plan_decode_run`` plan from the batch."""
    from simulator import load_scenario, simulate
    from simulator.engine.scheduler import Scheduler

    sc = load_scenario(SHAREGPT, {**MANY, **overrides})
    fast = simulate(sc)
    monkeypatch.setattr(Scheduler, "plan_decode_continuation", lambda self, *args: None)
    _same_run(fast, simulate(sc))


@pytest.mark.pure_python
@pytest.mark.parametrize("overrides", [*PLAIN_BATCH_CASES, {"scheduler.policy": "static"}])
def test_a_decode_run_read_off_the_tracked_batch_is_the_one_schedule_would_plan(overrides, monkeypatch):
    """With nobody waiting (after a step that admitted requests, a decode run that finished some,
    aborts), the next run is planned from the tracked batch (``plan_tracked_run``); the run is the
    same, bit for bit, as the one ``schedule`` + ``plan_decode_run`` plan from the batch."""
    from simulator import load_scenario, simulate
    from simulator.engine.scheduler import Scheduler

    sc = load_scenario(SHAREGPT, {**MANY, **overrides})
    planned = Scheduler.plan_tracked_run
    calls = []
    monkeypatch.setattr(Scheduler, "plan_tracked_run", lambda self, *a: calls.append(1) or planned(self, *a))
    fast = simulate(sc)
    assert calls or overrides.get("scheduler.policy") == "static"     # static batches keep padded rows
    monkeypatch.setattr(Scheduler, "plan_tracked_run", lambda self, *args: None)
    _same_run(fast, simulate(sc))


@pytest.mark.pure_python
@pytest.mark.parametrize("overrides", [
    *PLAIN_BATCH_CASES,
    {"client.timeout_s": 5, "scheduler.num_gpu_blocks_override": 4000},   # aborts of running requests
])
def test_the_tracked_batch_is_the_batch(overrides, monkeypatch):
    """The tracked batch (row counts kept less a phase that steps move on; the residue histogram and
    smallest remaining output kept up to date as rows come and leave) gives at every plan the
    histogram and minimum the rows' counts give; and the run is the same, bit for bit, as the
    untracked scheduler's, which steps its arrays and reads both from them."""
    import numpy as np

    from simulator import load_scenario, simulate
    from simulator.engine.decode_run import turned
    from simulator.engine.scheduler import Scheduler

    sc = load_scenario(SHAREGPT, {**MANY, **overrides})
    checked = []

    def check(self):
        n, bs = self.n, self.block_size
        if self._tracked and n:
            residues = np.bincount(np.asarray(self.computed_tokens()) % bs, minlength=bs).tolist()
            assert turned(self._residues_at_phase, self._phase_computed) == residues
            assert self._min_remaining() == min(self.remaining_tokens())
            checked.append(n)

    schedule, tracked_run = Scheduler.schedule, Scheduler.plan_tracked_run
    monkeypatch.setattr(Scheduler, "schedule", lambda self, now: check(self) or schedule(self, now))
    monkeypatch.setattr(Scheduler, "plan_tracked_run", lambda self, *a: check(self) or tracked_run(self, *a))
    tracked = simulate(sc)
    assert len(checked) > 1000
    monkeypatch.setattr(Scheduler, "schedule", schedule)
    monkeypatch.setattr(Scheduler, "plan_tracked_run", tracked_run)
    init = Scheduler.__init__

    def untracked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._tracked = False     # plan_tracked_run reads the tracked batch
    monkeypatch.setattr(Scheduler, "__init__", untracked)
    _same_run(tracked, simulate(sc))


@pytest.mark.parametrize("overrides", [
    {},                                                                    # the measured kernel tables
    {"deployment.replicas": 3, "workload.arrival.rate_per_s": 15.0, "scheduler.num_gpu_blocks_override": 6000},
])
def test_a_tabulated_run_reuses_the_durations_that_found_its_horizon(overrides, monkeypatch):
    """A decode run whose cost is not affine takes its step durations from the array summed to find
    the step that crosses the next arrival; the run is the same, bit for bit, as with the durations
    computed again."""
    from simulator import load_scenario, simulate
    from simulator.engine import decode_run

    sc = load_scenario(SHAREGPT, {"num_requests": 1500, "hardware": "h100-sxm", **overrides})
    monkeypatch.setattr(decode_run, "LIST_STEPS", 0)                  # every run priced with numpy
    fast = simulate(sc)
    assert fast.step_log.num_steps > fast.step_log.num_entries       # decode runs of several steps
    steps_to_reach = decode_run.steps_to_reach
    monkeypatch.setattr(decode_run, "steps_to_reach", lambda *args: (steps_to_reach(*args)[0], None))
    _same_run(fast, simulate(sc))


def test_numpy_sum_adds_as_numpy_does():
    """A decode run priced on plain floats sums its durations with numpy's pairwise order, so its
    total is the float ``np.sum`` gives for the same durations."""
    import numpy as np

    from simulator.engine.decode_run import numpy_sum

    rng = np.random.default_rng(3)
    for n in [*range(1, 300), 511, 1024, 2049]:
        x = rng.random(n) * 0.02 + 1e-3
        assert numpy_sum(x.tolist()) == float(x.sum())
        assert numpy_sum(x[1:].tolist()) == float(x[1:].sum())


@pytest.mark.pure_python
@pytest.mark.parametrize("engine", [None, "vllm-v1", "sglang", "vllm-v0.6"])
def test_a_decode_step_on_floats_is_the_numpy_step(engine):
    """``decode_step_fn`` (short decode runs) gives element for element the floats of
    ``decode_run_times`` (long ones), through the CUDA-graph and async-scheduling wrappers, below
    the first measured context, between the breakpoints and beyond the last."""
    import numpy as np

    from simulator import load_scenario
    from simulator.cost.factory import make_cost_model
    from simulator.engine.decode_run import DecodePrices
    from simulator.run.resolve import resolve
    from simulator.scenario.parallel import Parallelism

    sc = load_scenario(SHAREGPT, {"hardware": "h100-sxm", **({"engine": engine} if engine else {})})
    system = resolve(sc)
    cost = make_cost_model(system.profile, system.model, 1, None, Parallelism.of(sc.deployment), system.cuda_graph)
    for n in [1, 3, 17, 64, 200, 256, 300, 512]:
        fn = cost.decode_step_fn(n)
        assert fn is not None
        ctx = n * np.array([0, 1, 2, 7, 100, 999, 5000, 20000, 200000], dtype=np.float64)
        assert [fn(float(c)) for c in ctx] == cost.decode_run_times(n, ctx).tolist()
        assert fn(float(ctx[4])) == cost.decode_step_time_s(n, int(ctx[4]))
        assert [cost.decode_step_time_s(n, c) for c in ctx.astype(np.int64)] == [fn(float(c)) for c in ctx]
        assert [cost.decode_step_time_s(n, int(c)) for c in ctx] == [fn(float(c)) for c in ctx]
        # The run pricing the scheduler uses (the table's inlined steps without wrappers), across
        # breakpoints: the same floats, stopped at the first step whose running sum reaches delta.
        steps = DecodePrices(cost).steps(n)
        assert steps is not None
        assert engine is not None or cost.decode_steps_fn(n) is not None
        for ctx1 in (0, n, 50 * n, 999 * n, 20000 * n):
            k = 64 if n < 300 else 16
            ctxs = ctx1 + n * np.arange(k, dtype=np.float64)
            want = cost.decode_run_times(n, ctxs)
            got, reached = steps(ctx1, k, math.inf)
            assert got == want.tolist() and not reached
            cum = np.cumsum(want)
            delta = float(cum[k // 3])
            got, reached = steps(ctx1, k, delta)
            assert reached and got == want[:int(np.argmax(cum >= delta)) + 1].tolist()


@pytest.mark.parametrize("overrides", [
    {},
    {"engine": "vllm-v1"},
    {"engine": "sglang", "deployment.replicas": 3, "workload.arrival.rate_per_s": 15.0},
    {"scheduler.num_gpu_blocks_override": 6000, "workload.arrival.rate_per_s": 8.0},   # preemptions
])
def test_short_decode_runs_on_floats_are_the_numpy_runs(overrides, monkeypatch):
    """Decode runs of up to ``LIST_STEPS`` steps are priced on plain floats; the run is the same,
    bit for bit, as with every run priced by numpy."""
    from simulator import load_scenario, simulate
    from simulator.engine import decode_run

    sc = load_scenario(SHAREGPT, {"num_requests": 1200, "hardware": "h100-sxm", **overrides})
    fast = simulate(sc)
    monkeypatch.setattr(decode_run, "LIST_STEPS", 0)
    _same_run(fast, simulate(sc))


RR = {"num_requests": 1500, "deployment.replicas": 4, "deployment.router": "round_robin",
      "workload.arrival.rate_per_s": 22.0}


@pytest.mark.parametrize("overrides", [
    {},
    {"hardware": "h100-sxm-datasheet"},                                        # affine runs, closed form
    {"workload.over_length": "reject", "scheduler.max_model_len": 2500},       # refused ones are not routed
    {"admission.max_queue_len": 1, "workload.arrival.rate_per_s": 40.0},        # shed ones are
    {"client.timeout_s": 4, "workload.arrival.rate_per_s": 30.0},
    {"scheduler.policy": "chunked_prefill", "scheduler.num_gpu_blocks_override": 5000},
    {"max_sim_time_s": 40.0},
])
def test_round_robin_replicas_plan_decode_runs_up_to_their_own_next_arrival(overrides, monkeypatch):
    """With round-robin routing a replica's decode runs end at its own next arrival, not at every
    replica's: far fewer runs, and the same requests and steps as one event per step and as runs
    cut at every arrival (instants equal but for the last bits of their sums)."""
    from simulator import load_scenario, simulate
    from simulator.run import simulate as sim_module
    from tests.conftest import assert_same_run_to_1e9

    sc = load_scenario(SHAREGPT, {**RR, **overrides})
    own = simulate(sc)
    monkeypatch.setattr(sim_module._Run, "_routes_ahead", lambda self, router: False)
    cut = simulate(sc)
    slow = simulate(sc, fast_forward=False)
    assert own.step_log.num_entries < cut.step_log.num_entries
    assert_same_run_to_1e9(own, cut)
    assert_same_run_to_1e9(own, slow)


@pytest.mark.parametrize("overrides", [
    {},
    {"scheduler.num_gpu_blocks_override": 3000, "workload.arrival.rate_per_s": 12.0},           # preemptions
    {"scheduler.policy": "dynamic", "scheduler.max_wait_ms": 200},                            # waits to fill
    {"scheduler.policy": "static", "scheduler.max_num_seqs": 16},
    {"scheduler.policy": "chunked_prefill", "scheduler.long_prefill_token_threshold": 256},
    {"speculative_config": SPEC},
    {"workload.prefix": PREFIX, "scheduler.enable_prefix_caching": True},
    {"client.timeout_s": 3, "admission.max_queue_delay_s": 1.0, "workload.arrival.rate_per_s": 12.0},
    {"scheduler.scheduling_policy": "priority", "scheduler.num_scheduler_steps": 4, "workload.tiers": [
        {"name": "a", "share": 0.4, "priority": 0}, {"name": "b", "share": 0.6, "priority": 1}]},
    {"workload.arrival": {"process": "offline"}, "num_requests": 300},
    {"workload.arrival": {"process": "gamma", "rate_per_s": 6.0, "cv": 3.0}},                 # bursts
    {"deployment.replicas": 3, "deployment.router": "round_robin", "workload.arrival.rate_per_s": 15.0},
])
def test_replicas_that_take_their_own_arrivals_run_as_with_an_arrival_process(overrides, monkeypatch):
    """One replica, or round-robin replicas, queue their own arrivals when they next wake instead of
    an arrival process sending each at its instant: the same run bit for bit (requests, steps,
    counters, the clock at the end and the summary)."""
    from simulator import load_scenario, simulate
    from simulator.run import simulate as sim_module

    sc = load_scenario(SPEED, {"num_requests": 1500, **overrides})
    delivered = []
    plan = sim_module._Run._plan_own_arrivals

    def recorded(self, rejected, deliver=False):
        delivered.append(deliver)
        plan(self, rejected, deliver)
    monkeypatch.setattr(sim_module._Run, "_plan_own_arrivals", recorded)
    own = simulate(sc)
    assert delivered == [True]
    monkeypatch.setattr(sim_module._Run, "_replicas_take_arrivals", lambda self, router: False)
    sent = simulate(sc)
    _same_run(own, sent)
    assert own.sim_time_s == sent.sim_time_s
    assert {**own.summary, "wall_s": 0} == {**sent.summary, "wall_s": 0}


def test_the_summary_is_computed_on_first_use_and_the_planner_never_needs_it(monkeypatch):
    """``result.summary`` is built when first read (routing counters and ``wall_s`` appended, once);
    the planner's judge reads the stability test and the batch mean itself, equal to the summary's."""
    import dataclasses

    import simulator.metrics as metrics
    from simulator import load_scenario, simulate
    from simulator.planner import build_tasks, load_plan
    from simulator.planner.search import _judge_replication, _run_stability
    sc = load_scenario("examples/chat-h100.yaml", overrides={
        "num_requests": 600, "deployment.replicas": 2, "deployment.router": "prefix_affinity",
        "workload.arrival.rate_per_s": 12})
    result = simulate(sc)
    assert "_summary" not in result.__dict__
    summary = result.summary
    assert result.summary is summary and list(summary)[-2:] == ["routing", "wall_s"]
    assert summary["wall_s"] == result.wall_s
    assert _run_stability(result) == summary["stability"]
    assert metrics.batch_summary(result.step_log, result.system)["mean_num_seqs"] == summary["batch"]["mean_num_seqs"]

    def no_summary(_result):
        raise AssertionError("the planner computed a whole summary")
    monkeypatch.setattr(metrics, "summarize", no_summary)
    task = build_tasks(load_plan("examples/plan-fy27.yaml"))[0]
    task = dataclasses.replace(task, scenario=task.scenario.with_overrides({"num_requests": 300, "warmup_s": 0,
                                                                           "cooldown_s": 0}))
    checks = _judge_replication(task, 3, 0)
    assert checks[None]["stability"]["stable"] is not None and float(checks[None]["batching_factor"]) > 0


def test_client_latencies_as_new_records_are_the_in_place_ones():
    """The planner's judge adds each client mix's latencies to new records (``with_client_latencies``):
    on a frame, one concatenation; on a run's request columns, shared columns. Both are the frame,
    columns, dtypes and draws of the in-place ``add_client_latencies``, and leave their input as it
    was; columns added again are replaced, not doubled."""
    import numpy as np
    import pandas as pd

    from simulator import load_scenario, simulate
    from simulator.cluster.network import add_client_latencies, network_from_clients, with_client_latencies

    result = simulate(load_scenario("examples/chat-h100.yaml", overrides={"num_requests": 400}))
    columns = result.records
    net = network_from_clients([("near", 0.7, 0.02), ("far", 0.3, 0.08)], 2, 0.9)
    on_columns = with_client_latencies(columns, net, np.random.default_rng(3))
    assert "client" not in columns and list(on_columns)[-1] == "client_ttua_s"
    requests = result.requests
    in_place = requests.copy()
    add_client_latencies(in_place, net, np.random.default_rng(3))
    new = with_client_latencies(requests, net, np.random.default_rng(3))
    pd.testing.assert_frame_equal(new, in_place)
    pd.testing.assert_frame_equal(on_columns.to_frame(), in_place)
    assert "client" not in requests
    again = with_client_latencies(new, net, np.random.default_rng(4))
    assert list(again.columns) == list(new.columns) and not again["rtt_s"].equals(new["rtt_s"])
    again = with_client_latencies(on_columns, net, np.random.default_rng(4))
    assert list(again) == list(on_columns) and not np.array_equal(again["rtt_s"], on_columns["rtt_s"])


def test_a_released_batching_factor_simulates_its_run_again():
    """The planner keeps the step logs of its current answer's runs only; a released run's mean
    running batch comes from simulating the same seeded run again: the same float."""
    import dataclasses

    from simulator.planner import build_tasks, load_plan
    from simulator.planner.search import _judge_replication

    task = build_tasks(load_plan("examples/plan-fy27.yaml"))[2]
    task = dataclasses.replace(task, scenario=task.scenario.with_overrides({"num_requests": 400, "warmup_s": 0,
                                                                           "cooldown_s": 0}))
    factor = _judge_replication(task, 30, 1)[None]["batching_factor"]
    kept = float(factor)
    assert factor.step_log is not None
    factor.release()
    assert factor.step_log is None and float(factor) == kept and kept > 0


def _random_scenario(seed: int) -> dict:
    """Overrides of a small random scenario that mixes the levers the policies' fast paths meet."""
    import random

    rnd = random.Random(seed)
    chunked = rnd.random() < 0.6
    ov = {"model": "llama-3-8b", "hardware": rnd.choice(["a100-80gb-datasheet", "h100-sxm", "h100-sxm-datasheet"]),
          "num_requests": 200, "seed": seed, "scheduler.max_model_len": 1024,
          "scheduler.policy": "chunked_prefill" if chunked else "continuous",
          "scheduler.max_num_seqs": rnd.choice([4, 16, 64]),
          "scheduler.max_num_batched_tokens": rnd.choice([32, 64, 256, 1024]) if chunked else 1024,
          "workload.arrival.rate_per_s": rnd.choice([2.0, 8.0, 20.0, 40.0]),
          "workload.prompt_tokens": {"dist": "uniform", "min": 8, "max": rnd.choice([200, 600])},
          "workload.output_tokens": {"dist": "geometric", "mean": rnd.choice([5, 30, 100]), "max": 400}}
    if chunked and rnd.random() < 0.3:
        ov["scheduler.long_prefill_token_threshold"] = rnd.choice([16, 100])
    if not chunked or rnd.random() < 0.5:        # every draw has a policy with a fast path
        method = rnd.choice(["draft", "ngram", "mtp"])
        ov["speculative_config"] = {"method": method, "num_speculative_tokens": rnd.choice([1, 3, 6]),
                                    "acceptance_rate": rnd.choice([0.0, 0.5, 0.9, 1.0]),
                                    **({"draft_model": "llama-3.2-1b"} if method == "draft" else {})}
    if rnd.random() < 0.3:
        ov["scheduler.num_gpu_blocks_override"] = rnd.choice([80, 200])
    if rnd.random() < 0.3:
        ov.update({"scheduler.enable_prefix_caching": True,
                   "workload.prefix": {"num_prefixes": 2, "prefix_tokens": 64, "share": 0.7}})
    if rnd.random() < 0.3:
        ov.update({"deployment.replicas": rnd.choice([2, 3]),
                   "deployment.router": rnd.choice(["round_robin", "least_outstanding", "least_outstanding_tokens"])})
    if rnd.random() < 0.2:
        ov["client.timeout_s"] = rnd.choice([0.5, 3.0])
    if rnd.random() < 0.2:
        ov["admission.max_queue_delay_s"] = rnd.choice([0.2, 1.0])
    if rnd.random() < 0.2:
        ov.update({"scheduler.scheduling_policy": "priority", "workload.tiers": [
            {"name": "a", "share": 0.4, "priority": 0}, {"name": "b", "share": 0.6, "priority": 1}]})
    if rnd.random() < 0.2:
        ov["engine"] = rnd.choice(["vllm-v1", "sglang"])
    return ov


@pytest.mark.parametrize("case", range(16))
def test_the_policies_fast_paths_are_their_general_steps_on_random_scenarios(case, monkeypatch):
    """Random small scenarios (continuous or chunked prefill, speculation by draft, n-gram or MTP,
    KV pressure, prefix caching, replicas and routers, timeouts, shedding, priority tiers, engine
    presets): the run with the policies' ``advance_steps`` fast paths is the run without them, bit
    for bit (requests, every step, counters)."""
    from conftest import make_scenario

    from simulator import ScenarioError, simulate
    from simulator.engine.policies import ChunkedPrefillScheduler
    from simulator.engine.speculative import ChunkedSpeculativeScheduler, SpeculativeScheduler

    for seed in range(100 * case, 100 * case + 100):   # the first valid draw of this case's seeds
        try:
            sc = make_scenario(**_random_scenario(seed))
            fast = simulate(sc)
            break
        except ScenarioError:
            continue
    for policy in (ChunkedPrefillScheduler, SpeculativeScheduler, ChunkedSpeculativeScheduler):
        monkeypatch.setattr(policy, "own_steps", lambda self: None)   # no fast path of their own
    _same_run(fast, simulate(sc))


def test_the_planner_judges_request_columns_as_it_judges_the_frame():
    """``judge_run`` on a run's request columns (what the planner reads: tiers as row subsets, a
    client mix as added columns) gives the verdict it gives on the request frame."""
    import numpy as np

    from simulator import load_scenario, simulate
    from simulator.cluster.network import network_from_clients, with_client_latencies
    from simulator.planner.search import judge_run
    from simulator.scenario.config import SLOConfig

    sc = load_scenario("examples/tiers-h100.yaml", overrides={"num_requests": 1500, "warmup_s": 0, "cooldown_s": 0})
    slo = SLOConfig(ttft_p99_ms=400, tpot_p90_ms=40, attainment=0.9)
    result = simulate(sc)
    net = network_from_clients([("near", 0.7, 0.02), ("far", 0.3, 0.08)], 2, 0.9)
    on_columns = [judge_run(result, slo), judge_run(result, slo, with_client_latencies(
        result.records, net, np.random.default_rng(1)))]
    on_frame = [judge_run(result, slo, result.requests), judge_run(result, slo, with_client_latencies(
        result.requests, net, np.random.default_rng(1)))]
    assert on_columns == on_frame
    assert on_columns[0] != on_columns[1]     # the client mix's round trips count


def test_the_quantile_of_a_sorted_sample_is_numpys_bit_for_bit():
    """``sorted_quantile`` (the summary's and the judge's percentiles) is ``np.quantile``'s default
    linear quantile exactly, on samples of every small size, ties, negative and huge values, a
    trailing +inf and every percentile the summary reports."""
    import numpy as np

    from simulator.slo import sorted_quantile

    rng = np.random.default_rng(11)
    qs = [0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0, *rng.random(40)]
    samples = [rng.exponential(0.2, n) for n in [*range(1, 40), 99, 100, 101, 1000, 9999, 10_001]]
    samples += [rng.integers(0, 5, 50).astype(float), -rng.random(33) * 1e9, rng.random(20) * 1e-12,
                np.append(rng.random(30), np.inf), np.full(7, 0.25)]
    for x in samples:
        s = np.sort(x)
        for q in qs:
            with np.errstate(invalid="ignore"):     # numpy's inf - inf near a trailing +inf: NaN, as ours
                want = float(np.quantile(x, q))
            got = sorted_quantile(s, float(q))
            assert got == want or (math.isnan(got) and math.isnan(want)), (len(x), q, got, want)


def test_modules_load_with_the_collector_paused_and_are_frozen_after():
    """``loading_modules`` pauses the cyclic collector for a command's imports, freezes what they
    left alive and restores the collector's state (enabled or not) even when an import fails."""
    import gc

    from simulator.cli.startup import loading_modules

    was, kept = gc.isenabled(), []
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            frozen = gc.get_freeze_count()
            with pytest.raises(ImportError), loading_modules():
                assert not gc.isenabled()
                kept.extend([i] for i in range(1000))     # alive at the freeze
                import simulator_no_such_module  # noqa: F401
            assert gc.isenabled() is enabled and gc.get_freeze_count() >= frozen + 1000
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()


def test_a_process_main_ends_with_its_objects_frozen_and_its_exit_status():
    """``run_to_exit`` runs the command, keeps its exit (a ``SystemExit`` with its status) and then
    freezes what is alive, so the interpreter's exit has no collection left to make."""
    import gc

    from simulator.cli.startup import run_to_exit

    kept: list[list[int]] = []

    def main() -> None:
        kept.extend([i] for i in range(1000))
        raise SystemExit(2)

    frozen = gc.get_freeze_count()
    try:
        with pytest.raises(SystemExit) as stop:
            run_to_exit(main)
        assert stop.value.code == 2 and gc.get_freeze_count() >= frozen + 1000
    finally:
        gc.unfreeze()
