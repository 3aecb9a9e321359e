"""Engine presets (``engine:``) and multi-step scheduling (``scheduler.num_scheduler_steps``).

* a preset fills in only the scheduler fields the scenario leaves out, follows vLLM's GPU rule
  (large batch defaults on >= 70 GiB GPUs that are not A100s), and is re-applied when an
  override changes the engine; an unknown preset names the field and the known ones;
* ``engine.overhead`` replaces the profile's CPU overhead: step times move by exactly the difference;
* multi-step: a request arriving during a run is admitted only at the run's end (step by step),
  the per-step overhead is paid once per run, TTFT rises with the run length while TPOT falls,
  fast-forward equals step-by-step, and other policies or speculation refuse it naming both.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_scenario, make_scheduler

from simulator import ScenarioError, load_scenario, scenario_from_dict, simulate
from simulator.cost.base import BatchShape
from simulator.cost.factory import make_cost_model
from simulator.run.resolve import resolve
from simulator.scenario.engines import ENGINE_PRESETS

H100 = {"model": "llama-3-8b", "hardware": "h100-sxm"}
H100_2K = {**H100, "scheduler.max_model_len": 2048}


def test_a_preset_fills_only_the_fields_left_out():
    sc = make_scenario(**H100, engine="vllm-v1")
    # make_scenario sets max_num_seqs 8, max_num_batched_tokens 2048, block_size 16: those stay.
    assert (sc.scheduler.max_num_seqs, sc.scheduler.max_num_batched_tokens) == (8, 2048)
    assert sc.scheduler.policy == "chunked_prefill" and sc.scheduler.enable_prefix_caching
    assert sc.engine is not None and sc.engine.preset == "vllm-v1"


def test_vllm_v1_batch_defaults_follow_the_gpu(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("model: llama-3-8b\nhardware: h100-sxm\nnum_requests: 10\nengine: vllm-v1\n"
                    "workload: {arrival: {process: poisson, rate_per_s: 1}, prompt_tokens: {dist: fixed, value: 100},"
                    " output_tokens: {dist: fixed, value: 10}}\n")
    big = load_scenario(path).scheduler
    small = load_scenario(path, ["hardware=a100-80gb"]).scheduler
    assert (big.max_num_batched_tokens, big.max_num_seqs) == (8192, 1024)
    assert (small.max_num_batched_tokens, small.max_num_seqs) == (2048, 256)


def test_changing_the_engine_by_override_reapplies_the_preset(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("model: llama-3-8b\nhardware: h100-sxm\nnum_requests: 10\nengine: vllm-v1\n"
                    "scheduler: {max_num_seqs: 64}\n"
                    "workload: {arrival: {process: poisson, rate_per_s: 1}, prompt_tokens: {dist: fixed, value: 100},"
                    " output_tokens: {dist: fixed, value: 10}}\n")
    v1 = load_scenario(path)
    v06 = v1.with_overrides({"engine": "vllm-v0.6"})
    assert v1.scheduler.policy == "chunked_prefill" and v06.scheduler.policy == "continuous"
    assert not v06.scheduler.enable_prefix_caching
    assert v06.scheduler.max_num_batched_tokens == 8192          # max(context 8192, 2048), as vLLM v0
    assert v1.scheduler.max_num_seqs == v06.scheduler.max_num_seqs == 64   # set by the scenario: kept
    trt = v1.with_overrides({"engine": "trtllm"})
    assert (trt.scheduler.block_size, trt.scheduler.max_num_seqs) == (32, 64)


def test_a_dotted_override_into_an_engine_given_by_name_keeps_the_name(tmp_path):
    """``engine: sglang`` is ``engine: {preset: sglang}``: ``--set engine.async_scheduling=false`` after it
    keeps the preset (it used to replace the name and fail on a missing preset); a preset name for
    ``model`` or ``hardware`` still refuses a dotted key, naming it."""
    sc = make_scenario(engine="sglang")
    sync = sc.with_overrides({"engine.async_scheduling": False})
    assert sync.engine is not None and sync.engine.preset == "sglang" and sync.engine.async_scheduling is False
    assert not sync.engine.runs_async and sc.engine is not None and sc.engine.runs_async
    both = make_scenario().with_overrides({"engine": "sglang", "engine.async_scheduling": False})
    assert both.engine == sync.engine
    with pytest.raises(ScenarioError, match="model is the preset name 'tiny-llama'"):
        make_scenario().with_overrides({"model.num_layers": 2})


def test_unknown_preset_names_the_field_and_the_known_ones():
    with pytest.raises(ScenarioError) as info:
        make_scenario(engine="vllm-v2")
    assert info.value.field == "engine.preset" and "vllm-v2" in str(info.value)
    for name in ENGINE_PRESETS:
        assert name in str(info.value)


def test_every_preset_runs():
    for name in ENGINE_PRESETS:
        r = simulate(scenario_from_dict({**H100, "engine": name, "num_requests": 50, "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 5.0}, "prompt_tokens": {"dist": "fixed", "value": 300},
            "output_tokens": {"dist": "fixed", "value": 20}}}))
        assert r.summary["requests"]["completed"] == 50, name


def test_engine_overhead_replaces_the_profiles():
    base = make_scenario(**H100_2K)
    own = make_scenario(**H100_2K, engine={"preset": "vllm-v1", "overhead": {"step_s": 0.004, "per_seq_s": 0.0}})
    shape = BatchShape.decode(16, 16 * 500)
    times = []
    for sc in (base, own):
        system = resolve(sc)
        times.append(make_cost_model(system.profile, system.model, 1).step_time_s(shape))
    profile = resolve(base).profile.overhead
    assert times[1] - times[0] == pytest.approx((0.004 - profile.step_s) - 16 * profile.per_seq_s, abs=1e-12)


# -- multi-step ----------------------------------------------------------------------------------
def _step(sched, now):
    out = sched.schedule(now)
    sched.update_from_output(out, now + 1.0)
    return out


@pytest.mark.parametrize("steps", [1, 4])
def test_a_new_request_waits_for_the_multi_step_run_to_end(steps):
    sched = make_scheduler([8, 8], [100, 5], num_scheduler_steps=steps)
    sched.waiting.pop()                                  # request 1 arrives later
    assert _step(sched, 0.0).admitted == [0]             # the prefill step: no run yet
    _step(sched, 1.0)                                    # decode step 1 of the run
    sched.add_request(1)
    admitted_at = None
    for i in range(2, 10):
        if _step(sched, float(i)).admitted:
            admitted_at = i
            break
    # One-step scheduling admits at the next step; a 4-step run first finishes steps 2, 3, 4.
    assert admitted_at == (2 if steps == 1 else 5)


def test_multi_step_raises_ttft_lowers_tpot_and_pays_the_overhead_once_per_run():
    over = {**H100, "num_requests": 600, "scheduler.max_num_seqs": 64, "scheduler.max_num_batched_tokens": 8192,
            "workload.arrival.rate_per_s": 6.0,
            "workload.prompt_tokens": {"dist": "fixed", "value": 500},
            "workload.output_tokens": {"dist": "fixed", "value": 200}}
    runs = {k: simulate(make_scenario(**over, **{"scheduler.num_scheduler_steps": k})) for k in (1, 8, 16)}
    ttft = [runs[k].summary["ttft_s"]["mean"] for k in (1, 8, 16)]
    tpot = [runs[k].summary["tpot_s"]["mean"] for k in (1, 8, 16)]
    assert ttft[0] < ttft[1] < ttft[2], ttft
    assert tpot[0] > tpot[1] > tpot[2], tpot
    # The run-end wait is at most a run of decode steps (one step is about TPOT).
    assert ttft[2] - ttft[0] < 16 * tpot[0]
    # Per-step overhead spread over the run: a pure decode step is cheaper by step_s (1 - 1/k).
    profile = resolve(make_scenario(**over)).profile.overhead
    sys8 = resolve(make_scenario(**over, **{"scheduler.num_scheduler_steps": 8}))
    assert sys8.profile.overhead.step_s == pytest.approx(profile.step_s / 8)


def test_multi_step_fast_forward_equals_step_by_step():
    sc = make_scenario(**{"num_requests": 300, "workload.arrival.rate_per_s": 40.0, "scheduler.num_scheduler_steps": 8,
                          "workload.output_tokens": {"dist": "geometric", "mean": 30, "max": 200}})
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    np.testing.assert_allclose(fast.requests["first_token_time"], slow.requests["first_token_time"], atol=1e-9)
    np.testing.assert_allclose(fast.requests["finish_time"], slow.requests["finish_time"], atol=1e-9)


def test_a_timeout_that_empties_the_batch_mid_run_ends_the_multi_step_run():
    """The last running request aborted by its client's timeout in the middle of a multi-step run
    empties the batch, which ends the run, so the waiting requests are admitted at once (the run's
    count used to survive the abort: the next step admitted nobody and the engine stopped on an
    empty step). Every request is served or timed out, step by step as in fast-forward."""
    over = {"num_requests": 34, "hardware": "h100-sxm-datasheet", "scheduler.max_num_seqs": 1,
            "scheduler.num_scheduler_steps": 4, "client.timeout_s": 0.3, "scheduler.max_model_len": 1024,
            "workload.arrival.rate_per_s": 200, "workload.prompt_tokens": {"dist": "uniform", "min": 1, "max": 600},
            "workload.output_tokens": {"dist": "geometric", "mean": 30, "max": 300}, "seed": 0}
    sc = make_scenario(**over)
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    s = fast.summary["requests"]
    assert s["timed_out"] > 0 and s["completed"] + s["timed_out"] == 34
    assert slow.summary["requests"] == s


@pytest.mark.parametrize("over,other", [
    ({"scheduler.policy": "chunked_prefill"}, "'chunked_prefill'"),
    ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 0.5}},
     "speculative_config"),
])
def test_multi_step_is_refused_where_it_is_not_modelled(over, other):
    with pytest.raises(ScenarioError) as info:
        resolve(make_scenario(**{"scheduler.num_scheduler_steps": 4, **over}))
    assert info.value.field == "scheduler.num_scheduler_steps" and other in str(info.value)


def test_async_scheduling_takes_the_longer_of_gpu_and_cpu():
    """engine.async_scheduling: a step takes max(GPU, CPU) instead of GPU + CPU, exactly; a decode
    step of 16 requests is 1.5 ms + 16 x 10 us shorter on the H100 roofline (the GPU part is longer),
    and a one-token step on a huge CPU overhead takes exactly the CPU overhead."""
    shape = BatchShape.decode(16, 16 * 500)
    sync = resolve(make_scenario(**H100_2K))
    asyn = resolve(make_scenario(**H100_2K, engine={"preset": "vllm-v1", "async_scheduling": True}))
    t_sync = make_cost_model(sync.profile, sync.model, 1).step_time_s(shape)
    cost = make_cost_model(asyn.profile, asyn.model, 1)
    o = sync.profile.overhead
    assert t_sync - cost.step_time_s(shape) == pytest.approx(o.step_s + 16 * o.per_seq_s, abs=1e-12)
    assert cost.breakdown(shape).total_s == pytest.approx(cost.step_time_s(shape))
    slow_cpu = resolve(make_scenario(**H100_2K, engine={"preset": "vllm-v1", "async_scheduling": True,
                                                        "overhead": {"step_s": 0.5, "per_seq_s": 0.0}}))
    assert make_cost_model(slow_cpu.profile, slow_cpu.model, 1).step_time_s(BatchShape.decode(1, 100)) == 0.5
    np.testing.assert_allclose(cost.decode_run_times(16, np.array([8000.0, 8016.0])),
                               [cost.decode_step_time_s(16, 8000), cost.decode_step_time_s(16, 8016)])


def test_async_scheduling_lowers_tpot_and_fast_forward_is_exact():
    over = {**H100, "num_requests": 300, "scheduler.max_num_seqs": 64, "scheduler.max_num_batched_tokens": 8192,
            "workload.arrival.rate_per_s": 4.0, "workload.output_tokens": {"dist": "fixed", "value": 100}}
    sync = simulate(make_scenario(**over, engine="vllm-v1"))
    sc = make_scenario(**over, engine={"preset": "vllm-v1", "async_scheduling": True})
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    assert fast.summary["tpot_s"]["mean"] < sync.summary["tpot_s"]["mean"]
    np.testing.assert_allclose(fast.requests["finish_time"], slow.requests["finish_time"], atol=1e-9)


# -- CUDA-graph padding (engine.cuda_graph) ----------------------------------------------------------
ZERO_OVERHEAD = {"step_s": 0.0, "per_seq_s": 0.0, "per_token_s": 0.0}


def _gemm_bound_hardware():
    """The H100 roofline with its linear layers compute-bound at every batch (peak FLOP/s cut 100x,
    GEMM efficiency flat in the token count) and no CPU overhead: padding shows in full."""
    from simulator.scenario.profiles import load_profile
    hw = load_profile("h100-sxm-datasheet").model_dump()
    hw["peak_flops"] = {k: v / 100 for k, v in hw["peak_flops"].items()}
    hw["efficiency"]["gemm_half_tokens"] = 0.0
    hw["overhead"] = ZERO_OVERHEAD
    return hw


def _gemm_bound_system(**engine):
    hw = _gemm_bound_hardware()
    sc = make_scenario(model="llama-3-8b", hardware=hw, **{"scheduler.max_model_len": 2048},
                       engine={"preset": "vllm-v1", **engine})
    system = resolve(sc)
    return system, make_cost_model(system.profile, system.model, 1), make_cost_model(
        system.profile, system.model, 1, cuda_graph=system.cuda_graph)


def test_padding_prices_a_decode_step_at_the_padded_batch_with_the_real_context():
    """A pure-decode step of 9 requests runs the 16-request graph: its time is that of 16 decode rows
    over the 9 requests' context with 9 sampled rows (exactly; attention and the LM head are the real
    requests'), far above the unpadded 9; a captured size and a batch above the largest are unchanged."""
    system, eager, padded = _gemm_bound_system(cuda_graph={"capture_sizes": [1, 2, 4, 8, 16, 32]})
    assert system.cuda_graph is not None and system.cuda_graph.prefill_steps      # vllm-v1: every step
    ctx = 9 * 100
    t9 = padded.step_time_s(BatchShape.decode(9, ctx))
    assert t9 == pytest.approx(eager.step_time_s(BatchShape((), (), 16, ctx, 9)), rel=1e-12)
    assert t9 > 1.5 * eager.step_time_s(BatchShape.decode(9, ctx))               # GEMM-bound: ~16/9
    assert padded.breakdown(BatchShape.decode(9, ctx)).total_s == pytest.approx(t9, rel=1e-12)
    assert padded.breakdown(BatchShape.decode(9, ctx)).attention_s == eager.breakdown(
        BatchShape.decode(9, ctx)).attention_s
    for n in (8, 16, 32, 33, 200):                                                # captured, or eager
        assert padded.step_time_s(BatchShape.decode(n, n * 100)) == eager.step_time_s(BatchShape.decode(n, n * 100))
    # The decode-run entry points agree with the step price, and the affine form carries the padding.
    np.testing.assert_allclose(padded.decode_run_times(9, np.array([ctx, ctx + 9.0])),
                               [t9, padded.decode_step_time_s(9, ctx + 9)], rtol=1e-12)
    a, b = padded.decode_affine(9)
    assert a + b * ctx == pytest.approx(t9, rel=1e-12)


