"""The dashboard's library functions (simulator.report.analysis, simulator.scenario.io), checked against
closed forms (constant cost model), conservation and Little's law."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_scenario

from simulator import MODEL_PRESETS, ScenarioError, available_profiles, load_profile, load_scenario, simulate
from simulator.report.analysis import (
    KPI,
    RunCancelled,
    compare_kpis,
    cost_per_million_tokens,
    kpis,
    latency_cdf,
    load_sweep,
    max_load_meeting_slo,
    measured_requests,
    measured_vs_fitted,
    profiles_overview,
    run_report,
    stage_breakdown,
    step_time_curves,
    tier_table,
    time_series,
    with_arrival_rate,
)
from simulator.scenario.io import (
    MAX_SCENARIO_BYTES,
    scenario_diff,
    scenario_from_key,
    scenario_from_yaml_bytes,
    scenario_key,
    scenario_to_yaml,
)


@pytest.fixture(scope="module")
def light_run():
    """Constant cost model (every step 10 ms), fixed 32-token prompts and 10-token outputs, 5 req/s."""
    return simulate(make_scenario(num_requests=2000, **{"hardware.price_per_gpu_hour": 2.0,
                                                        "deployment.replicas": 2}))


# -- cost and KPIs ------------------------------------------------------------------------------------
def test_cost_per_million_tokens_formula():
    summary = {"throughput": {"output_tokens_per_s": 1000.0, "input_tokens_per_s": 3000.0}}
    cost = cost_per_million_tokens(summary, 3.0, gpus=2)
    assert cost["usd_per_hour"] == 6.0
    assert cost["usd_per_1m_output_tokens"] == pytest.approx(6.0 / 3600 / 1000 * 1e6)
    assert cost["usd_per_1m_tokens"] == pytest.approx(6.0 / 3600 / 4000 * 1e6)
    assert cost_per_million_tokens(summary, None, gpus=2)["usd_per_1m_output_tokens"] is None
    assert cost_per_million_tokens({"throughput": {"output_tokens_per_s": None}}, 3.0, 1)["usd_per_1m_tokens"] is None


def test_cost_matches_offered_load(light_run):
    """Below capacity every request finishes, so output tokens/s = rate x 10 tokens and the cost per
    1M output tokens is 2 GPUs x $2/h over that rate."""
    cards = {k.key: k for k in kpis(light_run.summary, light_run.scenario, 2.0)}
    expected = 2 * 2.0 / 3600 / (5.0 * 10) * 1e6
    assert cards["usd_per_1m_output_tokens"].value == pytest.approx(expected, rel=0.05)
    assert cards["throughput_rps"].value == pytest.approx(5.0, rel=0.05)
    assert cards["ttft_p99"].unit == "ms" and cards["e2e_p99"].unit == "s"
    assert cards["ttft_p99"].value == pytest.approx(light_run.summary["ttft_s"]["p99"] * 1e3)


def test_compare_kpis_directions():
    base = [KPI("ttft_p99", "TTFT p99", 100.0, "ms", False), KPI("throughput_rps", "Throughput", 5.0, "req/s", True),
            KPI("slo_attainment", "SLO attainment", None, "%", True)]
    cur = [KPI("ttft_p99", "TTFT p99", 80.0, "ms", False), KPI("throughput_rps", "Throughput", 4.0, "req/s", True),
           KPI("slo_attainment", "SLO attainment", 99.0, "%", True)]
    cmp = compare_kpis(base, cur).set_index("kpi")
    assert cmp.loc["TTFT p99", "delta"] == -20.0 and cmp.loc["TTFT p99", "delta_pct"] == -20.0
    assert cmp.loc["TTFT p99", "better"] == True  # noqa: E712
    assert cmp.loc["Throughput", "better"] == False  # noqa: E712
    assert cmp.loc["SLO attainment", "better"] is None


# -- stages, CDF, time series -----------------------------------------------------------------------------
def test_stage_breakdown_closed_form(light_run):
    """Constant 10 ms steps: the prompt's step takes 10 ms and 9 more decode steps 90 ms, exactly;
    a request waits at most one step in the queue at this load."""
    measured = measured_requests(light_run)
    st = stage_breakdown(measured).set_index("stage")
    assert st.loc["prefill", "mean_s"] == pytest.approx(0.01, abs=1e-9)
    assert st.loc["decode", "mean_s"] == pytest.approx(0.09, abs=1e-9)
    assert 0.0 <= st.loc["queue", "mean_s"] <= 0.01
    assert st["mean_s"].sum() == pytest.approx(measured["e2e_s"].mean(), rel=1e-12)
    assert st["share"].sum() == pytest.approx(1.0)


def test_latency_cdf_shape(light_run):
    measured = measured_requests(light_run)
    cdf = latency_cdf(measured, max_points=100)
    for metric, d in cdf.groupby("metric"):
        x = np.sort(measured[metric].dropna().to_numpy())
        assert len(d) <= 100
        assert d["value_s"].iloc[0] == x[0] and d["value_s"].iloc[-1] == x[-1]
        assert d["fraction"].iloc[-1] == 1.0
        assert np.all(np.diff(d["value_s"]) >= 0) and np.all(np.diff(d["fraction"]) > 0)
        median = d.loc[d["fraction"] >= 0.5, "value_s"].iloc[0]
        assert median == pytest.approx(np.quantile(x, 0.5), rel=0.05)
    assert latency_cdf(measured.iloc[:0]).empty


def test_time_series_splits_steps_at_bin_edges():
    steps = pd.DataFrame({"start_time": [0.5, 0.0], "duration_s": [1.0, 2.0], "replica": [0, 1],
                          "num_seqs": [2, 1], "num_waiting": [4, 0], "kv_blocks_used": [10, 30]})
    ts = time_series(steps, num_gpu_blocks=100, num_replicas=2, end_s=2.0, num_bins=2)
    assert ts["time_s"].tolist() == [0.0, 1.0]
    assert ts["running_batch"].tolist() == pytest.approx([2 * 0.5 + 1.0, 2 * 0.5 + 1.0])
    assert ts["queue_depth"].tolist() == pytest.approx([2.0, 2.0])
    assert ts["kv_usage"].tolist() == pytest.approx([(10 * 0.5 + 30) / 200, (10 * 0.5 + 30) / 200])


def test_time_series_conserves_integrals_and_littles_law():
    res = simulate(load_scenario("examples/chat-h100.yaml", {"num_requests": 1500}))
    steps = res.steps
    ts = time_series(steps, res.system.kv_plan.num_gpu_blocks, 1, res.sim_time_s, num_bins=50)
    width = ts["bin_s"].iloc[0]
    for col, src in (("running_batch", "num_seqs"), ("queue_depth", "num_waiting")):
        assert (ts[col] * width).sum() == pytest.approx((steps[src] * steps["duration_s"]).sum(), rel=1e-9)
    # Little's law: time-average requests in the system = sum of their times in it / elapsed time.
    req = res.requests
    in_system = (ts["running_batch"] + ts["queue_depth"]).mean()
    assert in_system == pytest.approx(req["e2e_s"].sum() / (width * len(ts)), rel=0.03)


def test_run_report_is_small_and_complete(light_run):
    rep = run_report(light_run, max_cdf_points=50, num_bins=40)
    assert len(rep.series) == 40 and len(rep.cdf) <= 150
    assert rep.system["num_gpus"] == 2 and rep.system["price_per_gpu_hour"] == 2.0
    assert [k.key for k in rep.kpis][:2] == ["ttft_p50", "ttft_p99"]


# -- load ------------------------------------------------------------------------------------------------
def test_with_arrival_rate_switches_process():
    sc = make_scenario()
    g = with_arrival_rate(sc, 7.0, cv=2.0)
    assert g.workload.arrival.process == "gamma" and g.workload.arrival.cv == 2.0 and g.workload.arrival.rate_per_s == 7
    p = with_arrival_rate(g, 3.0, cv=1.0)
    assert p.workload.arrival.process == "poisson" and p.workload.arrival.rate_per_s == 3.0
    assert with_arrival_rate(g, 4.0).workload.arrival.cv == 2.0        # keeps the burstiness
    trace = make_scenario(**{"workload.arrival": {"process": "trace", "path": "x.csv", "format": "azure"}})
    with pytest.raises(ScenarioError) as err:
        with_arrival_rate(trace, 2.0)
    assert err.value.field == "workload.arrival.process"
    with pytest.raises(ScenarioError) as err:
        with_arrival_rate(sc, -1.0)
    assert "rate_per_s" in err.value.field


def test_load_sweep_md1_capacity():
    """One request at a time, 10 steps of 10 ms each: service time 0.1 s, capacity 10 req/s per
    replica. Two replicas: below 20 req/s the p99 TTFT is bounded, above it the queue grows."""
    sc = make_scenario(num_requests=1500, **{"scheduler.max_num_seqs": 1, "deployment.replicas": 2,
                                            "slo.ttft_p99_ms": 400})
    calls = []
    sweep = load_sweep(sc, [24.0, 4.0, 10.0], on_progress=lambda i, n, d, t: calls.append((i, n)))
    assert sweep["rate_per_s"].tolist() == [4.0, 10.0, 24.0]
    assert sweep["rate_per_gpu"].tolist() == [2.0, 5.0, 12.0]
    assert sweep["ttft_p99_s"].is_monotonic_increasing
    assert sweep["slo_met"].tolist() == [True, True, False]
    assert sweep["ttft_p99_s"].iloc[-1] > 1.0                       # overloaded: grows with the run
    assert {c[0] for c in calls} == {0, 1, 2} and all(n == 3 for _, n in calls)
    limit = max_load_meeting_slo(sweep)
    assert limit["max_rate_per_s"] == 10.0 and limit["max_rate_per_gpu"] == 5.0
    assert limit["first_failing_rate_per_s"] == 24.0


def test_load_sweep_can_be_cancelled():
    def stop(point: int, points: int, done: int, total: int) -> None:
        if point == 1:
            raise RunCancelled("stop")
    with pytest.raises(RunCancelled):
        load_sweep(make_scenario(num_requests=300), [1.0, 2.0, 3.0], on_progress=stop)


def test_max_load_meeting_slo_cases():
    def frame(met):
        return pd.DataFrame({"rate_per_s": [1.0, 2.0, 3.0, 4.0], "rate_per_gpu": [0.5, 1.0, 1.5, 2.0], "slo_met": met})
    r = max_load_meeting_slo(frame([True, True, False, True]))      # the first miss ends the search
    assert (r["max_rate_per_s"], r["max_rate_per_gpu"], r["first_failing_rate_per_s"]) == (2.0, 1.0, 3.0)
    r = max_load_meeting_slo(frame([False, True, True, True]))
    assert r["max_rate_per_s"] is None and r["first_failing_rate_per_s"] == 1.0 and "lowest" in r["reason"]
    r = max_load_meeting_slo(frame([True] * 4))
    assert r["max_rate_per_s"] == 4.0 and r["first_failing_rate_per_s"] is None and "above" in r["reason"]
    r = max_load_meeting_slo(frame([None] * 4))
    assert r["max_rate_per_s"] is None and "no SLO" in r["reason"]


# -- hardware ----------------------------------------------------------------------------------------------
def test_profile_table_lists_every_profile():
    profiles = {n: load_profile(str(p)) for n, p in available_profiles().items()}
    table = profiles_overview(profiles).set_index("profile")
    assert set(table.index) == set(profiles)
    assert table.loc["h100-sxm", "bandwidth_tb_s"] == pytest.approx(3.35)
    assert table.loc["h100-sxm", "source"] == "imported"                  # measured kernels, the default
    assert table.loc["h100-sxm-datasheet", "source"] == "datasheet"       # the vendor-peak fallback
    assert table.loc["h100-sxm", "usd_per_gpu_hour"] == 3.0
    assert set(table["source"]) <= {"datasheet", "measured", "imported", "inline"}


def test_measured_vs_fitted_matches_the_table_and_its_fit_report():
    """Every measured point of the measured CPU profile appears once, measured times equal the
    table's, and the held-out errors are the ones the profile report summarises."""
    from simulator.report.profile_report import family_report
    from simulator.report.profile_report import profile_table as read_ops

    prof = load_profile("cpu-amd-epyc-tiny-llama")
    mf = measured_vs_fitted(prof)
    ops = read_ops(prof)
    assert len(mf) == len(ops)
    assert sorted(mf["measured_ms"]) == pytest.approx(sorted(ops["median_s"] * 1e3))
    fam = family_report(prof).set_index("family")
    for family, g in mf.groupby("family"):
        e = g["rel_error"].abs().dropna()
        if len(e):
            assert e.median() == pytest.approx(fam.loc[family, "median_abs_error"])
    ok = mf["rel_error"].notna()
    assert ((mf.loc[ok, "fitted_ms"] / mf.loc[ok, "measured_ms"] - 1).to_numpy()
            == pytest.approx(mf.loc[ok, "rel_error"]))
    assert set(mf.loc[mf["family"] == "attn_decode", "size_unit"]) == {"context tokens"}
    with pytest.raises(ScenarioError):
        measured_vs_fitted(load_profile("h100-sxm-datasheet"))


