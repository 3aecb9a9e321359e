"""Capacity planner: verified minima, monotonicity, cost ordering, failover, worksheets, bad plans."""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.errors import ScenarioError
from simulator.planner import WORKSHEET_COLUMNS, build_tasks, capacity_bound, load_plan, plan, write_worksheets
from simulator.planner.search import evaluate, search_replicas

SUMMARY_COLUMNS = (
    "quarter", "region", "status", "candidate", "hardware", "period_start", "period_end", "period_source",
    "period_hours", "peak_rps", "design_rps", "avg_prompt_tokens", "avg_output_tokens", "requests_millions",
    "successful_requests_millions", "tokens_in_millions", "tokens_out_millions", "batching_factor", "gpus_peak",
    "gpus_reserved", "provisioning", "gpus_avg", "gpu_hours", "reserved_gpu_hours", "on_demand_gpu_hours",
    "price_per_gpu_hour_usd", "reserved_price_per_gpu_hour_usd", "price_source", "reserved_cost_usd",
    "on_demand_cost_usd", "cost_usd", "usd_per_1m_tokens", "usd_per_successful_request",
    "slo_attainment_pct", "utilization_pct")

HW = {"cost_model": "constant", "step_time_s": 0.01, "prefill_time_per_token_s": 0.0001,
      "price_per_gpu_hour": 2.0, "memory_bytes": 80 * 2**30}


def base_plan(**changes):
    data = {
        "name": "t",
        "scenario": {"model": "tiny-llama", "hardware": dict(HW), "num_requests": 100,
                     "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 2048},
                     "workload": {"arrival": {"process": "poisson", "rate_per_s": 1.0},
                                  "prompt_tokens": {"dist": "fixed", "value": 64},
                                  "output_tokens": {"dist": "geometric", "mean": 8, "max": 64}}},
        "candidates": [{"name": "std", "set": {}}],
        "slo": {"ttft_p99_ms": 60, "attainment": 0.95},
        "regions": [{"name": "east", "rtt_ms": {"east": 5, "west": 40}},
                    {"name": "west", "rtt_ms": {"west": 5, "east": 40}, "price_multiplier": 1.5}],
        "forecast": [{"quarter": "Q1", "region": "east", "peak_rps": 80},
                     {"quarter": "Q1", "region": "west", "peak_rps": 40}],
        "simulation": {"num_requests": 600, "max_replicas": 16},
    }
    for key, value in changes.items():
        data[key] = value
    return data


def test_search_minimum_is_verified_both_ways():
    loaded = load_plan(base_plan())
    for task in build_tasks(loaded):
        row = search_replicas(task)
        n = row["replicas"]
        assert row["status"] == "ok" and n > 1
        seeds = dataclasses.replace(task, replications=row["replications"])   # the seeds the search used
        assert evaluate(seeds, n)["passed"]
        # n - 1 fails: by simulation, or without one when it would run at 100% of saturation or more
        below_saturated = task.design_rps >= (n - 1) * row["saturation_rps_per_replica"]
        assert below_saturated or not evaluate(seeds, n - 1)["passed"]
        assert str(n - 1) in row["replicas_tried"].split() and row["minus_one_check"].startswith(f"{n - 1} replicas")
        assert row["stable"] and task.design_rps < n * row["saturation_rps_per_replica"]   # below 100% utilization
        assert row["replications"] in (3, 8) and row["analytic_estimate_replicas"] >= 1


def test_capacity_bound_matches_constant_model_closed_form():
    loaded = load_plan(base_plan())
    sc = build_tasks(loaded)[0].scenario
    b = capacity_bound(sc)
    out_mean = 8.0  # geometric mean 8 truncated at 64 is ~7.9
    assert b.batch_size == 8
    expected = 8 / ((out_mean - 1) * 0.01 + 8 * 64 * 0.0001)
    assert b.max_rps_per_replica == pytest.approx(expected, rel=0.03)


def test_monotone_in_load_and_in_slo():
    rows = [{"quarter": f"Q{i}", "region": "east", "peak_rps": rps} for i, rps in enumerate([20, 50, 90, 140], 1)]
    tight = plan(base_plan(forecast=rows, regions=[{"name": "east", "rtt_ms": {"east": 5}}]), workers=1)
    reps = tight.worksheet["replicas"].tolist()
    assert reps == sorted(reps) and reps[-1] > reps[0]
    loose = plan(base_plan(forecast=rows, regions=[{"name": "east", "rtt_ms": {"east": 5}}],
                           slo={"ttft_p99_ms": 200, "attainment": 0.9}), workers=1)
    assert all(a <= b for a, b in zip(loose.worksheet["replicas"], reps, strict=True))