def test_prefill_steps_are_padded_only_where_the_engine_pads_them():
    """vLLM v1 pads a step with prompt tokens by its token count (piecewise graphs); with
    prefill_steps: false (vLLM 0.6, SGLang's decode graphs) it runs eagerly; a step above the largest
    captured size is never padded."""
    mixed = BatchShape((20,), (0,), 3, 3 * 500, 4)              # 23 tokens -> the 32 graph
    big = BatchShape((100,), (0,), 3, 3 * 500, 4)               # 103 tokens: eager
    _, eager, v1 = _gemm_bound_system(cuda_graph={"capture_sizes": [8, 16, 32]})
    _, _, decode_only = _gemm_bound_system(cuda_graph={"capture_sizes": [8, 16, 32], "prefill_steps": False})
    assert v1.step_time_s(mixed) > eager.step_time_s(mixed)
    assert v1.step_time_s(mixed) - eager.step_time_s(mixed) == pytest.approx(
        v1.step_time_s(BatchShape.decode(23, 0)) - eager.step_time_s(BatchShape.decode(23, 0)), rel=1e-12)
    assert decode_only.step_time_s(mixed) == eager.step_time_s(mixed)
    assert v1.step_time_s(big) == eager.step_time_s(big)
    assert decode_only.step_time_s(BatchShape.decode(23, 0)) > eager.step_time_s(BatchShape.decode(23, 0))