def test_step_time_curves():
    const = load_profile({"cost_model": "constant", "step_time_s": 0.02, "prefill_time_per_token_s": 1e-5})
    c = step_time_curves(const, MODEL_PRESETS["tiny-llama"], batch_sizes=(1, 8), prompt_tokens=(100,))
    assert c.loc[c["kind"] == "decode", "step_ms"].tolist() == pytest.approx([20.0, 20.0])
    assert c.loc[c["kind"] == "prefill", "step_ms"].tolist() == pytest.approx([20.0 + 1.0])
    h100 = step_time_curves(load_profile("h100-sxm"), MODEL_PRESETS["llama-3-8b"])
    for kind in ("decode", "prefill"):
        d = h100[h100["kind"] == kind]
        assert d["step_ms"].is_monotonic_increasing
    # A batch-1 decode step streams all weights: at least 16 GB / 3.35 TB/s = 4.8 ms.
    assert h100.loc[h100["kind"] == "decode", "step_ms"].iloc[0] > 16.06e9 / 3.35e12 * 1e3


# -- scenario text --------------------------------------------------------------------------------------------
def test_scenario_key_and_yaml_round_trip(tmp_path):
    sc = load_scenario("examples/sharegpt-h100.yaml")
    assert scenario_from_key(scenario_key(sc)) == sc
    assert scenario_key(sc) == scenario_key(load_scenario("examples/sharegpt-h100.yaml"))
    path = tmp_path / "copy.yaml"
    path.write_text(scenario_to_yaml(sc, keep_base_dir=True))
    assert load_scenario(path) == sc
    assert "base_dir" not in scenario_to_yaml(sc)


