"""Expert parallelism on the measured default profiles (``kernel_table``) and attention data
parallelism with expert parallelism (``deployment.data_parallel_size``, "DEP"): the MoE rows scaled
to one expert-parallel GPU, the all-to-all priced from the link, the DP ranks as engine loops of one
replica, the GPU count, and the refusals."""
from __future__ import annotations

import numpy as np
import pytest

from simulator import ScenarioError, load_scenario, resolve, simulate
from simulator.cost.analytic import roofline_cost_model
from simulator.cost.base import BatchShape
from simulator.cost.factory import make_cost_model
from simulator.cost.kernel_table import GeneralKernelTableCostModel, _ep_moe_roof, _moe_roof
from simulator.engine.kv_cache import plan_kv_cache
from simulator.run.topology import cost_model
from simulator.scenario.deployment import DeploymentConfig
from simulator.scenario.models import MODEL_PRESETS
from simulator.scenario.parallel import Parallelism, collective_link
from simulator.scenario.profiles import load_profile
from simulator.scenario.quantization import resolve_precision

EXAMPLE = "examples/chat-h100.yaml"
DEP = "examples/deepseek-v3-dep8-h200.yaml"
SERVED = {"mixtral-8x7b": None, "qwen3-30b-a3b": None, "gpt-oss-120b": "mxfp4", "deepseek-v3": "fp8"}


def kernel_table(profile: str, model: str, tp: int, dp: int = 1, ep: int | None = None) -> GeneralKernelTableCostModel:
    p, m = load_profile(profile), MODEL_PRESETS[model]
    par = Parallelism(tp, 1, tp * dp if ep is None else ep, dp)
    cm = make_cost_model(p, m, tp, resolve_precision(m, p, SERVED[model]), par)
    assert isinstance(cm, GeneralKernelTableCostModel)
    return cm


# -- the cost model ----------------------------------------------------------------------------------
@pytest.mark.parametrize("profile", ["h100-sxm", "h200", "b200"])
@pytest.mark.parametrize("model", ["mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b"])
def test_expert_parallel_reads_the_measured_moe_rows_without_a_fallback(profile: str, model: str) -> None:
    cm = kernel_table(profile, model, 4)
    assert cm.sources["moe"].startswith("measured, one of EP 4 GPUs")
    assert "not measured" in cm.sources["all_to_all"]
    assert 0 < cm.decode_step_time_s(32, 32 * 1000) < 1.0


def test_the_expert_parallel_curve_is_the_whole_width_rows_times_the_roofline_ratio() -> None:
    """Qwen3-30B-A3B on h200 at EP 4: the TP-1 rows of its own shape (measured), scaled per token
    count by the busiest GPU's MoE roofline (32 of 128 experts) over the whole layer's."""
    cm, one = kernel_table("h200", "qwen3-30b-a3b", 4), kernel_table("h200", "qwen3-30b-a3b", 1, ep=1)
    m = MODEL_PRESETS["qwen3-30b-a3b"]
    shape = [float(m.expert_intermediate_size), float(m.hidden_size), 128.0, 8.0, 1.0]
    floor = 6 * load_profile("h200").efficiency.kernel_latency_s        # the fused MoE's kernels
    for t in (1, 16, 256, 4096):
        ratio = float(_ep_moe_roof(shape, cm.peak, cm.bw, 2.0, 4, 0.25)(t) / _moe_roof(shape, cm.peak, cm.bw, 2.0)(t))
        assert cm._moe(t) == pytest.approx(max(one._moe(t) * ratio, floor), rel=1e-12)
        assert cm._moe(t) < one._moe(t)
    assert cm._moe(1) == pytest.approx(floor)           # one token: a few experts' weights, six launches


def test_ep_roof_at_one_rank_is_the_tp_one_roof() -> None:
    shape = [768.0, 2048.0, 128.0, 8.0, 1.0]
    t = np.array([1.0, 64.0, 8192.0])
    np.testing.assert_allclose(_ep_moe_roof(shape, 1e15, 3e12, 2.0, 1, 1.0)(t), _moe_roof(shape, 1e15, 3e12, 2.0)(t))


