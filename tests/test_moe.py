"""Mixture-of-experts, MLA and sliding-window models, expert and pipeline parallelism: sizes against
the published figures, roofline terms against hand computations, and end-to-end runs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator import ScenarioError, load_scenario, resolve, simulate
from simulator.cost.analytic import (
    GeneralRooflineCostModel,
    RooflineCostModel,
    expected_distinct_experts,
    roofline_cost_model,
    window_pairs,
)
from simulator.cost.base import BatchShape
from simulator.cost.factory import make_cost_model
from simulator.engine.kv_cache import plan_kv_cache
from simulator.planner import plan
from simulator.scenario.models import MODEL_PRESETS, ModelSpec
from simulator.scenario.parallel import Parallelism
from simulator.scenario.profiles import available_profiles, load_profile
from simulator.scenario.quantization import resolve_precision

EXAMPLE = "examples/chat-h100.yaml"


def datasheet(gpu: str) -> str:
    """The roofline (datasheet) profile of ``gpu``: ``<gpu>-datasheet`` where the measured kernel
    tables took the plain name, else the plain name."""
    return f"{gpu}-datasheet" if f"{gpu}-datasheet" in available_profiles() else gpu


def roofline(model: str, gpu: str = "h100-sxm", tp: int = 1, **split: int) -> RooflineCostModel:
    par = Parallelism(tp, split.get("pp", 1), split.get("ep", 1))
    return roofline_cost_model(load_profile(datasheet(gpu)), MODEL_PRESETS[model], tp, parallel=par)


# -- sizes ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, total, active", [
    ("mixtral-8x7b", 46.7e9, 12.9e9),      # Mistral AI's announcement
    ("qwen3-30b-a3b", 30.5e9, 3.3e9),      # Qwen3 model card
    ("deepseek-v3", 671e9, 37e9),          # DeepSeek-V3 model card (main model, MTP layer aside)
    ("gpt-oss-120b", 116.8e9, 5.1e9 + 0.58e9),   # OpenAI's card counts active without the 0.58B embedding
])
def test_total_and_active_parameters_match_the_published_counts(name: str, total: float, active: float) -> None:
    m = MODEL_PRESETS[name]
    assert m.num_params == pytest.approx(total, rel=0.01)
    assert m.num_active_params == pytest.approx(active, rel=0.025)


def test_long_context_presets() -> None:
    for name in ("llama-3.1-8b", "llama-3.1-70b", "gpt-oss-120b"):
        assert MODEL_PRESETS[name].max_model_len == 131072, name
    assert MODEL_PRESETS["llama-3.1-8b"].num_params == MODEL_PRESETS["llama-3-8b"].num_params


def test_spec_validation_names_the_fields() -> None:
    base = dict(num_layers=4, hidden_size=256, num_attention_heads=8, num_key_value_heads=8,
                intermediate_size=688, vocab_size=4096)
    with pytest.raises(ValueError, match="num_experts_per_tok = 0"):
        ModelSpec(**base, num_experts=8)
    with pytest.raises(ValueError, match="kv_lora_rank = 64"):
        ModelSpec(**base, kv_lora_rank=64)
    with pytest.raises(ValueError, match="first_k_dense_replace = 4"):
        ModelSpec(**base, num_experts=8, num_experts_per_tok=2, first_k_dense_replace=4)


# -- MoE in the roofline -------------------------------------------------------------------------------
def test_distinct_experts_formula() -> None:
    """One token touches exactly k experts; many touch all; a seeded draw agrees with E(1-(1-k/E)^B)."""
    assert expected_distinct_experts(1, 8, 2) == pytest.approx(2.0)
    assert expected_distinct_experts(10_000, 256, 8) == pytest.approx(256.0)
    rng = np.random.default_rng(0)
    E, k, B = 64, 4, 12
    draws = [len({int(e) for _ in range(B) for e in rng.choice(E, k, replace=False)}) for _ in range(2000)]
    assert np.mean(draws) == pytest.approx(expected_distinct_experts(B, E, k), rel=0.01)


def test_the_dense_roofline_refuses_a_model_that_needs_the_general_terms() -> None:
    """``RooflineCostModel`` itself would drop the expert terms: it refuses, and the ``roofline``
    cost model of a profile (``roofline_cost_model``) builds the general one."""
    p = load_profile(datasheet("h100-sxm"))
    with pytest.raises(TypeError, match="roofline_cost_model"):
        RooflineCostModel(p, MODEL_PRESETS["mixtral-8x7b"], 2)
    assert type(roofline_cost_model(p, MODEL_PRESETS["llama-3-8b"])) is RooflineCostModel
    assert type(make_cost_model(p, MODEL_PRESETS["mixtral-8x7b"], 2)) is GeneralRooflineCostModel


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"])
def test_moe_decode_at_batch_one_reads_the_active_weights_not_the_total(name: str) -> None:
    """Batch 1, short context: the linear time streams the active weights (less the embedding
    table, of which only one row is read) at the profile's streaming bandwidth."""
    m = MODEL_PRESETS[name]
    cm = roofline(name)
    assert isinstance(cm, GeneralRooflineCostModel)
    p = load_profile(datasheet("h100-sxm"))
    floor = cm._lin_floor_s + p.efficiency.kernel_latency_s            # the GEMMs' and the LM head's kernel latency
    streamed = ((cm.breakdown(BatchShape.decode(1, 10)).linear_s - floor)
                * p.memory_bandwidth_bytes_per_s * p.efficiency.memory)
    active = (m.num_active_params - m.embedding_params) * 2
    assert streamed == pytest.approx(active, rel=0.01)
    assert streamed < 0.35 * m.num_params * 2