def test_scenario_diff():
    a = make_scenario()
    b = a.with_overrides({"seed": 9, "scheduler.max_num_seqs": 4})
    assert scenario_diff(a, b) == [("scheduler.max_num_seqs", 8, 4), ("seed", 1, 9)]
    assert scenario_diff(a, a) == []


GOOD = (b"name: up\nnum_requests: 50\nmodel: tiny-llama\nhardware: {cost_model: constant, step_time_s: 0.01}\n"
        b"workload:\n  arrival: {process: poisson, rate_per_s: 2}\n  prompt_tokens: {dist: fixed, value: 8}\n"
        b"  output_tokens: {dist: fixed, value: 4}\n")


def test_upload_good_file(tmp_path):
    sc = scenario_from_yaml_bytes(GOOD, source="up.yaml", base_dir=tmp_path)
    assert sc.name == "up" and sc.base_dir == str(tmp_path)
    hostile = GOOD + b"base_dir: /etc\n"
    assert scenario_from_yaml_bytes(hostile, base_dir=tmp_path).base_dir == str(tmp_path)


def test_upload_may_only_reference_files_under_the_root(tmp_path):
    repo = Path(__file__).resolve().parent.parent
    lengths = (b"\n  prompt_tokens: {dist: empirical, path: %s, column: num_prefill_tokens}"
               b"\n  output_tokens: {dist: fixed, value: 4}\n")
    body = GOOD.split(b"\n  prompt_tokens")[0]
    inside = scenario_from_yaml_bytes(body + lengths % b"examples/data/sharegpt_lengths.csv.gz", base_dir=repo,
                                      allowed_root=repo)
    assert inside.workload.prompt_tokens.path == "examples/data/sharegpt_lengths.csv.gz"
    for path in (b"/etc/passwd", b"../../etc/passwd"):
        with pytest.raises(ScenarioError) as err:
            scenario_from_yaml_bytes(body + lengths % path, base_dir=repo, allowed_root=repo)
        assert err.value.field == "workload.prompt_tokens.path" and "only reference files under" in str(err.value)
    trace = GOOD.replace(b"{process: poisson, rate_per_s: 2}", b"{process: trace, path: /tmp/x.csv, format: azure}")
    with pytest.raises(ScenarioError) as err:
        scenario_from_yaml_bytes(trace, base_dir=repo, allowed_root=repo)
    assert err.value.field == "workload.arrival.path"
    hw = GOOD.replace(b"hardware: {cost_model: constant, step_time_s: 0.01}", b"hardware: /etc/hwprofile")
    with pytest.raises(ScenarioError) as err:
        scenario_from_yaml_bytes(hw, base_dir=repo, allowed_root=repo)
    assert err.value.field == "hardware"
    assert scenario_from_yaml_bytes(GOOD.replace(b"hardware: {cost_model: constant, step_time_s: 0.01}",
                                                 b"hardware: h100-sxm"), allowed_root=repo).hardware == "h100-sxm"