def test_kernel_table_all_to_all_by_hand() -> None:
    """DeepSeek-V3 TP 8 = EP 8 on h200: 2 x 61 - 58 measured all-reduces and, for each of the 58 MoE
    layers, a dispatch and a combine of T x 7168 x 2 bytes x 7/8 per GPU at NVLink's group bandwidth."""
    ep, tp1 = kernel_table("h200", "deepseek-v3", 8), kernel_table("h200", "deepseek-v3", 8, ep=1)
    link = collective_link(load_profile("h200"), 8)
    assert link is not None
    T = 256
    nbytes = T * 7168 * 2
    a2a = link.latency_s + nbytes * 7 / 8 / link.bandwidth_bytes_per_s
    assert ep._comm_s(T) == pytest.approx((2 * 61 - 58) * tp1._comm(nbytes) + 2 * 58 * a2a)
    assert tp1._comm_s(T) == pytest.approx(2 * 61 * tp1._comm(nbytes))


def test_data_parallel_ranks_bring_their_tokens_to_the_experts() -> None:
    """One DEP8 rank (TP 1) with T tokens: the MoE layer runs over the 8 ranks' 8 T tokens, as TP 8 =
    EP 8 runs over a batch of 8 T; attention and the dense layers see the rank's own T."""
    dep, ep8 = kernel_table("h200", "deepseek-v3", 1, dp=8), kernel_table("h200", "deepseek-v3", 8)
    t = 64
    assert dep._moe(t) == pytest.approx(ep8._moe(8 * t), rel=1e-9)
    assert dep._comm(1000) == 0.0                       # TP 1: no all-reduce inside a rank
    assert dep.heads == 128 and ep8.heads == 16         # each DP rank holds every attention head


def test_roofline_data_parallel_experts_see_every_ranks_tokens() -> None:
    p, m = load_profile("h200-datasheet"), MODEL_PRESETS["deepseek-v3"]
    dep = roofline_cost_model(p, m, 1, parallel=Parallelism(1, 1, 8, 8))
    ep8 = roofline_cost_model(p, m, 8, parallel=Parallelism(8, 1, 8))
    assert dep._experts_s(16) == pytest.approx(ep8._experts_s(128), rel=1e-12)


def test_dp_splits_the_routed_experts_over_every_gpu_of_the_replica() -> None:
    p, m = load_profile("h200"), MODEL_PRESETS["deepseek-v3"]
    prec = resolve_precision(m, p, "fp8")
    kw = dict(block_size=16, gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256,
              max_model_len=32768, precision=prec)
    tp8 = plan_kv_cache(m, p, tensor_parallel_size=8, **kw)
    dep8 = plan_kv_cache(m, p, tensor_parallel_size=1, data_parallel_size=8, **kw)
    routed = m.num_moe_layers * m.num_experts * m.params_per_expert * prec.linear_weight_bytes
    # DEP8: the routed experts are 1/8 per GPU either way; attention, shared experts and dense layers
    # are whole on each DEP rank, 1/8 with TP 8.
    assert dep8.weights_bytes > tp8.weights_bytes
    assert dep8.weights_bytes - tp8.weights_bytes < (m.num_params * prec.linear_weight_bytes - routed)


# -- the scenario --------------------------------------------------------------------------------------
def test_gpus_per_replica_count_the_data_parallel_ranks() -> None:
    dep = DeploymentConfig(replicas=2, tensor_parallel_size=2, data_parallel_size=4, expert_parallel_size=8)
    assert dep.gpus_per_replica == 8                     # TP 2 x DP 4 (EP 8 reuses them)
    assert Parallelism.of(dep).gpus_per_replica == 8


