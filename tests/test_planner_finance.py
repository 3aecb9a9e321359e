"""The finance worksheet: calendar quarters, fixed decimals, reserved and on-demand GPU-hours, the cost lines
beyond GPUs, cost per successful request, the assumptions file, and ``--compare``'s reasons."""

from __future__ import annotations

import copy
import datetime as dt
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_planner import base_plan

from simulator.errors import ScenarioError
from simulator.planner import load_plan, plan, write_worksheets
from simulator.planner.compare import delta_report, read_previous
from simulator.planner.fleet_hours import NAMED_SHAPES, autoscale_policy, fleet_day
from simulator.planner.periods import AVERAGE_QUARTER_HOURS, plan_periods, quarter_span

AUTO = {"deployment.autoscaler": {"max_replicas": 40, "target_outstanding_per_replica": 4}}


# -- calendar quarters ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("label", "month", "start", "end", "hours"), [
    ("2027Q1", 1, "2027-01-01", "2027-03-31", 2160),      # 90 days
    ("2028Q1", 1, "2028-01-01", "2028-03-31", 2184),      # leap year: 91 days
    ("2027-Q2", 1, "2027-04-01", "2027-06-30", 2184),
    ("Q3 2027", 1, "2027-07-01", "2027-09-30", 2208),
    ("CY27Q4", 7, "2027-10-01", "2027-12-31", 2208),      # calendar, whatever the fiscal year
    ("FY27Q1", 1, "2027-01-01", "2027-03-31", 2160),
    ("FY27Q1", 7, "2026-07-01", "2026-09-30", 2208),      # FY27 ends in June 2027
    ("FY2027-Q3", 2, "2026-08-01", "2026-10-31", 2208),   # FY27 = Feb 2026 - Jan 2027
    ("Q4 FY28", 2, "2027-11-01", "2028-01-31", 2208),
    ("fy28q4", 11, "2028-08-01", "2028-10-31", 2208),
])
def test_quarter_labels_name_calendar_quarters(label, month, start, end, hours):
    span = quarter_span(label, month)
    assert span == (dt.date.fromisoformat(start), dt.date.fromisoformat(end))
    assert plan_periods([label], month)[label].hours == hours


def test_every_quarter_of_a_year_adds_up_to_its_days():
    for year, days in ((2026, 365), (2028, 366), (2100, 365), (2000, 366)):
        labels = [f"{year}Q{q}" for q in range(1, 5)]
        assert sum(p.hours for p in plan_periods(labels).values()) == days * 24
        fiscal = [f"FY{year}Q{q}" for q in range(1, 5)]      # July-June: Feb of `year` inside
        assert sum(p.hours for p in plan_periods(fiscal, 7).values()) == days * 24


def test_stated_and_average_periods():
    periods = plan_periods(["Q1", "Q2", "2027Q1"], 1, {"Q2": 720, "2027Q1": 2000})
    assert periods["Q1"].hours == AVERAGE_QUARTER_HOURS == 2191.5 and periods["Q1"].source == "average"
    assert periods["Q2"].hours == 720 and periods["Q2"].source == "stated"
    assert periods["2027Q1"].hours == 2000 and periods["2027Q1"].start is None   # stated wins over the label
    with pytest.raises(ScenarioError, match=r"period_hours.Q9 = 100: not a quarter of the forecast; quarters: Q1"):
        plan_periods(["Q1"], 1, {"Q9": 100})
    with pytest.raises(ScenarioError, match=r"forecast quarter 'FY27Q5' = 5: a quarter number must be 1 to 4"):
        quarter_span("FY27Q5")


