"""Async scheduling's admission lag (``Replica.lagged_admission``).

An engine that runs async scheduling (vLLM's ``--async-scheduling``, SGLang's and TensorRT-LLM's
overlap schedulers) forms step n+1's batch while step n runs, so a request that arrives during
step n is first scheduled in step n+2; one that finds the engine idle is scheduled at once. On the
constant cost model (every step 10 ms) the lag is exactly one step, and nothing else moves:

* a request arriving mid-step gets its first token one step later than under a synchronous
  engine, and one arriving at an idle engine none later;
* every request is served (conservation), fast-forward equals step by step, and the compiled and
  pure-Python engines agree (``tests/test_native.py`` digests the ``async`` lever's run);
* routers see held requests as outstanding.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_scenario

from simulator import simulate

STEP_S = 0.01


def _trace(tmp_path: Path, rows: list[tuple[float, int, int]]) -> str:
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,prompt_tokens,output_tokens\n" + "".join(f"{t},{p},{o}\n" for t, p, o in rows))
    return str(path)


def _run(tmp_path: Path, rows: list[tuple[float, int, int]], async_scheduling: bool, **over):
    sc = make_scenario(**{"num_requests": len(rows), "workload.arrival": {"process": "trace", "format": "requests",
                                                                           "path": _trace(tmp_path, rows)},
                          "hardware.overhead": {"frontend_s": 0.0}, **over},
                       engine={"preset": "vllm-v1", "async_scheduling": async_scheduling})
    return simulate(sc), simulate(sc, fast_forward=False)


def _ttft(result) -> np.ndarray:
    return result.requests.sort_values("request_id")["ttft_s"].to_numpy()


def test_a_request_arriving_mid_step_waits_one_more_step(tmp_path: Path) -> None:
    # A arrives at an idle engine at 0 and decodes 20 tokens; B arrives at 15 ms, inside A's second
    # step [10, 20) ms. Synchronous: B's prefill is the step at 20 ms, first token at 30 ms (TTFT 15 ms).
    # Async: the step at 20 ms was formed while B's arrival step ran; B's prefill is the one at 30 ms.
    rows = [(0.0, 32, 20), (0.015, 32, 5)]
    (sync, sync_slow), (lag, lag_slow) = _run(tmp_path, rows, False), _run(tmp_path, rows, True)
    np.testing.assert_allclose(_ttft(sync), [STEP_S, 0.015], atol=1e-9)
    np.testing.assert_allclose(_ttft(lag), [STEP_S, 0.025], atol=1e-9)      # A found the engine idle: no lag
    for fast, slow in ((sync, sync_slow), (lag, lag_slow)):
        np.testing.assert_allclose(fast.requests["finish_time"], slow.requests["finish_time"], atol=1e-9)


def test_an_idle_engine_schedules_at_once(tmp_path: Path) -> None:
    # B arrives at 0.5 s, long after A finished: the engine is idle, B's TTFT is its prefill step.
    rows = [(0.0, 32, 5), (0.5, 32, 5)]
    (lag, _), (sync, _) = _run(tmp_path, rows, True), _run(tmp_path, rows, False)
    np.testing.assert_allclose(_ttft(lag), _ttft(sync), atol=1e-12)
    np.testing.assert_allclose(_ttft(lag), [STEP_S, STEP_S], atol=1e-9)


def test_requests_that_arrive_as_the_batch_empties_are_served(tmp_path: Path) -> None:
    # B arrives during A's last step (A's 3 tokens end at 30 ms): held, then scheduled when the batch
    # empties, at A's end (no step was formed without it: nothing else was left to run).
    rows = [(0.0, 32, 3), (0.025, 32, 3)]
    lag, _ = _run(tmp_path, rows, True)
    np.testing.assert_allclose(_ttft(lag), [STEP_S, 0.030 + STEP_S - 0.025], atol=1e-9)


@pytest.mark.parametrize("rate", [20.0, 80.0])
def test_poisson_load_conserves_requests_and_adds_at_most_a_step(rate: float) -> None:
    over = {"num_requests": 400, "workload.arrival.rate_per_s": rate, "hardware.overhead": {"frontend_s": 0.0}}
    sync = simulate(make_scenario(**over, engine={"preset": "vllm-v1", "async_scheduling": False}))
    sc = make_scenario(**over, engine={"preset": "vllm-v1", "async_scheduling": True})
    lag, slow = simulate(sc), simulate(sc, fast_forward=False)
    assert lag.requests["finish_time"].notna().all() and len(lag.requests) == 400
    np.testing.assert_allclose(lag.requests["finish_time"], slow.requests["finish_time"], atol=1e-9)
    # the constant model has no CPU overhead to overlap: TTFT grows by the lag alone, between none (an
    # idle engine) and one step per wait (queued requests wait their turn as before)
    extra = lag.summary["ttft_s"]["mean"] - sync.summary["ttft_s"]["mean"]
    assert 0.0 < extra <= STEP_S + 1e-9


def test_routers_count_held_requests(tmp_path: Path) -> None:
    # Two replicas, least-outstanding routing: a request held by a busy replica counts as outstanding,
    # so the next arrival in the same step goes to the other replica, as it would without the lag.
    rows = [(0.0, 32, 50), (0.0, 32, 50), (0.013, 32, 50), (0.014, 32, 50)]
    over = {"deployment.replicas": 2, "deployment.router": "least_outstanding"}
    (lag, _), (sync, _) = _run(tmp_path, rows, True, **over), _run(tmp_path, rows, False, **over)
    assert list(lag.requests.sort_values("request_id")["replica"]) == \
        list(sync.requests.sort_values("request_id")["replica"])