def test_padding_keeps_the_cpu_overhead_of_the_real_requests():
    """The CPU overhead (per step, request and token) counts the 9 real requests, not the 16 rows of
    the graph: the padding adds the same GPU time whatever the overhead; under async scheduling the
    padded GPU time is what the overhead overlaps."""
    shape = BatchShape.decode(9, 9000)
    heavy = {"step_s": 0.001, "per_seq_s": 1e-3, "per_token_s": 1e-3}
    deltas, padded_gpu = [], 0.0
    for overhead in (ZERO_OVERHEAD, heavy):
        system = resolve(make_scenario(**H100_2K, engine={"preset": "vllm-v1", "overhead": overhead,
                                                          "cuda_graph": {"capture_sizes": [16]}}))
        eager = make_cost_model(system.profile, system.model, 1)
        padded = make_cost_model(system.profile, system.model, 1, cuda_graph=system.cuda_graph)
        deltas.append(padded.step_time_s(shape) - eager.step_time_s(shape))
        assert padded.breakdown(shape).overhead_s == eager.breakdown(shape).overhead_s
        padded_gpu = padded_gpu or padded.step_time_s(shape)
    assert deltas[0] > 0 and deltas[1] == pytest.approx(deltas[0], rel=1e-9)
    light = {"step_s": 0.001, "per_seq_s": 1e-5, "per_token_s": 0.0}     # hidden behind the GPU step
    system = resolve(make_scenario(**H100_2K, engine={"preset": "vllm-v1", "overhead": light, "async_scheduling": True,
                                                      "cuda_graph": {"capture_sizes": [16]}}))
    cost = make_cost_model(system.profile, system.model, 1, cuda_graph=system.cuda_graph)
    assert padded_gpu > 0.001 + 9e-5 and cost.step_time_s(shape) == pytest.approx(padded_gpu, rel=1e-12)


