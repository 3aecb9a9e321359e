"""Batching policies besides vLLM's continuous batching (``scheduler.policy`` in the YAML).

* ``chunked_prefill`` (Sarathi-Serve, vLLM v1's default): a prompt is computed in chunks of at
  most ``long_prefill_token_threshold`` tokens (and whatever budget is left), piggybacked on
  the decodes of the running batch under ``max_num_batched_tokens``. Running requests are served
  first, in admission order (decodes one token, partial prefills their next chunk), then waiting
  requests are admitted FCFS with a first chunk, exactly as vLLM v1's scheduler walks its
  ``running`` then ``waiting`` lists. With prefix caching a request's cached leading blocks are
  skipped at admission and each chunk's full blocks are cached as it is scheduled
  (``kv.admit_chunk`` / ``kv.register``). A chunk allocates the blocks its tokens fill; when blocks
  run out the last running request is preempted (recompute), as in the continuous policy.
* ``dynamic``: request-level batching with a deadline (Triton-style dynamic batcher applied to
  generation). An idle engine starts a batch when ``max_num_seqs`` requests wait or the oldest
  has waited ``max_wait_ms``; with ``adaptive_batching`` it starts at once whenever requests
  queued up during the previous batch (the batch is sized to the queue depth). The batch runs
  until its last request finishes; nobody joins mid-flight, but finished requests leave the
  batch and stop costing compute (ragged batches). A batch prefills in one pass: it is limited
  by ``max_num_seqs`` and the KV blocks, not by ``max_num_batched_tokens``.
* ``static`` (FasterTransformer-style): like ``dynamic``, but the batch is a padded tensor:
  every prompt is padded to the longest one in the batch for the prefill, and a finished
  request's slot keeps computing (padding) until the longest request ends.

The continuous policy lives in :mod:`simulator.engine.scheduler`; all policies share its KV-block
accounting, preemption and fast-forward of pure-decode runs.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

from simulator.cost.base import BatchShape
from simulator.engine.disaggregated import DecodeScheduler
from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.request import RequestStatus, RequestTable
from simulator.engine.scheduler import POLICIES, Scheduler, SchedulerOutput
from simulator.engine.steplog import StepLogger
from simulator.scenario.config import SchedulerConfig

_RUNNING = int(RequestStatus.RUNNING)


class ChunkedPrefillScheduler(Scheduler):
    """Sarathi-Serve / vLLM v1 chunked prefill (see module docstring)."""

    splits_prompts: ClassVar[bool] = True

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, table: RequestTable) -> None:
        super().__init__(config, kv, table)
        self.num_pending: list[int] = []
        """Prompt tokens (plus recomputed output tokens) each running row has still to prefill."""
        self._rows.append(self.num_pending)
        self.num_prefilling = 0
        threshold = config.long_prefill_token_threshold
        self.chunk_limit = threshold if threshold else config.max_num_batched_tokens
        self._planned_tokens: list[int] = []
        """Tokens per row of the step :meth:`advance_steps` planned across its horizon."""

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        if self.n:
            if self.num_prefilling == 0:
                self._schedule_running(out)           # every row decodes: the vectorised path
                budget -= out.num_decode
            else:
                budget = self._schedule_running_mixed(out, budget)
        if self.waiting and not out.preempted and budget > 0 and self.n < self.max_num_seqs:
            self._admit_chunks(out, now, budget)
        return out

    def _schedule_running_mixed(self, out: SchedulerOutput, budget: int, lookahead: int = 1) -> int:
        """vLLM v1's walk over the running list when some rows are partway through their prompt:
        a decoding row takes ``lookahead`` tokens (speculative verification: ``k + 1``, fewer when
        the budget or its remaining output is smaller), a prefilling row its next chunk; the last
        running row is preempted while the blocks do not fit."""
        n, limit, kv = self.n, self.chunk_limit, self.kv
        bs = kv.block_size      # kv.blocks_for, inlined below: this loop visits every row every step
        computed, pending = self.num_computed_tokens, self.num_pending
        remaining = self.num_remaining_tokens if lookahead > 1 else None
        tokens = [0] * n
        free = kv.num_free_blocks
        need_total = 0
        alive = n
        i = 0
        while i < alive and budget > 0:
            c, p = computed[i], pending[i]
            t = min(p, budget, limit) if p else (1 if remaining is None else min(lookahead, budget, remaining[i]))
            need = -(-(c + t) // bs) - (-(-c // bs))
            while need_total + need > free and alive > i:
                alive -= 1                                   # preempt the last running row
                free += -(-computed[alive] // bs)
            if alive == i:                                   # this row itself was preempted
                break
            need_total += need
            tokens[i] = t
            budget -= t
            i += 1
        if alive < n:
            kv.release_many(self.req_id[alive:], self.num_computed_tokens[alive:])
            self._preempt_rows(alive, out)
            self.num_prefilling = sum(1 for p in self.num_pending if p > 0)
        ok = self.kv.allocate(need_total)
        assert ok
        if self.num_prefilling:                              # chunks' full blocks join the prefix cache
            ids = self.req_id
            for i in range(alive):
                if pending[i] and tokens[i]:
                    kv.register(ids[i], computed[i] + tokens[i])
        self._fill_output(out, tokens[:alive], computed, pending)
        return budget

    def _fill_output(self, out: SchedulerOutput, tokens: list[int], computed: list[int], pending: list[int]) -> None:
        """Describe scheduled running rows: decodes as ``num_decode``, chunks as ``admitted``."""
        decode_ctx = partial = 0
        decode_ids: list[int] = []
        prefill_ids: list[int] = []
        prefill_tokens: list[int] = []
        prefill_ctx: list[int] = []
        ids = self.req_id
        for row, t in enumerate(tokens):
            if t == 0:
                continue
            p = pending[row]
            if p == 0:
                decode_ids.append(ids[row])
                decode_ctx += computed[row] + 1
            else:
                prefill_ids.append(ids[row])
                prefill_tokens.append(t)
                prefill_ctx.append(computed[row])
                partial += t < p
        out.num_decode = len(decode_ids)
        out.decode_ids = decode_ids
        out.decode_context_sum = decode_ctx
        out.admitted, out.admitted_tokens, out.prefill_context = prefill_ids, prefill_tokens, prefill_ctx
        out.num_partial = partial
        out.row_tokens = tokens

    def _admit_chunks(self, out: SchedulerOutput, now: float, budget: int) -> None:
        """Admit waiting requests FCFS, each with a first chunk that fits the budget and blocks."""
        table, kv, waiting = self.table, self.kv, self.waiting
        max_seqs, limit = self.max_num_seqs, self.chunk_limit
        first_row = self.n
        admitted, chunks, contexts = [], [], []
        while waiting and self.n < max_seqs and budget > 0:
            rid = waiting[0]
            generated = int(table.num_output_tokens[rid])
            total = int(table.num_prompt_tokens[rid]) + generated
            hit, t = kv.admit_chunk(rid, total, min(budget, limit))   # prefix-cache hits are skipped
            if hit < 0:
                break
            waiting.popleft()
            self.req_id.append(rid)
            self.num_computed_tokens.append(hit)
            self.num_pending.append(total - hit)
            self.num_remaining_tokens.append(int(table.max_tokens[rid]) - generated)
            self.n += 1
            self.num_prefilling += 1
            self.context_total += hit
            budget -= t
            table.status[rid] = _RUNNING
            if generated == 0 and table.num_preemptions[rid] == 0:
                table.first_scheduled_time[rid] = now
                if hit:
                    table.num_cached_tokens[rid] = hit
            admitted.append(rid)
            chunks.append(t)
            contexts.append(hit)
            out.num_partial += t < total - hit
        if not admitted:
            return
        if self.priority_order:
            self.sort_pending = True
        if out.row_tokens is None:                           # the running rows all decoded
            out.row_tokens = [1] * first_row + chunks
            out.prefill_context = []
        else:
            out.row_tokens = out.row_tokens + chunks
        out.admitted.extend(admitted)
        out.admitted_tokens.extend(chunks)
        assert out.prefill_context is not None
        out.prefill_context.extend(contexts)

    def update_from_output(self, out: SchedulerOutput, now: float) -> list[int]:
        if out.row_tokens is None:                           # a pure-decode step
            return super().update_from_output(out, now)
        self._apply_rows(out.row_tokens, now)
        return self._finish(now)

    def own_steps(self) -> ChunkedPrefillScheduler:
        """Itself: its mixed steps (:meth:`advance_steps`, :meth:`apply_planned_step`)."""
        return self

    def advance_steps(self, t: float, horizon: float, cost: Any,
                      log: StepLogger) -> tuple[float, list[int], float | None]:
        """Plan and apply consecutive mixed steps from ``t`` (the prefilling rows' next chunks and a
        token for every decoding row, in row order within the budget) while nothing else can happen:
        each ends before ``horizon``, no request is admitted (none waits, or the step leaves no
        budget or seat), none preempts, a prompt is still being prefilled (else decode runs take
        over) and no request has finished yet. Returns the end of the last step applied (``t``
        when none was), the ids it finished, and the end of the step that crosses ``horizon`` when
        that step was planned too (None otherwise): it is logged and holds its blocks, and
        :meth:`apply_planned_step` applies it once the clock reaches its end.

        Each step makes exactly the calls and float operations of :meth:`schedule` (with
        :meth:`_schedule_running_mixed`), the replica's step costing and logging, and
        :meth:`update_from_output`, in the same order, on the row lists: the engine's fast path for
        the steps that prefill a prompt chunk by chunk beside the decodes, one event each otherwise.
        """
        n = self.n
        if not self.num_prefilling:
            return t, [], None
        kv, waiting = self.kv, len(self.waiting)
        # With requests waiting, a step is the fast path's only while it leaves no budget or seat
        # for them (schedule would admit none, nor call _admit_chunks).
        admits = waiting and n < self.max_num_seqs
        computed, pending, remaining = self.num_computed_tokens, self.num_pending, self.num_remaining_tokens
        ids = self.req_id                                # the row lists, updated in place
        step_time_s = cost.step_time_s
        finished, crossing_end = False, None
        while True:
            tokens, need, shape = self._mixed_step(computed, pending)
            if need > kv.num_free_blocks:                # the step preempts: planned the usual way
                break
            if admits and shape.num_tokens < self.config.max_num_batched_tokens:
                break                                    # budget left for a waiting request: the usual way
            duration = step_time_s(shape)
            end = t + duration
            ok = kv.allocate(need)
            assert ok
            for i, tk in enumerate(tokens):              # chunks' full blocks join the prefix cache
                if pending[i]:
                    kv.register(ids[i], computed[i] + tk)
            log.step(t, duration, shape.num_seqs, shape.num_tokens - shape.num_decodes, shape.num_decodes, waiting,
                     kv.num_used_blocks)
            if not end < horizon:                        # the step crosses the next event: applied at its end
                self._planned_tokens = tokens
                crossing_end = end
                break
            finished = self._mixed_update(tokens, computed, pending, remaining, ids, end)
            t = end
            if finished or not self.num_prefilling:
                break
        return t, (self._finish(t) if finished else []), crossing_end

    def _mixed_step(self, computed: list[int], pending: list[int]) -> tuple[list[int], int, BatchShape]:
        """The next mixed step of the running rows, none preempted (:meth:`_schedule_running_mixed`
        and :meth:`_fill_output`'s batch shape): tokens per scheduled row, the blocks it needs, and
        its batch shape."""
        bs, limit, budget = self.kv.block_size, self.chunk_limit, self.config.max_num_batched_tokens
        need = num_decode = decode_context = partial = 0
        tokens: list[int] = []
        chunks: list[int] = []
        contexts: list[int] = []
        for c, p in zip(computed, pending, strict=True):
            if budget <= 0:
                break
            if p:
                tk = min(p, budget, limit)
                chunks.append(tk)
                contexts.append(c)
                if tk < p:
                    partial += 1
            else:
                tk = 1
                num_decode += 1
                decode_context += c + 1
            need += -(-(c + tk) // bs) - (-(-c // bs))
            tokens.append(tk)
            budget -= tk
        sampled = num_decode + len(chunks) - partial   # decodes, and the prompts this step finishes
        return tokens, need, BatchShape(chunks, contexts, num_decode, decode_context, sampled)

    def _mixed_update(self, tokens: list[int], computed: list[int], pending: list[int], remaining: list[int],
                      ids: list[int], now: float) -> bool:
        """Apply a step's ``tokens`` per row (rows ``[0, len(tokens))``; a prompt's chunk, or a
        decoding row's token) to the rows' lists and the counters: a decoding row and a prompt's
        last chunk emit a token (the first one's time is the prompt's first token); returns whether
        a request emitted its last token."""
        first_token_time, phase = self.table.first_token_time, self._phase_remaining
        total, finished = 0, False
        for i, tk in enumerate(tokens):
            if not tk:                                   # a row the budget did not reach
                continue
            total += tk
            computed[i] += tk
            p = pending[i]
            if p:
                p -= tk
                pending[i] = p
                if p:
                    continue
                self.num_prefilling -= 1                 # its last chunk: the first token
                rid = ids[i]
                if math.isnan(first_token_time[rid]):
                    first_token_time[rid] = now
            r = remaining[i] - 1
            remaining[i] = r
            if r == phase:
                finished = True
        self.context_total += total
        return finished

    def _apply_rows(self, tokens: list[int], now: float) -> None:
        """:meth:`_mixed_update` on the first ``len(tokens)`` rows."""
        self._mixed_update(tokens, self.num_computed_tokens, self.num_pending, self.num_remaining_tokens,
                           self.req_id, now)

    def apply_planned_step(self, now: float) -> list[int]:
        """Apply the step :meth:`advance_steps` planned across its horizon, ending ``now``; returns
        the ids it finished."""
        self._apply_rows(self._planned_tokens, now)
        return self._finish(now)

    def _rows_leaving(self, rows: list[int]) -> None:   # aborted rows (simulator.engine.deadlines)
        pending = self.num_pending
        self.num_prefilling -= sum(1 for row in rows if pending[row] > 0)

    def _preempt_rows(self, keep: int, out: SchedulerOutput) -> None:
        self.num_prefilling -= sum(1 for p in self.num_pending[keep:] if p > 0)
        super()._preempt_rows(keep, out)


class DynamicBatchScheduler(Scheduler):
    """Request-level batching with a deadline; no joining mid-flight (see module docstring)."""

    pads = False
    uses_token_budget: ClassVar[bool] = False   # the whole batch prefills in one pass, limited by seats and KV blocks

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, table: RequestTable) -> None:
        super().__init__(config, kv, table)
        self.max_wait_s = config.max_wait_ms / 1000.0
        self.adaptive = config.adaptive_batching
        self._backlog = False
        """Whether requests were waiting when the last batch ended (adaptive batching)."""

    def batch_start_time(self, now: float) -> float:
        """When an idle engine starts its next batch (``inf``: wait for more arrivals)."""
        if not self.waiting:
            return math.inf
        if len(self.waiting) >= self.config.max_num_seqs or (self.adaptive and self._backlog):
            return now
        return max(now, float(self.table.arrival_time[self.waiting[0]]) + self.max_wait_s)

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput()
        if self.n:
            self._schedule_running(out)
            if self.pad_rows:                # finished requests' slots compute too
                out.cost_shape = BatchShape.decode(out.num_decode + self.pad_rows,
                                                   out.decode_context_sum + self.pad_context + self.pad_rows)
        elif self.waiting and self.batch_start_time(now) <= now:
            self._backlog = False
            self._schedule_waiting(out, now)
            if self.pads and out.admitted_tokens:   # every prompt is padded to the longest
                k = len(out.admitted_tokens)
                context = out.prefill_context if out.prefill_context is not None else [0] * k
                out.cost_shape = BatchShape([max(out.admitted_tokens)] * k, context, 0, 0, k)
        return out

    def _finish(self, now: float) -> list[int]:
        if self.pads:
            count = self.num_remaining_tokens.count(0)
            if count == 0:
                return []
            context = sum(c for c, r in zip(self.num_computed_tokens, self.num_remaining_tokens, strict=True) if r == 0)
        ids = super()._finish(now)
        if self.n == 0:                      # the batch is over
            self.pad_rows = self.pad_context = 0
            self._backlog = bool(self.waiting)
        elif self.pads:
            self.pad_rows += count
            self.pad_context += context
        return ids


    def _rows_leaving(self, rows: list[int]) -> None:
        """Aborted rows (simulator.engine.deadlines) leave like finished ones: padding in a static batch."""
        if self.n == len(rows):              # the batch is over
            self.pad_rows = self.pad_context = 0
            self._backlog = bool(self.waiting)
        elif self.pads:
            self.pad_rows += len(rows)
            computed = self.num_computed_tokens
            self.pad_context += sum(computed[row] for row in rows)


class StaticBatchScheduler(DynamicBatchScheduler):
    """FasterTransformer-style padded batches (see module docstring)."""

    pads = True


POLICIES.update({
    "disaggregated": DecodeScheduler,     # the decode pool's class; simulation.py builds both pools
    "chunked_prefill": ChunkedPrefillScheduler,
    "dynamic": DynamicBatchScheduler,
    "static": StaticBatchScheduler,
})
