"""MoE, MLA and sliding-window models on the measured default profiles (``kernel_table``): each of
Mixtral-8x7B, Qwen3-30B-A3B, gpt-oss-120b and DeepSeek-V3 runs end to end on every profile it fits
without a roofline fallback for its experts or its latent attention; the lookups pass through the
imported AIConfigurator rows and interpolate between them as documented; and every cost model has
the per-kernel latency floor."""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import script_module

from simulator import ScenarioError, load_scenario, simulate
from simulator.cost.analytic import DENSE_LAYER_KERNELS, MLA_LAYER_KERNELS, MOE_LAYER_KERNELS
from simulator.cost.base import COST_MODELS, BatchShape
from simulator.cost.factory import make_cost_model
from simulator.cost.kernel_table import GeneralKernelTableCostModel
from simulator.cost.op_table import monotone_table, read_table
from simulator.scenario.models import MODEL_PRESETS
from simulator.scenario.profiles import load_profile
from simulator.scenario.quantization import resolve_precision

EXAMPLE = "examples/chat-h100.yaml"

#: (model, quantization, tensor-parallel size): each checkpoint as it is served (Mixtral and Qwen3 in
#: bf16, gpt-oss's MXFP4 experts, DeepSeek-V3's block-fp8 weights) on the fewest GPUs of one node.
SERVED = {"mixtral-8x7b": (None, 2), "qwen3-30b-a3b": (None, 1), "gpt-oss-120b": ("mxfp4", 2),
          "deepseek-v3": ("fp8", 8)}
#: Where each fits: DeepSeek-V3's 671 GB of fp8 weights need more than 8 x 80 GB.
FITS = [(p, m) for p in ("h100-sxm", "h200", "b200", "a100-80gb") for m in SERVED
        if not (m == "deepseek-v3" and p in ("h100-sxm", "a100-80gb"))]


def general(profile: str, model: str) -> GeneralKernelTableCostModel:
    quant, tp = SERVED[model]
    p, m = load_profile(profile), MODEL_PRESETS[model]
    cm = make_cost_model(p, m, tp, resolve_precision(m, p, quant))
    assert isinstance(cm, GeneralKernelTableCostModel)
    return cm


@pytest.mark.parametrize("profile, model", FITS)
def test_each_moe_model_runs_on_each_measured_profile_it_fits(profile: str, model: str) -> None:
    quant, tp = SERVED[model]
    overrides = {"model": model, "hardware": profile, "deployment.tensor_parallel_size": tp,
                 "scheduler.max_model_len": 8192, "num_requests": 40, "warmup_s": 0}
    if quant:
        overrides["deployment.quantization"] = quant
    result = simulate(load_scenario(EXAMPLE, overrides))
    assert result.summary["requests"]["completed"] == 40 and result.summary["tpot_s"]["p50"] > 0
    cm = general(profile, model)
    assert not cm.sources["moe"].startswith("roofline")       # measured rows, at most scaled
    if profile != "a100-80gb":         # A100's database has bf16 MoE rows only (MXFP4: scaled, and says so)
        assert cm.sources["moe"].startswith("measured")
    if model == "deepseek-v3":
        assert cm.sources["attn_decode"].startswith("measured (MLA block)")
        assert cm.sources["attn_prefill"].startswith("measured (MLA block)")
        assert "qkv_proj" not in cm.sources and "kv_write" not in cm.sources   # inside the measured block


def test_deepseek_on_a_table_without_mla_rows_is_refused_with_the_way_out() -> None:
    p, m = load_profile("a100-80gb"), MODEL_PRESETS["deepseek-v3"]
    with pytest.raises(ScenarioError) as info:
        make_cost_model(p, m, 8, resolve_precision(m, p, "fp8"))
    assert "no mla_prefill rows" in info.value.message and "a100-80gb-datasheet" in info.value.message


def _moe_rows(profile: str, dtype: str, model: str, tp: int) -> tuple[np.ndarray, np.ndarray]:
    p, m = load_profile(profile), MODEL_PRESETS[model]
    t = monotone_table(read_table(p.table, sha256=p.table_sha256))
    r = t[(t["family"] == "moe") & (t["dtype"] == dtype) & (t["n"] == m.expert_intermediate_size)
          & (t["k"] == m.hidden_size) & (t["num_experts"] == m.num_experts)
          & (t["top_k"] == m.num_experts_per_tok) & (t["world_size"] == tp)].sort_values("tokens")
    return r["tokens"].to_numpy(np.float64), r["median_s"].to_numpy(np.float64)