def test_preset_capture_sizes_follow_the_engines_rules():
    def padding(hardware, engine, **over):
        return resolve(make_scenario(model="llama-3-8b", hardware=hardware, engine=engine,
                                     **{"scheduler.max_model_len": 2048, **over})).cuda_graph

    # vLLM v1, H100, the preset's 1,024 sequences: min(2 x 1024, 512) = 512, in steps of 8 then 16.
    v1 = padding("h100-sxm-datasheet", "vllm-v1", **{"scheduler.max_num_seqs": 1024,
                                                       "scheduler.max_num_batched_tokens": 8192})
    assert v1.capture_sizes[:5] == (1, 2, 4, 8, 16) and v1.max_capture_size == 512
    assert 248 in v1.capture_sizes and 264 not in v1.capture_sizes and 272 in v1.capture_sizes
    assert len(v1.capture_sizes) == 3 + 31 + 17 and v1.prefill_steps
    # ... 1,024 on B200; 2 x max_num_seqs (8 here) = 16 when smaller.
    assert padding("b200-datasheet", "vllm-v1", **{"scheduler.max_num_seqs": 1024,
                                                    "scheduler.max_num_batched_tokens": 8192}).max_capture_size == 1024
    assert padding("h100-sxm-datasheet", "vllm-v1").capture_sizes == (1, 2, 4, 8, 16)
    # vLLM 0.6: decode only, 1, 2, 4, multiples of 8 up to max_num_seqs padded (8 here).
    v06 = padding("h100-sxm-datasheet", "vllm-v0.6", **{"scheduler.max_num_seqs": 100})
    assert v06.capture_sizes[-2:] == (96, 104) and not v06.prefill_steps
    # SGLang: decode max_bs by GPU memory and TP.
    assert padding("h100-sxm-datasheet", "sglang").max_capture_size == 256
    assert padding("l40s-datasheet", "sglang").max_capture_size == 32
    sg = padding("h100-sxm-datasheet", "sglang", **{"deployment.tensor_parallel_size": 4})
    assert sg.max_capture_size == 512 and sg.capture_sizes[:6] == (1, 2, 4, 8, 12, 16) and 496 in sg.capture_sizes
    # TensorRT-LLM pads nothing by default (enable_padding: false) ...
    assert padding("h100-sxm-datasheet", "trtllm") is None
    # ... and max_capture_size simulates enable_padding with max_batch_size.
    trt = padding("h100-sxm-datasheet", {"preset": "trtllm", "cuda_graph": {"max_capture_size": 300}})
    assert trt.capture_sizes[:4] == (1, 2, 4, 8) and trt.capture_sizes[-4:] == (128, 192, 256, 300)


