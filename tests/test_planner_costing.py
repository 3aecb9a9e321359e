"""Planner costing: the fleet-hours fluid model against hand-computed days, diurnal shapes and their
errors, the candidate's autoscaler honoured, the finance worksheet (currency, price source, the forecast's
own numbers, totals) and $/1M tokens at the day's real volume."""

from __future__ import annotations

import copy
import math

import pandas as pd
import pytest
from test_planner import base_plan

from simulator.errors import ScenarioError
from simulator.planner import HOURS_PER_QUARTER, build_tasks, load_plan, plan, write_worksheets
from simulator.planner.fleet_hours import (
    NAMED_SHAPES,
    AutoscalePolicy,
    autoscale_policy,
    check_shape,
    fleet_day,
)
from simulator.planner.search import search_replicas
from simulator.planner.tables import candidates_frame

STEP = (0.5,) * 12 + (1.0,) * 12  # hours 0-11 at half the peak, 12-23 at the peak


def policy(min_r=1, max_r=100, delay_s=0.0, cold_s=0.0, warm=0, warm_s=0.0) -> AutoscalePolicy:
    return AutoscalePolicy(min_r, max_r, delay_s, cold_s, warm, warm_s)


# -- the fluid model, by hand ----------------------------------------------------------------------------
def test_flat_day_is_the_peak_fleet_all_day():
    assert fleet_day(4, None, None).replica_hours == 96 and fleet_day(4, None, None).provisioning == "peak"
    assert fleet_day(4, NAMED_SHAPES["flat"], policy()).replica_hours == 96
    assert fleet_day(4, None, policy(delay_s=600, cold_s=300)).replica_hours == 96


def test_static_fleet_runs_its_peak_all_day_whatever_the_shape():
    day = fleet_day(4, STEP, None)
    assert day.provisioning == "static" and day.replica_hours == 96 and day.traffic_hours == 18
    assert day.needed == (2,) * 12 + (4,) * 12  # what an autoscaler could follow


def test_autoscaled_step_follows_the_load():
    day = fleet_day(4, STEP, policy())
    assert day.provisioning == "diurnal" and day.needed == (2,) * 12 + (4,) * 12
    assert day.replica_hours == pytest.approx(2 * 12 + 4 * 12)


def test_scale_down_delay_and_cold_start_lead():
    # Two replicas step up at 12:00 (ordered 360 s = 0.1 h ahead, cold) and down at 24:00
    # (kept 1800 s = 0.5 h).
    day = fleet_day(4, STEP, policy(delay_s=1800, cold_s=360))
    assert day.replica_hours == pytest.approx(72 + 2 * 0.5 + 2 * 0.1)
    assert day.hourly[0] == pytest.approx(3.0)  # 2 + 2 replicas for the first half hour after midnight
    assert day.hourly[11] == pytest.approx(2.2)  # 2 + 2 starting for the last 0.1 h before noon
    assert day.hourly[1] == pytest.approx(2.0) and day.hourly[12] == pytest.approx(4.0)
    # A delay of a day keeps the peak fleet all day.
    assert fleet_day(4, STEP, policy(delay_s=86400)).replica_hours == pytest.approx(96)


def test_warm_pool_is_costed_and_shortens_the_lead():
    # warm_pool 1: one standby all day (24 h); of the 2-replica step, 1 comes warm (36 s = 0.01 h),
    # 1 cold (0.1 h).
    day = fleet_day(4, STEP, policy(cold_s=360, warm=1, warm_s=36))
    assert day.replica_hours == pytest.approx(72 + 24 + 0.01 + 0.1)
    assert day.max_replicas == 5


def test_min_replicas_floor_and_wrap_around_midnight():
    night = tuple(1.0 if h in (22, 23, 0, 1) else 0.25 for h in range(24))  # peak wraps midnight
    day = fleet_day(8, night, policy(min_r=3))
    assert day.needed == tuple(8 if h in (22, 23, 0, 1) else 3 for h in range(24))
    assert day.replica_hours == pytest.approx(8 * 4 + 3 * 20)
    lead = fleet_day(8, night, policy(min_r=3, cold_s=1800))  # 5 replicas ordered 0.5 h ahead
    assert lead.hourly[21] == pytest.approx(3 + 5 * 0.5) and lead.replica_hours == pytest.approx(92 + 2.5)