@pytest.mark.parametrize(("change", "expect"), [
    ({"period_hours": {"Q1": 0}}, r"period_hours.Q1 = 0.0: must be in \(0, 8,784\] hours"),
    ({"period_hours": {"Q7": 100}}, r"period_hours.Q7 = 100.0: not a quarter of the forecast"),
    ({"fiscal_year_start_month": 13}, r"fiscal_year_start_month = 13: "),
    ({"pricing": {"reserve": "all"}}, r"pricing.reserve = 'all': not allowed; allowed: 'floor' or 'peak'"),
    ({"pricing": {"reserved_discount": 1}}, r"pricing.reserved_discount = 1"),
    ({"pricing": {"hosts": {"gpus_per_host": 0, "price_per_host_hour": 1}}}, r"pricing.hosts.gpus_per_host = 0"),
    ({"pricing": {"egress": {"price_per_gb": 0.1}}},
     r"pricing.egress.bytes_per_output_token = None: required field is missing"),
    ({"candidates": [{"name": "std", "set": {}, "price_per_gpu_hour": 2, "reserved_price_per_gpu_hour": 3}]},
     r"candidates\[0\].reserved_price_per_gpu_hour = 3.0: is above the on-demand price_per_gpu_hour \(2\)"),
    ({"candidates": [{"name": "std", "set": {}, "reserved_price_per_gpu_hour": 2.5}]},
     r"candidates\[0\] \(std\).reserved_price_per_gpu_hour = 2.5: is above hardware profile 'inline''s "
     r"on-demand price \(2\)"),
])
def test_bad_finance_inputs_are_one_line_errors(change, expect):
    with pytest.raises(ScenarioError, match=expect):
        load_plan(base_plan(failover="none", **change))


# -- the worksheet, end to end ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def priced():
    """east (office-hours shape) and west (none), two calendar quarters of 2028 (a leap year), an
    autoscaled candidate, reserved at a discount, hosts and egress priced."""
    data = base_plan(
        failover="none",
        forecast=[{"quarter": q, "region": r, "peak_rps": p, "avg_output_tokens": 8}
                  for q in ("2028Q1", "2028Q3") for r, p in (("east", 40), ("west", 20))],
        candidates=[{"name": "auto", "set": AUTO, "price_reference": "list price, Nov 2026"}],
        pricing={"reserved_discount": 0.4, "hosts": {"gpus_per_host": 8, "price_per_host_hour": 1.5},
                 "egress": {"price_per_gb": 0.09, "bytes_per_output_token": 200}},
    )
    data["regions"][0]["diurnal"] = "office-hours"
    return data, plan(data, workers=1)


def test_calendar_hours_price_each_quarter(priced):
    _, res = priced
    s = res.summary.set_index(["quarter", "region"])
    assert (s.loc["2028Q1", "period_hours"] == 2184).all() and (s.loc["2028Q3", "period_hours"] == 2208).all()
    assert s.loc[("2028Q1", "east"), "period_start"] == "2028-01-01"
    assert s.loc[("2028Q3", "east"), "period_end"] == "2028-09-30"
    c = res.candidates.set_index(["quarter", "region"])
    for q, hours in (("2028Q1", 2184), ("2028Q3", 2208)):
        west = c.loc[(q, "west")]     # no shape: the peak fleet all quarter
        assert west["gpu_hours"] == pytest.approx(west["gpus"] * hours)
    t = res.totals.set_index(["quarter", "region"])
    assert t.loc[("all quarters", "all regions"), "period_hours"] == 2184 + 2208