@pytest.mark.parametrize("over, field, words", [
    ({"deployment.data_parallel_size": 4, "deployment.expert_parallel_size": 2},
     "deployment.expert_parallel_size", "must be 1 or tensor_parallel_size x data_parallel_size (1 x 4 = 4)"),
    ({"deployment.tensor_parallel_size": 2, "deployment.expert_parallel_size": 4},
     "deployment.expert_parallel_size", "data_parallel_size = expert_parallel_size / tensor_parallel_size"),
    ({"deployment.data_parallel_size": 0}, "deployment.data_parallel_size", "greater than or equal to 1"),
])
def test_bad_splits_name_the_field_and_what_is_allowed(over: dict, field: str, words: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", **over})
    assert info.value.field == field and words in info.value.message


def test_data_parallel_on_a_dense_model_is_refused() -> None:
    with pytest.raises(ScenarioError) as info:
        resolve(load_scenario(EXAMPLE, {"deployment.data_parallel_size": 2, "deployment.expert_parallel_size": 2}))
    assert info.value.field == "deployment.data_parallel_size" and "dense model" in info.value.message
    assert "deployment.replicas" in info.value.message


def test_experts_that_do_not_divide_over_the_ranks_are_refused() -> None:
    with pytest.raises(ScenarioError) as info:
        resolve(load_scenario(EXAMPLE, {"model": "mixtral-8x7b", "hardware": "h200",
                                        "deployment.data_parallel_size": 16, "deployment.expert_parallel_size": 16}))
    assert info.value.field == "deployment.expert_parallel_size" and "num_experts=8" in info.value.message


def test_data_parallel_beyond_the_nvlink_domain_needs_an_inter_node_link() -> None:
    with pytest.raises(ScenarioError) as info:
        resolve(load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "hardware": "h200",
                                        "deployment.data_parallel_size": 16, "deployment.expert_parallel_size": 16}))
    assert info.value.field == "deployment.data_parallel_size" and "inter_node" in info.value.message


def test_data_parallel_with_pipeline_stages_is_refused() -> None:
    with pytest.raises(ScenarioError) as info:
        resolve(load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "hardware": "h200-datasheet",
                                        "deployment.data_parallel_size": 2, "deployment.expert_parallel_size": 2,
                                        "deployment.pipeline_parallel_size": 2}))
    assert info.value.field == "deployment.data_parallel_size" and "pipeline_parallel_size" in info.value.message


# -- end to end -------------------------------------------------------------------------------------------
def test_deepseek_v3_dep8_on_eight_h200_runs_as_eight_engine_loops() -> None:
    sc = load_scenario(DEP, {"num_requests": 300, "warmup_s": 0})
    result = simulate(sc)
    s = result.summary
    assert s["num_gpus"] == 8
    d = s["deployment"]
    assert d["replicas"] == 1 and d["data_parallel_size"] == 8 and d["expert_parallel_size"] == 8
    assert "tensor_parallel_size" in d and d["tensor_parallel_size"] == 1
    assert s["requests"]["completed"] == 300
    assert result.num_replicas == 8                      # engine loops, one per DP rank
    ranks = set(np.asarray(result.requests["replica"]).tolist())
    assert len(ranks) > 1                                # the least-outstanding rank takes each request
    assert 0.005 < s["tpot_s"]["p50"] < 0.2


def test_two_dep4_replicas_count_eight_gpus_and_share_the_load() -> None:
    sc = load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "hardware": "h200", "num_requests": 200, "warmup_s": 0,
                                 "deployment.replicas": 2, "deployment.data_parallel_size": 4,
                                 "deployment.expert_parallel_size": 4})
    result = simulate(sc)
    assert result.summary["num_gpus"] == 8 and result.summary["deployment"]["replicas"] == 2
    per_rank = np.bincount(np.asarray(result.requests["replica"]), minlength=8)
    assert len(per_rank) == 8 and per_rank.min() > 0


def test_the_planner_prices_a_dep_replica_as_tp_x_dp_gpus() -> None:
    """A DEP2 candidate beside a TP2 one: every cell costs 2 GPUs per replica."""
    from simulator.planner import plan
    base = load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "hardware": "h200", "warmup_s": 0}).model_dump(
        mode="python", exclude_none=True)
    base["workload"]["prompt_tokens"] = {"dist": "fixed", "value": 500}
    base["workload"]["output_tokens"] = {"dist": "fixed", "value": 50}
    result = plan({
        "name": "dep", "scenario": base,
        "candidates": [{"name": "dep2", "set": {"deployment.data_parallel_size": 2,
                                                "deployment.expert_parallel_size": 2}},
                       {"name": "tp2", "set": {"deployment.tensor_parallel_size": 2}}],
        "slo": {"ttft_p99_ms": 3000, "tpot_p99_ms": 200, "attainment": 0.9},
        "regions": [{"name": "east", "rtt_ms": {"east": 5}}],
        "forecast": [{"quarter": "Q1", "region": "east", "peak_rps": 4}],
        "simulation": {"num_requests": 200, "max_replicas": 4},
    }, workers=1)
    ws = result.worksheet
    assert set(ws["status"]) == {"ok"}
    assert (ws["gpus"] == 2 * ws["replicas"]).all()