def test_autoscale_policy_reads_the_scenario():
    data = base_plan(failover="none")
    data["candidates"] = [
        {
            "name": "auto",
            "set": {
                "deployment.autoscaler": {
                    "min_replicas": 2,
                    "max_replicas": 9,
                    "target_outstanding_per_replica": 4,
                    "scale_down_delay_s": 120,
                    "engine_start_s": 30,
                    "load_bandwidth_bytes_per_s": 1e9,
                    "warm_pool": 1,
                }
            },
        }
    ]
    loaded = load_plan(data)
    pol = autoscale_policy(loaded.candidate_scenarios["auto"])
    from simulator.run.resolve import resolve

    weights = resolve(loaded.candidate_scenarios["auto"]).kv_plan.weights_bytes
    assert (pol.min_replicas, pol.max_replicas, pol.scale_down_delay_s, pol.warm_pool) == (2, 9, 120, 1)
    assert pol.cold_start_s == pytest.approx(weights / 1e9 + 30)


# -- shapes in the plan -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, field, expect",
    [
        ([0.5] * 23 + [1.0] * 0, "diurnal", "needs 24 hourly multipliers (hours 0-23, local time), got 23"),
        ([1.0] + [0.5] * 22 + [1.2], "diurnal[23]", "= 1.2: must be in (0, 1]"),
        ([1.0] + [0.0] * 23, "diurnal[1]", "= 0.0: must be in (0, 1]"),
        ([1.0] + [float("nan")] * 23, "diurnal[1]", "= nan: must be a finite number"),
        ([1.0] + ["x"] * 23, "diurnal[1]", "must be a finite number"),
        ([0.5] * 24, "diurnal", "the busiest hour must be 1.0 (it is 0.5)"),
        ("ofice-hours", "diurnal", "unknown diurnal shape (did you mean 'office-hours'?)"),
        (3, "diurnal", "give 24 hourly multipliers"),
        ({"Q9": "flat"}, "diurnal.Q9", "not a quarter of the forecast; quarters: Q1"),
    ],
)
def test_bad_diurnal_shapes_are_one_line_errors(value, field, expect):
    data = base_plan()
    data["regions"][1]["diurnal"] = value
    with pytest.raises(ScenarioError) as err:
        load_plan(data)
    assert str(err.value).startswith(f"regions[1] (west).{field}") and expect in str(err.value), str(
        err.value
    )


def test_shapes_per_quarter_with_a_default():
    data = base_plan(
        forecast=[{"quarter": q, "region": r, "peak_rps": 10} for q in ("Q1", "Q2") for r in ("east", "west")]
    )
    data["regions"][0]["diurnal"] = {"Q2": "consumer", "default": "office-hours"}
    data["regions"][1]["diurnal"] = {"Q1": [1.0] * 24}
    with pytest.raises(ScenarioError, match=r"regions\[1\] \(west\).diurnal = .*no shape for quarter Q2"):
        load_plan(data)
    data["regions"][1]["diurnal"] = None
    shapes = load_plan(data).diurnal
    assert (
        shapes[("Q1", "east")] == NAMED_SHAPES["office-hours"]
        and shapes[("Q2", "east")] == NAMED_SHAPES["consumer"]
    )
    assert shapes[("Q1", "west")] is None
    assert check_shape("x", [1] + [0.5] * 23)[0] == 1.0


# -- forecast gaps, currency ------------------------------------------------------------------------------
def test_forecast_gaps_are_errors_naming_quarter_and_region():
    data = base_plan(
        forecast=[
            {"quarter": "Q1", "region": "east", "peak_rps": 10},
            {"quarter": "Q1", "region": "west", "peak_rps": 10},
            {"quarter": "Q2", "region": "east", "peak_rps": 10},
        ]
    )
    with pytest.raises(ScenarioError, match=r"forecast \(quarter Q2, region west\) = None: missing row"):
        load_plan(data)
    data = base_plan(forecast=[{"quarter": "Q1", "region": "east", "peak_rps": 10}], failover="none")
    with pytest.raises(ScenarioError, match=r"forecast \(quarter Q1, region west\)"):
        load_plan(data)


def test_currency_needs_quoted_prices_and_names_the_columns():
    with pytest.raises(ScenarioError, match=r"currency = 'usd': must be an ISO 4217 code"):
        load_plan(base_plan(currency="usd"))
    with pytest.raises(
        ScenarioError,
        match=r"candidates\[0\] \(std\).price_per_gpu_hour = None: the plan's currency "
        r"is EUR but hardware profile 'inline' has an assumed USD price",
    ):
        load_plan(base_plan(currency="EUR"))
    res = plan(
        base_plan(
            currency="EUR",
            failover="none",
            candidates=[{"name": "std", "set": {}, "price_per_gpu_hour": 1.8}],
        ),
        workers=1,
    )
    s = res.summary
    assert {"cost_eur", "eur_per_1m_tokens", "price_per_gpu_hour_eur"} <= set(
        s.columns
    ) and "cost_usd" not in s
    assert (s["price_source"] == "quoted").all()
    assert {"cost_eur", "eur_per_1m_tokens"} <= set(res.totals.columns)