def test_reserved_floor_and_on_demand_surplus(priced):
    data, res = priced
    c = res.candidates.set_index(["quarter", "region"])
    east = c.loc[("2028Q1", "east")]
    day = fleet_day(int(east["replicas"]), NAMED_SHAPES["office-hours"],
                    autoscale_policy(load_plan(data).candidate_scenarios["auto"]))
    floor = math.floor(min(day.hourly))
    assert 1 <= floor < east["replicas"] and east["gpus_reserved"] == floor
    assert east["reserved_gpu_hours"] == pytest.approx(floor * 2184)
    assert east["on_demand_gpu_hours"] == pytest.approx((day.replica_hours - 24 * floor) * 2184 / 24)
    assert east["reserved_gpu_hours"] + east["on_demand_gpu_hours"] == pytest.approx(east["gpu_hours"])
    assert east["reserved_price_per_gpu_hour"] == pytest.approx(2.0 * 0.6)
    assert east["gpu_cost_per_quarter"] == pytest.approx(
        east["reserved_gpu_hours"] * 1.2 + east["on_demand_gpu_hours"] * 2.0)
    west = c.loc[("2028Q1", "west")]       # a flat day: all reserved, at west's 1.5 multiplier
    assert west["gpus_reserved"] == west["gpus"] and west["on_demand_gpu_hours"] == 0
    assert west["gpu_cost_per_quarter"] == pytest.approx(west["gpus"] * 2184 * 1.2 * 1.5)
    # hosts: whole 8-GPU hosts each hour; egress: output tokens x 200 bytes
    assert east["host_hours"] == pytest.approx(2184) and east["host_cost_per_quarter"] == pytest.approx(2184 * 1.5)
    out_tokens = 40 * 3600 * sum(NAMED_SHAPES["office-hours"]) * 8 * 2184 / 24
    assert east["egress_gb"] == pytest.approx(out_tokens * 200 / 1e9)
    assert east["cost_per_quarter"] == pytest.approx(
        east["gpu_cost_per_quarter"] + east["host_cost_per_quarter"] + east["egress_cost_per_quarter"])


def test_reserving_the_peak_pays_it_all_quarter(priced):
    data, res = priced
    peak = plan(dict(copy.deepcopy(data), pricing={"reserve": "peak", "reserved_discount": 0.4}), workers=1)
    c, floor = peak.candidates.set_index(["quarter", "region"]), res.candidates.set_index(["quarter", "region"])
    east = c.loc[("2028Q1", "east")]
    assert east["gpus_reserved"] == east["gpus"] and east["on_demand_gpu_hours"] == 0
    assert east["gpu_cost_per_quarter"] == pytest.approx(east["gpus"] * 2184 * 1.2)
    assert east["gpu_hours"] == floor.loc[("2028Q1", "east"), "gpu_hours"]    # the fleet runs the same hours


def test_successful_requests_and_cost_per_request(priced):
    _, res = priced
    c = res.candidates.set_index(["quarter", "region"])
    west = c.loc[("2028Q3", "west")]
    assert west["requests_per_quarter"] == pytest.approx(20 * 3600 * 2208)
    assert west["successful_requests_per_quarter"] == pytest.approx(
        west["requests_per_quarter"] * west["slo_attainment"])
    assert west["cost_per_successful_request"] == pytest.approx(
        west["cost_per_quarter"] / west["successful_requests_per_quarter"])


def test_worksheet_rows_and_totals_add_up(priced, tmp_path):
    _, res = priced
    paths = write_worksheets(res, tmp_path / "out")
    ws, tot = pd.read_csv(paths["worksheet"]), pd.read_csv(paths["totals"])
    lines = ["reserved_cost_usd", "on_demand_cost_usd", "host_cost_usd", "egress_cost_usd"]
    assert (ws[lines].sum(axis=1) - ws["cost_usd"]).abs().max() < 1e-6       # each row: the lines it shows
    assert ws["usd_per_successful_request"].to_numpy() == pytest.approx(
        (ws["cost_usd"] / (ws["successful_requests_millions"] * 1e6)).to_numpy(), rel=1e-3)
    t = tot.set_index(["quarter", "region"])
    for col in [*lines, "cost_usd", "gpu_hours", "on_demand_gpu_hours", "tokens_out_millions", "requests_millions"]:
        for q in ("2028Q1", "2028Q3"):
            assert t.loc[(q, "all regions"), col] == pytest.approx(ws.loc[ws["quarter"] == q, col].sum(), abs=1e-6)
        assert t.loc[("all quarters", "all regions"), col] == pytest.approx(ws[col].sum(), abs=1e-6)
    assert t.loc[("2028Q1", "all regions"), "gpus_reserved"] == ws.loc[ws["quarter"] == "2028Q1", "gpus_reserved"].sum()
    year = t.loc[("all quarters", "all regions")]
    assert year["usd_per_1m_tokens"] == pytest.approx(
        ws["cost_usd"].sum() / (ws["tokens_in_millions"] + ws["tokens_out_millions"]).sum(), rel=1e-3)
    # fixed decimals, no exponents, no 13-digit token counts
    text = paths["worksheet"].read_text()
    first = text.splitlines()[1].split(",")
    row = dict(zip(text.splitlines()[0].split(","), first, strict=True))
    decimals = {c: len(row[c].split(".")[1]) for c in ("cost_usd", "tokens_out_millions", "usd_per_successful_request")}
    assert decimals == {"cost_usd": 2, "tokens_out_millions": 3, "usd_per_successful_request": 8}
    assert row["period_hours"] == "2184.0"
    assert "e+" not in text and "e-" not in text and "e+" not in paths["totals"].read_text()