def test_the_scenarios_cuda_graph_fields_win_over_the_preset():
    def padding(cuda_graph):
        return resolve(make_scenario(**H100_2K, engine={"preset": "vllm-v1", "cuda_graph": cuda_graph})).cuda_graph

    assert padding({"capture_sizes": [64, 8, 8, 32]}).capture_sizes == (8, 32, 64)     # sorted, distinct
    assert padding(False) is None and padding({"capture_sizes": []}) is None           # eager
    assert padding(True).capture_sizes == (1, 2, 4, 8, 16)                             # the preset's
    assert padding({"max_capture_size": 40}).capture_sizes == (1, 2, 4, 8, 16, 24, 32, 40)
    assert not padding({"prefill_steps": False}).prefill_steps
    # Without engine: no padding at all (and the scenario results do not move: the cost model is unwrapped).
    assert resolve(make_scenario(**H100_2K)).cuda_graph is None


@pytest.mark.parametrize("cuda_graph,field,words", [
    ({"capture_sizes": [0, 8]}, "engine.cuda_graph.capture_sizes.0", "greater than or equal to 1"),
    ({"capture_sizes": [8, True]}, "engine.cuda_graph.capture_sizes.1", "not true/false"),
    ({"capture_sizes": [8, 16], "max_capture_size": 32}, "engine.cuda_graph.max_capture_size",
     "must be the largest of capture_sizes [8, 16]"),
    ({"capture_sizes": [], "max_capture_size": 32}, "engine.cuda_graph.max_capture_size",
     "must be the largest of capture_sizes []"),
    ({"max_capture_size": 0}, "engine.cuda_graph.max_capture_size", "greater than or equal to 1"),
    ({"max_size": 32}, "engine.cuda_graph.max_size", "unknown field"),
    ("some", "engine.cuda_graph", "valid dictionary"),
])
def test_bad_cuda_graph_settings_name_the_field(cuda_graph, field, words):
    with pytest.raises(ScenarioError) as info:
        make_scenario(engine={"preset": "vllm-v1", "cuda_graph": cuda_graph})
    assert info.value.field == field and words in str(info.value), str(info.value)


