"""The ``table`` cost model and per-op tables (no torch): interpolation through measured points,
closed-form checks of the interpolants and the leave-one-out report, the engine's decode
fast-forward contract, imported Vidur data reproduced, and clear errors for broken profiles."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from simulator import ScenarioError, simulate
from simulator.cost.base import BatchShape
from simulator.cost.factory import make_cost_model
from simulator.cost.op_table import TABLE_COLUMNS, LogCurve, file_sha256, fit_summary, leave_one_out
from simulator.cost.table import TableCostModel
from simulator.report.profile_report import family_report, op_report
from simulator.scenario.models import MODEL_PRESETS
from simulator.scenario.profiles import load_profile
from tests.conftest import make_scenario

REPO = Path(__file__).resolve().parents[1]
CPU = "cpu-amd-epyc-tiny-llama"
DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def cpu_model() -> TableCostModel:
    return make_cost_model(load_profile(CPU), MODEL_PRESETS["tiny-llama"], 1)


def test_measured_profile_is_labelled_and_uses_the_table(cpu_model: TableCostModel) -> None:
    p = load_profile(CPU)
    assert p.source == "measured" and p.cost_model == "table"
    for key in ("date", "torch_version", "cpu_model", "torch_threads", "dtype", "git_revision", "noise",
                "fit_leave_one_out", "timing"):
        assert key in p.provenance, key
    assert set(cpu_model.sources.values()) == {"measured"}      # tiny-llama is the calibrated model


def test_interpolation_passes_through_every_measured_point(cpu_model: TableCostModel) -> None:
    """At a measured shape the model returns the measured median (interpolation, not a fit)."""
    table = pd.read_csv(REPO / "hwprofiles" / CPU / "ops.csv")
    for op in ("qkv_proj", "gate_up_proj", "down_proj", "rmsnorm", "kv_write"):
        rows = table[table["op"] == op]
        for r in rows.itertuples():
            assert cpu_model.op_time_s(op, r.tokens) == pytest.approx(r.median_s, rel=1e-9), (op, r.tokens)
    pre = table[table["op"] == "attn_prefill"]
    for r in pre.itertuples():
        assert cpu_model.op_time_s("attn_prefill", r.tokens, r.context) == pytest.approx(r.median_s, rel=1e-9)


def test_log_curve_is_exact_on_power_laws_and_extrapolates_by_the_roofline() -> None:
    """On t = c x^p the log-log interpolant is exact between points; beyond them it follows the
    roofline ratio, so a linear roofline continues a linear curve exactly."""
    x = np.array([1.0, 4.0, 16.0, 64.0])
    curve = LogCurve(x, 3e-6 * x**0.7, lambda v: np.asarray(v, float) ** 0.7)
    for v in (2.0, 10.0, 50.0, 256.0, 0.5, 1.0, 64.0):
        assert float(curve(v)) == pytest.approx(3e-6 * v**0.7, rel=1e-12)
        assert curve.scalar(v) == pytest.approx(float(curve(v)), rel=1e-12)     # the engine's fast path


def test_leave_one_out_is_zero_on_exact_models() -> None:
    """Power-law GEMM times, elementwise times linear in tokens and affine decode: every held-out
    point is predicted exactly, so the report measures the data, not the method."""
    rows = []
    base = {c: 0 for c in TABLE_COLUMNS}
    for m in (1, 2, 4, 8, 16, 32):
        rows.append({**base, "op": "rmsnorm", "family": "elementwise", "dtype": "fp32", "tokens": m, "width": 64,
                     "median_s": 1e-6 * m})
    for b in (1, 4):
        for c in (16, 64, 256, 1024):
            rows.append({**base, "op": "attn_decode", "family": "attn_decode", "dtype": "fp32", "tokens": b,
                         "batch": b, "context": c, "num_heads": 8, "num_kv_heads": 4, "head_dim": 32,
                         "median_s": 2e-5 * b + 3e-9 * b * c})
    loo = leave_one_out(pd.DataFrame(rows))
    assert np.nanmax(np.abs(loo["rel_error"])) < 1e-9
    summary = fit_summary(loo)
    assert set(summary["family"]) == {"elementwise", "attn_decode"}


def test_decode_runs_equal_single_steps_bit_for_bit(cpu_model: TableCostModel) -> None:
    """The engine's decode fast-forward sums ``decode_run_times``; each entry must be the very
    float ``step_time_s`` gives for that step, and never decrease as the context grows."""
    for n in (1, 3, 8, 24, 300):
        ctx = np.array([1.0, n * 3.0, n * 10.0, n * 500.0, n * 1700.0, n * 9000.0])
        singles = [cpu_model.step_time_s(BatchShape.decode(n, int(c))) for c in ctx]
        runs = cpu_model.decode_run_times(n, ctx)
        assert runs.tolist() == singles
        assert cpu_model.decode_step_time_s(n, int(ctx[3])) == singles[3]
        dense = cpu_model.decode_run_times(n, np.arange(1.0, n * 2100.0, max(1.0, n / 3)))
        assert np.all(np.diff(dense) >= 0)


def test_closed_form_decode_only_where_decode_is_exactly_affine(cpu_model: TableCostModel) -> None:
    """Measured decode attention is piecewise: no closed form. Vidur's tables have no attention rows,
    so decode attention is the roofline and the engine may plan runs in closed form."""
    assert cpu_model.decode_affine(8) is None
    vidur = make_cost_model(load_profile("h100-sxm-vidur"), MODEL_PRESETS["llama-3-8b"], 1)
    for n in (1, 7, 64):
        ctx = np.array([n * 10.0, n * 700.0, n * 4000.0])
        a, b = vidur.decode_affine(n)
        singles = [vidur.step_time_s(BatchShape.decode(n, int(c))) for c in ctx]
        np.testing.assert_allclose(a + b * ctx, singles, rtol=1e-12)
        np.testing.assert_allclose(vidur.decode_run_times(n, ctx), singles, rtol=1e-12)


def test_decode_curves_interpolate_measured_points_batches_and_edges() -> None:
    """Through every measured point; piecewise linear in the context sum; linear in the batch at
    the same context sum; noise that makes a longer context cheaper is flattened; below the grid
    the first segment continues but never under proportional; above it the last segment does."""
    from simulator.cost.op_table import DecodeCurves

    rows = pd.DataFrame([{"batch": b, "context": c, "median_s": t} for b, pts in
                         {2: [(16, 10.0), (64, 20.0), (256, 80.0)],
                          4: [(16, 1.0), (64, 10.0), (256, 40.0)],
                          8: [(16, 30.0), (64, 25.0), (256, 200.0)]}.items() for c, t in pts])
    cv = DecodeCurves.fit(rows)
    assert float(cv(2, 2 * 64)) == 20.0 and float(cv(8, 8 * 256)) == 200.0
    assert float(cv(2, 2 * 40)) == pytest.approx(15.0)             # halfway between 16 and 64
    assert float(cv(8, 8 * 40)) == pytest.approx(30.0)             # 25 < 30 at 64 is flattened
    s = 2 * 256.0                                                  # batch 3 and 5 at the same context sum
    assert float(cv(3, s)) == pytest.approx(0.5 * 80.0 + 0.5 * 20.0)
    assert float(cv(5, s)) == pytest.approx(0.75 * 20.0 + 0.25 * float(cv(8, s)))
    assert float(cv(2, 2 * 4)) == pytest.approx(10.0 - (10.0 / 96) * 24)   # first segment continued
    assert float(cv(8, 8 * 4)) == 30.0                              # a flat first segment stays flat
    assert float(cv(4, 4 * 4)) == pytest.approx(1.0 * 4 / 16)       # steep: proportional floor
    assert float(cv(2, 2 * 512)) == pytest.approx(80.0 + (60.0 / 384) * 512)
    assert float(cv(16, 16 * 64)) == pytest.approx(2 * 30.0)         # beyond the batches: proportional


def test_steps_grow_with_batch_context_and_prompt(cpu_model: TableCostModel) -> None:
    by_ctx = cpu_model.decode_run_times(16, np.array([1e3, 1e4, 1e5]))
    assert np.all(np.diff(by_ctx) > 0)
    by_prompt = [cpu_model.step_time_s(BatchShape.prefill(n)) for n in (16, 128, 1024, 8192)]
    assert by_prompt == sorted(by_prompt)
    with_ctx = [cpu_model.step_time_s(BatchShape.prefill(256, c)) for c in (0, 512, 1792)]
    assert with_ctx == sorted(with_ctx)
    parts = cpu_model.breakdown(BatchShape([100], [0], 4, 400, 5))
    for args in (([100], [0], 4, 400, 5), ([], [], 7, 900, 7), ([300, 20], [0, 512], 0, 0, 1), ([], [], 0, 0, 0)):
        assert cpu_model.step_time_s(BatchShape(*args)) == cpu_model.breakdown(BatchShape(*args)).total_s
    assert parts.linear_s > 0 and parts.attention_s > 0 and parts.elementwise_s > 0 and parts.comm_s == 0
    assert parts.overhead_s == pytest.approx(0.0015 + 5 * 1e-5)


def test_simulating_with_the_measured_profile_fast_forward_changes_nothing() -> None:
    sc = make_scenario(hardware=CPU, num_requests=150, **{"workload.arrival.rate_per_s": 20.0,
                       "workload.output_tokens": {"dist": "uniform", "min": 1, "max": 60}})
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    assert fast.summary["requests"]["completed"] == 150
    assert fast.system.profile.source == "measured"
    cols = ["first_token_time", "finish_time"]
    np.testing.assert_allclose(fast.requests[cols].to_numpy(), slow.requests[cols].to_numpy(), rtol=0, atol=1e-9)
    # A 32-token prompt on tiny-llama at 1 thread: TTFT well under a second, above the overhead.
    assert 0.0015 < fast.summary["ttft_s"]["p50"] < 1.0


def test_imported_vidur_profile_reproduces_vidur_measurements() -> None:
    """llama-2-7b on the imported H100 table: each linear op at each of Vidur's token counts is
    Vidur's measured median (tests/data holds Vidur's own CSV; where Vidur measured a token count
    twice, the median of the two)."""
    cm = make_cost_model(load_profile("h100-sxm-vidur"), MODEL_PRESETS["llama-2-7b"], 1)
    assert load_profile("h100-sxm-vidur").source == "imported"
    d = pd.read_csv(DATA / "vidur_h100_llama2_7b_mlp.csv")
    d = d[d["num_tensor_parallel_workers"] == 1]
    ours = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
            "mlp_down_proj": "down_proj"}
    for vop, op in ours.items():
        assert cm.sources[op] == "measured"
        measured = d.groupby("num_tokens")[f"time_stats.{vop}.median"].median() / 1e3
        pred = np.array([cm.op_time_s(op, int(t)) for t in measured.index])
        np.testing.assert_allclose(pred, measured.to_numpy(), rtol=1e-5)
    # Attention is not in Vidur's shared tables: the datasheet roofline stands in, and says so.
    assert cm.sources["attn_prefill"] == cm.sources["attn_decode"] == "roofline"


def test_other_model_or_tp_is_scaled_and_labelled() -> None:
    cm = make_cost_model(load_profile("h100-sxm-vidur"), MODEL_PRESETS["llama-3-8b"], 2)
    assert cm.sources["qkv_proj"].startswith(("measured", "scaled from"))
    assert cm.sources["all_reduce"] == "measured"                      # Vidur's DGX NCCL table
    assert cm.breakdown(BatchShape.prefill(2048)).comm_s > 0


def test_profile_report_lists_every_op_with_error_and_efficiency() -> None:
    rep = op_report(load_profile(CPU))
    assert {"qkv_proj", "attn_prefill", "attn_decode", "sampling", "kv_write"} <= set(rep["op"])
    assert (rep["efficiency"] > 0).all() and (rep["efficiency"] <= 1.0 + 1e-9).all()
    profile = load_profile(CPU)
    fam = family_report(profile).set_index("family")
    assert set(fam.index) == {"gemm", "attn_prefill", "attn_decode", "elementwise", "sampling"}
    # The report, recomputed from ops.csv now, reproduces the leave-one-out figures the calibration
    # run wrote into the profile's provenance when it measured them (rounded to 4 digits there).
    for family, recorded in profile.provenance["fit_leave_one_out"].items():
        assert fam.loc[family, "points"] == recorded["points"], family
        assert fam.loc[family, "median_abs_error"] == pytest.approx(recorded["median_abs_error"], abs=1e-4), family
        assert fam.loc[family, "p90_abs_error"] == pytest.approx(recorded["p90_abs_error"], abs=1e-4), family
        assert bool(fam.loc[family, "meets_target"]) == (
            recorded["median_abs_error"] <= 0.05 and recorded["p90_abs_error"] <= 0.15), family


# -- broken profiles ---------------------------------------------------------------------------------------
@pytest.fixture
def cpu_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "prof"
    shutil.copytree(REPO / "hwprofiles" / CPU, dst)
    return dst


def _cost(path: Path, model: str = "tiny-llama", tp: int = 1) -> TableCostModel:
    return make_cost_model(load_profile(str(path)), MODEL_PRESETS[model], tp)


def test_truncated_table_is_caught_by_its_checksum(cpu_copy: Path) -> None:
    ops = cpu_copy / "ops.csv"
    ops.write_text("\n".join(ops.read_text().splitlines()[:-5]) + "\n")
    with pytest.raises(ScenarioError, match=r"sha256.*re-run `llmplan calibrate`"):
        _cost(cpu_copy)


def test_schema_mismatch_and_missing_columns_are_named(cpu_copy: Path) -> None:
    prof = yaml.safe_load((cpu_copy / "profile.yaml").read_text())
    prof["table_schema"] = 2
    (cpu_copy / "profile.yaml").write_text(yaml.safe_dump(prof))
    with pytest.raises(ScenarioError, match="table_schema = 2: this llmplan reads table schema 1"):
        _cost(cpu_copy)
    prof["table_schema"] = 1
    d = pd.read_csv(cpu_copy / "ops.csv").drop(columns=["median_s"])
    d.to_csv(cpu_copy / "ops.csv", index=False)
    prof["table_sha256"] = file_sha256(cpu_copy / "ops.csv")
    (cpu_copy / "profile.yaml").write_text(yaml.safe_dump(prof))
    with pytest.raises(ScenarioError, match="lacks columns median_s"):
        _cost(cpu_copy)


def test_corrupt_yaml_missing_table_and_bad_times(cpu_copy: Path) -> None:
    (cpu_copy / "ops.csv").rename(cpu_copy / "gone.csv")
    with pytest.raises(ScenarioError, match="per-op table not found"):
        _cost(cpu_copy)
    (cpu_copy / "gone.csv").rename(cpu_copy / "ops.csv")
    d = pd.read_csv(cpu_copy / "ops.csv")
    d.loc[3, "median_s"] = -1.0
    d.to_csv(cpu_copy / "ops.csv", index=False)
    prof = yaml.safe_load((cpu_copy / "profile.yaml").read_text())
    prof["table_sha256"] = file_sha256(cpu_copy / "ops.csv")
    (cpu_copy / "profile.yaml").write_text(yaml.safe_dump(prof))
    with pytest.raises(ScenarioError, match=r"row 5.*median_s must be a positive number"):
        _cost(cpu_copy)
    (cpu_copy / "profile.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_profile(str(cpu_copy))
    (cpu_copy / "profile.yaml").write_text("source: measured\ncost_model: table\n")
    with pytest.raises(ScenarioError, match="cost_model 'table' needs table, memory_bytes"):
        load_profile(str(cpu_copy))


def test_wrong_dtype_and_tp_without_collectives_are_refused() -> None:
    with pytest.raises(ScenarioError, match=r"no rows for the model's dtype 'bf16'.*--dtype bf16"):
        make_cost_model(load_profile(CPU), MODEL_PRESETS["llama-3-8b"], 1)
    with pytest.raises(ScenarioError, match="tensor_parallel_size=2 needs measured all_reduce rows"):
        make_cost_model(load_profile(CPU), MODEL_PRESETS["tiny-llama"], 2)


def test_a_partial_calibration_folder_is_not_loaded_as_a_profile(tmp_path: Path) -> None:
    (tmp_path / "ops.partial.csv").write_text(",".join(TABLE_COLUMNS) + ",key\n")
    with pytest.raises(ScenarioError, match=r"interrupted calibration.*resumes"):
        load_profile(str(tmp_path))


VIDUR_DATA = REPO.parent / "shared" / "data" / "llm_traces" / "vidur_profiling"


@pytest.mark.skipif(not VIDUR_DATA.is_dir(), reason="needs the raw Vidur tables in ../shared/data/llm_traces/"
                    "vidur_profiling (outside the repository; present in CI and on the dev machine, absent in a "
                    "stand-alone clone)")
def test_committed_vidur_profile_is_reproduced_by_the_importer(tmp_path: Path) -> None:
    """`llmplan import-profile vidur --gpu h100` rebuilds the committed table byte for byte."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "import-profile", "vidur", "--gpu", "h100",
                           "--data", str(VIDUR_DATA), "--out", str(tmp_path / "v")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert file_sha256(tmp_path / "v" / "ops.csv") == load_profile("h100-sxm-vidur").table_sha256
    prof = load_profile(str(tmp_path / "v"))
    assert prof.source == "imported" and "MIT" in prof.provenance["license"]
    bad = subprocess.run([sys.executable, "-m", "simulator.cli", "import-profile", "vidur", "--gpu", "v100",
                          "--out", str(tmp_path / "w")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "Vidur profiles are for h100, a100" in bad.stderr