def test_moe_prefill_computes_only_active_flops_in_grouped_gemms() -> None:
    """A long prefill touches every expert but computes 2 x active weights per token; its grouped GEMMs
    (T x k / E rows each) run below the dense GEMM rate of T rows."""
    cm = roofline("mixtral-8x7b")
    m = MODEL_PRESETS["mixtral-8x7b"]
    T = 8192
    pairs = T * m.num_experts_per_tok
    rows = pairs / expected_distinct_experts(T, m.num_experts, m.num_experts_per_tok)
    expert_flops = 2.0 * m.num_moe_layers * pairs * m.params_per_expert
    assert cm._experts_s(T) == pytest.approx(expert_flops / cm._gemm_rate(rows))
    assert rows == pytest.approx(T * 2 / 8, rel=1e-6)


def test_mixtral_decodes_more_than_twice_as_fast_as_llama_2_70b_on_two_h100() -> None:
    """Both on 2 x H100 (TP 2), a few requests at a time: Mixtral streams 12.9B active weights per
    token, Llama 2 70B all 69B."""
    tpot = {}
    for model in ("mixtral-8x7b", "llama-2-70b"):
        sc = load_scenario(EXAMPLE, {
            "model": model, "hardware": datasheet("h100-sxm"), "deployment.tensor_parallel_size": 2,
            "num_requests": 30, "warmup_s": 0, "workload.arrival.rate_per_s": 0.05,
            "scheduler.max_model_len": 4096, "workload.prompt_tokens": {"dist": "fixed", "value": 1000},
            "workload.output_tokens": {"dist": "fixed", "value": 100}})
        summary = simulate(sc).summary
        assert summary["batch"]["mean_num_seqs"] < 1.5
        tpot[model] = summary["tpot_s"]["p50"]
    assert tpot["llama-2-70b"] > 2 * tpot["mixtral-8x7b"]


# -- MLA -----------------------------------------------------------------------------------------------
def test_mla_kv_bytes_per_token_by_formula() -> None:
    """DeepSeek-V3 caches 512 + 64 latent elements per token per layer, whole on every TP rank;
    a GQA model caches 2 x kv_heads x head_dim, split over the TP ranks."""
    ds, llama = MODEL_PRESETS["deepseek-v3"], MODEL_PRESETS["llama-3-70b"]
    assert ds.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70_272
    assert llama.kv_bytes_per_token() == 2 * 80 * 8 * 128 * 2 == 327_680
    p = load_profile(datasheet("h200"))
    kw = dict(block_size=16, gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256,
              max_model_len=32768)
    fp8 = resolve_precision(ds, p, "fp8", "fp8")
    per_block = {}
    for tp in (8, 16):
        ds_plan = plan_kv_cache(ds, p, tensor_parallel_size=tp, precision=fp8, **kw)
        llama_plan = plan_kv_cache(llama, p, tensor_parallel_size=tp, **kw)
        per_block[tp] = ds_plan.kv_bytes_per_block, llama_plan.kv_bytes_per_block
    assert per_block[8][0] == per_block[16][0] == 16 * 61 * 576 * 1      # fp8 latent, not split by TP
    assert per_block[8][1] == per_block[16][1] == 16 * 2 * 80 * 1 * 128 * 2   # at least one KV head per GPU
    assert plan_kv_cache(llama, p, tensor_parallel_size=4, **kw).kv_bytes_per_block == 2 * per_block[8][1]


