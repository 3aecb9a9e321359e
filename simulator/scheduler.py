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
numpy arrays (struct of arrays) so that the engine can advance many identical decode steps in one
event (:meth:`Scheduler.plan_decode_run`), which is what makes 100k-request runs take seconds.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .config import SchedulerConfig
from .kv_cache import KVCacheManager
from .request import RequestStatus, RequestTable

_RUNNING, _PREEMPTED, _DONE = int(RequestStatus.RUNNING), int(RequestStatus.PREEMPTED), \
    int(RequestStatus.FINISHED_LENGTH_CAPPED)


@dataclass(slots=True)
class SchedulerOutput:
    """The plan of one engine step (vLLM's ``SchedulerOutput``, reduced to what costs time).

    Rows ``[0, num_decode)`` of the running batch decode one token each; ``admitted`` requests
    were appended after them and prefill ``admitted_tokens`` tokens each from scratch.
    """

    num_decode: int = 0
    decode_context_sum: int = 0
    """Tokens the decoding requests attend over (cached tokens + the new one, summed)."""
    admitted: list[int] = field(default_factory=list)
    admitted_tokens: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    decode_ids: np.ndarray | None = None

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.admitted_tokens)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return self.num_decode + self.num_prefill_tokens

    @property
    def num_scheduled_tokens(self) -> dict[int, int]:
        """Request id -> tokens scheduled this step (vLLM's field of the same name)."""
        out = {int(r): 1 for r in (self.decode_ids if self.decode_ids is not None else [])}
        out.update(zip(self.admitted, self.admitted_tokens))
        return out

    @property
    def is_pure_decode(self) -> bool:
        return not self.admitted and not self.preempted and self.num_decode > 0


@dataclass(slots=True)
class DecodeRun:
    """``num_steps`` consecutive pure-decode steps planned as one event."""

    num_steps: int
    durations_s: np.ndarray
    kv_blocks_used: np.ndarray
    """Blocks in use during each step (after that step's allocation)."""
    total_s: float
    """Duration of the whole run (the last entry of the cumulative step times)."""


