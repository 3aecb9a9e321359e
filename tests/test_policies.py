"""Batching policies: exact step plans on hand-built queues, equivalences that must hold, and the
direction and rough size of each policy's effect where the literature says what must happen."""
from __future__ import annotations

import pytest
from conftest import make_scenario, make_scheduler

from simulator import ScenarioError, load_scenario, simulate
from simulator.engine.request import RequestStatus


def step(sched, now):
    out = sched.schedule(now)
    plan = out.num_scheduled_tokens, list(out.preempted)
    sched.update_from_output(out, now + 1.0)
    return plan, out


# -- chunked prefill ---------------------------------------------------------------------------------
def test_chunked_prefill_splits_a_prompt_over_the_budget_and_piggybacks_the_next():
    """Budget 8: request 0's 10-token prompt takes 8 then 2 tokens; request 1's 6-token prompt
    rides in the second step's leftover budget; neither emits a token before its prompt is done."""
    sched = make_scheduler([10, 6], [3, 2], max_num_batched_tokens=8, policy="chunked_prefill")
    (plan, _), = [step(sched, 0.0)]
    assert plan == ({0: 8}, [])
    assert sched.table.status[0] == RequestStatus.RUNNING and sched.table.first_token_time[0] != 1.0
    plan, out = step(sched, 1.0)
    assert plan == ({0: 2, 1: 6}, [])
    assert out.prefill_context == [8, 0] and out.num_partial == 0
    assert list(sched.table.first_token_time[:2]) == [2.0, 2.0]
    assert step(sched, 2.0)[0] == ({0: 1, 1: 1}, [])          # request 1 emits its 2nd and last token
    assert sched.table.finish_time[1] == 3.0
    assert step(sched, 3.0)[0] == ({0: 1}, [])
    assert sched.table.finish_time[0] == 4.0 and sched.n == 0 and sched.kv.num_used_blocks == 0


def test_long_prefill_token_threshold_caps_each_chunk():
    sched = make_scheduler([10], [2], max_num_batched_tokens=64, policy="chunked_prefill",
                           long_prefill_token_threshold=4)
    plans = [step(sched, float(t))[0][0] for t in range(4)]
    assert plans == [{0: 4}, {0: 4}, {0: 2}, {0: 1}]
    assert sched.table.first_token_time[0] == 3.0


def test_chunked_prefill_decodes_go_first_and_chunks_take_the_rest():
    """A decoding request keeps its token every step while a long prompt streams in beside it."""
    sched = make_scheduler([4, 20], [10, 2], max_num_batched_tokens=8, max_num_seqs=4, policy="chunked_prefill")
    assert step(sched, 0.0)[0] == ({0: 4, 1: 4}, [])
    assert step(sched, 1.0)[0] == ({0: 1, 1: 7}, [])
    assert step(sched, 2.0)[0] == ({0: 1, 1: 7}, [])
    assert step(sched, 3.0)[0] == ({0: 1, 1: 2}, [])
    assert sched.table.first_token_time[1] == 4.0


def test_chunked_prefill_preempts_the_last_running_request_when_blocks_run_out():
    """6 blocks of 4 tokens: request 0 (8 tokens) and request 1's first chunk fill them; request 0's
    next decode needs a block, so request 1 (admitted last) is preempted and recomputed later."""
    sched = make_scheduler([8, 16], [4, 2], num_gpu_blocks=4, block_size=4, max_num_batched_tokens=16,
                           policy="chunked_prefill")
    assert step(sched, 0.0)[0] == ({0: 8, 1: 8}, [])
    plan, _ = step(sched, 1.0)
    assert plan == ({0: 1}, [1])
    assert sched.table.num_preemptions[1] == 1 and list(sched.waiting) == [1]


# -- request-level batching --------------------------------------------------------------------------
def test_dynamic_batch_runs_to_completion_without_joining():
    """Two seats: requests 0 and 1 form the batch; request 0 finishes first, but request 2 only
    starts once request 1 (the batch's longest) is done."""
    sched = make_scheduler([4, 4, 4], [2, 4, 2], max_num_seqs=2, policy="dynamic", max_wait_ms=0)
    assert sched.batch_start_time(0.0) == 0.0
    assert step(sched, 0.0)[0] == ({0: 4, 1: 4}, [])
    assert step(sched, 1.0)[0] == ({0: 1, 1: 1}, [])        # request 0 done
    assert step(sched, 2.0)[0] == ({1: 1}, [])              # a seat is free, nobody joins
    assert step(sched, 3.0)[0] == ({1: 1}, [])              # request 1 done: the batch is over
    assert step(sched, 4.0)[0] == ({2: 4}, [])


def test_dynamic_waits_for_a_full_batch_or_the_deadline():
    sched = make_scheduler([4], [2], max_num_seqs=4, policy="dynamic", max_wait_ms=250)
    assert sched.batch_start_time(0.0) == pytest.approx(0.25)   # one of four seats filled
    assert sched.schedule(0.1).admitted == []                   # not yet
    assert sched.schedule(0.25).admitted == [0]