def test_k8s_export_serves_a_dep_replica_with_vllms_flags() -> None:
    from simulator.planner.k8s import _split_args
    dep = DeploymentConfig(tensor_parallel_size=1, data_parallel_size=8, expert_parallel_size=8)
    assert _split_args(dep) == ["--data-parallel-size", "8", "--enable-expert-parallel"]
    assert _split_args(DeploymentConfig(tensor_parallel_size=8)) == []


def test_the_capacity_bound_of_a_dep_replica_counts_every_rank() -> None:
    """The bracket the planner starts from: each rank completes B / (decode run + prefills), the
    replica DP times that."""
    from simulator.planner.capacity import capacity_bound
    sc = load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "hardware": "h200", "deployment.data_parallel_size": 4,
                                 "deployment.expert_parallel_size": 4,
                                 "workload.prompt_tokens": {"dist": "fixed", "value": 500},
                                 "workload.output_tokens": {"dist": "fixed", "value": 101}})
    b = capacity_bound(sc)
    one_rank = b.batch_size / (100 * b.decode_step_s + b.batch_size * b.prefill_marginal_s)
    assert b.max_rps_per_replica == pytest.approx(4 * one_rank, rel=1e-12)


def test_serving_config_id_names_dp_only_when_used() -> None:
    """A candidate without attention DP keeps the id earlier plans gave it (the field is left out
    at its default); DEP changes it."""
    import hashlib
    import json

    from simulator.planner.assumptions import serving_config_id
    sc = load_scenario(EXAMPLE)
    data = sc.model_dump(mode="json", exclude_none=True, exclude={"workload", "name", "seed", "num_requests",
                                                                "base_dir"})
    del data["deployment"]["data_parallel_size"]
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]
    assert serving_config_id(sc) == digest
    dep = load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "deployment.data_parallel_size": 2,
                                  "deployment.expert_parallel_size": 2})
    assert serving_config_id(dep) != serving_config_id(dep.with_overrides({"deployment.data_parallel_size": 1,
                                                                           "deployment.expert_parallel_size": 1}))


# -- the ranks in lockstep ------------------------------------------------------------------------------
def _dep_costs():
    """DeepSeek-V3 DEP8 on h200: the measured tables and the datasheet roofline."""
    m = MODEL_PRESETS["deepseek-v3"]
    par = Parallelism(1, 1, 8, 8)
    out = []
    for name in ("h200", "h200-datasheet"):
        p = load_profile(name)
        out.append(make_cost_model(p, m, 1, resolve_precision(m, p, "fp8"), par))
    return out


@pytest.mark.parametrize("shape", [BatchShape.decode(32, 32 * 1500), BatchShape.prefill(4096),
                                   BatchShape([2048], [512], 16, 16 * 900, 17)])
def test_ranks_as_busy_as_each_other_step_as_one_rank_does(shape: BatchShape) -> None:
    """The lockstep step of DP identical batches is the one-rank step, which prices the experts as if
    every rank were as busy: the model before lockstep is its balanced case."""
    for cm in _dep_costs():
        assert cm.group_step_time_s([shape] * 8) == pytest.approx(cm.step_time_s(shape), rel=1e-12)


