"""The shipped GPU profiles (measured kernel tables, ``cost_model: kernel_table``) and their
importer: rows per precision, the roofline-ratio extrapolations, monotone curves, provenance, and
the AIConfigurator conversion on a small synthetic database laid out like the real one (no torch,
no wheel needed; the byte-for-byte rebuild of a committed table runs where the wheel is given)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from simulator.cost.base import BatchShape
from simulator.cost.factory import make_cost_model
from simulator.cost.kernel_table import KernelTableCostModel
from simulator.cost.op_table import _isotonic, file_sha256, monotone_table, read_table
from simulator.scenario.models import MODEL_PRESETS
from simulator.scenario.profiles import load_profile
from simulator.scenario.quantization import resolve_precision

DEFAULTS = ("a100-80gb", "h100-sxm", "h200", "l40s", "b200")


def cost(profile: str, model: str = "llama-3-8b", tp: int = 1, quantization: str | None = None,
         kv: str = "auto") -> KernelTableCostModel:
    p, m = load_profile(profile), MODEL_PRESETS[model]
    cm = make_cost_model(p, m, tp, resolve_precision(m, p, quantization, kv))
    assert isinstance(cm, KernelTableCostModel)
    return cm


# -- the shipped profiles ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", DEFAULTS)
def test_defaults_are_measured_tables_with_provenance_and_a_datasheet_fallback(name: str) -> None:
    p = load_profile(name)
    assert p.source == "imported" and p.cost_model == "kernel_table"
    for key in ("imported_from", "license", "system", "device_reported", "versions", "kernels", "files",
                "date_measured", "measured", "extrapolated", "compaction", "fit_leave_one_out", "roofline_fit"):
        assert key in p.provenance, key
    assert "Apache-2.0" in p.provenance["license"] and "aiconfigurator-core" in p.provenance["imported_from"]
    fallback = load_profile(f"{name}-datasheet")
    assert fallback.source == "datasheet" and fallback.cost_model == "roofline"
    # Memory, peaks and price come from the datasheet; the efficiencies are fitted, not assumed.
    assert (p.memory_bytes, p.peak_flops, p.price_per_gpu_hour) == (
        fallback.memory_bytes, fallback.peak_flops, fallback.price_per_gpu_hour)
    assert p.efficiency != fallback.efficiency and p.efficiency.kernel_latency_s > 0


@pytest.mark.parametrize("name", DEFAULTS)
def test_step_times_grow_with_batch_prompt_and_context(name: str) -> None:
    """Sanity of every default on Llama-3 8B (TP1) and 70B (TP2): decode and prefill steps never
    get cheaper with more work by more than the measurements' noise (1%: B200's decode attention
    at batch 2 is 0.3 us faster than at batch 1), and a batch-1 decode step streams all weights
    (>= 16 GB at peak bandwidth; 70B: 141 GB over 2 GPUs)."""
    for model, tp in (("llama-3-8b", 1), ("llama-3-70b", 2)):
        cm = cost(name, model, tp)
        decode = [cm.step_time_s(BatchShape.decode(b, b * 1025)) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
        prefill = [cm.step_time_s(BatchShape.prefill(n)) for n in (16, 64, 256, 512, 1024, 2048, 4096, 8192)]
        context = [cm.step_time_s(BatchShape.decode(32, 32 * c)) for c in (128, 512, 2048, 8192, 32768)]
        for series in (decode, prefill, context):
            assert np.all(np.diff(series) >= -0.01 * np.array(series[:-1])), (name, model, series)
        weights = MODEL_PRESETS[model].num_params * 2 / tp
        assert decode[0] > weights / float(load_profile(name).memory_bandwidth_bytes_per_s), (name, model)


def test_precision_picks_its_own_rows_or_says_how_it_scaled() -> None:
    fp8 = cost("h100-sxm", "llama-2-70b", 2, "fp8", "fp8")
    assert fp8.sources["qkv_proj"] == "measured (fp8)"
    assert fp8.sources["gate_up_proj"].endswith("(fp8)")
    assert not fp8.sources["lm_head"].endswith("(fp8)")          # the LM head stays 16-bit, as in vLLM
    bf16 = cost("h100-sxm", "llama-2-70b", 2)
    assert fp8.op_time_s("qkv_proj", 1) < bf16.op_time_s("qkv_proj", 1)   # half the weight bytes to stream
    # The fp8 KV cache has its own decode rows on Hopper: a different curve, not a scaled one.
    assert "not measured" not in fp8.sources["attn_decode"]
    assert fp8.op_time_s("attn_decode", 64, 4096) < bf16.op_time_s("attn_decode", 64, 4096)
    a100 = cost("a100-80gb", "llama-3-8b", 1, "fp8", "fp8")     # no fp8 tables (and no fp8 units)
    assert a100.sources["qkv_proj"].startswith("bf16 rows x roofline ratio (fp8)")
    assert "fp8 KV not measured" in a100.sources["attn_decode"]
    int4 = cost("h100-sxm", "llama-3-8b", 1, "int4")
    assert int4.sources["down_proj"].startswith("bf16 rows x roofline ratio (int4)")


def test_scaled_precisions_follow_the_roofline_ratio_exactly() -> None:
    """A100 fp8 (weight-only, bf16 compute): at m = 1 the GEMM streams half the weight bytes, so the
    bf16 measured time times the roofline ratio; fp8 KV reads the bf16 decode curve at half the
    context sum (the same bytes)."""
    bf16, fp8 = cost("a100-80gb"), cost("a100-80gb", quantization="fp8", kv="fp8")
    n, k = 6144.0, 4096.0
    roof = {wb: max(2 * n * k / 312e12, (n * k * wb + k * 2 + n * 2) / 2.039e12) for wb in (1.0, 2.0)}
    assert fp8.op_time_s("qkv_proj", 1) == pytest.approx(bf16.op_time_s("qkv_proj", 1) * roof[1.0] / roof[2.0])
    for b, s in ((8, 8 * 2048), (64, 64 * 1024)):
        assert float(fp8._decode(b, s)) == pytest.approx(float(bf16._decode(b, s / 2)))


def test_prefill_after_cached_tokens_is_the_no_prefix_prompt_of_equal_work() -> None:
    cm = cost("h100-sxm")
    length = (np.sqrt(8 * (512 * 4096 + 512 * 513 / 2) + 1) - 1) / 2
    assert cm._prefill(512, 4096) == pytest.approx(cm._prefill(int(round(length)), 0), rel=0.01)
    chunks = [cm._prefill(512, c) for c in (0, 256, 1024, 4096, 16384, 65536)]
    assert np.all(np.diff(chunks) > 0)
    # A short chunk after a long context reads the whole KV: never below the bandwidth floor.
    kv = 2 * 8 * 128 * 2 * (100_000 + 8) / (3.35e12 * load_profile("h100-sxm").efficiency.attention_memory)
    assert cm._prefill(8, 100_000) >= kv * (1 - 1e-12)


def test_monotone_table_leaves_monotone_curves_and_passes_through_them() -> None:
    p = load_profile("h100-sxm")
    raw = read_table(p.table, sha256=p.table_sha256)
    mono = monotone_table(raw)
    g = raw[(raw["family"] == "gemm") & (raw["dtype"] == "bf16")]
    rel = np.abs(mono.loc[g.index, "median_s"] / g["median_s"] - 1.0).to_numpy()
    assert np.median(rel[rel > 1e-9]) < 0.05          # the points pooled with a neighbour move ~2%
    cm = cost("h100-sxm")
    qkv = mono[(mono["family"] == "gemm") & (mono["dtype"] == "bf16") & (mono["n"] == 6144) & (mono["k"] == 4096)]
    for r in qkv.itertuples():
        assert cm.op_time_s("qkv_proj", r.tokens) == pytest.approx(r.median_s, rel=1e-9)
    assert np.all(np.diff(qkv.sort_values("tokens")["median_s"].to_numpy()) >= 0)


@pytest.mark.parametrize("name", ["h100-sxm", "l40s", "cpu-amd-epyc-tiny-llama"])
def test_monotone_table_fits_each_curve_on_its_own_in_size_order(name: str) -> None:
    """Every curve (the rows that share every shape column but the sizes: tokens, message bytes) is
    replaced by the isotonic fit of its log times in the order of its size, to the bit, and nothing
    else changes."""
    p = load_profile(name)
    raw = read_table(p.table, sha256=p.table_sha256)
    mono = monotone_table(raw)
    keys = ["op", "family", "dtype", "n", "k", "batch", "context", "num_heads", "num_kv_heads", "head_dim", "width",
            "world_size", "num_experts", "top_k", "weight_bits"]
    sizes = {"gemm": "tokens", "elementwise": "tokens", "sampling": "tokens", "attn_prefill": "tokens",
             "comm": "message_bytes", "moe": "tokens", "mla_prefill": "tokens", "all_to_all": "tokens"}
    expected = raw["median_s"].to_numpy(np.float64).copy()
    curves = 0
    for fam, size in sizes.items():
        rows = raw[raw["family"] == fam]
        for _, curve in rows.groupby(keys, sort=False):
            curve = curve.sort_values(size, kind="stable")
            at = raw.index.get_indexer(curve.index)
            expected[at] = np.exp(_isotonic(np.log(curve["median_s"].to_numpy(np.float64))))
            curves += 1
    assert curves > 10
    assert mono["median_s"].to_numpy().view(np.int64).tolist() == expected.view(np.int64).tolist()
    assert mono.drop(columns="median_s").equals(raw.drop(columns="median_s"))


@given(st.lists(st.floats(-5, 5), min_size=1, max_size=30))
def test_isotonic_is_non_decreasing_keeps_the_mean_and_sorted_input(y: list[float]) -> None:
    a = np.array(y)
    fit = _isotonic(a)
    assert np.all(np.diff(fit) >= -1e-12)
    assert fit.mean() == pytest.approx(a.mean(), abs=1e-9)
    np.testing.assert_allclose(_isotonic(np.sort(a)), np.sort(a))


def test_equal_inputs_share_one_cost_model() -> None:
    assert cost("h200") is cost("h200")
    assert cost("h200") is not cost("h200", tp=2)


# -- the importer on a synthetic database ------------------------------------------------------------------
def _synthetic_database(root: Path) -> Path:
    """A tiny aiconfigurator-core tree for h100_sxm: times that follow a known formula (ms)."""
    pkg = root / "aiconfigurator_core"
    data = pkg / "systems" / "data" / "h100_sxm"
    rows = []
    for dtype, kernel in (("bfloat16", "torch.nn.functional.linear"), ("fp8", "CutlassFP8ScaledMMLinearKernel"),
                          ("fp8_block", "DeepGemmFp8BlockScaledMMKernel")):
        for m in (1, 2, 4, 8, 16, 17, 32, 64, 128, 1024):
            for n, k in ((4096, 4096), (8192, 4096), (512, 4096)):
                rows.append(dict(framework="VLLM", version="0.24.0", device="NVIDIA H100 80GB HBM3", op_name="gemm",
                                 kernel_source=kernel, gemm_dtype=dtype, m=m, n=n, k=k,
                                 latency=0.01 + 1e-12 * m * n * k))
    d = data / "gemm" / "vllm" / "0.24.0"
    d.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(d / "gemm_perf.parquet")
    (d / "collection_meta.yaml").write_text("schema_version: 1\nprovenance: legacy\n")
    a = data / "attention" / "vllm" / "0.24.0"
    a.mkdir(parents=True)
    common = dict(framework="VLLM", version="0.24.0", device="NVIDIA H100 80GB HBM3", beam_width=1,
                  attn_dtype="bfloat16", num_heads=32, num_key_value_heads=8, head_dim=128, window_size=0)
    ctx = [dict(common, op_name="context_attention", kernel_source="vllm_flash_attn_fa3", batch_size=b, isl=s,
                kv_cache_dtype=kv, step=0, latency=0.01 + 1e-8 * s * s * b)
           for b in (1, 4) for s in (16, 128, 1024, 4096) for kv in ("bfloat16", "fp8")]
    pd.DataFrame(ctx).to_parquet(a / "context_attention_perf.parquet")
    gen = [dict(common, op_name="generation_attention", kernel_source="vllm_flash_attn_fa3", batch_size=b, isl=1,
                kv_cache_dtype=kv, step=s, latency=0.01 + (5e-8 if kv == "bfloat16" else 2.5e-8) * b * (s + 1))
           for b in (1, 8, 64) for s in (15, 255, 4095) for kv in ("bfloat16", "fp8")]
    pd.DataFrame(gen).to_parquet(a / "generation_attention_perf.parquet")
    c = data / "comm" / "vllm" / "0.24.0"
    c.mkdir(parents=True)
    pd.DataFrame([dict(framework="vLLM", version="0.24.0", device="NVIDIA H100 80GB HBM3", op_name="all_reduce",
                       kernel_source=f"vLLM_custom_{mode}", allreduce_dtype="bfloat16", num_gpus=g, message_size=s,
                       latency=0.004 + s / 1e9, backend=f"vllm_{mode}")
                  for g in (2, 4, 8) for s in (1024, 1 << 20, 1 << 24) for mode in ("graph", "eager")]
                 ).to_parquet(c / "custom_allreduce_perf.parquet")
    (pkg / "systems" / "h100_sxm.yaml").write_text("gpu:\n  mem_empirical_constant_latency: 0.000004\n")
    info = root / "aiconfigurator_core-0.12.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: aiconfigurator-core\nVersion: 0.12.0\n")
    return root


def test_aiconfigurator_rows_convert_units_and_pick_the_engine_kernels(tmp_path: Path) -> None:
    from calibrate.importers import AicDatabase, aiconfigurator_tables

    db = AicDatabase(_synthetic_database(tmp_path))
    assert db.version == "0.12.0"
    t = aiconfigurator_tables(db, "h100_sxm")
    df = pd.DataFrame(t.rows)
    assert t.kernels["gemm fp8"] == "CutlassFP8ScaledMMLinearKernel"   # per-tensor W8A8, not the block kernels
    assert set(df.loc[df["family"] == "gemm", "dtype"]) == {"bf16", "fp8"}
    g = df[(df["family"] == "gemm") & (df["dtype"] == "bf16") & (df["tokens"] == 64) & (df["n"] == 4096)].iloc[0]
    assert g["median_s"] == pytest.approx((0.01 + 1e-12 * 64 * 4096 * 4096) / 1e3)     # ms -> s
    pre = df[df["family"] == "attn_prefill"]
    assert set(pre["batch"]) == {1} and set(pre["context"]) == {0}
    dec = df[(df["family"] == "attn_decode") & (df["dtype"] == "fp8")]
    assert set(dec["context"]) == {16, 256, 4096}                        # step + 1 tokens cached
    ar = df[df["family"] == "comm"]
    assert t.kernels["all_reduce"] == "vLLM_custom_graph"                 # CUDA-graph replay, as vLLM serves
    row = ar[(ar["world_size"] == 2) & (ar["tokens"] == 1 << 20)].iloc[0]
    assert row["message_bytes"] == 2 << 20                               # elements of a 16-bit tensor -> bytes
    compact = pd.DataFrame(aiconfigurator_tables(db, "h100_sxm", compact=True).rows)
    assert not (compact["n"] == 512).any() and not (compact["tokens"] == 17).any()


def test_default_import_writes_a_loadable_kernel_table_profile(tmp_path: Path) -> None:
    from calibrate.importers import import_default

    path = import_default("h100_sxm", tmp_path / "out", source=_synthetic_database(tmp_path / "db"),
                          command="test")
    p = load_profile(str(path.parent))
    assert p.cost_model == "kernel_table" and p.name == "h100-sxm" and p.source == "imported"
    assert p.efficiency.kernel_latency_s == pytest.approx(4e-6)          # the system YAML's constant
    assert "not recorded" in p.provenance["date_measured"]              # legacy collection metadata
    assert p.provenance["compaction"]["bf16"]["thinned_m"]["rows"] == 2      # m = 17 of the two kept shapes
    assert p.provenance["dropped_spikes"]["rows"] == {}
    cm = make_cost_model(p, MODEL_PRESETS["llama-3-8b"], 2)
    assert cm.step_time_s(BatchShape.prefill(1024)) > cm.step_time_s(BatchShape.decode(1, 100)) > 0
    text = (path.parent / "profile.yaml").read_text()
    assert text.startswith("# Default profile of the NVIDIA H100") and yaml.safe_load(text)["table"] == "ops.csv.gz"


def test_an_aiconfigurator_import_is_a_kernel_table_profile_that_models_fp8(tmp_path: Path) -> None:
    from calibrate.importers import import_aiconfigurator

    path = import_aiconfigurator("h100_sxm", tmp_path / "aic", source=_synthetic_database(tmp_path / "db"))
    p = load_profile(str(path.parent))
    assert p.cost_model == "kernel_table" and p.name == "h100-sxm-aiconfigurator"
    m = MODEL_PRESETS["llama-3-8b"]
    cm = make_cost_model(p, m, 1, resolve_precision(m, p, "fp8", "fp8"))
    assert cm.sources["qkv_proj"].endswith("(fp8)") and "not measured" not in cm.sources["attn_decode"]


AIC_WHEEL = os.environ.get("AIC_WHEEL")


@pytest.mark.skipif(not AIC_WHEEL, reason="set AIC_WHEEL to the aiconfigurator-core 0.12.0 wheel "
                    "(pip download aiconfigurator-core==0.12.0 --no-deps) to rebuild the shipped tables")
@pytest.mark.parametrize("name, system", [("h100-sxm", "h100_sxm"), ("l40s", "l40s")])
def test_committed_defaults_are_reproduced_by_the_importer(tmp_path: Path, name: str, system: str) -> None:
    from calibrate.importers import import_default

    vidur = Path(__file__).resolve().parents[2] / "shared" / "data" / "llm_traces" / "vidur_profiling"
    path = import_default(system, tmp_path / name, source=AIC_WHEEL, vidur_dir=vidur if vidur.is_dir() else None)
    assert file_sha256(path.parent / "ops.csv.gz") == load_profile(name).table_sha256


@pytest.mark.parametrize("profile, kv", [("h100-sxm", "auto"), ("a100-80gb", "fp8"), ("l40s", "fp8")])
def test_decode_runs_equal_single_steps_bit_for_bit(profile: str, kv: str) -> None:
    """The engine's decode fast-forward sums ``decode_run_times``: each entry is the very float
    ``step_time_s`` gives for that step (the piecewise table's scalar path repeats np.interp's
    operations), never decreasing along the context, and the flattened table is the decode
    curves' own function."""
    from simulator.cost.op_table import DecodeCurves

    cm = cost(profile, "llama-3-8b", 1, "fp8" if kv == "fp8" else None, kv)
    for n in (1, 3, 8, 24, 300, 1500, 3000):
        ctx = np.array([n * 2.0, n * 3.0, n * 16.0, n * 500.0, n * 1700.0, n * 9000.0, n * 200_000.0])
        singles = [cm.step_time_s(BatchShape.decode(n, int(c))) for c in ctx]
        assert cm.decode_run_times(n, ctx).tolist() == singles
        dense = cm.decode_run_times(n, np.arange(n * 2.0, n * 40_000.0, n * 7.0))
        assert np.all(np.diff(dense) >= 0)
    p = load_profile(profile)
    rows = read_table(p.table)
    rows = rows[(rows["family"] == "attn_decode") & (rows["dtype"] == "bf16") & (rows["num_heads"] == 32)
                & (rows["num_kv_heads"] == 8) & (rows["head_dim"] == 128)]
    curves = DecodeCurves.fit(rows)
    from simulator.cost.piecewise_decode import PiecewiseDecode

    flat = PiecewiseDecode(curves, 1.0)
    s = np.geomspace(3.0, 5e6, 400)
    for n in (1, 5, 64, 100, 2048, 4000):
        np.testing.assert_allclose(flat(n, s * n), curves(n, s * n), rtol=1e-12)
