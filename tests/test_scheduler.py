"""Exact step plans of the vLLM-style continuous batching scheduler on hand-built queues.

Each test drives ``schedule()`` / ``update_from_output()`` by hand, as vLLM's own scheduler
tests do, and asserts who is scheduled, with how many tokens, and who is preempted.
"""
from __future__ import annotations

import numpy as np
from conftest import make_scheduler

from simulator.engine.request import RequestStatus


def step(sched, now):
    out = sched.schedule(now)
    plan = out.num_scheduled_tokens, list(out.preempted)
    sched.update_from_output(out, now + 1.0)
    return plan


def test_prefill_emits_first_token_then_one_token_per_step():
    """A prompt is computed in one step, which also emits the first token; each decode step emits one."""
    sched = make_scheduler([10], [3])
    assert step(sched, 0.0) == ({0: 10}, [])
    assert sched.table.first_token_time[0] == 1.0
    assert step(sched, 1.0) == ({0: 1}, [])
    assert step(sched, 2.0) == ({0: 1}, [])
    assert sched.table.status[0] == RequestStatus.FINISHED_LENGTH_CAPPED
    assert sched.table.finish_time[0] == 3.0
    assert sched.kv.num_used_blocks == 0 and sched.n == 0


def test_token_budget_defers_a_prompt_that_does_not_fit():
    """Budget 16: the 10-token prompt goes first; the 8-token one waits for the next step, where it
    shares the budget with the first request's decode token (running before waiting)."""
    sched = make_scheduler([10, 8], [5, 5], max_num_batched_tokens=16)
    assert step(sched, 0.0) == ({0: 10}, [])
    assert step(sched, 1.0) == ({0: 1, 1: 8}, [])
    assert step(sched, 2.0) == ({0: 1, 1: 1}, [])


def test_max_num_seqs_caps_the_running_batch():
    """With two seats the third request waits until a running one finishes."""
    sched = make_scheduler([4, 4, 4], [2, 3, 2], max_num_seqs=2)
    assert step(sched, 0.0) == ({0: 4, 1: 4}, [])
    assert step(sched, 1.0) == ({0: 1, 1: 1}, [])       # request 0 finishes here
    assert step(sched, 2.0) == ({1: 1, 2: 4}, [])
    assert sched.table.first_scheduled_time[2] == 2.0


def test_fcfs_head_of_line_blocking_on_kv():
    """The head needs more blocks than are free; the small request behind it is not let past."""
    sched = make_scheduler([8, 40, 4], [50, 2, 2], num_gpu_blocks=10, block_size=4)
    assert step(sched, 0.0) == ({0: 8}, [])   # 2 blocks; request 1 needs 10 > 8 free
    out = sched.schedule(1.0)
    assert out.num_scheduled_tokens == {0: 1} and sched.num_waiting == 2
    assert list(sched.waiting) == [1, 2]


def test_preemption_recomputes_the_last_admitted_request():
    """Two requests fill all blocks; when both need a new block the later one is preempted (FCFS),
    goes to the front of the waiting queue with its KV dropped, and nothing is admitted that step.
    It comes back with prompt + generated tokens to recompute, keeping its first-token time."""
    sched = make_scheduler([8, 8, 4], [20, 20, 1], num_gpu_blocks=4, block_size=4, max_num_seqs=3)
    assert step(sched, 0.0) == ({0: 8, 1: 8}, [])     # 4 blocks used; request 2 cannot fit
    assert sched.kv.num_free_blocks == 0
    plan, preempted = step(sched, 1.0)                 # both need a 3rd block; only request 0 keeps going
    assert plan == {0: 1} and preempted == [1]
    assert list(sched.waiting) == [1, 2]
    assert sched.table.num_preemptions[1] == 1 and sched.table.num_output_tokens[1] == 1
    first_token_1 = sched.table.first_token_time[1]
    # Request 0 now holds 3 blocks; request 1 needs 8 + 1 = 9 tokens = 3 blocks: it waits (1 free).
    assert step(sched, 2.0) == ({0: 1}, [])
    assert sched.table.first_token_time[1] == first_token_1


def test_preempted_request_is_readmitted_with_its_generated_tokens():
    """After the preempting request finishes, the preempted one recomputes prompt + generated tokens."""
    sched = make_scheduler([8, 8], [2, 5], num_gpu_blocks=4, block_size=4)
    step(sched, 0.0)                                   # both prefilled, 4/4 blocks
    plan, preempted = step(sched, 1.0)                 # request 0 decodes (needs block 3) and finishes
    assert preempted == [1] and plan == {0: 1}
    assert sched.table.status[0] == RequestStatus.FINISHED_LENGTH_CAPPED
    assert step(sched, 2.0) == ({1: 9}, [])            # 8 prompt + 1 generated, from scratch
    assert sched.table.num_output_tokens[1] == 1       # table copy is refreshed when it stops running
    for t in range(3, 7):
        step(sched, float(t))
    assert sched.table.status[1] == RequestStatus.FINISHED_LENGTH_CAPPED
    assert sched.table.num_output_tokens[1] == 5 and sched.kv.num_used_blocks == 0


