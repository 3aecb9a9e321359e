"""Every dashboard page through streamlit's AppTest: widgets changed, results checked against the
library, bad input shown as an error naming the field while the page keeps working."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the app extra (streamlit, plotly) is not installed")
pytest.importorskip("plotly", reason="the app extra (streamlit, plotly) is not installed")
import streamlit as st
from streamlit.proto.Metric_pb2 import Metric as MetricProto
from streamlit.testing.v1 import AppTest

from simulator import available_profiles, load_scenario, simulate
from simulator.report.analysis import load_sweep, max_load_meeting_slo, with_arrival_rate

APP = str(Path(__file__).resolve().parent.parent / "app.py")
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "chat-h100.yaml"


@pytest.fixture
def app():
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=90)
    at.run()
    assert not at.exception
    return at


def ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.message for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_what_if_runs_and_matches_the_library(app):
    assert "llama-3-8b" in app.markdown[0].value and "28,116 blocks" in app.markdown[0].value
    app.number_input(key="wi_num_requests").set_value(1500)
    app.number_input(key="wi_seed").set_value(3)
    ok(app.run())
    ok(app.button(key="wi_run").click().run())
    cards = metrics(app)
    assert len(cards) == 11
    expected = simulate(load_scenario(EXAMPLE, {"num_requests": 1500, "seed": 3})).summary
    assert cards["TTUA p99 (s)"] == f"{expected['ttua_s']['p99']:,.2f}"
    assert cards["TTFT p99 (ms)"] == f"{expected['ttft_s']['p99'] * 1e3:,.1f}"
    assert cards["E2E p50 (s)"] == f"{expected['e2e_s']['p50']:,.2f}"
    price = 3.0  # h100-sxm's assumed $/GPU-hour
    cost = price / 3600 / expected["throughput"]["output_tokens_per_s"] * 1e6
    assert cards["Cost ($/1M output tok)"] == f"{cost:,.2f}"
    assert len(app.get("plotly_chart")) == 3                 # CDF, stages, time series
    assert app.download_button(key="wi_download").label == "Download scenario YAML"
    # Shareable: the URL now carries the example and the knobs.
    assert app.query_params["example"] == "chat-h100.yaml" and app.query_params["n"] == "1500"


def test_what_if_lists_the_moe_and_long_context_models(app):
    """The model knob offers the MoE, MLA and 128k presets; the DeepSeek-V3 example names its split."""
    options = app.selectbox(key="wi_model").options
    for name in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b", "llama-3.1-8b", "llama-3.1-70b"):
        assert name in options, name
    ok(app.selectbox(key="wi_example").select("deepseek-v3-h200.yaml").run())
    line = app.markdown[0].value
    assert "deepseek-v3" in line and "8 × h200-datasheet" in line and "TP 8, EP 8" in line


def test_what_if_shows_each_model_pool():
    """A scenario with model pools names every pool, its model and GPUs, and runs."""
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params["example"] = "model-routing.yaml"
    ok(at.run())
    line = at.markdown[0].value
    assert line.startswith("Model pools (3 GPUs; routing by prompt_tokens)"), line
    assert "**small**: llama-3.2-1b on 1 × h100-sxm" in line and "**big**: llama-3-8b on 2 × h100-sxm" in line
    at.number_input(key="wi_num_requests").set_value(800)
    ok(at.button(key="wi_run").click().run())
    assert len(metrics(at)) == 11


def test_baseline_compare_shows_deltas(app):
    app.number_input(key="wi_num_requests").set_value(1000)
    ok(app.button(key="wi_run").click().run())
    ok(app.button(key="wi_pin").click().run())
    app.number_input(key="wi_rate").set_value(12.0)
    app.number_input(key="wi_cv").set_value(2.0)
    ok(app.run())
    assert any("knobs changed" in c.value for c in app.caption)
    ok(app.button(key="wi_run").click().run())
    deltas = {m.label: m.delta for m in app.metric}
    assert deltas["TTFT p99 (ms)"].startswith("+") and float(deltas["TTFT p99 (ms)"]) > 0   # more load, longer tails
    assert all(deltas[label] for label in deltas)
    # The compare tab: one KPI table and the list of changed fields.
    changed = app.dataframe[-1].value
    assert set(changed["field"]) == {"workload.arrival.rate_per_s", "workload.arrival.process", "workload.arrival.cv"}
    ok(app.button(key="wi_clear").click().run())
    assert all(m.delta is None or m.delta == "" for m in app.metric)


def test_a_change_that_rounds_to_zero_is_neither_better_nor_worse(app):
    """SLO attainment 100.00% -> 99.96% shows as 0.0 in grey, not "-0.0" in red; the compare tab says
    "same"; a real change keeps its colour."""
    app.number_input(key="wi_num_requests").set_value(3000)
    app.number_input(key="wi_seed").set_value(1)
    ok(app.button(key="wi_run").click().run())
    ok(app.button(key="wi_pin").click().run())
    app.number_input(key="wi_seed").set_value(2)
    ok(app.button(key="wi_run").click().run())
    cards = {m.label: m for m in app.metric}
    att = cards["SLO attainment (%)"]
    assert att.value == "100.0" and att.delta == "0.0" and att.proto.color == MetricProto.MetricColor.GRAY
    ttft = cards["TTFT p99 (ms)"]
    assert float(ttft.delta) != 0 and ttft.proto.color in (MetricProto.MetricColor.RED, MetricProto.MetricColor.GREEN)
    table = next(d.value for d in app.dataframe if "kpi" in d.value.columns).set_index("kpi")
    assert table.loc["SLO attainment", "better"] == "same" and table.loc["SLO attainment", "delta"] < 0


def test_impossible_configuration_names_the_field(app):
    app.selectbox(key="wi_model").set_value("llama-3-70b")
    ok(app.run())
    assert any("does not fit" in e.value and "model" in e.value for e in app.error)
    assert app.button(key="wi_run").disabled
    app.selectbox(key="wi_tp").set_value(4)
    ok(app.run())
    assert not app.error and not app.button(key="wi_run").disabled
    app.number_input(key="wi_max_num_batched_tokens").set_value(64)
    ok(app.run())
    assert any("max_num_batched_tokens" in e.value for e in app.error)


def test_bad_uploads_show_errors_and_the_page_keeps_working(app):
    app.radio(key="wi_mode").set_value("Upload YAML")
    ok(app.run())
    text = EXAMPLE.read_text().replace("max_num_seqs: 256", "max_num_seq: 256")
    app.file_uploader(key="wi_upload").set_value(("typo.yaml", text.encode(), "application/x-yaml"))
    ok(app.run())
    assert any("scheduler.max_num_seq" in e.value and "did you mean 'max_num_seqs'" in e.value for e in app.error)
    app.file_uploader(key="wi_upload").set_value(("big.yaml", b"#" * 70_000, "application/x-yaml"))
    ok(app.run())
    assert any("too large" in e.value for e in app.error)
    app.file_uploader(key="wi_upload").set_value(("evil.yaml", b"!!python/object/apply:os.system ['true']",
                                                  "application/x-yaml"))
    ok(app.run())
    assert any("not valid YAML" in e.value for e in app.error)
    good = EXAMPLE.read_text().replace("num_requests: 20000", "num_requests: 800")
    app.file_uploader(key="wi_upload").set_value(("good.yaml", good.encode(), "application/x-yaml"))
    ok(app.run())
    assert not app.error
    ok(app.button(key="wi_run").click().run())
    assert len(metrics(app)) == 11


def test_time_limit_cancels_a_run(app):
    app.number_input(key="wi_seed").set_value(12345)
    app.number_input(key="wi_time_limit_s").set_value(0.001)
    ok(app.run())
    ok(app.button(key="wi_run").click().run())
    assert any("cancelled" in w.value for w in app.warning)
    assert not app.metric                                    # nothing half-done is shown or cached
    app.number_input(key="wi_time_limit_s").set_value(60.0)
    app.number_input(key="wi_num_requests").set_value(500)
    ok(app.button(key="wi_run").click().run())
    assert len(metrics(app)) == 11


def test_query_parameters_restore_a_view():
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update({"example": "chat-h100.yaml", "rate": "3.5", "cv": "2", "n": "400", "replicas": "2",
                            "seqs": "nonsense"})
    ok(at.run())
    assert at.number_input(key="wi_rate").value == 3.5
    assert at.number_input(key="wi_num_requests").value == 400
    assert at.number_input(key="wi_replicas").value == 2
    assert any("seqs" in w.value for w in at.warning)
    assert "2 × h100-sxm" in at.markdown[0].value


def test_load_curve_page(app):
    ok(app.switch_page("app_pages/load_curve.py").run())
    assert app.radio(key="lc_mode").value == "What-if's"
    app.slider(key="lc_points").set_value(3)
    app.number_input(key="lc_min_rate").set_value(4.0)
    app.number_input(key="lc_max_rate").set_value(40.0)
    app.number_input(key="lc_num_requests").set_value(1500)   # 37 s of arrivals at 40 req/s: past the 30 s warm-up
    ok(app.run())
    ok(app.button(key="lc_run").click().run())
    cards = metrics(app)
    sc = with_arrival_rate(load_scenario(EXAMPLE, {"num_requests": 1500}), 4.0)
    limit = max_load_meeting_slo(load_sweep(sc, [4.0, 22.0, 40.0]))
    assert cards["Max load meeting the SLO (req/s)"] == f"{limit['max_rate_per_s']:,.2f}"
    assert cards["First swept rate missing it (req/s)"] == f"{limit['first_failing_rate_per_s']:,.2f}"
    assert len(app.get("plotly_chart")) == 1
    assert app.dataframe[0].value.shape[0] == 3
    # No SLO: a warning, no limit marked, the sweep still runs.
    app.number_input(key="lc_slo_ttft_ms").set_value(0.0)
    app.number_input(key="lc_slo_tpot_ms").set_value(0.0)
    ok(app.run())
    assert any("No SLO" in w.value for w in app.warning)
    ok(app.button(key="lc_run").click().run())
    assert metrics(app)["Max load meeting the SLO (req/s)"] == "–"
    # A bad range is an error naming it, and the button is off.
    app.number_input(key="lc_max_rate").set_value(1.0)
    ok(app.run())
    assert any("highest rate" in e.value for e in app.error) and app.button(key="lc_run").disabled


def test_hardware_page(app):
    ok(app.switch_page("app_pages/hardware.py").run())
    table = app.dataframe[0].value
    assert set(table["profile"]) == set(available_profiles())
    assert table.set_index("profile").loc["h100-sxm", "source"] == "imported"
    assert table.set_index("profile").loc["h100-sxm-datasheet", "source"] == "datasheet"
    assert len(app.get("plotly_chart")) == 2                 # step times; measured vs fitted
    app.selectbox(key="hw_model").set_value("llama-3-70b")
    app.selectbox(key="hw_tp").set_value(8)
    app.multiselect(key="hw_profiles").set_value(["h100-sxm", "b200"])
    ok(app.run())
    assert not any(c.value.startswith("Not shown") for c in app.caption)
    # Measured vs fitted: the family table is the profile report's held-out fit.
    from simulator import load_profile
    from simulator.report.profile_report import family_report
    app.selectbox(key="hw_fit_profile").set_value("cpu-amd-epyc-tiny-llama")
    ok(app.run())
    fit = app.dataframe[1].value.set_index("family")
    expected = family_report(load_profile("cpu-amd-epyc-tiny-llama")).set_index("family")
    assert fit["median |error| (%)"].to_numpy() == pytest.approx(100 * expected["median_abs_error"].to_numpy())
    app.selectbox(key="hw_detail").set_value("l40s")
    ok(app.run())
    provenance = app.dataframe[2].value
    assert {"imported_from", "license", "measured", "extrapolated"} <= set(provenance["field"])
    # A profile that cannot time the chosen model is listed with the reason, not drawn.
    app.multiselect(key="hw_profiles").set_value(["cpu-amd-epyc-tiny-llama"])
    ok(app.run())
    assert any(c.value.startswith("Not shown: cpu-amd-epyc-tiny-llama") for c in app.caption)
    assert len(app.get("plotly_chart")) == 1


def test_second_view_of_a_scenario_comes_from_the_cache(app, monkeypatch):
    import sys

    app.number_input(key="wi_num_requests").set_value(700)
    ok(app.button(key="wi_run").click().run())
    first = metrics(app)

    def no_simulation(*args, **kwargs):
        raise AssertionError("simulated again instead of using the cache")

    monkeypatch.setattr(sys.modules["app_pages.common"], "simulate", no_simulation)
    app.number_input(key="wi_num_requests").set_value(800)          # away and back: same frozen scenario
    ok(app.run())
    app.number_input(key="wi_num_requests").set_value(700)
    ok(app.button(key="wi_run").click().run())
    assert metrics(app) == first
    app.number_input(key="wi_num_requests").set_value(800)          # a new scenario does simulate
    ok(app.button(key="wi_run").click().run())                    # an internal error is shown, not raised
    assert any("Internal error" in e.value and "simulated again" in e.value for e in app.error)
    assert metrics(app) == first                                   # the last good results stay


def test_quantisation_knobs_change_memory_and_speed(app):
    """fp8 weights free about 8 GB for KV blocks and halve the bytes a decode step streams; an fp8
    KV cache then doubles the blocks again (the KV-cache bytes per token halve)."""
    app.number_input(key="wi_num_requests").set_value(600)
    ok(app.run())
    assert "28,116 blocks" in app.markdown[0].value

    def blocks() -> int:
        return int(app.markdown[0].value.split("KV cache ")[1].split(" blocks")[0].replace(",", ""))

    ok(app.button(key="wi_run").click().run())
    bf16 = float(metrics(app)["TPOT p50 (ms)"])
    app.selectbox(key="wi_quantization").set_value("fp8")
    ok(app.run())
    fp8_weights = blocks()
    assert fp8_weights > 28_116 * 1.1
    ok(app.button(key="wi_run").click().run())
    assert float(metrics(app)["TPOT p50 (ms)"]) < bf16            # decode is memory-bound: fewer bytes
    app.selectbox(key="wi_kv_dtype").set_value("fp8")
    ok(app.run())
    assert blocks() == pytest.approx(2 * fp8_weights, rel=0.01)
    assert app.query_params["quant"] == "fp8" and app.query_params["kvdtype"] == "fp8"


def test_trace_upload_replays_with_a_speedup(app):
    """A scenario replaying the Azure conversation excerpt: no rate knob, a speedup instead; twice
    the speed gives twice the throughput (the system is far from saturation)."""
    text = ("name: trace-up\nmodel: llama-3-8b\nhardware: h100-sxm\nworkload:\n"
            "  arrival: {process: trace, path: tests/data/azure_conv_excerpt.csv, format: azure}\n")
    app.radio(key="wi_mode").set_value("Upload YAML")
    ok(app.run())
    app.file_uploader(key="wi_upload").set_value(("trace.yaml", text.encode(), "application/x-yaml"))
    ok(app.run())
    assert not app.error and not [w for w in app.number_input if w.key == "wi_rate"]
    ok(app.button(key="wi_run").click().run())
    slow = float(metrics(app)["Throughput (req/s)"])
    app.number_input(key="wi_speedup").set_value(2.0)
    ok(app.button(key="wi_run").click().run())
    assert float(metrics(app)["Throughput (req/s)"]) == pytest.approx(2 * slow, rel=0.1)
    ok(app.switch_page("app_pages/load_curve.py").run())
    assert any("needs poisson or gamma arrivals" in e.value for e in app.error)


def test_stop_reports_only_a_run_that_was_cut_short(app):
    """A run still flagged as running on the next rerun was interrupted (the browser test clicks
    Stop during a real run); Stop with nothing running says nothing."""
    app.session_state["wi_running"] = True
    ok(app.button(key="wi_stop").click().run())
    assert any("Stopped" in i.value for i in app.info)
    ok(app.button(key="wi_stop").click().run())
    assert not any("Stopped" in i.value for i in app.info)
    app.session_state["wi_running"] = True
    app.number_input(key="wi_seed").set_value(5)
    ok(app.run())
    assert any("interrupted by a change" in i.value for i in app.info)


def test_batching_policy_and_speculative_knobs(app):
    """A budget below max_model_len is an error for continuous batching and fine for chunked
    prefill; speculative decoding with a good draft cuts TPOT at light load (the README's test)."""
    app.number_input(key="wi_num_requests").set_value(400)
    app.number_input(key="wi_rate").set_value(1.0)
    app.number_input(key="wi_max_num_batched_tokens").set_value(512)
    ok(app.run())
    assert any("max_num_batched_tokens" in e.value for e in app.error)
    app.selectbox(key="wi_policy").set_value("chunked_prefill")
    ok(app.run())
    app.number_input(key="wi_long_prefill").set_value(256)
    ok(app.run())
    assert not app.error
    ok(app.button(key="wi_run").click().run())
    assert app.query_params["policy"] == "chunked_prefill" and app.query_params["lpt"] == "256"
    app.selectbox(key="wi_policy").set_value("continuous")
    app.number_input(key="wi_max_num_batched_tokens").set_value(8192)
    ok(app.button(key="wi_run").click().run())
    plain_tpot = float(metrics(app)["TPOT p50 (ms)"])
    app.selectbox(key="wi_spec_method").set_value("draft")
    ok(app.run())
    app.slider(key="wi_spec_alpha").set_value(0.8)
    app.selectbox(key="wi_spec_draft").set_value("llama-3.2-1b")
    ok(app.button(key="wi_run").click().run())
    assert float(metrics(app)["TPOT p50 (ms)"]) < 0.8 * plain_tpot
    assert any("speculative" in c.value for c in app.caption)
    app.selectbox(key="wi_policy").set_value("static")              # speculation is continuous-only
    ok(app.run())
    assert any("speculative_config" in e.value for e in app.error)
    app.number_input(key="wi_max_wait_ms").set_value(20.0)
    ok(app.run())


def test_engine_preset_sets_the_scheduler_knobs_and_multi_step_raises_ttft(app):
    """Choosing vLLM v1 sets its scheduler defaults in the knobs (H100: chunked prefill, prefix
    caching, 8,192 tokens, 1,024 sequences); vLLM 0.6 with 8 scheduler steps raises TTFT p50."""
    app.number_input(key="wi_num_requests").set_value(1000)
    app.selectbox(key="wi_engine").set_value("vllm-v1")
    ok(app.run())
    assert app.selectbox(key="wi_policy").value == "chunked_prefill"
    assert app.toggle(key="wi_prefix_caching").value
    assert app.number_input(key="wi_max_num_batched_tokens").value == 8192
    assert app.number_input(key="wi_max_num_seqs").value == 1024
    app.toggle(key="wi_async").set_value(True)
    ok(app.button(key="wi_run").click().run())
    assert not app.error and app.query_params["engine"] == "vllm-v1"
    app.selectbox(key="wi_engine").set_value("vllm-v0.6")
    ok(app.run())
    assert app.selectbox(key="wi_policy").value == "continuous"
    ok(app.button(key="wi_run").click().run())
    one_step = float(metrics(app)["TTFT p50 (ms)"])
    app.number_input(key="wi_num_scheduler_steps").set_value(8)
    ok(app.button(key="wi_run").click().run())
    assert not app.error
    assert float(metrics(app)["TTFT p50 (ms)"]) > one_step


def test_tiers_example_and_priority_scheduling(app):
    """The tiers example, as shipped: a stable run in which priority scheduling keeps the interactive
    tier's TTFT low and both tiers meet their SLOs; under fcfs the interactive tier misses, and the
    table says why."""
    app.selectbox(key="wi_example").set_value("tiers-h100.yaml")
    ok(app.run())
    assert app.selectbox(key="wi_scheduling").value == "priority"
    ok(app.button(key="wi_run").click().run())
    assert not [e.value for e in app.error if "Unstable run" in e.value]
    tiers = app.dataframe[-1].value.set_index("tier")
    assert list(tiers.index) == ["interactive", "batch"]
    prio = tiers.loc["interactive", "TTFT p99 (ms)"]
    assert prio < 500 < tiers.loc["batch", "TTFT p99 (ms)"]
    assert tiers["tier's SLO met"].tolist() == [True, True] and tiers["why not met"].tolist() == ["", ""]
    app.number_input(key="wi_num_requests").set_value(3000)
    app.selectbox(key="wi_scheduling").set_value("fcfs")
    ok(app.button(key="wi_run").click().run())
    tiers = app.dataframe[-1].value.set_index("tier")
    fcfs = tiers.loc["interactive", "TTFT p99 (ms)"]
    assert fcfs > 2 * prio and not tiers.loc["interactive", "tier's SLO met"]
    assert tiers.loc["interactive", "why not met"] == f"ttft_p99 {fcfs:.1f} ms > 500 ms"


def test_swap_preemption_knob(app):
    app.number_input(key="wi_num_requests").set_value(300)
    app.selectbox(key="wi_preemption").set_value("swap")
    ok(app.run())
    app.number_input(key="wi_swap_gib").set_value(16.0)
    ok(app.button(key="wi_run").click().run())
    assert len(metrics(app)) == 11
    assert app.query_params["preempt"] == "swap" and app.query_params["swap"] == "16.0"
    yaml_text = app.code[-1].value
    assert "preemption_mode: swap" in yaml_text and "swap_space_gib: 16.0" in yaml_text


SMALL_FORECAST = (b"quarter,region,peak_rps\nFY27Q1,us-east,20\nFY27Q1,eu-west,8\nFY27Q2,us-east,30\n"
                  b"FY27Q2,eu-west,10\n")


def test_capacity_plan_page(app):
    """A small forecast uploaded as CSV, one candidate: the worksheet is the planner's own, row for row."""
    from simulator.planner.config import load_plan
    from simulator.planner.run import plan

    ok(app.switch_page("app_pages/capacity_plan.py").run())
    assert any("12 forecast rows × 3 candidates" in c.value for c in app.caption)
    app.multiselect(key="cp_candidates").set_value(["h100-tp1"])
    app.number_input(key="cp_num_requests").set_value(300)
    app.file_uploader(key="cp_upload").set_value(("small.csv", SMALL_FORECAST, "text/csv"))
    ok(app.run())
    assert any("4 forecast rows × 1 candidates" in c.value and "left out: us-west" in c.value
               for c in app.caption)
    ok(app.button(key="cp_run").click().run())
    ws = next(d.value for d in app.dataframe if "gpus_peak" in d.value and "provisioning" in d.value)
    data = load_plan("examples/plan-fy27.yaml").config.model_dump(mode="json", exclude_none=True)
    data.update(forecast=[{"quarter": "FY27Q1", "region": "us-east", "peak_rps": 20},
                          {"quarter": "FY27Q1", "region": "eu-west", "peak_rps": 8},
                          {"quarter": "FY27Q2", "region": "us-east", "peak_rps": 30},
                          {"quarter": "FY27Q2", "region": "eu-west", "peak_rps": 10}],
                regions=[dict(r, rtt_ms={k: v for k, v in r["rtt_ms"].items() if k != "us-west"})
                         for r in data["regions"] if r["name"] != "us-west"],
                candidates=[c for c in data["candidates"] if c["name"] == "h100-tp1"],
                simulation={**data["simulation"], "num_requests": 300})
    expected = plan(load_plan(data, base_dir=data["base_dir"]), workers=1)
    assert ws["gpus_peak"].tolist() == expected.summary["gpus_peak"].tolist()
    cells = ["quarter", "region"]
    assert ws[cells].values.tolist() == expected.summary[cells].values.tolist()
    last_q = expected.summary[expected.summary["quarter"] == "FY27Q2"]
    assert metrics(app)["Peak GPUs in FY27Q2"] == f"{last_q['gpus_peak'].sum():,.0f}"
    assert metrics(app)["GPU-hours in FY27Q2 (provisioned)"] == f"{last_q['gpu_hours'].sum():,.0f}"
    assert len(app.get("plotly_chart")) == 1
    assert app.download_button(key="cp_download").label == "Download worksheet CSV"


def test_capacity_plan_bad_input(app):
    ok(app.switch_page("app_pages/capacity_plan.py").run())
    app.file_uploader(key="cp_upload").set_value(("typo.csv", b"quarter,region,peak_rp\nQ1,us-east,5\n", "text/csv"))
    ok(app.run())
    assert any("peak_rp" in e.value for e in app.error) and app.button(key="cp_run").disabled
    app.file_uploader(key="cp_upload").set_value(("empty.csv", b"quarter,region,peak_rps\n", "text/csv"))
    ok(app.run())
    assert any("no rows" in e.value for e in app.error)
    app.file_uploader(key="cp_upload").set_value(("mars.csv", b"quarter,region,peak_rps\nQ1,mars,5\n", "text/csv"))
    ok(app.run())
    assert any("mars" in e.value for e in app.error) and app.button(key="cp_run").disabled
    app.file_uploader(key="cp_upload").set_value(None)
    app.multiselect(key="cp_candidates").set_value([])
    ok(app.run())
    assert any("candidates" in e.value for e in app.error) and app.button(key="cp_run").disabled


def test_prefix_caching_knob_on_the_prefix_example(app):
    """Shared 2,048-token system prompts: with prefix caching most of each prompt is a cache hit,
    so the median TTFT falls."""
    app.selectbox(key="wi_example").set_value("chat-prefix-h100.yaml")
    ok(app.run())
    assert app.toggle(key="wi_prefix_caching").value is True
    app.number_input(key="wi_num_requests").set_value(600)
    ok(app.button(key="wi_run").click().run())
    cached = float(metrics(app)["TTFT p50 (ms)"])
    app.toggle(key="wi_prefix_caching").set_value(False)
    ok(app.button(key="wi_run").click().run())
    assert float(metrics(app)["TTFT p50 (ms)"]) > 1.5 * cached
    assert app.query_params["prefix"] == "False"


def test_timeouts_and_load_shedding_knobs(app):
    """Overload (3x the default rate) with shedding at 20 waiting requests: requests are shed and
    the admitted ones keep a bounded TTFT; a client timeout makes requests time out."""
    app.number_input(key="wi_num_requests").set_value(1500)
    app.number_input(key="wi_rate").set_value(40.0)
    ok(app.button(key="wi_run").click().run())
    overloaded = float(metrics(app)["TTFT p99 (ms)"].replace(",", ""))
    app.number_input(key="wi_max_queue_len").set_value(20)
    ok(app.button(key="wi_run").click().run())
    line = next(c.value for c in app.caption if "measured of" in c.value)
    shed = int(line.split("(shed: ")[1].split(")")[0].replace(",", ""))
    assert shed > 0 and float(metrics(app)["TTFT p99 (ms)"].replace(",", "")) < overloaded
    app.number_input(key="wi_max_queue_len").set_value(0)
    app.number_input(key="wi_timeout_s").set_value(2.0)
    ok(app.button(key="wi_run").click().run())
    line = next(c.value for c in app.caption if "measured of" in c.value)
    assert int(line.split(" timed out")[0].split(", ")[-1].replace(",", "")) > 0
    assert app.query_params["timeout"] == "2.0"


def test_validation_page(app, tmp_path, monkeypatch):
    import json

    from simulator.report.validation_report import load_validation, validation_table
    results = Path(APP).parent / "benchmarks" / "results"
    ok(app.switch_page("app_pages/validation.py").run())
    assert not app.error
    app.selectbox(key="val_folder").set_value("fidelity-thread")
    ok(app.run())
    doc = load_validation(results / "fidelity-thread")
    table = app.dataframe[1].value
    assert len(table) == len(validation_table(doc))
    assert table["error"].tolist() == pytest.approx(validation_table(doc)["error"].tolist())
    assert metrics(app)["Clock"] == "thread"
    assert metrics(app)["Targets met"] == f"{len(table)} / {len(table)}"
    chart = app.get("plotly_chart")
    assert len(chart) == 1
    names = [t["name"] for t in json.loads(chart[0].proto.spec)["data"]]
    assert {"±10%", "±15%", "y = x", "ttft_p99", "e2e_p50"} <= set(names)
    app.selectbox(key="val_folder").set_value("fidelity-wall-shared")
    ok(app.run())
    assert metrics(app)["Clock"] == "wall"
    # Uploads: a malformed file is one error naming the field, then a good one renders.
    app.radio(key="val_mode").set_value("Upload validation.json")
    ok(app.run())
    bad = json.loads((results / "fidelity-thread" / "validation.json").read_text())
    del bad["rows"][2]["predicted"]
    app.file_uploader(key="val_upload").set_value(("bad.json", json.dumps(bad).encode(), "application/json"))
    ok(app.run())
    errors = [e.value.replace("\\", "") for e in app.error]   # markdown escapes the brackets
    assert any("rows[2].predicted" in e and "bad.json" in e for e in errors), errors
    assert not app.get("plotly_chart")
    app.file_uploader(key="val_upload").set_value(("x.json", b"{not json", "application/json"))
    ok(app.run())
    assert any("not valid JSON" in e.value for e in app.error)
    good = (results / "fidelity-wall-shared" / "validation.json").read_bytes()
    app.file_uploader(key="val_upload").set_value(("good.json", good, "application/json"))
    ok(app.run())
    assert not app.error and len(app.get("plotly_chart")) == 1


def test_validation_page_missing_and_broken_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPLAN_FIDELITY_RESULTS", str(tmp_path))
    (tmp_path / "fidelity-broken").mkdir()
    (tmp_path / "fidelity-broken" / "validation.json").write_text('{"settings": {}, "rows": [{"metric": "x"}]}')
    at = AppTest.from_file(APP, default_timeout=90)
    at.switch_page("app_pages/validation.py")
    ok(at.run())
    errors = [e.value.replace("\\", "") for e in at.error]
    assert any("fidelity-broken" in e and "rows[0].load" in e for e in errors), errors
    (tmp_path / "fidelity-broken" / "validation.json").unlink()
    ok(at.run())
    assert any("No benchmarks/results/fidelity-" in i.value for i in at.info)


def test_closed_loop_example_has_a_clients_knob(app):
    """The closed-loop example: a clients knob instead of a rate, and the load it held."""
    app.selectbox(key="wi_example").set_value("closed-loop-h100.yaml")
    ok(app.run())
    assert app.number_input(key="wi_clients").value == 32 and not [w for w in app.number_input if w.key == "wi_rate"]
    app.number_input(key="wi_num_requests").set_value(400)
    app.number_input(key="wi_clients").set_value(8)
    ok(app.button(key="wi_run").click().run())
    assert any("closed loop of 8 clients" in c.value for c in app.caption)
    assert app.query_params["clients"] == "8"


def test_load_curve_requests_outlast_the_warm_up_at_the_highest_rate(app):
    """The sweep's default requests per rate carry the highest rate (4x the scenario's) past warm-up and
    cool-down twice over: the what-if's 1,500 requests at 16 req/s, swept to 64 req/s, arrived within the
    example's 30 s warm-up (an empty window, refused)."""
    app.number_input(key="wi_num_requests").set_value(1500)
    app.number_input(key="wi_rate").set_value(16.0)
    ok(app.run())
    ok(app.switch_page("app_pages/load_curve.py").run())
    assert app.number_input(key="lc_max_rate").value == 64.0
    assert app.number_input(key="lc_num_requests").value == 2 * 64 * 30


def test_load_curve_over_clients(app):
    """Sweeping clients: the sweep's throughput and the most clients meeting the SLO, as the library has them."""
    ok(app.switch_page("app_pages/load_curve.py").run())
    app.radio(key="lc_axis").set_value("Clients (closed loop)")
    ok(app.run())
    app.number_input(key="lc_min_clients").set_value(4)
    app.number_input(key="lc_max_clients").set_value(64)
    app.slider(key="lc_points").set_value(3)
    app.number_input(key="lc_num_requests").set_value(1000)   # 64 clients send them over ~75 s: past the 30 s warm-up
    ok(app.run())
    ok(app.button(key="lc_run").click().run())
    sc = load_scenario(EXAMPLE, {"num_requests": 1000})
    sweep = load_sweep(sc, [4, 34, 64], axis="concurrency")
    limit = max_load_meeting_slo(sweep)
    cards = metrics(app)
    assert cards["Most clients meeting the SLO"] == (f"{limit['max_concurrency']:,}" if limit["max_concurrency"]
                                                     else "–")
    assert app.dataframe[0].value["clients"].tolist() == [4, 34, 64]


def test_agent_loop_example_shows_the_task_ttua(app):
    """The agent-loop example: its rate knob starts sessions, and the task TTUA p99 is a headline number."""
    app.selectbox(key="wi_example").set_value("agent-loop-h100.yaml")
    ok(app.run())
    assert app.number_input(key="wi_rate").label == "Sessions started (per s)"
    app.number_input(key="wi_num_requests").set_value(300)
    ok(app.button(key="wi_run").click().run())
    labels = [m.label for m in app.metric]
    assert any(label.startswith("Task TTUA p99") for label in labels), labels