def test_one_ranks_prefill_sets_every_ranks_step() -> None:
    """Rank 0 prefills 4,096 tokens, ranks 1-7 decode 16 requests each: the step is rank 0's own part
    (its step less its shared part) plus the routed experts over the 4,096 + 7 x 16 tokens and the
    all-to-all at rank 0's 4,096, by hand from the measured curves; far longer than a decode rank's
    step alone, shorter than eight prefills' worth of experts."""
    cm = kernel_table("h200", "deepseek-v3", 1, dp=8)
    prefill, decode = BatchShape.prefill(4096), BatchShape.decode(16, 16 * 1000)
    layers = cm._moe_layers

    def own(s: BatchShape) -> float:
        t = s.num_tokens
        return cm.step_time_s(s) - layers * cm._moe(t) - cm._a2a_s(t)
    total = 4096 + 7 * 16
    by_hand = max(own(prefill), own(decode)) + layers * cm._moe_group(total) + cm._a2a_s(4096)
    group = cm.group_step_time_s([prefill] + [decode] * 7)
    assert group == pytest.approx(by_hand, rel=1e-12)
    assert group > 3 * cm.step_time_s(decode)
    assert group < cm.step_time_s(prefill)          # that step priced the experts at 8 x 4,096 tokens


def test_ranks_that_share_no_experts_step_at_the_slowest_ones_pace() -> None:
    from simulator.cost.analytic import ConstantCostModel
    from simulator.scenario.profiles import HardwareProfile
    cm = ConstantCostModel(HardwareProfile(name="c", cost_model="constant", step_time_s=0.01,
                                           prefill_time_per_token_s=1e-5))
    assert cm.group_step_time_s([BatchShape.prefill(1000), BatchShape.decode(4, 400)]) == pytest.approx(0.02)


def test_the_engine_wrappers_keep_the_balanced_case() -> None:
    """With SGLang's preset (CUDA-graph padding and the CPU overlapped with the GPU) the lockstep step
    of identical batches is still the one-rank step; the slowest rank's CPU time bounds it below."""
    sc = load_scenario(DEP, {"engine": "sglang"})
    cm = cost_model(sc, resolve(sc))
    for shape in (BatchShape.decode(30, 30 * 2000), BatchShape([1024], [0], 8, 8000, 9)):
        assert cm.group_step_time_s([shape] * 8) == pytest.approx(cm.step_time_s(shape), rel=1e-12)


def _lockstep_run(tmp_path, rows: list[tuple[float, int, int]], **over):
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,prompt_tokens,output_tokens\n" + "".join(f"{t},{p},{o}\n" for t, p, o in rows))
    sc = load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "hardware": "h200", "num_requests": len(rows),
                                 "warmup_s": 0, "deployment.data_parallel_size": 2,
                                 "deployment.expert_parallel_size": 2, "scheduler.policy": "chunked_prefill",
                                 "scheduler.max_num_batched_tokens": 8192,
                                 "workload.arrival": {"process": "trace", "format": "requests", "path": str(path)},
                                 **over})
    return simulate(sc)


def test_a_prefill_on_one_rank_stalls_the_decodes_of_the_other(tmp_path) -> None:
    """A decodes alone on rank 0; B's 6,000-token prompt arrives at 50 ms and goes to rank 1 (the less
    loaded). The step B prefills in is rank 0's step too: both ranks log the same start and duration,
    many times A's decode steps, and every request is served."""
    result = _lockstep_run(tmp_path, [(0.0, 64, 200), (0.05, 6000, 4)])
    req = result.requests.sort_values("request_id")
    assert req["replica"].tolist() == [0, 1]
    assert (req["status"] == "finished_length_capped").all()
    steps = result.steps
    for _, same in steps.groupby("start_time"):
        assert same["duration_s"].nunique() == 1           # lockstep: one duration per instant
    prefill = steps[(steps["replica"] == 1) & (steps["num_prefill_tokens"] == 6000)]
    assert len(prefill) == 1
    beside = steps[(steps["replica"] == 0) & (steps["start_time"] == prefill["start_time"].iloc[0])]
    assert len(beside) == 1 and beside["num_decode_tokens"].iloc[0] == 1
    alone = steps[(steps["replica"] == 0) & (steps["start_time"] < 0.04) & (steps["num_prefill_tokens"] == 0)]
    assert beside["duration_s"].iloc[0] > 5 * alone["duration_s"].median()


