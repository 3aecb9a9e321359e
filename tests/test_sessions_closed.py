"""Closed-loop sessions (agent loops): a session's next turn is sent once the previous answer ended.

* each later turn arrives its gap (and under a microsecond of network jitter) after the previous
  turn's answer ended (fixed gaps), and a
  dropped turn (here: the client's timeout) ends its session: no later turn of it is ever sent;
* with ``parallel_tool_calls: p`` the gap is the slowest of p exponential tool runs, whose mean is
  the closed form ``turn_gap_s * (1 + 1/2 + ... + 1/p)``;
* ``num_requests`` keeps whole sessions, and fast-forwarded decode runs give the same records as
  step-by-step ones;
* the task TTUA runs from the first turn's arrival to the last answer and can be an SLO.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_scenario

from simulator import ScenarioError, simulate
from simulator.slo import tasks

CLOSED = {"workload.sessions": {"turns": 5, "turn_gap_s": 0.25, "turn_gap_dist": "fixed", "loop": "closed"},
          "workload.arrival.rate_per_s": 2.0, "num_requests": 1000}


def _later_turns(req: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(each later turn's arrival, its previous turn's finish), matched by session and turn."""
    prev = req.set_index(["session", "turn"])["finish_time"]
    later = req[req["turn"] > 0]
    keys = list(zip(later["session"], later["turn"] - 1, strict=True))
    return later["arrival_time"].to_numpy(), prev.loc[keys].to_numpy()


def test_each_turn_is_sent_its_gap_after_the_previous_answer_ended():
    res = simulate(make_scenario(**CLOSED))
    req = res.requests
    assert len(req) == 1000 and (req["session_turns"] == 5).all()
    arrival, prev_end = _later_turns(req)
    gap = arrival - prev_end   # the fixed gap and 0.5-1 us of network jitter
    assert ((gap >= 0.25 + 0.5e-6 - 1e-12) & (gap <= 0.25 + 1e-6 + 1e-12)).all()
    t = res.summary["tasks"]
    assert t["loop"] == "closed" and t["completed"] == t["started"] > 150 and t["failed"] == 0
    # A task's TTUA: the answers of its five turns plus four gaps, nothing else.
    per = tasks(req)
    e2e = req.groupby("session")["e2e_s"].sum()
    np.testing.assert_allclose(per["ttua_s"].to_numpy(), (e2e + 4 * 0.25).to_numpy(), rtol=0, atol=4e-6)


def test_an_open_loop_sends_the_next_turn_whether_or_not_the_answer_came():
    """The same sessions in the open loop: later turns arrive on their own schedule, so at this load
    some arrive before the previous answer ended (which a closed loop never does)."""
    sc = make_scenario(**{**CLOSED, "workload.sessions": {**CLOSED["workload.sessions"], "loop": "open"},
                          "workload.arrival.rate_per_s": 8.0, "workload.output_tokens.value": 200})
    arrival, prev_end = _later_turns(simulate(sc).requests)
    assert (arrival < prev_end).any()


def test_a_dropped_turn_ends_its_task_and_its_later_turns_are_never_sent():
    sc = make_scenario(**{**CLOSED, "workload.arrival.rate_per_s": 12.0, "client.timeout_s": 1.0,
                          "workload.output_tokens": {"dist": "uniform", "min": 10, "max": 400}})
    res = simulate(sc)
    req = res.requests
    status = req["status"].astype(str)
    dropped = req[status == "finished_aborted"]
    assert len(dropped) > 20
    # The dropped turn is its session's last one sent: nothing after it.
    last_sent = req.groupby("session")["turn"].max()
    assert (dropped["turn"].to_numpy() == last_sent.loc[dropped["session"]].to_numpy()).all()
    assert dropped["session"].is_unique
    t = res.summary["tasks"]
    per = tasks(req)
    start, end = res.summary["throughput"]["window_s"]        # the tasks started in the measured window
    per = per[per["start_s"].between(start, end)]
    assert t["failed"] == (per["outcome"] == "failed").sum() == int(dropped["session"].isin(per.index).sum())
    assert t["completed"] + t["failed"] + t["unfinished"] == t["started"]
    assert res.summary["requests"]["arrived"] == len(req) < 1000   # the turns never sent are not requests
    # Each completed turn of a failed task was delivered before its client's deadline.
    ok = req[status == "finished_length_capped"]
    assert (ok["e2e_s"] <= 1.0 + 1e-9).all()


def test_parallel_tool_calls_wait_for_the_slowest():
    """p exponential tool runs of mean g in parallel: the next turn waits for the slowest, whose mean
    is g * H_p (the p-th harmonic number)."""
    g, p = 0.5, 3
    sc = make_scenario(**{**CLOSED, "num_requests": 6000, "workload.arrival.rate_per_s": 1.0,
                          "workload.sessions": {"turns": 6, "turn_gap_s": g, "loop": "closed",
                                                "parallel_tool_calls": p}})
    arrival, prev_end = _later_turns(simulate(sc).requests)
    gap = arrival - prev_end
    assert len(gap) == 5000
    assert gap.mean() == pytest.approx(g * (1 + 1 / 2 + 1 / 3), rel=0.04)