def test_mla_decode_attention_reads_the_latent_and_computes_the_absorbed_form() -> None:
    cm = roofline("deepseek-v3", "h200", 8, ep=8)
    L, heads = 61, 128 / 8
    assert cm._kv_bytes_per_token == L * 576 * 2
    assert cm._attn_flops_per_pair == 2.0 * L * heads * (2 * 512 + 64)
    assert cm._prefill_flops_per_pair == 2.0 * L * heads * (128 + 64 + 128)


# -- sliding window ------------------------------------------------------------------------------------
def test_window_pairs_by_hand() -> None:
    assert window_pairs(4, 0, 10) == 10                  # 1 + 2 + 3 + 4
    assert window_pairs(4, 20, 10) == 40                 # every query sees the window
    assert window_pairs(4, 8, 10) == 9 + 10 + 10 + 10    # positions 9..12
    assert window_pairs(100, 0, 10) == 55 + 90 * 10


def test_sliding_window_caps_decode_attention() -> None:
    """Mistral 7B v0.1 slides every layer over 4,096 tokens: a decode step costs the same at 4k and
    30k of context; Llama 3 8B's grows."""
    mistral, llama = roofline("mistral-7b"), roofline("llama-3-8b")
    assert mistral.decode_affine(1) is None
    assert mistral.decode_step_time_s(1, 30_000) == pytest.approx(mistral.decode_step_time_s(1, 4096))
    assert mistral.decode_step_time_s(1, 2000) < mistral.decode_step_time_s(1, 4096)
    assert llama.decode_step_time_s(1, 30_000) > llama.decode_step_time_s(1, 4096)
    runs = mistral.decode_run_times(2, np.array([1000.0, 9000.0, 20_000.0]))
    assert runs[1] == runs[2] == pytest.approx(mistral.decode_step_time_s(2, 9000))


def test_gpt_oss_sets_aside_its_window_and_counts_blocks_for_full_layers() -> None:
    """gpt-oss-120b: 18 of 36 layers slide over 128 tokens. Their KV is set aside per seat
    (ceil(128/16) + 1 blocks); blocks count the 18 full-attention layers only."""
    m, p = MODEL_PRESETS["gpt-oss-120b"], load_profile(datasheet("h100-sxm"))
    plan_ = plan_kv_cache(m, p, tensor_parallel_size=1, block_size=16, gpu_memory_utilization=0.9,
                          max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=32768,
                          precision=resolve(load_scenario(EXAMPLE, {"model": "gpt-oss-120b",
                                                                     "hardware": datasheet("h100-sxm"),
                                                                     "deployment.quantization": "mxfp4",
                                                                     "scheduler.policy": "chunked_prefill"})).precision)
    per_layer_token = 2 * 8 * 64 * 2
    assert plan_.kv_bytes_per_block == 16 * 18 * per_layer_token
    assert plan_.reserved_bytes == 256 * (8 + 1) * 16 * 18 * per_layer_token


# -- expert and pipeline parallelism ---------------------------------------------------------------------
def test_expert_parallel_all_to_all_by_hand() -> None:
    """DeepSeek-V3 on 8 x H200, TP 8 = EP 8: 61 all-reduces after attention, 3 after the dense
    layers' MLPs, and for each of the 58 MoE layers a dispatch and a combine of T x 7168 x 2 bytes
    x 7/8 per GPU over NVLink."""
    cm = roofline("deepseek-v3", "h200", 8, ep=8)
    ic = load_profile(datasheet("h200")).interconnect
    assert ic is not None
    T, h, bw, lat = 512, 7168, ic.bandwidth_bytes_per_s, ic.latency_s
    all_reduce = (61 + 3) * (lat + 2 * 7 / 8 * h * 2 * T / bw)
    all_to_all = 2 * 58 * (lat + h * 2 * 7 / 8 * T / bw)
    assert cm.breakdown(BatchShape.decode(T, T * 1000)).comm_s == pytest.approx(all_reduce + all_to_all)