def test_lockstep_with_the_overlap_schedulers_admission_lag(tmp_path) -> None:
    """SGLang's preset (async scheduling) on a DEP2 replica: requests held while a step runs join the
    step after the next, and every request is still served."""
    rows = [(0.001 * i, 256, 32) for i in range(40)]
    result = _lockstep_run(tmp_path, rows, engine="sglang")
    assert (result.requests["status"] == "finished_length_capped").all()
    assert result.summary["requests"]["completed"] == 40


# -- attention DP with tensor-parallel experts (EP 1) ---------------------------------------------------------
def test_data_parallel_without_expert_parallelism_splits_every_experts_width() -> None:
    """DP 4 x TP 2 with EP 1 (vLLM's --data-parallel-size alone, SGLang's --enable-dp-attention): the
    MoE layer is the measured TP 8 curve (widths split 8 ways) over the 4 ranks' tokens; its
    all-reduce over the rank's 2 GPUs becomes an all-gather and reduce-scatter of the 4 ranks' tokens
    over all 8, priced from the measured all-reduce rows at 8 GPUs."""
    p, m = load_profile("h200"), MODEL_PRESETS["qwen3-30b-a3b"]
    adp = make_cost_model(p, m, 2, resolve_precision(m, p, None), Parallelism(2, 1, 1, 4))
    tp8 = make_cost_model(p, m, 8, resolve_precision(m, p, None), Parallelism(8))
    tp2 = make_cost_model(p, m, 2, resolve_precision(m, p, None), Parallelism(2))
    assert isinstance(adp, GeneralKernelTableCostModel) and isinstance(tp8, GeneralKernelTableCostModel)
    t = 64
    assert adp._moe(t) == pytest.approx(tp8._moe(4 * t), rel=1e-12)
    assert "TP 2 x DP 4" in adp.sources["moe"] and "measured all_reduce rows at 8" in adp.sources["moe_gather"]
    nbytes = t * m.hidden_size * 2
    moe_layers, layers = m.num_moe_layers, m.num_layers
    assert adp._comm_s(t) == pytest.approx((2 * layers - moe_layers) * tp2._comm(nbytes)
                                           + moe_layers * tp8._comm(4 * nbytes), rel=1e-12)
    shape = BatchShape.decode(32, 32 * 800)
    assert adp.group_step_time_s([shape] * 4) == pytest.approx(adp.step_time_s(shape), rel=1e-12)


def test_roofline_data_parallel_without_expert_parallelism() -> None:
    """The datasheet roofline of the same split: each GPU holds 1/(TP x DP) of every expert, reads them
    for every rank's tokens, and gathers the group's tokens over the 8 GPUs' link."""
    p, m = load_profile("h200-datasheet"), MODEL_PRESETS["qwen3-30b-a3b"]
    adp = roofline_cost_model(p, m, 2, parallel=Parallelism(2, 1, 1, 4))
    tp8 = roofline_cost_model(p, m, 8, parallel=Parallelism(8))
    assert adp._experts_s(16) == pytest.approx(tp8._experts_s(64), rel=1e-12)
    link = collective_link(p, 8)
    assert link is not None
    per_token = m.num_moe_layers * 2.0 * 7 / 8 * m.hidden_size * 2 / link.bandwidth_bytes_per_s
    assert adp._gather_s_per_token == pytest.approx(per_token, rel=1e-12)
    shape = BatchShape([512], [0], 8, 8 * 600, 9)
    assert adp.group_step_time_s([shape] * 4) == pytest.approx(adp.step_time_s(shape), rel=1e-12)


def test_a_dp_replica_with_tensor_parallel_experts_runs_end_to_end() -> None:
    sc = load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "hardware": "h200", "num_requests": 200, "warmup_s": 0,
                                 "deployment.data_parallel_size": 4})
    result = simulate(sc)
    s = result.summary
    assert s["num_gpus"] == 4 and s["requests"]["completed"] == 200
    assert s["deployment"]["data_parallel_size"] == 4 and "expert_parallel_size" not in s["deployment"]
    assert len(set(np.asarray(result.requests["replica"]).tolist())) > 1


