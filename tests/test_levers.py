"""Each serving lever moves the numbers the way theory says it must.

Model-level (``deployment.quantization``, ``kv_cache_dtype``, ``tensor_parallel_size``): fewer
weight bytes leave more KV blocks and shorten memory-bound decode steps; an fp8 cache holds twice
the tokens; TP splits the per-GPU work but adds two all-reduces per layer.
Request-level (``client``, ``admission``): non-streaming TTFT is the whole response; ``max_tokens``
and ``max_prompt_tokens`` cap lengths; a timed-out request frees its seat and KV blocks; load
shedding bounds queueing delay under overload and counts every rejection.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_scenario, make_scheduler

from simulator import load_profile, scenario_from_dict, simulate
from simulator.cost.analytic import RooflineCostModel
from simulator.cost.base import BatchShape
from simulator.engine.request import RequestStatus
from simulator.run.resolve import resolve
from simulator.scenario.models import MODEL_PRESETS
from simulator.scenario.quantization import resolve_precision

H100 = "h100-sxm"


def llama8b(**over):
    base = {"name": "levers", "seed": 3, "num_requests": 200, "model": "llama-3-8b", "hardware": H100,
            "workload": {"arrival": {"process": "poisson", "rate_per_s": 5},
                         "prompt_tokens": {"dist": "fixed", "value": 1000},
                         "output_tokens": {"dist": "fixed", "value": 200}}}
    sc = scenario_from_dict(base)
    return sc.with_overrides(over) if over else sc


def roofline(model: str, quantization=None, kv="auto", tp=1, hw="h100-sxm-datasheet") -> RooflineCostModel:
    profile = load_profile(hw)
    m = MODEL_PRESETS[model]
    return RooflineCostModel(profile, m, tp, precision=resolve_precision(m, profile, quantization, kv))


# -- model-level levers ----------------------------------------------------------------------------
def test_default_precision_reproduces_the_unquantized_model():
    """No quantization and an auto KV dtype change nothing (same cost, same blocks as before)."""
    p, m = load_profile("h100-sxm-datasheet"), MODEL_PRESETS["llama-3-8b"]
    plain, explicit = RooflineCostModel(p, m, 1), roofline("llama-3-8b")
    for n, ctx in ((1, 100), (64, 64 * 1500), (256, 256 * 3000)):
        assert plain.decode_step_time_s(n, ctx) == explicit.decode_step_time_s(n, ctx)
    assert resolve(llama8b()).kv_plan.num_gpu_blocks == 28116   # the README's figure


def test_int4_weights_raise_max_batch_and_lower_decode_step_time():
    """W4A16 weights take about a quarter of the bytes: more KV blocks, a bigger batch when the
    cache binds, and a faster memory-bound decode step (weights dominate its traffic)."""
    bf16, int4 = resolve(llama8b()), resolve(llama8b(**{"deployment.quantization": "int4"}))
    assert int4.kv_plan.weights_bytes < 0.36 * bf16.kv_plan.weights_bytes   # 0.52 B/weight + 16-bit head
    assert int4.kv_plan.num_gpu_blocks > 1.15 * bf16.kv_plan.num_gpu_blocks
    # Decode at batch 1 streams the weights once: int4 is at least 1.9x faster than bf16 there.
    t16 = roofline("llama-3-8b").decode_step_time_s(1, 1000)
    t4 = roofline("llama-3-8b", "int4").decode_step_time_s(1, 1000)
    assert t4 < t16 / 1.9
    # Prefill is compute-bound: W4A16 computes in 16 bits, so it is no faster there.
    big = roofline("llama-3-8b").step_time_s(BatchShape.prefill(8192))
    int4 = roofline("llama-3-8b", "int4").step_time_s(BatchShape.prefill(8192))
    assert int4 == pytest.approx(big, rel=0.02)
    # Saturated with long requests, the KV cache bounds the batch: int4 runs more at once.
    sat = {"num_requests": 300, "workload.arrival.rate_per_s": 1e6,
           "workload.prompt_tokens": {"dist": "fixed", "value": 4000},
           "workload.output_tokens": {"dist": "fixed", "value": 400}}
    a = simulate(llama8b(**sat)).summary
    b = simulate(llama8b(**sat, **{"deployment.quantization": "int4"})).summary
    assert a["batch"]["max_num_seqs"] < 256 and b["batch"]["max_num_seqs"] > 1.15 * a["batch"]["max_num_seqs"]
    assert b["deployment"]["max_concurrency"] > 1.15 * a["deployment"]["max_concurrency"]
    # Each step then carries more requests (a bigger batch reads more KV), but the work is done
    # sooner (only a little: 4000-token prompts make this run prefill-bound, where int4 gains nothing).
    assert b["sim_time_s"] < a["sim_time_s"]


def test_fp8_weights_compute_prefill_at_the_fp8_peak_where_the_profile_has_one():
    """W8A8 fp8 doubles the GEMM peak on H100 (prefill faster) but A100 has no fp8 units: there it
    is weight-only, with a 16-bit prefill and still a faster decode."""
    prefill = BatchShape.prefill(8192)
    h_bf16, h_fp8 = roofline("llama-3-8b"), roofline("llama-3-8b", "fp8")
    assert h_fp8.precision.compute_dtype == "fp8"
    assert h_fp8.breakdown(prefill).linear_s < 0.55 * h_bf16.breakdown(prefill).linear_s
    a100 = "a100-80gb-datasheet"
    a_bf16, a_fp8 = roofline("llama-3-8b", hw=a100), roofline("llama-3-8b", "fp8", hw=a100)
    assert a_fp8.precision.compute_dtype == "bf16"
    assert a_fp8.step_time_s(prefill) == pytest.approx(a_bf16.step_time_s(prefill), rel=0.02)
    assert a_fp8.decode_step_time_s(8, 8000) < a_bf16.decode_step_time_s(8, 8000)


def test_fp8_kv_cache_doubles_blocks_and_speeds_long_context_decode():
    bf16, fp8 = resolve(llama8b()), resolve(llama8b(**{"deployment.kv_cache_dtype": "fp8"}))
    assert fp8.kv_plan.kv_bytes_per_block * 2 == bf16.kv_plan.kv_bytes_per_block
    assert abs(fp8.kv_plan.num_gpu_blocks - 2 * bf16.kv_plan.num_gpu_blocks) <= 1
    assert fp8.kv_plan.weights_bytes == bf16.kv_plan.weights_bytes
    # Decode attention reads half the bytes: with 200k cached tokens in the batch the step is faster.
    assert roofline("llama-3-8b", kv="fp8").decode_step_time_s(64, 200_000) < \
        0.85 * roofline("llama-3-8b").decode_step_time_s(64, 200_000)


def test_tensor_parallel_70b_lowers_step_time_but_adds_all_reduce():
    """Llama-3-70B: TP=2 halves each GPU's weights and heads (faster steps) but pays two
    all-reduces per layer over NVLink, so it is slower than a perfect 2x split."""
    tp1, tp2 = roofline("llama-3-70b"), roofline("llama-3-70b", tp=2)
    for n in (1, 32, 128):
        shape = BatchShape.decode(n, n * 2000)
        one, two = tp1.breakdown(shape), tp2.breakdown(shape)
        assert one.comm_s == 0 and two.comm_s > 0
        assert two.total_s < one.total_s
        assert two.total_s > (one.total_s - one.overhead_s) / 2 + two.overhead_s   # not a perfect split
    prefill_comm = tp2.breakdown(BatchShape.prefill(4096)).comm_s
    assert prefill_comm > 50 * tp2.breakdown(BatchShape.decode(1, 2000)).comm_s / 2   # grows with tokens
    # End to end: TP=1 does not fit one H100, TP=2 does, and the summary counts GPUs.
    r = simulate(llama8b(**{"model": "llama-3-70b", "deployment.tensor_parallel_size": 2,
                            "deployment.replicas": 2, "num_requests": 60}))
    assert r.summary["num_gpus"] == 4 and r.summary["deployment"]["num_gpus"] == 4
    assert r.summary["requests"]["completed"] == 60


# -- request-level levers --------------------------------------------------------------------------
def test_non_streaming_ttft_equals_e2e():
    sc = llama8b(num_requests=100)
    streamed, whole = simulate(sc), simulate(sc.with_overrides({"client.stream": False}))
    done = whole.requests[whole.requests["status"] == "finished_length_capped"]
    np.testing.assert_array_equal(done["ttft_s"].to_numpy(), done["e2e_s"].to_numpy())
    assert whole.summary["ttft_s"]["p99"] == whole.summary["e2e_s"]["p99"]
    assert streamed.summary["ttft_s"]["p99"] < 0.2 * streamed.summary["e2e_s"]["p99"]
    # The engine is unchanged: same first-token instants, same E2E.
    np.testing.assert_array_equal(streamed.requests["first_token_time"], whole.requests["first_token_time"])
    assert whole.summary["e2e_s"] == streamed.summary["e2e_s"]


def test_max_tokens_caps_output_and_max_prompt_tokens_trims_prompts():
    sc = llama8b(**{"num_requests": 300, "workload.prompt_tokens": {"dist": "uniform", "min": 100, "max": 9000},
                    "workload.output_tokens": {"dist": "geometric", "mean": 300},
                    "workload.over_length": "error"})
    with pytest.raises(Exception, match="max_model_len"):
        simulate(sc)                      # prompts of up to 9000 tokens do not fit 8192
    capped = sc.with_overrides({"client.max_prompt_tokens": 4000, "client.max_tokens": 128})
    r = simulate(capped)
    req = r.requests
    assert req["num_prompt_tokens"].max() == 4000 and req["max_tokens"].max() == 128
    assert (req["num_output_tokens"] <= 128).all()
    assert r.summary["requests"]["completed"] == 300
    loose = simulate(capped.with_overrides({"client.max_tokens": 4000}))
    assert r.summary["e2e_s"]["mean"] < loose.summary["e2e_s"]["mean"]


def test_finish_requests_frees_seat_and_kv_blocks():
    """Aborting a running request returns its blocks and seat; aborting a waiting one removes it."""
    sched = make_scheduler([10, 10, 10], [50, 50, 50], num_gpu_blocks=100, block_size=4, max_num_seqs=2)
    out = sched.schedule(0.0)
    sched.update_from_output(out, 0.1)
    assert sched.n == 2 and list(sched.waiting) == [2]
    used = sched.kv.num_used_blocks          # 2 x ceil(10 / 4) = 6
    assert used == 6
    sched.finish_requests([0, 2], RequestStatus.FINISHED_ABORTED, 0.2)
    assert sched.n == 1 and sched.running_ids() == [1] and not sched.waiting
    assert sched.kv.num_used_blocks == 3 and sched.context_total == 10
    t = sched.table
    assert t.status[0] == t.status[2] == RequestStatus.FINISHED_ABORTED
    assert t.num_output_tokens[0] == 1 and t.num_output_tokens[2] == 0 and t.finish_time[0] == 0.2


def test_timed_out_request_frees_its_kv_for_the_next():
    """The cache holds one 1500-token prompt at a time: request 1 waits until request 0 times out,
    and is admitted at that very step boundary (request 0's KV was freed)."""
    sc = make_scenario(**{"num_requests": 2, "seed": 4, "workload.arrival.rate_per_s": 20,
                          "scheduler.num_gpu_blocks_override": 128, "client.timeout_s": 1.0,
                          "workload.prompt_tokens": {"dist": "fixed", "value": 1500},
                          "workload.output_tokens": {"dist": "fixed", "value": 500}})
    r = simulate(sc)
    req = r.requests
    assert req["arrival_time"][1] < req["arrival_time"][0] + 1.0
    assert req["finish_time"][0] >= req["arrival_time"][0] + 1.0
    assert req["finish_time"][0] < req["arrival_time"][0] + 1.0 + 0.01 + 1e-9   # next step boundary
    assert req["first_scheduled_time"][1] == req["finish_time"][0]
    s = r.summary["requests"]
    assert s["timed_out"] == 2 and s["completed"] == 0 and s["timed_out_waiting"] == 0
    assert (req["num_output_tokens"] < 500).all()
    assert r.steps["kv_blocks_used"].max() <= 128


def _overloaded(**over):
    """M/D/1 at rho = 1.5: one request at a time, 0.1 s each, 15 arrivals per second."""
    return make_scenario(**{"num_requests": 3000, "scheduler.max_num_seqs": 1,
                            "hardware": {"cost_model": "constant", "step_time_s": 0.1},
                            "workload.arrival.rate_per_s": 15.0,
                            "workload.output_tokens": {"dist": "fixed", "value": 1}, **over})


def test_load_shedding_bounds_queue_delay_under_overload():
    free = simulate(_overloaded()).summary
    assert free["queue_delay_s"]["p99"] > 50          # the queue grows without bound
    for over, bound in (({"admission.max_queue_len": 5}, 0.6 + 1e-9), ({"admission.max_queue_delay_s": 1.0}, 1.0)):
        s = simulate(_overloaded(**over)).summary
        rq = s["requests"]
        assert s["queue_delay_s"]["p99"] < bound
        # Served at capacity (10/s), the other third shed and counted, none lost.
        assert rq["shed"] == rq["rejected"] and rq["completed"] + rq["shed"] == rq["arrived"] == 3000
        assert 0.28 < rq["shed"] / 3000 < 0.39
        assert s["throughput"]["requests_per_s"] == pytest.approx(10.0, rel=0.03)


def test_timeouts_and_shedding_fast_forward_equals_step_by_step():
    """Deadlines end decode runs like arrivals: one event per run and one per step agree exactly."""
    sc = make_scenario(**{"num_requests": 400, "workload.arrival.rate_per_s": 60, "scheduler.max_num_seqs": 6,
                          "client.timeout_s": 0.8, "admission.max_queue_delay_s": 0.5,
                          "scheduler.num_gpu_blocks_override": 200,
                          "workload.prompt_tokens": {"dist": "uniform", "min": 1, "max": 300},
                          "workload.output_tokens": {"dist": "geometric", "mean": 40, "max": 400}})
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    cols = ["first_scheduled_time", "first_token_time", "finish_time"]
    np.testing.assert_allclose(fast.requests[cols].to_numpy(), slow.requests[cols].to_numpy(), atol=1e-9)
    assert (fast.requests["status"] == slow.requests["status"]).all()
    assert (fast.requests["num_output_tokens"] == slow.requests["num_output_tokens"]).all()
    assert fast.summary["requests"]["timed_out"] > 0 and fast.summary["requests"]["shed"] > 0
    for col in ("num_seqs", "kv_blocks_used", "num_waiting"):
        assert (fast.steps[col].to_numpy() == slow.steps[col].to_numpy()).all(), col


def test_levers_example_runs_and_its_guards_act_without_the_model_levers():
    from pathlib import Path

    from simulator import load_scenario

    path = Path(__file__).resolve().parents[1] / "examples/levers-h100.yaml"
    small = {"num_requests": 1500, "warmup_s": 0, "cooldown_s": 0}
    with_levers = simulate(load_scenario(path, small)).summary
    assert with_levers["deployment"]["quantization"] == "int4" and with_levers["deployment"]["kv_cache_dtype"] == "fp8"
    without = simulate(load_scenario(path, {**small, "deployment.quantization": None,
                                            "deployment.kv_cache_dtype": "auto", "client.max_tokens": None})).summary
    rq, rq0 = with_levers["requests"], without["requests"]
    assert rq["timed_out"] + rq["shed"] < rq0["timed_out"] + rq0["shed"]
    assert with_levers["throughput"]["requests_per_s"] > without["throughput"]["requests_per_s"]


def test_timeout_while_a_dynamic_batcher_waits_to_fill_its_batch():
    """An idle engine waiting (max_wait_ms) to fill a batch still notices a client giving up: the
    request is dropped at its deadline exactly, and the engine never starts a batch for it."""
    sc = make_scenario(**{"num_requests": 1, "scheduler.policy": "dynamic", "scheduler.max_wait_ms": 5000.0,
                          "client.timeout_s": 1.0})
    for fast in (True, False):
        r = simulate(sc, fast_forward=fast)
        req = r.requests
        assert req["status"].astype(str)[0] == "finished_aborted"
        assert req["finish_time"][0] == pytest.approx(req["arrival_time"][0] + 1.0, abs=1e-12)
        assert r.summary["requests"]["timed_out_waiting"] == 1 and len(r.steps) == 0


def test_aborting_a_swapped_out_request_returns_its_host_blocks():
    """Swap preemption parks a request's KV in host memory; if its client gives up while it waits,
    those host blocks come back (and nothing is left in the waiting queue)."""
    from simulator.engine.scheduler import SwapSpace

    sched = make_scheduler([8, 8], [50, 50], num_gpu_blocks=5, block_size=4, max_num_seqs=2,
                           preemption_mode="swap")
    sched.swap = SwapSpace(capacity_blocks=100, bytes_per_block=1e6, bandwidth_bytes_per_s=1e10)
    out = sched.schedule(0.0)                 # both admitted: 2 x 2 blocks
    sched.update_from_output(out, 0.1)
    out = sched.schedule(0.1)                 # both need a 3rd block, 1 free: request 1 swapped out
    assert out.preempted == [1] and sched.swap.used_blocks == 2
    sched.update_from_output(out, 0.2)
    sched.finish_requests([1], RequestStatus.FINISHED_ABORTED, 0.2)
    assert sched.swap.used_blocks == 0 and not sched.waiting and sched.running_ids() == [0]
    assert sched.table.num_output_tokens[1] == 1


def test_aborting_under_priority_scheduling_removes_from_the_heap():
    sched = make_scheduler([8, 8, 8], [5, 5, 5], max_num_seqs=1, scheduling_policy="priority")
    sched.finish_requests([2], RequestStatus.FINISHED_SHED, 0.0)
    assert list(sched.waiting) == [0, 1]
    out = sched.schedule(0.0)
    assert out.admitted == [0]


def test_num_gpus_counts_disaggregated_pools():
    sc = make_scenario(**{"num_requests": 30, "scheduler.policy": "disaggregated", "deployment.prefill_replicas": 1,
                          "deployment.decode_replicas": 2, "deployment.kv_transfer_bandwidth_bytes_per_s": 2e9,
                          "admission.max_queue_len": 1000})
    s = simulate(sc).summary
    assert s["num_gpus"] == 3 and s["requests"]["completed"] == 30