def test_static_batch_pads_prompts_and_finished_slots():
    """Prefill is charged for the longest prompt in every slot; a finished request's slot keeps
    computing until the batch ends."""
    sched = make_scheduler([4, 12], [2, 4], max_num_seqs=2, policy="static", max_wait_ms=0)
    _, out = step(sched, 0.0)
    assert out.batch_shape().prefill_tokens == [12, 12]
    step(sched, 1.0)                                            # request 0 done
    _, out = step(sched, 2.0)
    assert out.num_decode == 1 and out.batch_shape().num_decodes == 2   # one real decode, two computing slots


def test_request_level_batching_with_one_seat_is_continuous_batching():
    """With max_num_seqs=1 nothing can join mid-flight and nothing is padded: static, dynamic
    (no wait) and continuous batching are the same queue, request for request."""
    sc = make_scenario(**{"num_requests": 300, "scheduler.max_num_seqs": 1,
                          "workload.output_tokens": {"dist": "geometric", "mean": 20}})
    base = simulate(sc).requests
    for policy in ("static", "dynamic", "chunked_prefill"):
        other = simulate(sc.with_overrides({"scheduler.policy": policy, "scheduler.max_wait_ms": 0})).requests
        for col in ("first_token_time", "finish_time"):
            assert (other[col] == base[col]).all(), (policy, col)


def test_dynamic_batching_at_low_load_waits_about_max_wait():
    """Arrivals 2 s apart on average, batches of 8 never fill: most requests find the engine idle
    and wait exactly the 50 ms deadline; the few that arrive inside an open window wait less, and
    those arriving during a 100 ms batch wait for its end."""
    sc = make_scenario(**{"num_requests": 400, "workload.arrival.rate_per_s": 0.5,
                          "scheduler.policy": "dynamic", "scheduler.max_wait_ms": 50})
    q = simulate(sc).summary["queue_delay_s"]
    assert q["p50"] == pytest.approx(0.050, abs=1e-9)
    assert 0.045 < q["mean"] < 0.055
    cont = simulate(sc.with_overrides({"scheduler.policy": "continuous"})).summary["queue_delay_s"]
    assert cont["mean"] < 0.005


def reference(**over):
    """llama-3-8b on h100-sxm with ShareGPT lengths (the README's reference scenario), small."""
    sc = load_scenario("examples/sharegpt-h100.yaml")
    return sc.with_overrides({"num_requests": 1500, "warmup_s": 0, **over})


def test_continuous_batching_beats_request_level_batching_on_p99_ttft():
    """Orca/vLLM's result: at moderate load, iteration-level scheduling cuts tail TTFT by orders of
    magnitude against batches that run to their longest request."""
    rate = {"workload.arrival.rate_per_s": 3.0}
    cont = simulate(reference(**rate)).summary["ttft_s"]["p99"]
    dyn = simulate(reference(**rate, **{"scheduler.policy": "dynamic"})).summary["ttft_s"]["p99"]
    stat = simulate(reference(**rate, **{"scheduler.policy": "static"})).summary["ttft_s"]["p99"]
    assert cont * 10 < dyn < stat


def test_chunked_prefill_lowers_p99_tpot_when_long_prompts_arrive_among_decodes():
    """Sarathi-Serve's result: a 6k-token prefill stalls every running decode for one long step;
    chunks of 512 tokens spread it over steps that all still emit tokens."""
    over = {"workload.arrival.rate_per_s": 2.0, "num_requests": 600,
            "workload.prompt_tokens": {"dist": "uniform", "min": 2000, "max": 6000},
            "workload.output_tokens": {"dist": "fixed", "value": 300}}
    cont = simulate(reference(**over)).summary
    chunk = simulate(reference(**over, **{"scheduler.policy": "chunked_prefill",
                                          "scheduler.long_prefill_token_threshold": 512})).summary
    assert chunk["tpot_s"]["p99"] < 0.9 * cont["tpot_s"]["p99"]
    assert chunk["ttft_s"]["p50"] > cont["ttft_s"]["p50"]        # the price: prompts take several steps


def test_chunked_prefill_accepts_a_budget_below_the_context_length():
    sc = make_scenario(**{"scheduler.max_num_batched_tokens": 64, "scheduler.policy": "chunked_prefill",
                          "workload.prompt_tokens": {"dist": "fixed", "value": 500}, "num_requests": 50})
    assert simulate(sc).summary["requests"]["completed"] == 50
    with pytest.raises(ScenarioError, match="max_num_batched_tokens"):
        simulate(sc.with_overrides({"scheduler.policy": "continuous"}))


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(ScenarioError, match=r"unknown policy.*chunked_prefill.*static"):
        simulate(make_scenario(**{"scheduler.policy": "orca"}))
