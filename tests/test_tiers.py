"""Request tiers and priority scheduling: Cobham's formula for non-preemptive priority M/G/1, the
preemption victim vLLM's priority policy picks, per-tier SLO reporting and clear errors."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_scenario, make_scheduler

from simulator import ScenarioError, simulate
from simulator.metrics import summarize_replications

TIERS = [{"name": "interactive", "share": 0.3, "priority": 0, "slo": {"ttft_p99_ms": 200}},
         {"name": "batch", "share": 0.7, "priority": 1}]


@pytest.mark.slow
def test_priority_queueing_matches_cobhams_formula():
    """One seat, constant 10 ms steps, geometric outputs of mean 10 (service S = 10 ms x N): the
    system is an M/G/1 queue with two non-preemptive priority classes. Cobham (1954):
    W_k = W0 / ((1 - sigma_{k-1}) (1 - sigma_k)), W0 = lambda E[S^2] / 2, sigma_k = load of
    classes 1..k. At 5 req/s (load 0.5): W_interactive = 55.9 ms, W_batch = 111.8 ms, against
    81.2 ms for both under FCFS (Pollaczek-Khinchine)."""
    lam, mean_n, step = 5.0, 10, 0.01
    es2 = step ** 2 * (2 - 1 / mean_n) * mean_n ** 2
    w0 = lam * es2 / 2
    rho1, rho = lam * 0.3 * step * mean_n, lam * step * mean_n
    theory = {"interactive": w0 / (1 - rho1), "batch": w0 / ((1 - rho1) * (1 - rho))}
    runs = []
    for seed in range(4):
        sc = make_scenario(**{"seed": seed, "num_requests": 15000, "warmup_s": 100, "scheduler.max_num_seqs": 1,
                              "workload.arrival.rate_per_s": lam, "workload.tiers": TIERS,
                              "scheduler.scheduling_policy": "priority",
                              "workload.output_tokens": {"dist": "geometric", "mean": mean_n}})
        runs.append(simulate(sc).summary["tiers"])
    for name, expected in theory.items():
        ci = summarize_replications([r[name] for r in runs], "queue_delay_s", "mean")
        assert ci["mean"] == pytest.approx(expected, rel=0.04), (name, ci, expected)


def test_priority_preempts_the_lowest_priority_running_request():
    """Request 0 (batch tier) is admitted before request 1 (interactive). When the next decode runs
    out of blocks, FCFS would preempt request 1 (admitted last); priority preempts request 0."""
    for policy, victim in (("fcfs", 1), ("priority", 0)):
        sched = make_scheduler([8, 8], [20, 20], num_gpu_blocks=4, block_size=4, scheduling_policy=policy)
        sched.table.priority[:] = [1, 0]
        sched.table.arrival_time[:] = [0.0, 0.5]
        out = sched.schedule(0.0)
        sched.update_from_output(out, 1.0)
        if sched.sort_pending:
            sched.sort_rows()
        out = sched.schedule(1.0)
        assert out.preempted == [victim], policy


def test_priority_queue_serves_by_priority_then_arrival():
    sched = make_scheduler([4, 4, 4], [2, 2, 2], max_num_seqs=1, scheduling_policy="priority")
    while sched.waiting:                       # re-queue with real priorities and arrival instants
        sched.waiting.popleft()
    sched.table.priority[:] = [2, 0, 0]
    sched.table.arrival_time[:] = [0.0, 0.2, 0.1]
    for rid in range(3):
        sched.add_request(rid)
    assert list(sched.waiting) == [2, 1, 0]
    order = []
    for t in range(20):
        out = sched.schedule(float(t))
        order += out.admitted
        sched.update_from_output(out, t + 1.0)
    assert order == [2, 1, 0]


def test_tiers_are_reported_with_their_own_slo():
    sc = make_scenario(**{"num_requests": 2000, "workload.arrival.rate_per_s": 60, "workload.tiers": TIERS,
                          "scheduler.scheduling_policy": "priority", "slo": {"ttft_p99_ms": 50}})
    r = simulate(sc)
    tiers = r.summary["tiers"]
    assert set(tiers) == {"interactive", "batch"}
    assert tiers["interactive"]["slo"]["thresholds_s"] == {"ttft_s": 0.2}
    assert tiers["batch"]["slo"]["thresholds_s"] == {"ttft_s": 0.05}
    shares = r.requests["tier"].value_counts(normalize=True)
    assert shares["interactive"] == pytest.approx(0.3, abs=0.03)
    assert tiers["interactive"]["ttft_s"]["mean"] < tiers["batch"]["ttft_s"]["mean"]
    arrived = sum(t["requests"]["arrived"] for t in tiers.values())
    assert arrived == r.summary["requests"]["arrived"]


def test_tiers_leave_other_streams_unchanged():
    sc = make_scenario(num_requests=300)
    with_tiers = sc.with_overrides({"workload.tiers": TIERS})
    a, b = simulate(sc).requests, simulate(with_tiers).requests
    np.testing.assert_array_equal(a["arrival_time"], b["arrival_time"])
    np.testing.assert_array_equal(a["max_tokens"], b["max_tokens"])


@pytest.mark.parametrize("tiers,match", [
    ([{"name": "a", "share": 0.5}, {"name": "b", "share": 0.3}], "shares must sum to 1, got 0.8"),
    ([{"name": "a", "share": 0.5}, {"name": "a", "share": 0.5}], "has this name too"),
    ([{"name": "a", "share": 0}], "share"),
])
def test_bad_tiers_are_clear_errors(tiers, match):
    with pytest.raises(ScenarioError, match=match):
        make_scenario(**{"workload.tiers": tiers})


def test_unknown_scheduling_policy_is_a_clear_error():
    with pytest.raises(ScenarioError, match="scheduling_policy"):
        make_scenario(**{"scheduler.scheduling_policy": "lifo"})