def test_cheapest_candidate_wins_and_costs_add_up():
    fast = dict(HW, step_time_s=0.005, prefill_time_per_token_s=0.00005, price_per_gpu_hour=5.0)
    cands = [{"name": "std", "set": {}}, {"name": "fast-pricey", "set": {"hardware": fast}},
             {"name": "std-discount", "set": {}, "price_per_gpu_hour": 1.0}]
    res = plan(base_plan(candidates=cands, failover="none"), workers=1)
    c = res.candidates
    for (_, _), cell in c.groupby(["quarter", "region"]):
        by = cell.set_index("candidate")
        assert by.at["std-discount", "status"] == "ok"
        for name in ("std", "fast-pricey"):   # searched, or pruned: its cheapest count costs more than the pick
            assert by.at[name, "status"] == "ok" or (by.at[name, "status"] == "pruned" and by.at[
                name, "binding_constraint"].startswith("not searched: even ") and pd.isna(by.at[name, "replicas"]))
        if by.at["std", "status"] == "ok":
            assert by.at["std", "replicas"] == by.at["std-discount", "replicas"]   # same system, same seed
    assert (c["status"] == "pruned").any()
    assert (res.worksheet["candidate"] == "std-discount").all()
    ws = res.worksheet.iloc[0]
    assert ws["cost_per_hour"] == pytest.approx(ws["gpus"] * 1.0 * ws["price_multiplier"])
    assert ws["cost_per_quarter"] == pytest.approx(ws["cost_per_hour"] * 365.25 * 24 / 4)
    west = res.worksheet.set_index("region").loc["west"]
    assert west["price_multiplier"] == 1.5 and west["cost_per_hour"] == pytest.approx(west["gpus"] * 1.5)
    assert res.totals["gpus_peak"].iloc[0] == res.worksheet["gpus"].sum()
    assert (res.worksheet["provisioning"] == "peak").all()     # no diurnal shape: the peak fleet all quarter


def test_n_plus_one_failover_adds_capacity_and_rtt():
    slo = {"ttft_p99_ms": 150, "attainment": 0.95}
    none = plan(base_plan(failover="none", slo=slo), workers=1).worksheet.set_index("region")
    n1 = plan(base_plan(failover="n_plus_one", slo=slo), workers=1).worksheet.set_index("region")
    assert (n1["status"] == "ok").all() and (none["status"] == "ok").all()
    # east absorbs all of west's 40 rps when west is down (and vice versa: 80 rps).
    assert n1.loc["east", "failover_rps"] == pytest.approx(40) and n1.loc["west", "failover_rps"] == pytest.approx(80)
    assert (n1["replicas"] >= none["replicas"]).all()
    assert n1["gpus"].sum() > none["gpus"].sum()
    assert n1.loc["west", "worst_case"] == "east down"
    # The redirected clients' 40 ms RTT (x3 on a new connection) shows in the client TTFT (at the median:
    # the tail also holds the server's queueing, which the larger failover fleet shortens).
    assert n1.loc["west", "ttft_p50_ms"] > none.loc["west", "ttft_p50_ms"] + 20


def test_infeasible_slo_reports_best_instead_of_looping():
    res = plan(base_plan(slo={"ttft_p99_ms": 5}, failover="none",
                         simulation={"num_requests": 300, "max_replicas": 4}), workers=1)
    ws = res.worksheet
    assert (ws["status"] == "infeasible").all()
    assert ws["replicas"].isna().all() and ws["cost_per_hour"].isna().all()
    assert ws["binding_constraint"].str.contains("no count up to max_replicas=4").all()
    assert ws["ttft_p99_ms"].notna().all()      # the best achieved is still reported
    assert (ws["slo_worst_ratio"] > 1).all()


