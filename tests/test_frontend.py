"""The engine's front end (``overhead.frontend_s``, simulator/cluster/frontend.py): a constant time per
request between the client's send and the engine, in every TTFT and E2E and in no TPOT.

* open loop: the same run as without it, every request's TTFT and E2E ``frontend_s`` longer, its
  engine queue delay and TPOT unchanged (a constant delay moves every arrival alike);
* closed loop: each client's cycle grows by ``frontend_s`` (Little's law: N clients, throughput N /
  (mean E2E + think)), so throughput drops;
* where the figure comes from: ``engine.overhead`` over the profile's overhead over the preset's.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import CONSTANT_HW, make_scenario

from simulator import simulate
from simulator.cluster.frontend import with_frontend
from simulator.run.resolve import resolve
from simulator.scenario.engines import ENGINE_PRESETS

F = 0.025
CLOSED_SESSIONS = {"workload.sessions": {"turns": 4, "turn_gap_s": 0.1, "turn_gap_dist": "fixed", "loop": "closed"}}


def _with(frontend_s: float | None, **over: object):
    hw = dict(CONSTANT_HW)
    if frontend_s is not None:
        hw["overhead"] = {"frontend_s": frontend_s}
    return make_scenario(hardware=hw, **over)


def test_open_loop_requests_pay_the_front_end_in_ttft_and_e2e_and_nowhere_else() -> None:
    base, front = simulate(_with(None)).requests, simulate(_with(F)).requests
    np.testing.assert_allclose(front["ttft_s"], base["ttft_s"] + F, rtol=0, atol=1e-9)
    np.testing.assert_allclose(front["e2e_s"], base["e2e_s"] + F, rtol=0, atol=1e-9)
    np.testing.assert_allclose(front["tpot_s"], base["tpot_s"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(front["queue_delay_s"], base["queue_delay_s"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(front["arrival_time"], base["arrival_time"], rtol=0, atol=1e-9)   # the send
    np.testing.assert_allclose(front["first_token_time"], base["first_token_time"] + F, rtol=0, atol=1e-9)


def test_closed_loop_cycles_grow_by_the_front_end_littles_law() -> None:
    over = {"workload.arrival": {"process": "closed_loop", "concurrency": 4, "think_time_s": 0.05},
            "num_requests": 2000}
    base, front = simulate(_with(None, **over)), simulate(_with(F, **over))
    for r in (base, front):
        req = r.requests[r.requests["status"] == "finished_length_capped"]
        cycle = req["e2e_s"].mean() + 0.05
        assert r.summary["throughput"]["requests_per_s"] == pytest.approx(4 / cycle, rel=0.02)
    assert front.summary["ttft_s"]["p50"] == pytest.approx(base.summary["ttft_s"]["p50"] + F, rel=0.05)
    assert front.summary["throughput"]["requests_per_s"] < base.summary["throughput"]["requests_per_s"]
    first = front.requests.sort_values("request_id").head(4)
    np.testing.assert_allclose(first["arrival_time"], 0.0, atol=1e-12)   # sent at 0, at the engine at F
    np.testing.assert_allclose(first["first_token_time"] - first["ttft_s"], 0.0, atol=1e-9)


def test_closed_sessions_later_turns_are_sent_the_front_end_before_they_reach_the_engine() -> None:
    @dataclasses.dataclass(frozen=True)
    class Drawn:     # the fields with_frontend reads
        arrival_time: np.ndarray
        send_delay: None
        session: np.ndarray
        turn_gap: np.ndarray
    w = with_frontend(Drawn(np.array([0.0, np.nan, 1.0]), None, np.array([0, 0, 2]), np.array([0.0, 0.5, 0.0])), F)
    np.testing.assert_allclose(w.turn_gap, [0.0, 0.5 + F, 0.0])          # a first turn has no gap
    np.testing.assert_allclose(w.arrival_time[[0, 2]], [F, 1.0 + F])      # first turns: open arrivals


def test_with_stages_the_front_end_adds_to_the_path_measured_from_the_send() -> None:
    over = {"pipeline": {"pre": [{"name": "auth", "latency_ms": {"dist": "fixed", "mean_ms": 10}}]}}
    base, front = simulate(_with(None, **over)).requests, simulate(_with(F, **over)).requests
    np.testing.assert_allclose(front["ttft_s"], base["ttft_s"] + F, rtol=0, atol=1e-9)
    np.testing.assert_allclose(front["pre_s"], base["pre_s"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(front["queue_delay_s"], base["queue_delay_s"], rtol=0, atol=1e-9)


def test_the_figure_comes_from_engine_overhead_then_the_profile_then_the_preset() -> None:
    assert resolve(_with(None)).frontend_s == 0.0
    assert resolve(_with(F)).frontend_s == F
    sc = _with(F, engine={"preset": "vllm-v1", "overhead": {"frontend_s": 0.004}})
    assert resolve(sc).frontend_s == 0.004
    preset = ENGINE_PRESETS["vllm-v1"].frontend_s
    got = resolve(_with(None, engine={"preset": "vllm-v1"})).frontend_s
    assert got == (preset or 0.0)
    assert resolve(_with(0.0, engine={"preset": "vllm-v1"})).frontend_s == 0.0   # an explicit 0 turns it off


def test_a_bad_front_end_names_the_field() -> None:
    from simulator import ScenarioError
    with pytest.raises(ScenarioError) as info:
        resolve(_with(-1.0))   # an inline profile is validated when resolved
    assert "frontend_s" in str(info.value)


@pytest.mark.parametrize("over", [{}, dict(CLOSED_SESSIONS), {"deployment.replicas": 2},
                                  {"pipeline": {"pre": [{"name": "auth", "workers": 2,
                                                         "latency_ms": {"dist": "exponential", "mean_ms": 20}}]}}])
def test_a_client_timeout_runs_from_the_send_not_from_the_engine_arrival(over: dict) -> None:
    """``client.timeout_s`` is the client's: it gives up that long after it sent the request, which
    behind a front end is ``frontend_s`` before the engine saw it, and before the request path's
    stages (queueing included) took their time. Every request that counts as completed ended within
    the timeout of its send, and every abandoned one at or after it (the engine used to start the
    clock at its own arrival, so an answer that late by the front end and the stages was counted as
    delivered)."""
    timeout = 0.2
    hw = {**CONSTANT_HW, "overhead": {"frontend_s": 0.05}}
    sc = make_scenario(hardware=hw, num_requests=300, **{
        "client.timeout_s": timeout, "workload.arrival.rate_per_s": 40,
        "workload.output_tokens": {"dist": "geometric", "mean": 12, "max": 40}, **over})
    req = simulate(sc).requests
    e2e = req["finish_time"] - req["arrival_time"]          # arrival_time: the send
    done = req["status"] == "finished_length_capped"
    aborted = req["status"] == "finished_aborted"
    assert done.sum() > 20 and aborted.sum() > 20
    assert (e2e[done] <= timeout + 1e-9).all()
    assert (e2e[aborted] >= timeout - 1e-9).all()