def test_parallel_tool_results_all_join_the_next_prompt():
    sc = make_scenario(**{**CLOSED, "num_requests": 10, "workload.sessions": {
        "turns": 2, "turn_gap_s": 0.1, "loop": "closed", "parallel_tool_calls": 4,
        "followup_tokens": {"dist": "fixed", "value": 7}}})
    req = simulate(sc).requests
    first, second = req[req["turn"] == 0], req[req["turn"] == 1]
    np.testing.assert_array_equal(second["num_prompt_tokens"].to_numpy(),
                                  first["num_prompt_tokens"].to_numpy() + first["max_tokens"].to_numpy() + 4 * 7)


def test_num_requests_keeps_whole_sessions():
    sc = make_scenario(**{**CLOSED, "num_requests": 500, "workload.sessions": {
        "turns": {"dist": "geometric", "mean": 4}, "turn_gap_s": 0.2, "loop": "closed"}})
    req = simulate(sc).requests
    assert 450 < len(req) <= 500
    assert (req.groupby("session").size() == req.groupby("session")["session_turns"].first()).all()


@pytest.mark.parametrize("gap, router", [({"turn_gap_s": 0.0, "turn_gap_dist": "fixed"}, "round_robin"),
                                         ({"turn_gap_s": 0.3}, "least_outstanding_tokens"),
                                         ({"turn_gap_s": 0.1, "turn_gap_dist": "fixed"}, "session_affinity")])
def test_fast_forward_gives_the_step_by_step_records(gap, router):
    sc = make_scenario(**{**CLOSED, "deployment.replicas": 3, "workload.arrival.rate_per_s": 6.0,
                          "deployment.router": router,
                          "workload.output_tokens": {"dist": "uniform", "min": 5, "max": 120},
                          "workload.sessions": {"turns": 4, "loop": "closed", **gap}})
    fast, slow = simulate(sc, fast_forward=True), simulate(sc, fast_forward=False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)


def test_the_task_ttua_is_an_slo():
    res = simulate(make_scenario(**CLOSED))
    p99 = float(np.quantile(tasks(res.requests)["ttua_s"], 0.99))
    for limit_ms, passed in ((1000 * p99 * 1.05, True), (1000 * p99 * 0.95, False)):
        summary = simulate(make_scenario(**CLOSED, **{"slo": {"task_ttua_p99_ms": limit_ms}})).summary
        assert summary["slo"]["passed"] is passed
        assert summary["slo"]["met"] == {"task_ttua_p99": passed}


@pytest.mark.parametrize("change, words", [
    ({"slo": {"task_ttua_p99_ms": 5000}}, ["slo.task_ttua_p99_ms", "workload.sessions"]),
    ({**CLOSED, "network": {"clients": [{"name": "a", "share": 1, "rtt_ms": 20}]}},
     ["workload.sessions.loop", "network", "turn_gap_s"]),
    ({"workload.sessions": {"turns": 3, "turn_gap_s": 0}}, ["turn_gap_s", "loop: closed"]),
    ({"workload.sessions": {"turns": 3, "turn_gap_s": 1, "parallel_tool_calls": 0}}, ["parallel_tool_calls", "0"]),
])
def test_bad_session_settings_name_the_field(change, words):
    with pytest.raises(ScenarioError) as info:
        simulate(make_scenario(**change))
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_the_planner_sizes_sessions_on_requests_per_second():
    """A forecast counts requests: with 4 turns per session the planner starts a quarter as many
    sessions per second, so the simulated cell carries the forecast's request rate, and the count it
    picks holds a task-TTUA objective."""
    from test_planner_trust import trust_plan

    from simulator.planner import build_tasks, load_plan, plan

    spec = trust_plan({"ttft_p99_ms": 400, "task_ttua_p99_ms": 4000}, num_requests=2000, peak=40.0)
    spec["scenario"]["workload"]["sessions"] = {"turns": 4, "turn_gap_s": 0.2, "loop": "closed"}
    loaded = load_plan(spec)
    task = build_tasks(loaded)[0]
    assert task.scenario.workload.arrival.rate_per_s == pytest.approx(10.0)
    row = plan(loaded, workers=1).worksheet.iloc[0]
    assert row["status"] == "ok" and 0 < row["task_ttua_p99_ms"] <= 4000
    n = int(row["replicas"])
    res = simulate(task.scenario.with_overrides({"deployment.replicas": n}), seed=5)
    assert res.summary["throughput"]["requests_per_s"] == pytest.approx(40.0, rel=0.1)
    assert res.summary["tasks"]["completed"] == res.summary["tasks"]["started"]


def test_a_load_sweep_with_sessions_counts_requests():
    """The load curve's rates are requests/s, as the planner's: each point starts rate / turns
    sessions per second, and its measured throughput is the swept rate."""
    from simulator.report.analysis import load_sweep

    sc = make_scenario(**{**CLOSED, "num_requests": 2000, "workload.sessions": {
        "turns": 4, "turn_gap_s": 0.2, "loop": "closed"}})
    sweep = load_sweep(sc, [4.0, 8.0])
    assert sweep["sessions_per_s"].tolist() == [1.0, 2.0]
    np.testing.assert_allclose(sweep["throughput_rps"], sweep["rate_per_s"], rtol=0.1)