def test_worksheet_schema_and_formula_safety(tmp_path):
    data = base_plan(failover="none", regions=[{"name": "=HYPERLINK(1)", "rtt_ms": {"=HYPERLINK(1)": 5}}],
                     forecast=[{"quarter": "+Q1", "region": "=HYPERLINK(1)", "peak_rps": 30}])
    res = plan(data, workers=1)
    paths = write_worksheets(res, tmp_path / "ws.csv")
    ws = pd.read_csv(paths["worksheet"])
    assert tuple(ws.columns) == SUMMARY_COLUMNS
    assert ws["region"].iloc[0] == "'=HYPERLINK(1)" and ws["quarter"].iloc[0] == "'+Q1"
    tot = pd.read_csv(paths["totals"])
    assert list(tot.columns) == ["quarter", "region", "cells", "infeasible_cells", "period_hours", "peak_rps",
                                 "gpus_peak", "gpus_reserved", "gpu_hours", "reserved_gpu_hours",
                                 "on_demand_gpu_hours", "reserved_cost_usd", "on_demand_cost_usd", "cost_usd",
                                 "requests_millions", "successful_requests_millions", "tokens_in_millions",
                                 "tokens_out_millions", "usd_per_1m_tokens", "usd_per_successful_request"]
    assert tot["quarter"].tolist() == ["'+Q1", "all quarters", "all quarters"]
    assert tot["region"].tolist() == ["all regions", "'=HYPERLINK(1)", "all regions"]
    cand = pd.read_csv(paths["candidates"])
    assert len(cand) == 1 and tuple(cand.columns[:len(WORKSHEET_COLUMNS)]) == WORKSHEET_COLUMNS
    assert cand["chosen"].tolist() == [True]


def test_results_independent_of_backend_and_workers():
    data = base_plan(candidates=[{"name": "a", "set": {}}, {"name": "b", "set": {"scheduler.max_num_seqs": 4}}])
    one = plan(data, workers=1).candidates
    two = plan(data, workers=2).candidates
    pd.testing.assert_frame_equal(one, two)
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl:
        via_dask = plan(data, backend="dask", address=cl.scheduler_address).candidates
    pd.testing.assert_frame_equal(one, via_dask)



def test_searches_of_the_slowest_candidate_start_first(monkeypatch):
    """With a known number of workers, the next search comes from the candidate whose searches took
    longest so far (unseen candidates first, in plan order); every row comes back once."""
    from concurrent.futures import Executor, Future

    from simulator.planner import run as plan_run

    duration = {"a": 1.0, "b": 5.0}     # seconds one search of each candidate takes
    now = [0.0]
    ends: dict[Future, float] = {}

    class TwoWorkers(Executor):   # runs on a virtual clock: a search ends `duration` after it starts
        def __init__(self) -> None:
            self.started: list[tuple[str, str]] = []

        def submit(self, fn, /, *args, **kwargs):
            task = args[0]
            self.started.append((task.candidate, task.quarter))
            fut: Future = Future()
            fut.set_result({"candidate": task.candidate, "quarter": task.quarter})
            ends[fut] = now[0] + duration[task.candidate]
            return fut

    def wait(running, return_when):
        first = min(running, key=lambda f: ends[f])
        now[0] = ends[first]
        return {first}, set()

    monkeypatch.setattr(plan_run, "executor_slots", lambda _: 2)
    monkeypatch.setattr(plan_run, "wait", wait)
    monkeypatch.setattr(plan_run.time, "perf_counter", lambda: now[0])
    tasks = [type("T", (), {"candidate": c, "quarter": q})() for q in ("Q1", "Q2", "Q3", "Q4") for c in ("a", "b")]
    ex = TwoWorkers()
    class AllAtOnce:       # every search independent (CellCosts' ordering and pruning are tested elsewhere)
        def first(self):
            return list(range(len(tasks)))

        def done(self, i, row):
            return [], []
    rows = list(plan_run._longest_first(ex, tasks, AllAtOnce()))
    assert sorted((r["candidate"], r["quarter"]) for r in rows) == sorted((t.candidate, t.quarter) for t in tasks)
    assert ex.started[:2] == [("a", "Q1"), ("b", "Q1")]          # plan order while nothing is known
    # a ended first; b, not seen yet, went next, then first again once seen to be the slow one
    assert ex.started[2:5] == [("b", "Q2"), ("b", "Q3"), ("b", "Q4")]
    assert now[0] == 12.0                # in plan order the last b would start at 8 and end at 13