# -- the plan, end to end ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def costed():
    """east: office-hours shape; west: no shape. std: no autoscaler; auto: an autoscaler with a 10-minute
    scale-down delay; quoted: std with a quoted price. Two quarters."""
    data = base_plan(
        failover="none",
        forecast=[
            {"quarter": q, "region": r, "peak_rps": p, "avg_output_tokens": 8}
            for q, scale in (("Q1", 1.0), ("Q2", 1.5))
            for r, p in (("east", 40 * scale), ("west", 20 * scale))
        ],
    )
    data["regions"][0]["diurnal"] = "office-hours"
    data["simulation"]["search_all_candidates"] = True     # every candidate's count, to compare their costs
    data["candidates"] = [
        {"name": "std", "set": {}},
        {
            "name": "auto",
            "set": {
                "deployment.autoscaler": {
                    "max_replicas": 40,
                    "target_outstanding_per_replica": 4,
                    "scale_down_delay_s": 600,
                }
            },
        },
        {"name": "quoted", "set": {}, "price_per_gpu_hour": 2.5},
    ]
    return data, plan(data, workers=1)


def test_provisioning_modes_and_gpu_hours(costed):
    data, res = costed
    c = res.candidates.set_index(["quarter", "region", "candidate"])
    loaded = load_plan(data)
    pol = autoscale_policy(loaded.candidate_scenarios["auto"])
    for q in ("Q1", "Q2"):
        std, auto = c.loc[(q, "east", "std")], c.loc[(q, "east", "auto")]
        assert std["provisioning"] == "static" and auto["provisioning"] == "diurnal"
        assert std["gpu_hours"] == pytest.approx(std["gpus"] * HOURS_PER_QUARTER)
        assert std["replicas"] == auto["replicas"]  # same system, same seed: the same peak fleet
        day = fleet_day(int(auto["replicas"]), NAMED_SHAPES["office-hours"], pol)
        assert auto["gpu_hours"] == pytest.approx(day.replica_hours * HOURS_PER_QUARTER / 24)
        assert auto["gpu_hours"] < std["gpu_hours"] and auto["gpus_avg"] < auto["gpus"]
        assert auto["autoscaler"].startswith("min 1, max 40, scale-down delay 600 s, cold start")
        for cand in ("std", "auto"):
            west = c.loc[(q, "west", cand)]
            assert west["provisioning"] == "peak" and west["gpu_hours"] == pytest.approx(
                west["gpus"] * HOURS_PER_QUARTER
            )
    # east picks the autoscaled candidate (it pays fewer GPU-hours); the summary says so.
    s = res.summary.set_index(["quarter", "region"])
    assert s.loc[("Q1", "east"), "candidate"] == "auto" and s.loc[("Q1", "east"), "provisioning"] == "diurnal"
    assert s.loc[("Q1", "east"), "gpus_peak"] == c.loc[("Q1", "east", "auto"), "gpus"]
    assert res.candidates["chosen"].sum() == len(res.summary)


def test_cost_per_million_tokens_uses_the_days_real_volume(costed):
    _, res = costed
    c = res.candidates.set_index(["quarter", "region", "candidate"])
    std = c.loc[("Q1", "east", "std")]
    volume = 40 * 3600 * sum(NAMED_SHAPES["office-hours"]) * (64 + 8)  # forecast tokens, not the sampled mean
    assert std["tokens_in_per_day"] + std["tokens_out_per_day"] == pytest.approx(volume)
    cost_per_day = std["gpus"] * 2.0 * 24
    assert std["cost_per_million_tokens"] == pytest.approx(cost_per_day / (volume / 1e6))
    west = c.loc[("Q1", "west", "std")]  # no shape: flat at the peak, 24 h
    assert west["tokens_in_per_day"] == pytest.approx(20 * 86400 * 64)


def test_summary_reports_the_forecasts_numbers_and_price_source(costed):
    _, res = costed
    s, ws = res.summary, res.worksheet
    assert (s["avg_output_tokens"] == 8).all() and s.attrs["decimals"]["avg_output_tokens"] == 1  # written 8.0
    assert (ws["avg_output_tokens"] != 8).all()  # the truncated geometric's mean stays in engineering
    assert s["peak_rps"].tolist() == [40, 20, 60, 30]
    assert s["slo_attainment_pct"].between(0, 100).all() and (s["slo_attainment_pct"] > 1).all()
    assert s["utilization_pct"].max() > 1
    picked = s.set_index(["quarter", "region"])["candidate"]
    for (q, r), cand in picked.items():
        assert s.set_index(["quarter", "region"]).loc[(q, r), "price_source"] == (
            "quoted" if cand == "quoted" else "assumed"
        )
    cand = res.candidates
    assert set(cand.loc[cand["candidate"] == "quoted", "price_source"]) == {"quoted"}
    assert set(cand.loc[cand["candidate"] != "quoted", "price_source"]) == {"assumed"}