def test_expert_parallel_imbalance_slows_the_busiest_rank() -> None:
    spec = MODEL_PRESETS["deepseek-v3"].model_copy(update={"moe_load_imbalance": 1.5})
    p = load_profile(datasheet("h200"))
    even = roofline_cost_model(p, MODEL_PRESETS["deepseek-v3"], 8, parallel=Parallelism(8, 1, 8))
    skew = roofline_cost_model(p, spec, 8, parallel=Parallelism(8, 1, 8))
    # 8 tokens touch ~57 of 256 experts, ~7 per rank: the busiest rank reads and computes 1.5 x that.
    assert skew._experts_s(8) == pytest.approx(1.5 * even._experts_s(8), rel=1e-9)
    # 64 tokens touch ~222: 1.5 x the mean would exceed the rank's 32 experts, so it reads all 32.
    assert skew._experts_s(64) < 1.5 * even._experts_s(64)


def test_pipeline_send_recv_by_hand_and_memory_per_stage() -> None:
    """Llama 3 70B on 8 x H100 as TP 4 x PP 2: the TP all-reduces of every layer plus one send of
    the hidden states and residual (2 x T x 8192 x 2 bytes) across the stage boundary."""
    cm = roofline("llama-3-70b", "h100-sxm", 4, pp=2)
    ic = load_profile(datasheet("h100-sxm")).interconnect
    assert ic is not None
    T, h, bw, lat = 300, 8192, ic.bandwidth_bytes_per_s, ic.latency_s
    expected = 160 * (lat + 2 * 3 / 4 * h * 2 * T / bw) + (lat + 2 * T * h * 2 / bw)
    assert cm.breakdown(BatchShape.decode(T, T * 500)).comm_s == pytest.approx(expected)
    # A step traverses both stages: the same compute as TP 4 alone, plus the send.
    tp4 = roofline("llama-3-70b", "h100-sxm", 4)
    shape = BatchShape.prefill(2048)
    assert cm.breakdown(shape).linear_s == pytest.approx(tp4.breakdown(shape).linear_s)
    sc = load_scenario(EXAMPLE, {"model": "llama-3-70b", "hardware": datasheet("h100-sxm"),
                                 "deployment.tensor_parallel_size": 4, "deployment.pipeline_parallel_size": 2})
    system = resolve(sc)
    assert system.kv_plan.weights_bytes == pytest.approx(MODEL_PRESETS["llama-3-70b"].weight_bytes() / 8, rel=0.02)
    assert system.kv_plan.kv_bytes_per_block == 16 * 2 * 40 * 2 * 128 * 2    # 40 layers, 2 KV heads per GPU


def test_multi_node_replicas_need_an_inter_node_link() -> None:
    """TP 8 x PP 2 = 16 GPUs: refused on an 8-GPU HGX profile without inter_node; on MI300X the
    boundary between the two boards runs over its (assumed) 400 Gb/s link; a GB200 NVL72 keeps all
    16 GPUs on NVLink."""
    over = {"model": "llama-3-70b", "deployment.tensor_parallel_size": 8, "deployment.pipeline_parallel_size": 2}
    with pytest.raises(ScenarioError) as info:
        resolve(load_scenario(EXAMPLE, {**over, "hardware": datasheet("h100-sxm")}))
    assert info.value.field == "deployment.pipeline_parallel_size"
    assert "inter_node" in info.value.message and "16 GPUs" in info.value.message
    for gpu, link_bw in (("mi300x-datasheet", 5.0e10), ("gb200-datasheet", 9.0e11)):
        cm = roofline_cost_model(load_profile(gpu), MODEL_PRESETS["llama-3-70b"], 8, parallel=Parallelism(8, 2))
        tp8 = RooflineCostModel(load_profile(gpu), MODEL_PRESETS["llama-3-70b"], 8)
        T = 1000
        send = cm.breakdown(BatchShape.decode(T, 0)).comm_s - tp8.breakdown(BatchShape.decode(T, 0)).comm_s
        lat = 1e-5 if gpu.startswith("mi300x") else 5e-6
        assert send == pytest.approx(lat + 2 * T * 8192 * 2 / link_bw), gpu
        # TP 16: the all-reduces themselves leave an MI300X board, not a GB200 NVL72's NVLink domain.
        tp16 = RooflineCostModel(load_profile(gpu), MODEL_PRESETS["llama-3-70b"], 16)
        assert tp16._ar_bytes_per_token == pytest.approx(2 * 15 / 16 * 8192 * 2 / link_bw), gpu