# -- bad input -----------------------------------------------------------------------------------------
def _write(tmp_path: Path, data: dict) -> Path:
    import yaml
    p = tmp_path / "plan.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.mark.parametrize("change, expect", [
    (lambda d: d.update(headroom=-1), "headroom = -1"),
    (lambda d: d.update(failovr="none"), "failovr = 'none': unknown field (did you mean 'failover'?)"),
    (lambda d: d.update(failover="n+1"), "failover = 'n+1': not allowed"),
    (lambda d: d["forecast"].append({"quarter": "Q1", "region": "mars", "peak_rps": 3}),
     "forecast[2].region = 'mars': unknown region"),
    (lambda d: d["forecast"].append({**d["forecast"][1]}),
     "forecast[2] = 'Q1 west': quarter and region appear twice (also forecast[1])"),
    (lambda d: d["forecast"].append({"quarter": "Q2", "region": "east", "peak_rps": -3}), "forecast[2].peak_rps = -3"),
    (lambda d: d["candidates"].append({"name": "big", "set": {"model": "llama-3-70b", "hardware": "l40s",
                                                             "scheduler.max_model_len": 2048}}),
     "candidates[1] (big): model = 'llama-3-70b': does not fit"),
    (lambda d: d["candidates"].append({"name": "x", "set": {"scheduler.max_num_seq": 4}}),
     "candidates[1] (x).set.scheduler.max_num_seq"),
    (lambda d: d["regions"][1]["rtt_ms"].pop("east"), "failover n_plus_one needs the RTT to every region"),
    (lambda d: d.update(slo={"attainment": 0.9}), "give at least one threshold"),
    (lambda d: d["candidates"].append({"name": "pools", "set": {"deployment.pools": [
        {"name": "short"}, {"name": "long", "tensor_parallel_size": 2}],
        "deployment.pool_routing": {"by": "prompt_tokens", "thresholds": [{"max_prompt_tokens": 32, "pool": "short"}],
                                    "default": "long"},
        "deployment.autoscaler": {"max_replicas": 4, "target_outstanding_per_replica": 4}}}),
     "candidates[1] (pools): deployment.autoscaler = 'set': is not modelled together with deployment.pools"),
    (lambda d: d["simulation"].update(replications=0),
     "simulation.replications = 0: give auto or a whole number of seeds from 1 to 20"),
])
def test_bad_plans_fail_with_one_line(tmp_path, change, expect):
    data = copy.deepcopy(base_plan(failover="n_plus_one"))
    change(data)
    result = CliRunner().invoke(app, ["plan", str(_write(tmp_path, data)), "--out", str(tmp_path / "w.csv")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], result.output
    assert not (tmp_path / "w.csv").exists()


def test_bad_forecast_csv_rows(tmp_path):
    data = base_plan(forecast="f.csv")
    (tmp_path / "f.csv").write_text("quarter,region,peak_rps\nQ1,east,10\nQ1,west,\n")
    with pytest.raises(ScenarioError, match=r"f.csv row 3 column peak_rps = None: required value is missing"):
        load_plan(data, base_dir=tmp_path)
    (tmp_path / "f.csv").write_text("quarter,regoin,peak_rps\nQ1,east,10\n")
    with pytest.raises(ScenarioError, match=r"unknown column \(did you mean 'region'\?\)"):
        load_plan(data, base_dir=tmp_path)


def test_unreachable_dask_address_is_a_quick_clear_error(tmp_path):
    pytest.importorskip("distributed")
    import time
    p = _write(tmp_path, base_plan())
    t0 = time.perf_counter()
    result = CliRunner().invoke(app, ["plan", str(p), "--out", str(tmp_path / "w.csv"), "--backend", "dask",
                                      "--address", "tcp://127.0.0.1:9", "--timeout", "2"])
    assert result.exit_code == 2 and "no Dask scheduler answered within 2 s" in result.output, result.output
    assert time.perf_counter() - t0 < 20


def test_cli_plan_writes_worksheets(tmp_path):
    p = _write(tmp_path, base_plan(failover="none"))
    result = CliRunner().invoke(app, ["plan", str(p), "--out", str(tmp_path / "w.csv"), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert {"w.csv", "w-totals.csv", "w-candidates.csv"} <= {f.name for f in tmp_path.iterdir()}
    assert "capacity plan" in result.output


def test_example_plan_loads():
    loaded = load_plan(Path(__file__).parents[1] / "examples" / "plan-fy27.yaml")
    assert len(build_tasks(loaded)) == 12 * 3


def test_base_scenario_fleet_features_do_not_leak_into_cells():
    data = base_plan(failover="none")
    data["scenario"] = dict(data["scenario"], deployment={
        "router": "power_of_two", "autoscaler": {"max_replicas": 2, "target_outstanding_per_replica": 4}})
    for task in build_tasks(load_plan(data)):
        sc = task.scenario
        # the search verifies a fixed count; the autoscaler is honoured by the fleet-hours model instead
        assert sc.network is None and sc.deployment.autoscaler is None and sc.deployment.router == "power_of_two"