@pytest.mark.parametrize("data, field, words", [
    (b"x" * (MAX_SCENARIO_BYTES + 1), "f.yaml", "too large"),
    (b"\xff\xfe\x00bad", "f.yaml", "not UTF-8"),
    (b"name: [unclosed\n", "f.yaml", "line 2"),
    (b"- a\n- b\n", "f.yaml", "YAML mapping"),
    (b"!!python/object/apply:os.system ['true']\n", "f.yaml", "not valid YAML"),
    (b"a: &x [1, 2]\nb: *x\n", "f.yaml", "aliases"),
    (GOOD.replace(b"num_requests: 50", b"num_requests: 50\nscheduler: {max_num_seq: 3}"), "scheduler.max_num_seq",
     "did you mean 'max_num_seqs'"),
    (GOOD.replace(b"rate_per_s: 2", b"rate_per_s: -2"), "workload.arrival.rate_per_s", "greater than 0"),
])
def test_upload_errors_name_the_field(data, field, words):
    with pytest.raises(ScenarioError) as err:
        scenario_from_yaml_bytes(data, source="f.yaml")
    assert err.value.field == field
    assert words in str(err.value)


def test_tier_table_from_a_tiered_run():
    sc = make_scenario(num_requests=600, **{"workload.tiers": [
        {"name": "fast", "share": 0.25, "priority": 0, "slo": {"ttft_p99_ms": 30}},
        {"name": "slow", "share": 0.75, "priority": 1}], "slo.ttft_p99_ms": 1000})
    res = simulate(sc)
    t = tier_table(res.summary).set_index("tier")
    assert list(t.index) == ["fast", "slow"]
    assert t["arrived"].sum() == 600 and t.loc["fast", "priority"] == 0
    req = res.requests
    assert t.loc["fast", "arrived"] == (req["tier"] == "fast").sum()
    assert t.loc["slow", "ttft_p99_ms"] == pytest.approx(res.summary["tiers"]["slow"]["ttft_s"]["p99"] * 1e3)
    assert t.loc["slow", "slo_attainment_pct"] == 100.0        # 1 s is generous at this load
    assert tier_table(simulate(make_scenario(num_requests=50)).summary).empty