@pytest.mark.parametrize("profile, model, dtype", [("h100-sxm", "mixtral-8x7b", "bf16"),
                                                   ("h200", "deepseek-v3", "fp8_block"),
                                                   ("b200", "gpt-oss-120b", "mxfp4")])
def test_moe_lookup_passes_through_the_rows_and_interpolates_log_log(profile: str, model: str, dtype: str) -> None:
    cm = general(profile, model)
    tokens, times = _moe_rows(profile, dtype, model, SERVED[model][1])
    assert len(tokens) >= 10
    for x, t in zip(tokens, times, strict=True):
        assert cm._moe(float(x)) == pytest.approx(t, rel=1e-12)
    for i in range(len(tokens) - 1):           # the geometric midpoint: the geometric mean of the neighbours
        mid = math.sqrt(tokens[i] * tokens[i + 1])
        assert cm._moe(mid) == pytest.approx(math.sqrt(times[i] * times[i + 1]), rel=1e-9)
    # Beyond the last measured count the roofline carries the curve on: growing, at most linearly in tokens.
    assert 1.5 < cm._moe(2 * tokens[-1]) / times[-1] <= 2.0 + 1e-9


def test_moe_off_the_grid_is_scaled_from_the_nearest_shape_and_says_so() -> None:
    """TP 16 is not in the compact grid: the TP 8 curve scaled by the ratio of the two MoE rooflines."""
    p, m = load_profile("h200"), MODEL_PRESETS["qwen3-30b-a3b"]
    cm = make_cost_model(p, m, 16, resolve_precision(m, p))
    assert isinstance(cm, GeneralKernelTableCostModel)
    assert cm.sources["moe"].startswith("scaled from 2048x768, 128 experts top-8, TP ")
    tp8 = general("h200", "qwen3-30b-a3b")
    assert cm._moe(4096.0) < tp8._moe(4096.0)      # half the expert width per GPU


def test_mla_decode_and_prefill_pass_through_the_rows() -> None:
    cm = general("h200", "deepseek-v3")
    p = load_profile("h200")
    t = read_table(p.table, sha256=p.table_sha256)
    dec = t[(t["family"] == "mla_decode") & (t["dtype"] == "bf16") & (t["weight_bits"] == 8) & (t["num_heads"] == 16)]
    checked = 0
    for b, g in dec.groupby("batch"):
        g = g.sort_values("context")
        mono = np.maximum.accumulate(g["median_s"].to_numpy(np.float64))
        for c, want in zip(g["context"].to_numpy(), mono, strict=True):
            assert cm.op_time_s("attn_decode", int(b), int(c)) == pytest.approx(want, rel=1e-9)
            checked += 1
    assert checked > 100
    pre = monotone_table(t)
    pre = pre[(pre["family"] == "mla_prefill") & (pre["dtype"] == "bf16") & (pre["weight_bits"] == 8)
              & (pre["num_heads"] == 16)].sort_values("tokens")
    for q, want in zip(pre["tokens"].to_numpy(), pre["median_s"].to_numpy(), strict=True):
        assert cm.op_time_s("attn_prefill", int(q)) == pytest.approx(want, rel=1e-12)
    # fp8 KV reads the FlashMLA rows of its own dtype.
    m = MODEL_PRESETS["deepseek-v3"]
    fp8kv = make_cost_model(p, m, 8, resolve_precision(m, p, "fp8", "fp8"))
    assert "not measured" not in fp8kv.sources["attn_decode"]


@pytest.mark.parametrize("model", ["gpt-oss-120b", "deepseek-v3", "qwen3-30b-a3b"])
def test_decode_runs_equal_single_steps_bit_for_bit(model: str) -> None:
    """The engine's decode runs (``decode_run_times``, and ``decode_step_fn`` on floats) give the very
    floats of single steps, non-decreasing along the context, the sliding window's cap included."""
    cm = general("h200", model)
    for n in (1, 3, 24, 300):
        ctx = np.array([n * 2.0, n * 100.0, n * 127.0, n * 129.0, n * 500.0, n * 9000.0])
        singles = [cm.step_time_s(BatchShape.decode(n, int(c))) for c in ctx]
        assert cm.decode_run_times(n, ctx).tolist() == singles
        step = cm.decode_step_fn(n)
        assert step is not None and [step(float(c)) for c in ctx] == singles
        assert np.all(np.diff(cm.decode_run_times(n, np.arange(n * 2.0, n * 20_000.0, n * 13.0))) >= 0)
    assert cm.decode_affine(8) is None           # measured decode attention is piecewise affine only