def test_assumptions_file_says_what_the_numbers_rest_on(priced, tmp_path):
    _, res = priced
    paths = write_worksheets(res, tmp_path / "ws.csv")
    assert paths["assumptions"].name == "ws-assumptions.yaml"
    a = yaml.safe_load(paths["assumptions"].read_text())
    assert a["slo"] == {"ttft_p99_ms": 60.0, "attainment": 0.95, "max_drop_fraction": 0.0}
    assert a["headroom"] == 0.0 and a["failover"] == "none" and "design_rps" in a["design_rate"]
    assert a["design_rps"]["2028Q1"] == {"east": 40.0, "west": 20.0}
    assert a["costed_flat_at_peak"] == {q: {"west": "no diurnal shape: the peak fleet costed all day"}
                                        for q in ("2028Q1", "2028Q3")}
    cand = a["candidates"]["auto"]
    assert cand["price_source"].startswith("assumed") and cand["price_reference"] == "list price, Nov 2026"
    assert cand["autoscaler"]["min_replicas"] == 1 and cand["autoscaler"]["floor_gpus"] == 1
    assert cand["hardware_basis"] == "inline: numbers written in the scenario"     # what the costs rest on
    assert a["periods"]["2028Q1"] == {"start": "2028-01-01", "end": "2028-03-31", "hours": 2184.0,
                                      "source": "calendar"}
    assert a["pricing"]["egress"] == {"price_per_gb": 0.09, "bytes_per_output_token": 200.0}


# -- --compare ---------------------------------------------------------------------------------------------
def _one_quarter(**changes):
    return base_plan(failover="none", forecast=[{"quarter": "2027Q3", "region": "east", "peak_rps": 40},
                                                {"quarter": "2027Q3", "region": "west", "peak_rps": 20}], **changes)


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    out = tmp_path_factory.mktemp("earlier") / "plan-out"
    write_worksheets(plan(_one_quarter(), workers=1), out)
    return read_previous(out)


def _delta(earlier, data):
    res = plan(data, workers=1)
    return delta_report(earlier, res.summary, res.assumptions).set_index(["quarter", "region"])


def test_delta_names_traffic(earlier):
    data = _one_quarter()
    data["forecast"][0]["peak_rps"] = 120
    d = _delta(earlier, data)
    east, west = d.loc[("2027Q3", "east")], d.loc[("2027Q3", "west")]
    assert east["change"] == "changed" and east["reasons"] == "traffic" and east["gpus_peak_change"] > 0
    assert "peak_rps 40 -> 120 (+200.0%)" in east["explanation"]
    assert west["change"] == "unchanged" and west["reasons"] == ""
    q = d.loc[("2027Q3", "all regions")]
    assert q["reasons"] == "traffic" and q["gpus_peak_change"] == east["gpus_peak_change"]
    assert "because of traffic in east" in q["explanation"]