def test_totals_per_quarter_region_and_year(costed):
    _, res = costed
    s, t = res.summary, res.totals.set_index(["quarter", "region"])
    for q in ("Q1", "Q2"):
        part = s[s["quarter"] == q]
        row = t.loc[(q, "all regions")]
        assert row["gpus_peak"] == part["gpus_peak"].sum() and row["gpu_hours"] == pytest.approx(
            part["gpu_hours"].sum()
        )
        assert (
            row["cost_usd"] == pytest.approx(part["cost_usd"].sum())
            and row["period_hours"] == HOURS_PER_QUARTER
        )
    for r in ("east", "west"):
        part = s[s["region"] == r]
        row = t.loc[("all quarters", r)]
        assert row["gpus_peak"] == part["gpus_peak"].max()  # the fleet to buy for the year
        assert (
            row["cost_usd"] == pytest.approx(part["cost_usd"].sum())
            and row["period_hours"] == 2 * HOURS_PER_QUARTER
        )
    year = t.loc[("all quarters", "all regions")]
    assert year["gpus_peak"] == max(t.loc[(q, "all regions"), "gpus_peak"] for q in ("Q1", "Q2"))
    assert year["cost_usd"] == pytest.approx(s["cost_usd"].sum())
    tokens = (s["tokens_in_millions"] + s["tokens_out_millions"]).sum()   # quarters labelled Q1, Q2: average hours
    assert tokens == pytest.approx((res.worksheet["tokens_in_per_day"] + res.worksheet["tokens_out_per_day"]).sum()
                                   * HOURS_PER_QUARTER / 24 / 1e6)
    assert year["usd_per_1m_tokens"] == pytest.approx(s["cost_usd"].sum() / tokens, rel=1e-3)


def test_worksheet_files_are_for_finance(costed, tmp_path):
    _, res = costed
    paths = write_worksheets(res, tmp_path)
    text = paths["worksheet"].read_text()
    assert "e+" not in text  # no exponents in the finance files
    ws = pd.read_csv(paths["worksheet"])
    assert ws["tokens_in_millions"].dtype.kind == "f" and ws["avg_output_tokens"].tolist() == [8, 8, 8, 8]
    assert ",8.0," in text and ws["gpus_peak"].dtype.kind == "i"   # fixed decimals; counts as integers
    assert "e+" not in paths["totals"].read_text()
    cand = pd.read_csv(paths["candidates"])
    assert len(cand) == 12 and cand["chosen"].sum() == 4 and "replicas_paid_by_hour" in cand


def test_autoscaler_capped_below_the_peak_is_infeasible():
    data = base_plan(failover="none")
    data["candidates"] = [
        {
            "name": "capped",
            "set": {"deployment.autoscaler": {"max_replicas": 1, "target_outstanding_per_replica": 4}},
        }
    ]
    ws = plan(data, workers=1).worksheet
    assert (ws["status"] == "infeasible").all() and ws["gpus"].isna().all()
    assert ws["binding_constraint"].str.contains("deployment.autoscaler.max_replicas=1 is below the").all()


def test_extra_search_keys_pass_through_to_the_candidates_file():
    loaded = load_plan(base_plan(failover="none"))
    rows = [dict(search_replicas(t), extra_flag=True, extra_count=3) for t in build_tasks(loaded)]
    frame = candidates_frame(loaded, copy.deepcopy(rows))
    assert list(frame.columns[-2:]) == ["extra_flag", "extra_count"] and frame["extra_count"].tolist() == [3, 3]
    assert not math.isnan(frame["gpu_hours"].iloc[0])


def test_what_a_plan_cannot_honour_is_an_error_not_dropped():
    data = base_plan()
    data["candidates"] = [{"name": "net", "set": {"network.clients": [{"rtt_ms": 5}]}}]
    with pytest.raises(
        ScenarioError, match=r"candidates\[0\] \(net\).set.network.clients = .*the plan's regions"
    ):
        load_plan(data)
    data = base_plan()
    data["scenario"] = dict(
        data["scenario"],
        fleet={"regions": [{"name": "a", "replicas": 1}], "clients": [{"name": "c", "rtt_ms": {"a": 5}}]},
    )
    with pytest.raises(
        ScenarioError, match=r"scenario.fleet = \['a'\]: the plan's regions and forecast replace"
    ):
        load_plan(data)