def test_models_beyond_the_dense_shape_say_what_they_have() -> None:
    assert MODEL_PRESETS["llama-3.1-70b"].beyond_dense == []
    assert MODEL_PRESETS["gpt-oss-120b"].beyond_dense == ["experts", "a sliding window"]


def test_infinity_fabric_mesh_gives_a_small_group_fewer_links() -> None:
    ic = load_profile("mi300x-datasheet").interconnect
    assert ic is not None
    assert ic.group_bandwidth_bytes_per_s(2) == pytest.approx(64e9)
    assert ic.group_bandwidth_bytes_per_s(8) == pytest.approx(448e9)
    tp2 = RooflineCostModel(load_profile("mi300x-datasheet"), MODEL_PRESETS["llama-3-70b"], 2)
    assert tp2._ar_bytes_per_token == pytest.approx(2 * 1 / 2 * 8192 * 2 / 64e9)


def test_expert_parallel_needs_an_moe_model_and_tp_ranks() -> None:
    with pytest.raises(ScenarioError) as info:
        resolve(load_scenario(EXAMPLE, {"deployment.tensor_parallel_size": 2, "deployment.expert_parallel_size": 2}))
    assert info.value.field == "deployment.expert_parallel_size" and "dense model" in info.value.message
    with pytest.raises(ScenarioError) as info:
        load_scenario(EXAMPLE, {"model": "mixtral-8x7b", "deployment.tensor_parallel_size": 4,
                                "deployment.expert_parallel_size": 2})
    assert "tensor_parallel_size" in info.value.message


def test_make_cost_model_passes_the_split_only_when_it_is_more_than_tp() -> None:
    p, m = load_profile(datasheet("h100-sxm")), MODEL_PRESETS["llama-3-8b"]
    assert type(make_cost_model(p, m, 2, parallel=Parallelism(2))) is RooflineCostModel
    assert type(make_cost_model(p, m, 2, parallel=Parallelism(2, 2))) is GeneralRooflineCostModel


# -- end to end ------------------------------------------------------------------------------------------
def _deepseek(**over: object):
    return load_scenario("examples/deepseek-v3-h200.yaml", {"hardware": datasheet("h200"), **over})


def test_deepseek_v3_on_eight_h200_with_expert_parallelism_runs() -> None:
    sc = _deepseek(num_requests=400, warmup_s=0)
    result = simulate(sc)
    s = result.summary
    assert s["num_gpus"] == 8
    assert s["deployment"]["expert_parallel_size"] == 8 and s["deployment"]["quantization"] == "fp8"
    assert s["requests"]["completed"] == 400
    assert 0.005 < s["tpot_s"]["p50"] < 0.1
    plan_ = result.system.kv_plan
    assert plan_.kv_bytes_per_block == 16 * 61 * 576 * 2
    assert plan_.weights_bytes == pytest.approx(671e9 / 8, rel=0.03)     # fp8 experts, bf16 embedding


def test_deepseek_v3_small_plan() -> None:
    """One region, one quarter, two candidates (EP 8 and EP 1): every cell is sized and costed at 8
    GPUs per replica."""
    base = _deepseek(num_requests=200, warmup_s=0).model_dump(mode="python", exclude_none=True)
    base["scheduler"] = {"policy": "chunked_prefill", "max_num_seqs": 128, "max_num_batched_tokens": 8192,
                         "max_model_len": 16384}
    base["workload"]["prompt_tokens"] = {"dist": "fixed", "value": 1000}
    base["workload"]["output_tokens"] = {"dist": "fixed", "value": 100}
    result = plan({
        "name": "ds", "scenario": base,
        "candidates": [{"name": "ep8", "set": {}}, {"name": "tp8", "set": {"deployment.expert_parallel_size": 1}}],
        "slo": {"ttft_p99_ms": 3000, "tpot_p99_ms": 150, "attainment": 0.9},
        "regions": [{"name": "east", "rtt_ms": {"east": 5}}],
        "forecast": [{"quarter": "Q1", "region": "east", "peak_rps": 6}],
        "simulation": {"num_requests": 200, "max_replicas": 4},
    }, workers=1)
    ws = result.worksheet
    assert set(ws["status"]) == {"ok"}
    assert (ws["gpus"] == 8 * ws["replicas"]).all() and (ws["gpus"] >= 8).all()