def test_preemption_keeps_the_largest_feasible_prefix():
    """With several running requests short of blocks, vLLM's pop-the-last loop keeps the longest
    prefix of the running list that fits once the rest are freed."""
    sched = make_scheduler([4, 4, 4, 4], [9, 9, 9, 9], num_gpu_blocks=5, block_size=4)
    step(sched, 0.0)                                   # 4 blocks used, each request's block is full
    plan, preempted = step(sched, 1.0)                 # 4 need 1 each, 1 free: keep rows 0,1 (free 2)
    assert preempted == [2, 3] and plan == {0: 1, 1: 1}
    assert list(sched.waiting) == [2, 3]
    assert sched.kv.num_used_blocks == 4


def test_decode_run_matches_single_steps():
    """plan_decode_run advances k identical steps: same tokens, blocks and finish as k single steps."""
    from simulator.cost.analytic import ConstantCostModel
    from simulator.engine.decode_run import DecodePrices
    from simulator.scenario.profiles import HardwareProfile

    cost = ConstantCostModel(HardwareProfile(cost_model="constant", step_time_s=0.5))
    a = make_scheduler([5, 3, 9], [7, 12, 4], num_gpu_blocks=100, block_size=4)
    b = make_scheduler([5, 3, 9], [7, 12, 4], num_gpu_blocks=100, block_size=4)
    step(a, 0.0)
    step(b, 0.0)
    out = a.schedule(1.0)
    run = a.plan_decode_run(out, 1.0, np.inf, DecodePrices(cost))
    assert run.num_steps == 3 and run.finishes            # request 2 has 3 tokens left
    assert run.total_s == 1.5
    a.advance_decode(run, 2.5)
    for t in (1.0, 1.5, 2.0):
        step(b, t)
    assert a.kv.num_used_blocks == b.kv.num_used_blocks
    assert a.running_ids() == b.running_ids() == [0, 1]
    np.testing.assert_array_equal(a.computed_tokens(), b.computed_tokens())
    # 2 + 1 + 3 blocks after prefill; at step 2 the 3-token request crosses into a second block.
    assert list(run.kv_blocks_used()) == [6, 7, 7]


def test_decode_run_stops_at_the_step_in_which_the_next_arrival_falls():
    from simulator.cost.analytic import ConstantCostModel
    from simulator.engine.decode_run import DecodePrices
    from simulator.scenario.profiles import HardwareProfile

    cost = ConstantCostModel(HardwareProfile(cost_model="constant", step_time_s=0.5))
    s = make_scheduler([4], [100])
    step(s, 0.0)
    run = s.plan_decode_run(s.schedule(1.0), 1.0, 2.2, DecodePrices(cost))   # steps end 1.5, 2.0, 2.5
    assert run.num_steps == 3 and not run.finishes


def test_kv_cache_interface_counts_blocks_per_request():
    """The scheduler's KV calls on the count-based cache: admission holds ``ceil(tokens / block_size)``
    blocks and finds nothing cached; preemption releases rows from the last until the others' new
    blocks fit (the largest feasible prefix)."""
    from simulator.engine.kv_cache import KVCacheManager

    kv = KVCacheManager(10, 4)
    assert kv.blocks_for(9) == 3 and kv.blocks_for(np.array([0, 1, 4, 5])).tolist() == [0, 1, 1, 2]
    assert kv.admit(0, 9, budget=8) == -1 and kv.num_used_blocks == 0        # over the token budget
    assert kv.admit(0, 9, budget=16) == 0 and kv.num_used_blocks == 3
    assert kv.admit(1, 1, 16, 13) == 0 and kv.num_used_blocks == 7           # swap-in: 1 token over 13
    assert kv.admit(2, 16, budget=16) == -1 and kv.num_used_blocks == 7      # 4 blocks, 3 free
    kv.release(1, 13)
    assert kv.num_used_blocks == 3
    kv.release_many([0], [9])
    assert kv.num_used_blocks == 0
    kv.allocate(9)                  # rows of 8, 4 and 12 cached tokens hold 2 + 1 + 3 blocks; 3 others
    keep = kv.release_tail_until_fits([5, 6, 7], [8, 4, 12], [1, 1, 1])
    assert keep == 2 and kv.num_used_blocks == 6                             # row 2 released: 3 blocks