def test_padding_slows_decode_and_fast_forward_stays_exact():
    """Batches of up to 9 requests (the 16 graph on the GEMM-bound H100) decode more slowly padded; the
    fast-forwarded decode runs equal the step-by-step ones."""
    over = {"model": "llama-3-8b", "hardware": _gemm_bound_hardware(), "num_requests": 130, "scheduler.max_num_seqs": 9,
            "scheduler.max_num_batched_tokens": 8192, "workload.arrival.rate_per_s": 50.0,
            "workload.prompt_tokens": {"dist": "fixed", "value": 200},
            "workload.output_tokens": {"dist": "geometric", "mean": 60, "max": 300}}
    eager = simulate(make_scenario(**over, engine={"preset": "vllm-v1", "cuda_graph": False}))
    sc = make_scenario(**over, engine="vllm-v1")                    # graphs 1, 2, 4, 8, 16 (2 x 9 = 18)
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    assert fast.summary["tpot_s"]["p50"] > 1.1 * eager.summary["tpot_s"]["p50"]
    np.testing.assert_allclose(fast.requests["finish_time"], slow.requests["finish_time"], rtol=1e-9, atol=1e-9)



def test_sglang_and_trtllm_overlap_their_cpu_work_by_default():
    """SGLang's and TensorRT-LLM's overlap schedulers are on by default: their presets take
    max(GPU, CPU) per step; vLLM's do not; the scenario's engine.async_scheduling wins."""
    shape = BatchShape.decode(16, 16 * 500)

    def step(engine):
        system = resolve(make_scenario(**H100_2K, engine=engine))
        return make_cost_model(system.profile, system.model, 1).step_time_s(shape)

    sync = step("vllm-v1")
    o = resolve(make_scenario(**H100_2K)).profile.overhead
    for name in ("sglang", "trtllm"):
        # trtllm pads nothing by default; SGLang's 16-row graph is a captured size: no padding either.
        assert sync - step(name) == pytest.approx(o.step_s + 16 * o.per_seq_s, abs=1e-12), name
        assert step({"preset": name, "async_scheduling": False}) == sync
    assert step({"preset": "vllm-v1", "async_scheduling": True}) == step("sglang")
    assert make_scenario(engine="sglang").engine.runs_async and not make_scenario(engine="vllm-v0.6").engine.runs_async