def test_forecast_rows_from_csv_bytes():
    from simulator.scenario.io import MAX_FORECAST_BYTES, forecast_rows_from_csv_bytes

    rows = forecast_rows_from_csv_bytes(b"quarter,region,peak_rps,avg_prompt_tokens\nQ1,us-east,10,\nQ2,eu,12.5,900\n")
    assert rows == [{"quarter": "Q1", "region": "us-east", "peak_rps": 10.0, "avg_prompt_tokens": None},
                    {"quarter": "Q2", "region": "eu", "peak_rps": 12.5, "avg_prompt_tokens": 900.0}]
    for data, words in ((b"x" * (MAX_FORECAST_BYTES + 1), "too large"), (b"\xff\xfe", "not UTF-8"),
                        (b"", "not a readable CSV"), (b"quarter,region,peak_rps\n", "no rows")):
        with pytest.raises(ScenarioError) as err:
            forecast_rows_from_csv_bytes(data, source="f.csv")
        assert err.value.field == "f.csv" and words in str(err.value)


def test_stage_breakdown_network_stage():
    """One client 100 ms away on kept-alive connections: every request pays exactly one RTT."""
    res = simulate(make_scenario(num_requests=300, **{"network": {"clients": [{"rtt_ms": 100}],
                                                                  "keepalive_reuse": 1.0}}))
    st = stage_breakdown(measured_requests(res)).set_index("stage")
    assert list(st.index) == ["network", "queue", "prefill", "decode"]
    assert st.loc["network", "mean_s"] == pytest.approx(0.1) and st.loc["network", "p99_s"] == pytest.approx(0.1)
    assert st.loc["decode", "mean_s"] == pytest.approx(0.09, abs=1e-9)
    assert st["mean_s"].sum() == pytest.approx(measured_requests(res)["client_e2e_s"].mean())
