"""The two ways engines are benchmarked: a closed loop of N clients, and an offline batch.

Closed loop: the interactive response-time law N = X (R + Z) (X throughput, R mean response time,
Z mean think time) holds over the steady window on the constant and roofline cost models; 32
clients keep a running batch of about 32, never more; drops free their clients; fast-forward
and step-by-step runs agree. Offline: with one replica busy from t=0 to the end, the makespan is
the sum of the step times and throughput is completed tokens over it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import CONSTANT_HW, make_scenario
from typer.testing import CliRunner

from simulator import ScenarioError, load_scenario, simulate
from simulator.cli import app
from simulator.report.analysis import load_sweep, max_load_meeting_slo, with_concurrency
from simulator.scenario.config import scenario_from_dict

REPO = Path(__file__).resolve().parents[1]


def closed_loop(n: int, think_s: float = 0.0, dist: str = "fixed", **over):
    return make_scenario(**{"workload.arrival": {"process": "closed_loop", "concurrency": n, "think_time_s": think_s,
                                                 "think_time_dist": dist}, **over})


def max_in_system(req: pd.DataFrame) -> int:
    """Most requests sent and not yet ended at any instant (an end frees its client first)."""
    t = np.concatenate([req["arrival_time"], req["finish_time"].dropna()])
    step = np.concatenate([np.ones(len(req)), -np.ones(int(req["finish_time"].notna().sum()))])
    order = np.lexsort((step, t))          # at equal instants, ends before sends
    return int(np.cumsum(step[order]).max())


def response_time_law(summary: dict, think_s: float) -> float:
    """X (R + Z) over the measurement window: the number of clients it implies."""
    return summary["throughput"]["requests_per_s"] * (summary["e2e_s"]["mean"] + think_s)


# -- closed loop against closed forms -----------------------------------------------------------------
def test_response_time_law_constant_cost_model():
    """12 clients, 8 seats, think time 5 steps: some clients always wait for a seat."""
    sc = closed_loop(12, 0.05, **{"num_requests": 3000, "workload.output_tokens": {"dist": "geometric", "mean": 20,
                                                                                 "max": 200}})
    s = simulate(sc).summary
    assert response_time_law(s, 0.05) == pytest.approx(12, rel=0.02)
    assert s["queue_delay_s"]["mean"] > 0.01                                # seats are the bottleneck
    every = s["benchmark"].pop("every_request")
    assert s["benchmark"] == {"mode": "closed_loop", "concurrency": 12, "think_time_s": 0.05,
                              "think_time_dist": "fixed", "mean_running_batch": pytest.approx(8, rel=0.05)}
    assert every["completed"] == s["requests"]["completed"]
    assert s["stability"]["stable"] is True and "closed loop" in s["stability"]["reason"]


def test_response_time_law_roofline_exponential_think():
    sc = closed_loop(16, 0.2, "exponential", **{
        "num_requests": 2000, "model": "llama-3-8b", "hardware": "h100-sxm", "scheduler.max_num_seqs": 64,
        "scheduler.max_model_len": 4096, "scheduler.max_num_batched_tokens": 4096,
        "workload.prompt_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.6, "max": 2000},
        "workload.output_tokens": {"dist": "geometric", "mean": 60, "max": 400}})
    s = simulate(sc).summary
    assert response_time_law(s, 0.2) == pytest.approx(16, rel=0.02)


def test_32_clients_hold_a_running_batch_of_32():
    """chat-h100 (max_num_seqs 256) driven by 32 clients without think time."""
    sc = load_scenario(REPO / "examples/chat-h100.yaml", {
        "num_requests": 1500, "warmup_s": 0, "workload.arrival": {"process": "closed_loop", "concurrency": 32}})
    r = simulate(sc)
    batch = r.summary["benchmark"]["mean_running_batch"]
    assert 31.0 < batch <= 32.0                      # a freed seat is refilled at the next step
    assert r.steps["num_seqs"].max() == 32
    assert max_in_system(r.requests) == 32
    assert r.summary["requests"]["arrived"] == r.summary["requests"]["completed"] == 1500
    assert response_time_law(r.summary, 0.0) == pytest.approx(32, rel=0.02)


def test_requests_are_sent_in_id_order_as_clients_free_up():
    r = simulate(closed_loop(4, 0.0123, **{"num_requests": 200}))
    req = r.requests
    assert (req["arrival_time"].iloc[:4] == 0).all()
    assert req["arrival_time"].is_monotonic_increasing
    # every later arrival is a request's end, plus the think time, plus 0.5-1 us on the network
    # (the k-th end frees the client of the (k+4)-th request)
    ends = np.sort(req["finish_time"].to_numpy())[: len(req) - 4]
    delay = req["arrival_time"].iloc[4:].to_numpy() - (ends + 0.0123)
    assert ((delay >= 0.5e-6 - 1e-12) & (delay <= 1e-6 + 1e-12)).all()


# -- closed loop: drops, stops, determinism ----------------------------------------------------------
def test_a_dropped_request_frees_its_client():
    """Shedding and client timeouts end requests early; their clients send again after thinking."""
    sc = closed_loop(16, 0.02, **{"num_requests": 600, "admission.max_queue_len": 2, "client.timeout_s": 0.12,
                                 "deployment.replicas": 2, "scheduler.max_num_seqs": 2})
    r = simulate(sc)
    rq = r.summary["requests"]
    assert rq["arrived"] == 600 and rq["in_flight"] == 0
    assert rq["shed"] > 0 and rq["timed_out"] > 0
    assert max_in_system(r.requests) <= 16


def test_duration_stops_the_sending():
    r = simulate(closed_loop(8, 0.01, **{"num_requests": 100_000, "duration_s": 2.0}))
    req = r.requests
    assert 100 < len(req) < 100_000 and req["arrival_time"].max() < 2.0
    assert r.summary["requests"]["in_flight"] == 0 and req["arrival_time"].notna().all()


def test_same_seed_same_numbers_bit_for_bit():
    sc = closed_loop(10, 0.03, "exponential", **{"num_requests": 800, "deployment.replicas": 2,
                                                  "workload.output_tokens": {"dist": "geometric", "mean": 15}})
    a, b = simulate(sc), simulate(sc)
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    a.summary.pop("wall_s"), b.summary.pop("wall_s")
    assert a.summary == b.summary
    assert not simulate(sc, seed=2).requests["arrival_time"].equals(a.requests["arrival_time"])


FAST_FORWARD_CASES = {
    "one replica, think time a multiple of the step": ({"workload.arrival.think_time_s": 0.05}, 12),
    "three replicas, exponential think": ({"deployment.replicas": 3, "deployment.router": "least_outstanding",
                                           "workload.arrival.think_time_s": 0.031,
                                           "workload.arrival.think_time_dist": "exponential"}, 20),
    "three replicas by outstanding tokens": ({"deployment.replicas": 3, "deployment.router": "least_outstanding_tokens",
                                              "workload.arrival.think_time_s": 0.031,
                                              "workload.arrival.think_time_dist": "exponential"}, 20),
    "two replicas, no think time, drops": ({"deployment.replicas": 2, "client.timeout_s": 0.15,
                                            "admission.max_queue_len": 3}, 24),
    "chunked prefill, prefill cost": ({"scheduler.policy": "chunked_prefill", "scheduler.max_num_batched_tokens": 48,
                                       "hardware.prefill_time_per_token_s": 0.0001,
                                       "workload.arrival.think_time_s": 0.02}, 10),
}


@pytest.mark.parametrize("over, clients", FAST_FORWARD_CASES.values(), ids=FAST_FORWARD_CASES)
def test_fast_forward_changes_nothing(over, clients):
    sc = closed_loop(clients, **{"num_requests": 700, "workload.output_tokens": {"dist": "geometric", "mean": 25,
                                                                                 "max": 300}, **over})
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    assert len(fast.requests) == len(slow.requests) == 700
    cols = ["arrival_time", "first_scheduled_time", "first_token_time", "finish_time"]
    np.testing.assert_allclose(fast.requests[cols].to_numpy(), slow.requests[cols].to_numpy(),
                               rtol=0, atol=1e-9, equal_nan=True)
    for col in ("status", "num_preemptions", "replica", "num_output_tokens"):
        assert (fast.requests[col] == slow.requests[col]).all(), col
    # replicas' steps starting at the same instant may be logged in either order
    a, b = (r.steps.sort_values(["replica", "start_time"], kind="stable") for r in (fast, slow))
    for col in ("num_seqs", "kv_blocks_used", "num_prefill_tokens", "num_waiting"):
        assert (a[col].to_numpy() == b[col].to_numpy()).all(), col
    assert fast.step_log.num_entries < slow.step_log.num_entries      # runs really were fast-forwarded


# -- closed loop replaying a trace ---------------------------------------------------------------------
def length_trace(tmp_path: Path, prompts: list[int], outputs: list[int], extra: str = "") -> Path:
    """A ``requests`` trace whose rows are out of time order (the loop sends them in time order)."""
    rows = [f"{10.0 - i},{p},{o}{extra and ',x'}" for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
    path = tmp_path / f"trace-{extra or 'lengths'}.csv"
    path.write_text("timestamp,prompt_tokens,output_tokens" + (extra and f",{extra}") + "\n" + "\n".join(rows) + "\n")
    return path


def test_a_closed_loop_sends_a_traces_requests_in_its_order_as_clients_free_up(tmp_path):
    """The trace's lengths in its send order (its instants unused), as many in flight as clients; a
    faster engine keeps them in flight where the trace replayed at its instants would drain."""
    rng = np.random.default_rng(3)
    prompts, outputs = rng.integers(8, 200, 60).tolist(), rng.integers(2, 40, 60).tolist()
    path = length_trace(tmp_path, prompts, outputs)
    trace = {"path": str(path), "format": "requests"}
    sc = make_scenario(**{"num_requests": None, "workload.arrival": {"process": "closed_loop", "concurrency": 5,
                                                                     "replay": trace}})
    r = simulate(sc)
    req = r.requests.sort_values("request_id")
    assert len(req) == 60 and r.summary["requests"]["completed"] == 60
    assert req["num_prompt_tokens"].tolist() == prompts[::-1] and req["num_output_tokens"].tolist() == outputs[::-1]
    assert (req["arrival_time"].iloc[:5] == 0).all() and max_in_system(req) == 5
    ends = np.sort(req["finish_time"].to_numpy())[: len(req) - 5]
    delay = req["arrival_time"].iloc[5:].to_numpy() - ends
    assert ((delay >= 0.5e-6 - 1e-12) & (delay <= 1e-6 + 1e-12)).all()
    # num_requests: the trace's first requests
    first = simulate(sc.with_overrides({"num_requests": 12})).requests.sort_values("request_id")
    assert first["num_prompt_tokens"].tolist() == prompts[::-1][:12]
    # a sweep over clients keeps the trace: the same requests from 8 clients
    more = simulate(with_concurrency(sc, 8)).requests.sort_values("request_id")
    assert more["num_prompt_tokens"].tolist() == prompts[::-1] and max_in_system(more) == 8
    # the same trace replayed at its instants (1 s apart) holds one request at a time, not five
    opened = simulate(sc.with_overrides({"workload.arrival": {"process": "trace", **trace}})).requests
    assert max_in_system(opened) == 1


def test_a_closed_loop_trace_is_checked(tmp_path):
    path = length_trace(tmp_path, [10, 20, 30], [3, 3, 3])
    arrival = {"process": "closed_loop", "concurrency": 2, "replay": {"path": str(path), "format": "requests"}}
    with pytest.raises(ScenarioError) as err:
        simulate(make_scenario(**{"num_requests": 4, "workload.arrival": arrival}))
    assert err.value.field == "num_requests" and "holds 3 requests" in err.value.message
    tiers = length_trace(tmp_path, [10, 20], [3, 3], extra="tier")
    with pytest.raises(ScenarioError) as err:
        tiered = {**arrival, "replay": {"path": str(tiers), "format": "requests"}}
        simulate(make_scenario(**{"num_requests": None, "workload.tiers": [{"name": "x", "share": 1.0}],
                                  "workload.arrival": tiered}))
    assert err.value.field == "workload.arrival.replay.path" and "tier" in err.value.message
    with pytest.raises(ScenarioError) as err:
        make_scenario(**{"workload.arrival": {**arrival, "replay": {"path": str(path), "format": "csv"}}})
    assert err.value.field == "workload.arrival.replay.format"
    with pytest.raises(ScenarioError) as err:
        make_scenario(**{"workload.prompt_popularity": {"distinct_prompts": 4, "zipf_s": 1.0},
                         "workload.arrival": arrival})
    assert err.value.field == "workload.prompt_popularity" and "closed loop's trace" in err.value.message
    # the lengths come from the trace: no length distribution is needed
    sc = scenario_from_dict({"name": "t", "num_requests": None, "model": "tiny-llama", "hardware": dict(CONSTANT_HW),
                             "workload": {"arrival": arrival}})
    assert len(simulate(sc).requests) == 3


# -- offline ------------------------------------------------------------------------------------------
def test_offline_makespan_is_the_sum_of_step_times():
    sc = make_scenario(**{"num_requests": 150, "model": "llama-3-8b", "hardware": "h100-sxm",
                          "scheduler.max_num_seqs": 32, "scheduler.max_model_len": 4096,
                          "scheduler.max_num_batched_tokens": 4096, "workload.arrival": {"process": "offline"},
                          "workload.prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.5, "max": 1500},
                          "workload.output_tokens": {"dist": "geometric", "mean": 50, "max": 300}})
    r = simulate(sc)
    req, s = r.requests, r.summary
    assert (req["arrival_time"] == 0).all()
    makespan = float(req["finish_time"].max())
    assert r.steps["start_time"].iloc[0] == 0.0
    assert float(r.steps["duration_s"].sum()) == pytest.approx(makespan, rel=1e-12)   # never idle
    assert s["throughput"]["window_s"] == [0.0, makespan]
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(req["num_output_tokens"].sum() / makespan)
    assert s["throughput"]["requests_per_s"] == pytest.approx(150 / makespan)
    assert s["benchmark"]["mode"] == "offline" and s["benchmark"]["makespan_s"] == makespan
    assert s["e2e_s"]["n"] == 150 and s["stability"]["stable"] is True


# -- errors and refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize("arrival", [{"process": "offline"}, {"process": "closed_loop", "concurrency": 4}])
def test_benchmark_modes_need_num_requests(arrival):
    sc = make_scenario(**{"num_requests": None, "duration_s": 10.0, "workload.arrival": arrival})
    with pytest.raises(ScenarioError) as err:
        simulate(sc)
    assert err.value.field == "num_requests" and arrival["process"] in err.value.message


def test_think_time_must_be_finite():
    with pytest.raises(ScenarioError) as err:
        closed_loop(4, float("inf"))
    assert err.value.field == "workload.arrival.think_time_s"


def test_the_planner_refuses_a_closed_loop_candidate():
    from test_planner import base_plan

    from simulator.planner import plan

    data = base_plan()
    data["scenario"]["workload"]["arrival"] = {"process": "closed_loop", "concurrency": 8}
    with pytest.raises(ScenarioError) as err:
        plan(data, workers=1)
    assert err.value.field == "scenario.workload.arrival.process" and "poisson or gamma" in err.value.message


# -- sweeps and the table output ----------------------------------------------------------------------
def test_load_sweep_over_clients():
    """4 seats, 10 steps of 10 ms per request: up to 4 clients, X = N / 0.1 s; beyond, X stays 40."""
    sc = make_scenario(**{"num_requests": 400, "scheduler.max_num_seqs": 4, "slo.e2e_p99_ms": 150})
    sweep = load_sweep(sc, [8, 1, 2], axis="concurrency")
    assert sweep["concurrency"].tolist() == [1, 2, 8]
    assert sweep["rate_per_s"].tolist() == pytest.approx([10, 20, 40], rel=0.02)
    assert sweep["mean_running_batch"].tolist() == pytest.approx([1, 2, 4], rel=0.01)
    limit = max_load_meeting_slo(sweep)
    assert limit["max_concurrency"] == 2 and limit["first_failing_concurrency"] == 8
    assert limit["max_rate_per_s"] == pytest.approx(20, rel=0.01)
    assert with_concurrency(closed_loop(3, 0.5), 9).workload.arrival.think_time_s == 0.5
    with pytest.raises(ScenarioError):
        load_sweep(sc, [0, 2], axis="concurrency")


TABLE_CASES = {
    "offline": ({"workload": {"arrival": {"process": "offline"}}}, "benchmark: offline"),
    "one request": ({"num_requests": 1, "workload": {"arrival": {"process": "offline"}}}, "throughput: "),
    "all at t=0 (a trace)": ({"workload": {"arrival": {"process": "trace", "path": "t0.csv", "format": "azure"}}},
                             "throughput: "),
    "nothing finished": ({"max_sim_time_s": 1e-4, "workload": {"arrival": {"process": "closed_loop",
                                                                           "concurrency": 4}}}, "throughput: -"),
}


@pytest.mark.parametrize("change, expect", TABLE_CASES.values(), ids=TABLE_CASES)
def test_table_output_never_crashes(tmp_path, change, expect):
    (tmp_path / "t0.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     + "2024-01-01 00:00:00,40,8\n" * 20)
    data = make_scenario(num_requests=20).model_dump(mode="json", exclude_none=True)
    data.pop("base_dir")
    for key, value in change.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and key in data else value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["simulate", str(path), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert expect in result.output


def test_every_request_summary_counts_the_start_up_wave_as_benchmark_clients_do() -> None:
    """``benchmark.every_request``: every completed request from the first send to the last completion
    (vllm bench serve's and GenAI-Perf's summary), beside the steady window that starts once every
    client has had an answer: the first wave queues behind each other's prefills, so its TTFT tail is
    longer than the steady one's."""

    r = simulate(load_scenario("examples/closed-loop-h100.yaml", {"num_requests": 600}))
    s, req = r.summary, r.requests
    every = s["benchmark"]["every_request"]
    done = req[req["status"] == "finished_length_capped"]
    assert every["completed"] == len(done) == 600 > s["requests"]["measured"]
    span = done["finish_time"].max() - req["arrival_time"].min()
    assert every["requests_per_s"] == pytest.approx(600 / span)
    assert every["output_tokens_per_s"] == pytest.approx(done["num_output_tokens"].sum() / span)
    assert every["ttft_s"]["p99"] == pytest.approx(float(np.quantile(done["ttft_s"], 0.99)), rel=0.02)
    assert every["ttft_s"]["p99"] > 2 * s["ttft_s"]["p99"]          # the start-up wave
    assert every["itl_s"]["p99"] >= s["itl_s"]["p99"]