@pytest.mark.parametrize("over", [
    {"scheduler.num_gpu_blocks_override": 300},                                  # preemption on every rank
    {"client.timeout_s": 3.0, "admission.max_queue_delay_s": 0.3,                # deadlines in lockstep
     "workload.arrival.rate_per_s": 40, "scheduler.max_num_seqs": 16},
    {"engine": "sglang", "scheduler.num_gpu_blocks_override": 300},              # admission lag + preemption
    {"scheduler.policy": "dynamic"},                                             # a batching policy's waits
])
def test_lockstep_conserves_every_request(over: dict) -> None:
    """Every request that arrives at a DEP2 replica is served, timed out or shed, whatever the ranks'
    KV pressure, deadlines or admission lag; every step of one instant has one duration."""
    sc = load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "hardware": "h200", "num_requests": 300, "warmup_s": 0,
                                 "deployment.data_parallel_size": 2, "deployment.expert_parallel_size": 2,
                                 "workload.arrival.rate_per_s": 20, "scheduler.max_model_len": 4096,
                                 "scheduler.max_num_batched_tokens": 4096,
                                 "workload.prompt_tokens": {"dist": "uniform", "min": 100, "max": 1500},
                                 "workload.output_tokens": {"dist": "geometric", "mean": 300, "max": 2000}, **over})
    s = simulate(sc).summary["requests"]
    assert s["arrived"] == 300 and s["in_flight"] == 0
    assert s["completed"] + s["timed_out"] + s["rejected"] == 300          # rejected counts the shed
    result = simulate(sc, fast_forward=False)
    assert result.summary["requests"] == s                 # lockstep takes one event per step either way
    for _, same in result.steps.groupby("start_time"):
        assert same["duration_s"].nunique() == 1


# -- the engine's choice of rank ------------------------------------------------------------------------------
class _Rank:
    def __init__(self, waiting: int, running: int) -> None:
        self.num_waiting, self.num_outstanding = waiting, waiting + running


def test_each_engines_rank_choice() -> None:
    """Rank 0 has 2 waiting and 1 running (3 outstanding, vLLM's score 9); rank 1 has 0 waiting and 4
    running (4 outstanding, score 4): fewest outstanding picks 0, vLLM's score picks 1, round robin
    takes them in turn whatever the load."""
    from simulator.engine.data_parallel import RANK_CHOICES
    ranks = [_Rank(2, 1), _Rank(0, 4)]
    assert RANK_CHOICES["least_outstanding"]().choose(ranks) == 0
    assert RANK_CHOICES["vllm"]().choose(ranks) == 1
    assert RANK_CHOICES["vllm"]().choose([_Rank(0, 3), _Rank(0, 3)]) == 0      # ties to the lowest
    robin = RANK_CHOICES["round_robin"]()
    assert [robin.choose(ranks) for _ in range(5)] == [0, 1, 0, 1, 0]


def test_the_rank_choice_follows_the_engine_preset(tmp_path) -> None:
    from simulator.run.topology import data_parallel_routing
    base = {"model": "qwen3-30b-a3b", "hardware": "h200", "deployment.data_parallel_size": 2}
    assert data_parallel_routing(load_scenario(EXAMPLE, base)) == "least_outstanding"
    assert data_parallel_routing(load_scenario(EXAMPLE, {**base, "engine": "vllm-v1"})) == "vllm"
    assert data_parallel_routing(load_scenario(EXAMPLE, {**base, "engine": "sglang"})) == "round_robin"
    assert data_parallel_routing(load_scenario(EXAMPLE, {**base, "engine": "sglang",
                                                         "engine.data_parallel_routing": "vllm"})) == "vllm"
    # SGLang's round robin: a burst alternates ranks whatever their load
    rows = [(0.0001 * i, 256, 64) for i in range(6)]
    result = _lockstep_run(tmp_path, rows, engine="sglang")
    assert result.requests.sort_values("request_id")["replica"].tolist() == [0, 1, 0, 1, 0, 1]


def test_an_unknown_rank_choice_names_the_field() -> None:
    sc = load_scenario(EXAMPLE, {"model": "qwen3-30b-a3b", "hardware": "h200", "deployment.data_parallel_size": 2,
                                 "engine": {"preset": "vllm-v1", "data_parallel_routing": "fastest"}})
    with pytest.raises(ScenarioError) as info:
        resolve(sc)
    assert info.value.field == "engine.data_parallel_routing" and "round_robin" in info.value.message