def test_chunked_prefill_of_a_100k_token_prompt_on_a_128k_model() -> None:
    sc = load_scenario(EXAMPLE, {
        "model": "llama-3.1-8b", "hardware": datasheet("h100-sxm"), "scheduler.policy": "chunked_prefill",
        "num_requests": 3, "warmup_s": 0, "workload.arrival.rate_per_s": 0.05,
        "workload.prompt_tokens": {"dist": "fixed", "value": 100_000},
        "workload.output_tokens": {"dist": "fixed", "value": 20}})
    result = simulate(sc)
    assert result.system.max_model_len == 131072
    assert result.system.kv_plan.num_token_slots >= 131072
    assert result.summary["requests"]["completed"] == 3
    # 100k tokens in chunks of 8,192: at least 13 steps before the first token.
    assert result.summary["ttft_s"]["p50"] > 13 * roofline("llama-3.1-8b").step_time_s(BatchShape.prefill(8192)) * 0.5
    assert math.isfinite(result.summary["tpot_s"]["p50"])


def test_new_datasheet_profiles_carry_the_sheets_dense_peaks_and_links() -> None:
    """B300 (the DGX B300 figures over 8 GPUs) and MI355X (256 CUs x 2.4 GHz x 8,192 FP8 FLOP per clock)."""
    b300, mi355x = load_profile("b300-datasheet"), load_profile("mi355x-datasheet")
    assert b300.source == mi355x.source == "datasheet" and b300.cost_model == "roofline"
    assert b300.peak_flops["fp4"] == pytest.approx(108e15 / 8)
    assert b300.peak_flops["fp8"] == pytest.approx(72e15 / 8 / 2)
    assert "int8" not in b300.peak_flops and b300.peak_flops_for("int8") == b300.peak_flops["bf16"]
    assert mi355x.peak_flops["fp8"] == pytest.approx(256 * 2.4e9 * 8192, rel=1e-4)
    assert mi355x.peak_flops["fp4"] == pytest.approx(2 * mi355x.peak_flops["fp8"], rel=1e-4)
    assert mi355x.memory_bytes == 288 * 2**30
    ic = mi355x.interconnect
    assert ic is not None and ic.group_bandwidth_bytes_per_s(2) == pytest.approx(76.8e9)


def test_nvfp4_weights_are_four_bits_plus_an_fp8_scale_per_16_and_compute_at_the_fp4_peak() -> None:
    m = MODEL_PRESETS["llama-3.1-70b"]
    on_b300 = resolve_precision(m, load_profile("b300-datasheet"), "nvfp4")
    assert on_b300.linear_weight_bytes == 0.5 + 1 / 16 and on_b300.compute_dtype == "fp4"
    on_h100 = resolve_precision(m, load_profile("h100-sxm-datasheet"), "nvfp4")    # no fp4 tensor cores
    assert on_h100.compute_dtype == "bf16"
    mx = resolve_precision(m, load_profile("b300-datasheet"), "mxfp4")
    assert on_b300.weight_bytes(m) > mx.weight_bytes(m)              # 16-element blocks: more scales
    # Decode at batch 1 streams the weights: NVFP4 beats FP8 on the same GPU by about the byte ratio.
    p = load_profile("b300-datasheet")
    fp8 = make_cost_model(p, m, 1, resolve_precision(m, p, "fp8"))
    fp4 = make_cost_model(p, m, 1, resolve_precision(m, p, "nvfp4"))
    shape = BatchShape.decode(1, 1024)
    assert 0.5 < fp4.step_time_s(shape) / fp8.step_time_s(shape) < 0.75


def test_nvfp4_experts_read_the_measured_nvfp4_rows_on_blackwell_and_the_mxfp4_rows_on_hopper() -> None:
    m = MODEL_PRESETS["qwen3-30b-a3b"]
    for profile, rows in (("b200", "(nvfp4)"), ("h100-sxm", "(mxfp4)")):
        p = load_profile(profile)
        cm = make_cost_model(p, m, 1, resolve_precision(m, p, "nvfp4"))
        assert cm.sources["moe"].endswith(rows), (profile, cm.sources["moe"])