def test_sliding_layers_attend_to_the_window_only() -> None:
    """gpt-oss's 18 windowed layers: a long context costs only the 18 full layers more in decode, and
    a 4k prompt's windowed layers cost what a prompt of the window's causal work costs."""
    cm = general("h200", "gpt-oss-120b")
    short, long = (cm.step_time_s(BatchShape.decode(8, 8 * c)) for c in (128, 16_000))
    full_only = 18 * (cm._decode(8, 8 * 16_000.0) - cm._decode(8, 8 * 128.0))
    assert long - short == pytest.approx(float(full_only), rel=1e-9)
    q, w = 4096, 128
    pairs = w * (w + 1) / 2 + (q - w) * w
    window_len = (math.sqrt(8 * pairs + 1) - 1) / 2
    assert cm._prefill_s(q, 0) == pytest.approx(18 * cm._prefill(q, 0) + 18 * cm._prefill(window_len, 0))


# -- the per-kernel latency floor ---------------------------------------------------------------------------


def _with_latency(profile: str, latency: float):  # type: ignore[no-untyped-def]
    p = load_profile(profile)
    return p.model_copy(update={"efficiency": p.efficiency.model_copy(update={"kernel_latency_s": latency})})


@pytest.mark.parametrize("profile, model", [("h100-sxm-datasheet", "llama-3-8b"), ("h100-sxm-datasheet", "deepseek-v3"),
                                            ("h100-sxm-vidur", "llama-3-8b"), ("h100-sxm", "llama-3-8b"),
                                            ("h200", "gpt-oss-120b")])
def test_every_cost_model_has_a_per_kernel_latency_floor(profile: str, model: str) -> None:
    """Raising ``efficiency.kernel_latency_s`` by 1 ms makes a one-token decode step slower by at least
    a millisecond per layer: the roofline counts every kernel, the table models every kernel they
    have no rows for (measured rows carry their own floor)."""
    m = MODEL_PRESETS[model]
    tp = 8 if model == "deepseek-v3" else 1
    shape = BatchShape.decode(1, 100)
    base = make_cost_model(_with_latency(profile, 0.0), m, tp).step_time_s(shape)
    more = make_cost_model(_with_latency(profile, 1e-3), m, tp).step_time_s(shape)
    assert more - base >= m.num_layers * 1e-3 * 0.999
    assert {"constant", "roofline", "table", "kernel_table"} == set(COST_MODELS)     # a new one joins this test


def test_roofline_floor_counts_the_kernels_each_layer_runs() -> None:
    lat = 3e-6
    p = load_profile("h100-sxm-datasheet")
    assert p.efficiency.kernel_latency_s == lat
    dense = make_cost_model(p, MODEL_PRESETS["llama-3-8b"], 1)
    assert dense._lin_floor_s + dense._attn_floor_s + dense._elem_floor_s == pytest.approx(
        lat * (32 * sum(DENSE_LAYER_KERNELS.values()) + 1))
    ds = make_cost_model(p, MODEL_PRESETS["deepseek-v3"], 8)
    per_moe_layer = (MLA_LAYER_KERNELS["gemm"] + MOE_LAYER_KERNELS["gemm"] + MOE_LAYER_KERNELS["shared_gemm"] + 1
                     + MLA_LAYER_KERNELS["elementwise"] + 1)
    per_dense_layer = MLA_LAYER_KERNELS["gemm"] + 2 + 1 + MLA_LAYER_KERNELS["elementwise"] + 1
    assert ds._lin_floor_s + ds._attn_floor_s + ds._elem_floor_s == pytest.approx(
        lat * (58 * per_moe_layer + 3 * per_dense_layer + 1))
    assert per_moe_layer == 22                  # DeepSeek's "~20 kernels a layer"


def test_the_published_moe_table_in_the_docs_is_what_the_script_prints() -> None:
    """docs/hardware-profiles.md's published MoE points are recomputed by benchmarks/published_moe.py
    (every prediction, to the printed digit): the table cannot drift from the model."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    mod = script_module("benchmarks/published_moe.py")
    docs = (root / "docs" / "hardware-profiles.md").read_text()
    for point in mod.POINTS:
        pred = mod.predict(point)
        row = next(line for line in docs.splitlines() if line.startswith(f"| {point['model']} (")
                   and f"| {point['tp']} x {point['gpu']} |" in line and f"| {point['published']:,.2f} " in line)
        assert f"| {pred:,.2f} | {pred / point['published'] - 1:+.0%} |" in row