class Scheduler:
    """Waiting queue, running batch and KV blocks of one replica (see module docstring).

    Args:
        config: the scenario's scheduler section (vLLM names).
        kv: the replica's block accounting.
        table: the run's request columns.
        max_model_len: longest sequence served (validated against the budget and the cache).
    """

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, table: RequestTable) -> None:
        cap = config.max_num_seqs
        self.config = config
        self.kv = kv
        self.table = table
        self.block_size = config.block_size
        self.waiting: deque[int] = deque()
        # Running batch, rows [0, n) in admission order.
        self.n = 0
        self.req_id = np.zeros(cap, dtype=np.int64)
        self.num_computed_tokens = np.zeros(cap, dtype=np.int64)
        self.num_output_tokens = np.zeros(cap, dtype=np.int64)
        self.max_tokens = np.zeros(cap, dtype=np.int64)
        self.num_blocks = np.zeros(cap, dtype=np.int64)
        self.on_finish: Callable[[np.ndarray, float], None] | None = None

    # -- queue interface ---------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return self.n

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def running_ids(self) -> list[int]:
        return [int(r) for r in self.req_id[: self.n]]

    def add_request(self, rid: int) -> None:
        self.waiting.append(rid)
        self.table.status[rid] = RequestStatus.WAITING

    # -- planning ------------------------------------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        """Plan the next step (allocating its KV blocks); see the module docstring."""
        out = SchedulerOutput()
        if self.n:
            self._schedule_running(out)
        if not out.preempted:
            self._schedule_waiting(out, now)
        return out

    def _schedule_running(self, out: SchedulerOutput) -> None:
        n, bs = self.n, self.block_size
        computed = self.num_computed_tokens[:n]
        need = (computed + bs) // bs - self.num_blocks[:n]   # blocks for computed + 1 slots
        total = int(need.sum())
        keep = n
        if total > self.kv.num_free_blocks:
            keep = self._rows_that_fit(need)
            self._preempt_rows(keep, out)
            total = int(need[:keep].sum())
        if keep:
            ok = self.kv.allocate(total)
            assert ok
            self.num_blocks[:keep] += need[:keep]
        out.num_decode = keep
        out.decode_ids = self.req_id[:keep].copy()
        out.decode_context_sum = int(computed[:keep].sum()) + keep

    def _rows_that_fit(self, need: np.ndarray) -> int:
        """Largest prefix of running rows whose new blocks fit once every later row is preempted.

        vLLM's loop (preempt the last running request until the current one fits) keeps exactly
        this prefix: feasibility of a prefix only improves as it shrinks.
        """
        n = self.n
        blocks = self.num_blocks[:n]
        tail_free = np.concatenate((np.cumsum(blocks[::-1])[::-1], [0]))  # blocks held by rows >= m
        prefix_need = np.concatenate(([0], np.cumsum(need)))              # need of rows < m
        fits = prefix_need <= self.kv.num_free_blocks + tail_free
        return int(np.flatnonzero(fits)[-1])

    def _preempt_rows(self, keep: int, out: SchedulerOutput) -> None:
        n, table = self.n, self.table
        rows = slice(keep, n)
        ids = self.req_id[rows]
        self.kv.free(int(self.num_blocks[rows].sum()))
        table.num_output_tokens[ids] = self.num_output_tokens[rows]
        table.num_preemptions[ids] += 1
        table.status[ids] = _PREEMPTED
        preempted = [int(r) for r in ids]
        self.waiting.extendleft(reversed(preempted))   # front of the queue, in running order
        out.preempted = preempted
        self.n = keep

    def _schedule_waiting(self, out: SchedulerOutput, now: float) -> None:
        table, kv, bs = self.table, self.kv, self.block_size
        budget = self.config.max_num_batched_tokens - out.num_decode
        max_seqs = self.config.max_num_seqs
        waiting = self.waiting
        while waiting and self.n < max_seqs:
            rid = waiting[0]
            generated = int(table.num_output_tokens[rid])
            tokens = int(table.num_prompt_tokens[rid]) + generated
            if tokens > budget:
                break
            blocks = -(-tokens // bs)
            if not kv.allocate(blocks):
                break
            waiting.popleft()
            row = self.n
            self.req_id[row] = rid
            self.num_computed_tokens[row] = 0
            self.num_output_tokens[row] = generated
            self.max_tokens[row] = table.max_tokens[rid]
            self.num_blocks[row] = blocks
            self.n = row + 1
            budget -= tokens
            table.status[rid] = _RUNNING
            if generated == 0 and table.first_scheduled_time[rid] != table.first_scheduled_time[rid]:
                table.first_scheduled_time[rid] = now   # (NaN check: first admission only)
            out.admitted.append(rid)
            out.admitted_tokens.append(tokens)

    # -- applying a step ---------------------------------------------------------------------------
    def update_from_output(self, out: SchedulerOutput, now: float) -> np.ndarray:
        """Apply a finished step at instant ``now``; returns the ids of requests that finished."""
        m, a = out.num_decode, len(out.admitted)
        if m:
            self.num_computed_tokens[:m] += 1
            self.num_output_tokens[:m] += 1
        if a:
            rows = slice(m, m + a)
            self.num_computed_tokens[rows] = out.admitted_tokens
            self.num_output_tokens[rows] += 1
            first = self.req_id[rows][self.num_output_tokens[rows] == 1]
            self.table.first_token_time[first] = now
        return self._finish(now)

    def plan_decode_run(self, out: SchedulerOutput, now: float, next_event_time: float,
                        step_times: Callable[[int, np.ndarray], np.ndarray]) -> DecodeRun:
        """Plan as many pure-decode steps as can run before anything changes the batch.

        ``out`` is the (already allocated) first step. The run stops at the first of: the step in
        which a running request emits its last token, the last step whose new KV blocks still
        fit, and the step during which ``next_event_time`` (the next arrival) passes: the
        scheduler would only see that arrival at the following step boundary anyway. Waiting
        requests cannot be admitted during the run: the budget and seat count are unchanged and
        free blocks only shrink, so the step-by-step scheduler would make the same decisions.
        """
        n, bs = out.num_decode, self.block_size
        computed = self.num_computed_tokens[:n]
        k_max = int((self.max_tokens[:n] - self.num_output_tokens[:n]).min())
        first = step_times(n, np.array([out.decode_context_sum], dtype=np.float64))
        if next_event_time != np.inf:
            # Steps only get longer as contexts grow, so the first step's length bounds the count.
            k_max = min(k_max, int((next_event_time - now) / first[0]) + 2)
        used_1 = self.kv.num_used_blocks
        kv_used = np.full(k_max, used_1, dtype=np.int64)
        if k_max > 1:
            # Step j (1-based) needs a new block for rows whose slot c + j - 1 starts a block.
            hist = np.bincount(computed % bs, minlength=bs)
            new_blocks = np.cumsum(hist[(1 - np.arange(2, k_max + 1)) % bs])
            over = np.flatnonzero(new_blocks > self.kv.num_free_blocks)
            if len(over):
                k_max = int(over[0]) + 1
            kv_used[1:k_max] += new_blocks[: k_max - 1]
        ctx = out.decode_context_sum + n * np.arange(k_max, dtype=np.float64)
        durations = step_times(n, ctx)
        cum = np.cumsum(durations)
        k = k_max
        if next_event_time != np.inf:
            k = min(k, int(np.searchsorted(cum, next_event_time - now)) + 1)
        return DecodeRun(k, durations[:k], kv_used[:k], float(cum[k - 1]))

    def advance_decode(self, num_steps: int, now: float) -> np.ndarray:
        """Apply a planned decode run of ``num_steps`` steps ending at ``now``; returns the ids of
        the requests that finished."""
        n, bs = self.n, self.block_size
        self.num_computed_tokens[:n] += num_steps
        self.num_output_tokens[:n] += num_steps
        if num_steps > 1:
            # The first step's blocks were allocated by schedule(); allocate the rest now.
            blocks = (self.num_computed_tokens[:n] + bs - 1) // bs
            ok = self.kv.allocate(int(blocks.sum() - self.num_blocks[:n].sum()))
            assert ok, "decode run planned more KV blocks than were free"
            self.num_blocks[:n] = blocks
        return self._finish(now)

    def _finish(self, now: float) -> np.ndarray:
        n = self.n
        done = self.num_output_tokens[:n] >= self.max_tokens[:n]
        if not done.any():
            return _EMPTY
        ids = self.req_id[:n][done]
        table = self.table
        table.finish_time[ids] = now
        table.num_output_tokens[ids] = self.num_output_tokens[:n][done]
        table.status[ids] = _DONE
        self.kv.free(int(self.num_blocks[:n][done].sum()))
        keep = ~done
        m = n - len(ids)
        for arr in (self.req_id, self.num_computed_tokens, self.num_output_tokens, self.max_tokens,
                    self.num_blocks):
            arr[:m] = arr[:n][keep]
        self.n = m
        return ids


_EMPTY = np.zeros(0, dtype=np.int64)

#: Batching policies by the name the YAML and the UI use.
POLICIES: dict[str, type[Scheduler]] = {"continuous": Scheduler}