def test_delta_names_the_slo(earlier):
    d = _delta(earlier, _one_quarter(slo={"ttft_p99_ms": 30, "attainment": 0.95}))
    assert set(d["reasons"]) == {"SLO"} and (d["change"] == "changed").any()
    assert "ttft_p99_ms 60.0 -> 30" in d.loc[("2027Q3", "east"), "explanation"]


def test_delta_names_the_hardware(earlier):
    fast = {"cost_model": "constant", "step_time_s": 0.005, "prefill_time_per_token_s": 0.00005,
            "price_per_gpu_hour": 2.0, "memory_bytes": 80 * 2**30}
    d = _delta(earlier, _one_quarter(candidates=[{"name": "std", "set": {"hardware": fast}}]))
    assert set(d["reasons"]) == {"hardware/candidate"} and (d["change"] == "changed").any()
    assert "serving configuration changed" in d.loc[("2027Q3", "east"), "explanation"]
    d = _delta(earlier, _one_quarter(candidates=[{"name": "fast", "set": {"hardware": fast}}]))
    assert d.loc[("2027Q3", "east"), "reasons"] == "hardware/candidate"
    assert "candidate std -> fast" in d.loc[("2027Q3", "east"), "explanation"]


def test_delta_names_tokens_and_unchanged_plans(earlier):
    data = _one_quarter()
    data["forecast"][1]["avg_output_tokens"] = 40
    d = _delta(earlier, data)
    assert d.loc[("2027Q3", "west"), "reasons"] == "tokens" and d.loc[("2027Q3", "east"), "reasons"] == ""
    same = _delta(earlier, _one_quarter())
    assert (same["change"] == "unchanged").all() and (same["reasons"] == "").all()


def test_compare_needs_a_worksheet(tmp_path):
    with pytest.raises(ScenarioError, match=r"--compare = .*: no worksheet at .*worksheet.csv; give the --out folder"):
        read_previous(tmp_path)


def test_cli_plan_compare_writes_the_delta(tmp_path):
    from typer.testing import CliRunner

    from simulator.cli import app

    def write(name, data):
        (tmp_path / name).write_text(yaml.safe_dump(data))
        return str(tmp_path / name)

    a = write("a.yaml", _one_quarter())
    data = _one_quarter()
    data["forecast"][0]["peak_rps"] = 120
    b = write("b.yaml", data)
    run = CliRunner().invoke
    assert run(app, ["plan", a, "--out", str(tmp_path / "a"), "--workers", "1"]).exit_code == 0
    result = run(app, ["plan", b, "--out", str(tmp_path / "b"), "--workers", "1", "--compare", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "changes since the earlier plan" in result.output and "because traffic: peak_rps 40 -> 120" in result.output
    delta = pd.read_csv(tmp_path / "b" / "worksheet-delta.csv")
    assert delta["reasons"].fillna("").tolist() == ["traffic", "", "traffic"]
    assert (tmp_path / "b" / "worksheet-assumptions.yaml").is_file()
    bad = run(app, ["plan", b, "--out", str(tmp_path / "c"), "--compare", str(tmp_path / "none")])
    assert bad.exit_code == 2 and "error: --compare = " in bad.output and not (tmp_path / "c").exists()


def test_a_candidates_serving_id_does_not_depend_on_the_folder_it_was_read_from(tmp_path) -> None:
    """The same plan in two checkouts serves with the same candidates: ``plan --compare`` across them
    must not see every candidate as changed (the id once hashed the scenario's absolute folder)."""
    from simulator.planner.assumptions import serving_config_id
    from simulator.scenario.config import load_scenario

    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "chat.yaml").write_text(Path("examples/chat-h100.yaml").read_text())
    ids = {serving_config_id(load_scenario(d / "chat.yaml")) for d in (a, b)}
    assert len(ids) == 1
    assert serving_config_id(load_scenario(a / "chat.yaml", {"deployment.tensor_parallel_size": 2})) not in ids
