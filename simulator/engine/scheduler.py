"""Iteration-level (continuous) batching with vLLM v1 semantics, for one replica.

Each engine step hands out a token budget of ``max_num_batched_tokens``:

1. *Running requests first*, in admission order, one token each (they are decoding). Each needs
   KV slots for its cached tokens plus the new one. When the free blocks do not cover them, the
   scheduler preempts the most recently admitted running request (FCFS), frees its blocks, puts
   it at the *front* of the waiting queue with ``num_computed_tokens = 0`` (recompute), and tries
   again, exactly as vLLM's ``_preempt_request`` loop does.
2. *Then waiting requests*, in FCFS order, only if nothing was preempted this step and fewer than
   ``max_num_seqs`` run: each needs its whole prompt (plus any tokens it had generated before a
   preemption) to fit the remaining budget and the free blocks; the first that does not fit stops
   admission (no skipping ahead).

A prefill step also emits the request's first token, as in vLLM. The running batch is kept as
Python lists of ints, one per row field (struct of arrays: plain list reads and writes in the
compiled engine), and the engine advances many identical decode steps in one event
(:meth:`Scheduler.plan_decode_run`), which is what makes 100k-request runs take seconds.

Block accounting needs no per-request block counter: a running request that has cached ``c``
tokens holds ``ceil(c / block_size)`` blocks, and it needs a new block exactly when
``c % block_size == 0``. A histogram of ``c % block_size`` over the batch therefore gives the
blocks every future decode step needs, in closed form. Everything else about blocks goes through
the KV cache (:class:`~simulator.engine.kv_cache.KVCacheManager`): ``admit`` a waiting request,
``release`` a leaving one, ``release_tail_until_fits`` to choose the preempted rows; with prefix
caching the same calls share blocks, so the scheduler never asks which cache it has.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar, cast

import numpy as np

from simulator.engine.decode_run import DecodePrices, DecodeRun, plan_run, turned
from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.output import SchedulerOutput
from simulator.engine.request import RequestStatus, RequestTable
from simulator.engine.request_queue import PriorityWaitingQueue
from simulator.engine.swap import SwapSpace
from simulator.registry import Registry
from simulator.scenario.config import SchedulerConfig

if TYPE_CHECKING:  # pragma: no cover
    from simulator.engine.interface import OwnSteps

_RUNNING, _PREEMPTED, _DONE = (int(RequestStatus.RUNNING), int(RequestStatus.PREEMPTED),
                               int(RequestStatus.FINISHED_LENGTH_CAPPED))


class Scheduler:
    """Waiting queue, running batch and KV blocks of one replica (see module docstring).

    Args:
        config: the scenario's scheduler section (vLLM names).
        kv: the replica's block accounting (:class:`~simulator.engine.prefix_cache.PrefixCachingKVManager`
            under ``enable_prefix_caching``): the scheduler admits, releases and preempts through it.
        table: the run's request columns.
    """

    splits_prompts: ClassVar[bool] = False
    """Whether a prompt may be computed over several steps (else it must fit one step's budget):
    what the policy declares for the scenario's checks (``run.resolve``), not an engine path."""
    uses_token_budget: ClassVar[bool] = True
    """Whether ``max_num_batched_tokens`` limits a step (request-level batching prefills whole
    batches): declared for the scenario's checks, and the budget :meth:`_schedule_waiting` admits to."""

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, table: RequestTable) -> None:
        self.config = config
        self.kv = kv
        self.table = table
        self.block_size = config.block_size
        self.priority_order = config.scheduling_policy == "priority"
        self.waiting: deque[int] | PriorityWaitingQueue = (PriorityWaitingQueue(table) if self.priority_order
                                                           else deque())
        self.sort_pending = False
        """Rows must be re-sorted by (priority, arrival) before the next step (priority scheduling)."""
        self.max_num_seqs = config.max_num_seqs
        """Running requests this batch may hold: ``max_num_seqs``, less those of the other micro-batches
        of a pipelined replica (:mod:`simulator.engine.pipeline`: the limit is the engine's)."""
        self.swap: SwapSpace | None = None
        """Host memory for ``preemption_mode: swap`` (None: recompute)."""
        self._swapped: dict[int, int] = {}
        """Request id -> tokens whose KV waits outside the cache (host memory, or in transfer)."""
        self._restore_free: set[int] = set()
        """Of those, requests whose KV arrives at no cost to this engine (disaggregated handoffs)."""
        # Running batch, rows [0, n) in admission order: one list per field, n entries each.
        self.n = 0
        self.req_id: list[int] = []
        self.num_computed_tokens: list[int] = []
        """Each running row's cached tokens, less ``_phase_computed`` (:meth:`computed_tokens` adds it)."""
        self.num_remaining_tokens: list[int] = []
        """Output tokens each running request has still to emit, plus ``_phase_remaining``
        (:meth:`remaining_tokens` subtracts it)."""
        self.context_total = 0
        """Sum of ``num_computed_tokens`` over the running batch (kept incrementally)."""
        self._rows: list[list[int]] = [self.req_id, self.num_computed_tokens, self.num_remaining_tokens]
        """Per-row lists, changed together when rows leave the batch (policies may add theirs)."""
        self.pad_rows = 0
        self.pad_context = 0
        """Slots of finished requests that still compute (static batching pads), and their context."""
        self.num_scheduler_steps = config.num_scheduler_steps
        self.steps_into_run = 0
        """Multi-step scheduling: decode steps done in the current run (no admission until it ends)."""
        # A tracked batch (this class's rows only: policies step rows by different amounts). Every
        # step moves every row's counts on by the same amount, so the row arrays are kept in a frame
        # that steps do not move: a row's cached tokens are its ``num_computed_tokens`` plus
        # ``_phase_computed``, its remaining output its ``num_remaining_tokens`` less
        # ``_phase_remaining`` (update_from_output adds one to both phases, advance_decode the run's
        # steps; untracked schedulers keep both at zero). In the same frame the batch's residue
        # histogram and its smallest remaining output are kept up to date as rows come and leave
        # (leaving rows are struck from the heap lazily), instead of being read from the arrays.
        self._tracked = type(self) is Scheduler
        """Whether the batch is tracked, and :meth:`plan_tracked_run` plans from it (this class's
        rows only: policies keep padded or partial rows)."""
        self._phase_computed = 0
        self._residues_at_phase = [0] * self.block_size
        self._phase_remaining = 0
        self._remaining_heap: list[int] = []
        self._remaining_gone: dict[int, int] = {}

    # -- queue interface ---------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return self.n

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def running_ids(self) -> list[int]:
        return list(self.req_id)

    def add_request(self, rid: int) -> None:
        self.waiting.append(rid)
        self.table.status[rid] = RequestStatus.WAITING

    # -- planning ------------------------------------------------------------------------------------
    def batch_start_time(self, now: float) -> float:
        """When an idle engine with waiting requests starts working: at once, for continuous batching."""
        return now

    def schedule(self, now: float) -> SchedulerOutput:
        """Plan the next step (allocating its KV blocks); see the module docstring."""
        out = SchedulerOutput()
        if self.n:
            self._schedule_running(out)
        if self.waiting and not out.preempted and self.steps_into_run == 0:
            self._schedule_waiting(out, now)
        return out

    def _multi_step(self, decode_steps: int) -> None:
        """Count ``decode_steps`` pure-decode steps into the multi-step run (a step that admits
        requests, or an empty batch, ends it)."""
        if self.n == 0 or not decode_steps:
            self.steps_into_run = 0
        else:
            self.steps_into_run = (self.steps_into_run + decode_steps) % self.num_scheduler_steps

    def _min_remaining(self) -> int:
        """The running batch's fewest output tokens still to emit (tracked rows; a batch of at least one)."""
        heap, gone = self._remaining_heap, self._remaining_gone
        while True:
            top = heap[0]
            g = gone.get(top)
            if not g:
                return top - self._phase_remaining
            if g == 1:
                del gone[top]
            else:
                gone[top] = g - 1
            heapq.heappop(heap)

    def computed_tokens(self, rows: Iterable[int] | None = None) -> list[int]:
        """``num_computed_tokens`` of the running ``rows`` (default: all), in tokens."""
        pc, src = self._phase_computed, self.num_computed_tokens
        if rows is None:
            return [c + pc for c in src]
        return [src[row] + pc for row in rows]

    def remaining_tokens(self, rows: Iterable[int] | None = None) -> list[int]:
        """Output tokens the running ``rows`` (default: all) have still to emit."""
        pr, src = self._phase_remaining, self.num_remaining_tokens
        if rows is None:
            return [r - pr for r in src]
        return [src[row] - pr for row in rows]

    def _untrack(self, computed: Iterable[int], remaining: Iterable[int]) -> None:
        """Rows with these ``num_computed_tokens`` and remaining tokens leave the tracked batch."""
        bs, pc, pr = self.block_size, self._phase_computed, self._phase_remaining
        res, gone = self._residues_at_phase, self._remaining_gone
        for c in computed:
            res[(c - pc) % bs] -= 1
        for r in remaining:
            gone[r + pr] = gone.get(r + pr, 0) + 1

    def _schedule_running(self, out: SchedulerOutput) -> None:
        n, bs = self.n, self.block_size
        residues: list[int] | None
        if self._tracked:
            residues = turned(self._residues_at_phase, self._phase_computed)
        else:
            residues = [0] * bs
            for c in self.num_computed_tokens:
                residues[c % bs] += 1
        need = residues[0]        # rows whose blocks are exactly full need one more
        keep = n
        if need > self.kv.num_free_blocks:
            computed = self.computed_tokens()
            need_rows = [1 if c % bs == 0 else 0 for c in computed]
            keep = self.kv.release_tail_until_fits(self.req_id, computed, need_rows)
            self._preempt_rows(keep, out)
            need = sum(need_rows[:keep])
            residues = None
        ok = self.kv.allocate(need)
        assert ok
        out.num_decode = keep
        out.decode_ids = self.req_id
        out.decode_context_sum = self.context_total + keep
        out.residues = residues

    def _preempt_rows(self, keep: int, out: SchedulerOutput) -> None:
        """Preempt running rows ``keep..n`` (their KV has been released: recompute, or swap out)."""
        n, table = self.n, self.table
        rows = range(keep, n)
        preempted = self.req_id[keep:]
        computed, remaining = self.computed_tokens(rows), self.remaining_tokens(rows)
        if self._tracked:
            self._untrack(computed, remaining)
        if self.swap is not None:
            self._swap_out(preempted, computed, out)
        self.context_total -= sum(computed)
        ids = np.asarray(preempted, dtype=np.int64)
        table.num_output_tokens[ids] = table.max_tokens[ids] - np.asarray(remaining, dtype=np.int64)
        table.num_preemptions[ids] += 1
        table.status[ids] = _PREEMPTED
        self.waiting.extendleft(reversed(preempted))   # front of the queue, in running order
        out.preempted = preempted
        for rows_field in self._rows:
            del rows_field[keep:]
        self.n = keep

    def _schedule_waiting(self, out: SchedulerOutput, now: float) -> None:
        table, kv = self.table, self.kv
        budget = (self.config.max_num_batched_tokens if self.uses_token_budget else _NO_LIMIT) - (
            out.num_decode if out.decode_budget_tokens is None else out.decode_budget_tokens)
        max_seqs = self.max_num_seqs
        waiting = self.waiting
        while waiting and self.n < max_seqs:
            rid = waiting[0]
            generated = int(table.num_output_tokens[rid])
            swapped = self._swapped.get(rid) if self._swapped else None
            if swapped is None:
                tokens = int(table.num_prompt_tokens[rid]) + generated
                cached = tokens
            else:                                      # swap in: its KV returns, it decodes a token
                tokens, cached = 1, swapped + 1
            hit = kv.admit(rid, tokens, budget, cached)   # prefix-cache hits (never with swap)
            if hit < 0:
                break
            if hit and generated == 0 and table.num_preemptions[rid] == 0:
                table.num_cached_tokens[rid] = hit
            waiting.popleft()
            if swapped is not None:
                self._swap_in(rid, swapped, out)
            elif hit or out.prefill_context is not None:   # new tokens attend over the cached ones
                if out.prefill_context is None:
                    out.prefill_context = [0] * len(out.admitted)
                out.prefill_context.append(hit)
            row = self.n
            remaining = int(table.max_tokens[rid]) - generated
            self.req_id.append(rid)
            self.num_computed_tokens.append(cached - self._phase_computed)     # cached once this step ends
            self.num_remaining_tokens.append(remaining + self._phase_remaining)
            if self._tracked:   # this step's update_from_output moves both phases on by one
                self._residues_at_phase[(cached - self._phase_computed - 1) % self.block_size] += 1
                heapq.heappush(self._remaining_heap, remaining + self._phase_remaining)
            self.n = row + 1
            self.context_total += cached
            budget -= tokens - hit
            table.status[rid] = _RUNNING
            if generated == 0:
                out.admitted_first.append(rid)
                if table.num_preemptions[rid] == 0:
                    table.first_scheduled_time[rid] = now
            out.admitted.append(rid)
            out.admitted_tokens.append(tokens - hit)
        if self.priority_order and out.admitted:
            self.sort_pending = True

    # -- applying a step ---------------------------------------------------------------------------
    def update_from_output(self, out: SchedulerOutput, now: float) -> list[int]:
        """Apply a finished step at instant ``now``; returns the ids of requests that finished."""
        m, n = out.num_decode, self.n
        if m:
            self.context_total += m
            if self.pad_rows:
                self.pad_context += self.pad_rows
        if self._tracked:      # the decoding rows cached one more token, every row emitted one
            self._phase_computed += 1
            self._phase_remaining += 1
            computed = self.num_computed_tokens
            for row in range(m, n):                   # admitted rows (a few): cached as admitted
                computed[row] -= 1
        else:
            computed = self.num_computed_tokens
            for row in range(m):
                computed[row] += 1
            remaining = self.num_remaining_tokens
            for row in range(n):
                remaining[row] -= 1
        self._record_first_tokens(out, now)
        finishes = not self._tracked or (n > 0 and self._min_remaining() == 0)
        done = self._finish(now) if finishes else []
        if self.num_scheduler_steps > 1:
            self._multi_step(0 if out.admitted else 1)
        return done

    def _record_first_tokens(self, out: SchedulerOutput, now: float) -> None:
        """The step's prompts that were computed from scratch emitted their first token at ``now``."""
        first = out.admitted_first
        if first:
            if len(first) == 1:                       # most steps admit one: no fancy indexing
                self.table.first_token_time[first[0]] = now
            else:
                self.table.first_token_time[first] = now

    def plan_decode_run(self, out: SchedulerOutput, now: float, next_event_time: float,
                        prices: DecodePrices) -> DecodeRun | None:
        """Plan as many pure-decode steps as can run before anything changes the batch.

        ``out`` is the (already allocated) first step. The run stops at the first of: the step in
        which a running request emits its last token, the last step whose new KV blocks still
        fit, and the step during which ``next_event_time`` (the next arrival) passes: the
        scheduler would only see that arrival at the following step boundary anyway. Waiting
        requests cannot be admitted during the run: the budget and seat count are unchanged and
        free blocks only shrink, so the step-by-step scheduler would make the same decisions.
        Returns None when the policy's pure-decode steps are not all alike (speculative decoding
        draws each step's outcome): the replica then runs ``out`` as one step.
        """
        n = out.num_decode
        nc = n + self.pad_rows      # rows that compute: padded slots of a static batch do too
        affine = prices.affine(nc)
        ctx1 = out.decode_context_sum + (self.pad_context + self.pad_rows if self.pad_rows else 0)
        k_fin = self._min_remaining() if self._tracked else min(self.num_remaining_tokens)
        residues = cast(list, out.residues)   # set: a pure-decode step
        return self._decode_run(n, residues, k_fin, ctx1, affine, now, next_event_time, prices,
                                self.kv.num_free_blocks, self.kv.num_used_blocks)

    def plan_decode_continuation(self, prev: DecodeRun, now: float, next_event_time: float,
                                 prices: DecodePrices) -> DecodeRun | None:
        """The run :meth:`schedule` + :meth:`plan_decode_run` would plan right after ``prev`` was
        applied, when nothing else changed the batch since (same rows, nobody waiting, ``prev``
        finished no request): the next step's blocks are allocated as :meth:`_schedule_running`
        allocates them, and the run is planned from ``prev`` in closed form instead of re-reading
        the batch (its residues turned by ``prev``'s steps, its finish and context moved on).
        Returns None, changing nothing, when those blocks are not free (``schedule`` preempts).
        """
        kv = self.kv
        n, k = prev.num_seqs - prev.num_padded, prev.num_steps
        residues = turned(prev.residues, k)
        need = residues[0]          # rows whose blocks are exactly full need one more
        if need > kv.num_free_blocks:
            return None
        ok = kv.allocate(need)
        assert ok
        return self._decode_run(n, residues, prev.steps_to_finish - k, prev.context_sum + prev.num_seqs * k,
                                prev.affine, now, next_event_time, prices, kv.num_free_blocks, kv.num_used_blocks)

    def plan_tracked_run(self, now: float, next_event_time: float, prices: DecodePrices) -> DecodeRun | None:
        """The run :meth:`schedule` + :meth:`plan_decode_run` would plan now, with nobody waiting
        (so the step is the running batch's decodes), from the tracked batch's residues, context and
        smallest remaining output, without building the step's :class:`SchedulerOutput`: after a step
        that admitted requests, a run that finished some, or aborts. Returns None, changing nothing,
        when the first step's blocks are not free (``schedule`` preempts), or when the batch is not
        tracked (a policy's rows)."""
        if not self._tracked:
            return None
        n = self.n
        residues = turned(self._residues_at_phase, self._phase_computed)
        need = residues[0]          # rows whose blocks are exactly full need one more
        kv = self.kv
        if need > kv.num_free_blocks:
            return None
        ok = kv.allocate(need)
        assert ok
        return self._decode_run(n, residues, self._min_remaining(), self.context_total + n, prices.affine(n), now,
                                next_event_time, prices, kv.num_free_blocks, kv.num_used_blocks)

    def _decode_run(self, n: int, residues: list[int], k_fin: int, ctx1: int, affine: tuple[float, float] | None,
                    now: float, next_event_time: float, prices: DecodePrices, free: int, used: int) -> DecodeRun:
        """:func:`~simulator.engine.decode_run.plan_run` for this batch (its padded slots, and the
        end of a multi-step run)."""
        k_cap = k_fin
        if self.num_scheduler_steps > 1:             # a multi-step run ends at its last step
            k_cap = min(k_cap, self.num_scheduler_steps - self.steps_into_run)
        return plan_run(n, self.pad_rows, residues, k_fin, k_cap, ctx1, affine, now, next_event_time, prices,
                        free, used)

    def own_steps(self) -> OwnSteps | None:
        """The policy's own fast path for steps that decode runs do not cover (:class:`OwnSteps`),
        asked once per replica; None: continuous batching has none (its steps between events are
        decode runs)."""
        return None

    def advance_decode(self, run: DecodeRun, now: float) -> list[int]:
        """Apply a planned decode run ending at ``now``; returns the ids of finished requests."""
        n, k = self.n, run.num_steps
        if run.extra_blocks:
            ok = self.kv.allocate(run.extra_blocks)
            assert ok, "decode run planned more KV blocks than were free"
        if self._tracked:
            self._phase_computed += k
            self._phase_remaining += k
        else:
            computed, remaining = self.num_computed_tokens, self.num_remaining_tokens
            for row in range(n):
                computed[row] += k
                remaining[row] -= k
        self.context_total += n * k
        if self.pad_rows:
            self.pad_context += self.pad_rows * k
        done = self._finish(now) if run.finishes else []
        if self.num_scheduler_steps > 1:
            self._multi_step(k)
        return done

    def _finish(self, now: float) -> list[int]:
        """The rows whose last token this step emitted leave the batch; returns their ids."""
        pr = self._phase_remaining
        remaining = self.num_remaining_tokens
        done: list[int] = []
        for row in range(len(remaining)):          # a loop over machine integers in the compiled engine
            if remaining[row] == pr:
                done.append(row)
        if not done:
            return []
        if len(done) == 1:
            return self._finish_row(done[0], now)
        ids = [self.req_id[row] for row in done]
        computed = self.computed_tokens(done)
        if self._tracked:
            self._untrack(computed, [0] * len(done))
        self._record_finished(ids, now)
        self.kv.release_many(ids, computed)
        self.context_total -= sum(computed)
        self._drop_rows(done)
        return ids

    def _drop_rows(self, rows: list[int]) -> None:
        """Delete the running ``rows`` (in increasing order) from every row list."""
        for rows_field in self._rows:
            for row in reversed(rows):
                del rows_field[row]
        self.n = len(self.req_id)

    def _finish_row(self, row: int, now: float) -> list[int]:
        """The common case of one request finishing: scalar bookkeeping, one row deleted."""
        table = self.table
        rid = self.req_id[row]
        computed = self.num_computed_tokens[row] + self._phase_computed
        if self._tracked:
            self._untrack((computed,), (0,))
        table.finish_time[rid] = now            # _record_finished for one id, without fancy indexing
        table.num_output_tokens[rid] = table.max_tokens[rid]
        table.status[rid] = _DONE
        self.kv.release(rid, computed)
        self.context_total -= computed
        for rows_field in self._rows:
            del rows_field[row]
        self.n -= 1
        return [rid]

    def _swap_out(self, ids: list[int], computed: list[int], out: SchedulerOutput) -> None:
        """Copy preempted requests' KV to host memory while it has room (else they recompute)."""
        swap, blocks_for = self.swap, self.kv.blocks_for
        assert swap is not None
        for rid, c in zip(ids, computed, strict=False):
            copy_s = swap.copy_out(blocks_for(c))
            if copy_s >= 0.0:
                self._swapped[rid] = c
                out.extra_s += copy_s

    def _swap_in(self, rid: int, tokens: int, out: SchedulerOutput) -> None:
        del self._swapped[rid]
        if rid in self._restore_free:
            self._restore_free.discard(rid)
        else:
            assert self.swap is not None
            out.extra_s += self.swap.copy_in(self.kv.blocks_for(tokens))
        if out.prefill_context is None:
            out.prefill_context = [0] * len(out.admitted)
        out.prefill_context.append(tokens)

    def sort_rows(self) -> None:
        """Order the running batch by (priority, arrival) so that the last row is the one vLLM's
        priority policy preempts first; called between steps, never while a step is planned."""
        table = self.table
        ids = np.asarray(self.req_id, dtype=np.int64)
        order = np.lexsort((table.arrival_time[ids], table.priority[ids])).tolist()
        for rows_field in self._rows:
            rows_field[:] = [rows_field[row] for row in order]
        self.sort_pending = False

    def stats(self) -> dict[str, int]:
        """Policy-specific counters, summed over replicas into ``SimulationResult.engine_stats``."""
        return {} if self.swap is None else self.swap.stats()

    def _record_finished(self, ids: list[int], now: float) -> None:
        table = self.table
        finish_time, num_output_tokens, max_tokens, status = (table.finish_time, table.num_output_tokens,
                                                              table.max_tokens, table.status)
        for rid in ids:                        # a few at a time: scalar writes beat building index arrays
            finish_time[rid] = now
            num_output_tokens[rid] = max_tokens[rid]
            status[rid] = _DONE

    # -- request-level levers (simulator.engine.deadlines): aborts and shedding ---------------------------------
    def finish_requests(self, ids: list[int], status: RequestStatus, now: float) -> None:
        """Finish unfinished requests early, at a step boundary (vLLM's ``finish_requests``).

        A waiting request leaves the queue (and frees its host blocks if it was swapped out); a
        running one leaves the batch and its KV blocks are freed. Each keeps the tokens it has generated
        (``num_output_tokens``) and gets ``status``
        (``FINISHED_ABORTED`` for a client timeout, ``FINISHED_SHED`` for admission control).
        """
        table = self.table
        gone = set(ids)
        rows = [row for row, rid in enumerate(self.req_id) if rid in gone]
        left_running: set[int] = set()
        if rows:
            rids = [self.req_id[row] for row in rows]
            left_running = set(rids)
            computed, remaining = self.computed_tokens(rows), self.remaining_tokens(rows)
            if self._tracked:
                self._untrack(computed, remaining)
            at = np.asarray(rids, dtype=np.int64)
            table.num_output_tokens[at] = table.max_tokens[at] - np.asarray(remaining, dtype=np.int64)
            self.kv.release_many(rids, computed)    # with prefix caching its blocks stay cached
            self.context_total -= sum(computed)
            self._rows_leaving(rows)
            self._drop_rows(rows)
            if self.n == 0:                         # an empty batch ends a multi-step run (as _multi_step does)
                self.steps_into_run = 0
        if len(rows) < len(gone):
            waiting = [r for r in ids if r not in left_running]
            if isinstance(self.waiting, deque):
                kept = [r for r in self.waiting if r not in gone]
                self.waiting.clear()
                self.waiting.extend(kept)
            else:                                   # the priority heap
                for rid in waiting:
                    self.waiting.remove(rid)
            if self._swapped:                       # a swapped-out request's host blocks come back
                assert self.swap is not None
                for rid in waiting:
                    c = self._swapped.pop(rid, None)
                    if c is not None:
                        self.swap.used_blocks -= self.kv.blocks_for(c)
        table.status[ids] = status
        table.finish_time[ids] = now

    def _rows_leaving(self, rows: list[int]) -> None:
        """Hook: running ``rows`` are about to leave the batch unfinished (policies keep counters)."""


_NO_LIMIT = 1 << 62

#: Batching policies by the name the YAML and the UI use (:mod:`simulator.engine.policies` adds the others).
POLICIES: Registry[type[Scheduler]] = Registry("policy", "scheduler.policy")
POLICIES.add("continuous", Scheduler)
