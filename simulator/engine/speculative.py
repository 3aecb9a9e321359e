"""Speculative decoding on top of continuous batching (``speculative_config`` in the YAML).

Each decode step, every running request gets ``k = num_speculative_tokens`` proposed tokens
(from a draft model, an n-gram prompt lookup, or MTP heads) and the target verifies all ``k + 1``
positions in one forward pass. Proposals are accepted independently with probability ``alpha``
and in order, so a step emits ``a + 1`` tokens where ``a`` (accepted proposals) is a geometric
count truncated at ``k``: ``P(a >= j) = alpha^j``. The expected tokens per step is therefore
``(1 - alpha^(k+1)) / (1 - alpha)`` (Leviathan et al., 2023).

Costs of one step:

* verification: the target computes ``k + 1`` query tokens per decoding request, attending
  over that request's cached context (charged like a prefill chunk of ``k + 1`` tokens), and
  samples all ``k + 1`` positions;
* proposal: ``draft``: ``k`` sequential decode steps of the draft model over the same batch
  (without a second CPU overhead: the drafter runs inside the engine step); ``mtp``: ``k`` extra
  decoder layers of the target (one MTP head each); ``ngram``: nothing (a CPU lookup);
* KV: blocks for ``k + 1`` lookahead slots per request are reserved before the step and the
  unused ones returned after it (vLLM's lookahead slots). With a draft model, every cached token
  also holds the draft's KV, and the draft's weights take memory (see ``simulation.resolve``).

Acceptance draws come from their own seeded stream. A step's outcome is random per request, so
there is no closed-form decode run: every step is planned and drawn. The steps in which every
running request verifies and that end before the next event are planned and applied back to back
on Python lists (:meth:`Speculation.advance_steps`), and the step crossing that event is
planned with them and applied at its end: the same calls, draws and floats as one step per event
(tested bit for bit); ``docs/speed.md`` gives the cost.

With ``scheduler.policy: chunked_prefill`` (:class:`ChunkedSpeculativeScheduler`, as vLLM v1 runs
speculation) the verification positions share the step's token budget with prefill chunks: each
decoding request takes ``k + 1`` tokens of the budget (fewer when the budget or its remaining
output is smaller), running requests first, then waiting ones are admitted with a first chunk.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from simulator.cost.base import BatchShape, CostModel, VerifyStep, verify_step_fn
from simulator.engine.decode_run import DecodePrices, DecodeRun
from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.policies import ChunkedPrefillScheduler
from simulator.engine.request import RequestTable
from simulator.engine.scheduler import Scheduler, SchedulerOutput
from simulator.engine.steplog import StepLogger
from simulator.scenario.config import SchedulerConfig, SpeculativeConfig


def expected_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """``(1 - alpha^(k+1)) / (1 - alpha)``: tokens one verification step emits on average."""
    a, k = acceptance_rate, num_speculative_tokens
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def no_proposal(n: int, ctx: int) -> float:
    """``ngram`` proposals: a CPU lookup, no GPU time."""
    return 0.0


def mtp_proposal(cost: Any, k: int, num_layers: int) -> Callable[[int, int], float]:
    """``mtp`` proposals: ``k`` extra decoder layers of the target (``cost``) over the batch."""
    def mtp(n: int, ctx: int) -> float:
        bd = cost.breakdown(BatchShape.decode(n, ctx))
        return k * (bd.total_s - bd.overhead_s) / num_layers
    return mtp


def draft_proposal(draft_cost: CostModel, k: int) -> Callable[[int, int], float]:
    """``draft`` proposals: ``k`` sequential decode steps of the draft model (``draft_cost``) over
    the batch, without a second CPU overhead (the drafter runs inside the engine step)."""
    by_n: dict[int, tuple[float, Callable[[float], float], tuple[float, float] | None]] = {}
    """Pure functions of the batch size: the draft's CPU overhead, its decode step as a function of the
    context, and that step's ``(fixed, slope)`` where it is ``fixed + slope * s`` (``decode_step_terms``)."""

    def draft(n: int, ctx: int) -> float:     # k sequential draft decode steps, no second CPU overhead
        got = by_n.get(n)
        if got is None:
            step = draft_cost.decode_step_fn(n)
            got = by_n[n] = (draft_cost.breakdown(BatchShape.decode(n, 0)).overhead_s,
                             step or partial(draft_cost.decode_step_time_s, n),
                             draft_cost.decode_step_terms(n) if step is not None else None)
        overhead, step, terms = got
        total = 0.0                           # sum() of the k steps, added in order (0 + x is 0.0 + x)
        if terms is not None:                 # step(s) inlined: the same float operations
            fixed, slope = terms
            s, nf = float(ctx), float(n)      # whole numbers below 2**53: s is float(ctx + n * j) exactly
            for _ in range(k):
                total += fixed + slope * s - overhead
                s += nf
            return total
        for j in range(k):
            total += step(float(ctx + n * j)) - overhead
        return total
    return draft


class Speculation:
    """What both speculative schedulers share, held by each as ``spec``: acceptance draws,
    counters, verification costs, and the fast path of steps in which every running request
    verifies (one object the scheduler hands its rows to, rather than a mixin class)."""

    def __init__(self, sched: Scheduler, spec: SpeculativeConfig, rng: np.random.Generator,
                 proposal_time_s: Callable[[int, int], float], caps_lookahead: bool) -> None:
        self.sched = sched
        self.k = spec.num_speculative_tokens
        self.alpha = spec.acceptance_rate
        self.rng = rng
        self.proposal_time_s = proposal_time_s
        self.caps_lookahead = caps_lookahead
        """Whether a decoding request verifies at most its remaining output tokens (vLLM v1's
        chunked-prefill scheduler) rather than always ``k + 1`` positions."""
        self.num_draft_tokens = 0
        """Tokens proposed (vLLM's metric name)."""
        self.num_accepted_tokens = 0
        self.num_verify_steps = 0
        self.num_emitted_decode_tokens = 0
        self._draws: list[int] = []
        self._next_draw = 0
        self._verify_fns: dict[int, VerifyStep] = {}
        self._verify_cost: Any = None

    def emitted_list(self, m: int) -> list[int]:
        """Tokens the verifications of ``m`` requests emit where their outputs allow: accepted
        proposals (geometric counts truncated at k, drawn in blocks) plus the target's own token."""
        if self.alpha >= 1.0:
            return [self.k + 1] * m
        i = self._next_draw
        if i + m > len(self._draws):
            fresh = np.minimum(self.rng.geometric(1.0 - self.alpha, size=max(4096, m)), self.k + 1)
            self._draws = self._draws[i:] + fresh.tolist()
            i = 0
        self._next_draw = i + m
        return self._draws[i:i + m]

    def verify_fn(self, cost: Any, n: int) -> VerifyStep:
        """``cost``'s verification step of ``n`` requests (:func:`~simulator.cost.base.verify_step_fn`)."""
        if cost is not self._verify_cost:
            self._verify_fns, self._verify_cost = {}, cost
        fn = self._verify_fns.get(n)
        if fn is None:
            fn = self._verify_fns[n] = verify_step_fn(cost, n, self.k + 1)
        return fn

    def advance_steps(self, t: float, horizon: float, cost: Any, log: StepLogger,
                      only_verifies: bool) -> tuple[float, list[int], float | None]:
        """Plan and apply consecutive verification steps from ``t`` while nothing else can happen:
        each ends before ``horizon``, every running request verifies (no preemption, no waiting
        request, so none is admitted; with chunked prefill, no prompt chunk left and a token budget
        that does not bind: ``only_verifies``), and none has finished yet. Returns the end of the
        last step applied (``t`` when none was), the ids it finished, and the end of the step that
        crosses ``horizon`` when that step was planned too (None otherwise): it is logged and holds
        its lookahead blocks, and :meth:`apply_planned_step` applies it once the clock reaches its
        end, as ``schedule`` and ``update_from_output`` would plan and apply it.

        Each step makes exactly the calls, draws and float operations of ``schedule``, the
        replica's step costing and ``update_from_output``, in the same order, on Python lists
        instead of small numpy arrays: the engine's fast path for the batches speculative decoding
        runs one step at a time. ``log`` (``StepLog.step_logger``) records each step.
        """
        sched = self.sched
        n, k1, kv = sched.n, self.k + 1, sched.kv
        capped = self.caps_lookahead
        if sched.waiting or not only_verifies:
            return t, [], None
        bs = kv.block_size           # kv.blocks_for(x) is -(-x // bs), inlined: this visits every row every step
        computed, remaining = sched.num_computed_tokens, sched.num_remaining_tokens   # updated in place
        verify_s, proposal_s, emitted_list = self.verify_fn(cost, n), self.proposal_time_s, self.emitted_list
        step_time_s = cost.step_time_s
        context = sum(computed) if capped else sched.context_total   # the rows' cached tokens, kept up to date
        need = 0                     # the lookahead blocks of the next step
        short = False                # a request verifies fewer than k + 1 positions (capped lookahead)
        for c, r in zip(computed, remaining, strict=True):
            q = k1
            if capped and r < k1:
                q, short = r, True
            need += -(-(c + q) // bs) + (-c // bs)
        finished = False
        while not finished:
            if need > kv.num_gpu_blocks - kv.num_used_blocks:   # the step preempts: planned the usual way
                break
            if short:
                tokens = [r if r < k1 else k1 for r in remaining]
                step_s = step_time_s(BatchShape(tokens, list(computed), 0, 0, sum(tokens)))
            else:
                step_s = verify_s(computed)
            duration = step_s + proposal_s(n, context + n)
            end = t + duration
            kv.allocate(need)                    # fits (checked above); with a prefix cache it evicts LRU
            log.step(t, duration, n, 0, n, 0, kv.num_used_blocks)
            if not end < horizon:                # the step crosses the next event: applied at its end
                return t, [], end
            before = sched.context_total
            need, finished, short = self.verify_rows(computed, remaining, emitted_list(n))
            context += sched.context_total - before      # the tokens the step emitted
            t = end
        return t, (sched._finish(t) if finished else []), None

    def verify_rows(self, computed: list[int], remaining: list[int],
                    emitted: list[int]) -> tuple[int, bool, bool]:
        """Apply one verification step of every running request to ``computed`` and ``remaining``
        (the rows' lists, updated in place) and to the counters and KV blocks, as
        ``update_from_output`` does for a step of decoding rows only; returns the next step's
        lookahead blocks, whether a request finished, and whether one now has fewer than ``k + 1``
        tokens left to verify (capped lookahead only)."""
        sched = self.sched
        k1, bs, n = self.k + 1, sched.kv.block_size, len(computed)
        freed = emitted_sum = need = 0
        finished = short = False
        if not self.caps_lookahead:      # k + 1 positions per request, always (the lean loop: every row, every step)
            for i in range(n):
                c, r = computed[i], remaining[i]
                e = emitted[i]           # accepted proposals plus the target's own token, within the output
                if e >= r:
                    e = r
                    finished = True
                ce = c + e
                computed[i] = ce
                remaining[i] = r - e
                emitted_sum += e
                held = -ce // bs                             # minus the blocks that hold its tokens now
                freed += held - (-(c + k1) // bs)            # the lookahead the rejected positions leave
                need += held - (-(ce + k1) // bs)            # the next step's lookahead
            drafted = n * self.k
        else:                            # the same, verifying at most the remaining output
            drafted = 0
            for i in range(n):
                c, r = computed[i], remaining[i]
                q = r if r < k1 else k1
                e = emitted[i]
                if e >= r:
                    e = r
                    finished = True
                ce, r = c + e, r - e
                computed[i] = ce
                remaining[i] = r
                emitted_sum += e
                drafted += q - 1
                held = -ce // bs
                freed += held - (-(c + q) // bs)
                if r < k1:
                    q, short = r, True
                else:
                    q = k1
                need += held - (-(ce + q) // bs)
        sched.context_total += emitted_sum
        sched.kv.free(freed)
        self.num_draft_tokens += drafted
        self.num_accepted_tokens += emitted_sum - n
        self.num_verify_steps += n
        self.num_emitted_decode_tokens += emitted_sum
        return need, finished, short

    def apply_planned_step(self, now: float) -> list[int]:
        """Apply the step :meth:`advance_steps` planned across its horizon, ending ``now``;
        returns the ids it finished."""
        sched = self.sched
        self.verify_rows(sched.num_computed_tokens, sched.num_remaining_tokens, self.emitted_list(sched.n))
        return sched._finish(now)

    def stats(self) -> dict[str, int]:
        return {"num_draft_tokens": self.num_draft_tokens, "num_accepted_tokens": self.num_accepted_tokens,
                "num_verify_steps": self.num_verify_steps,
                "num_emitted_decode_tokens": self.num_emitted_decode_tokens}


class SpeculativeScheduler(Scheduler):
    """Continuous batching whose decode steps propose and verify ``k`` tokens per request."""


    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, table: RequestTable, *,
                 spec: SpeculativeConfig, rng: np.random.Generator,
                 proposal_time_s: Callable[[int, int], float]) -> None:
        super().__init__(config, kv, table)
        self.spec = Speculation(self, spec, rng, proposal_time_s, caps_lookahead=False)
        self.k = spec.num_speculative_tokens
        self.proposal_time_s = proposal_time_s

    def own_steps(self) -> SpeculativeScheduler:
        """Itself: its verification steps (:meth:`advance_steps`, :meth:`apply_planned_step`)."""
        return self

    def advance_steps(self, t: float, horizon: float, cost: Any,
                      log: StepLogger) -> tuple[float, list[int], float | None]:
        """Verification steps on lists while nothing else can happen (:meth:`Speculation.advance_steps`)."""
        return self.spec.advance_steps(t, horizon, cost, log, True)

    def apply_planned_step(self, now: float) -> list[int]:
        return self.spec.apply_planned_step(now)

    def plan_decode_run(self, out: SchedulerOutput, now: float, next_event_time: float,
                        prices: DecodePrices) -> DecodeRun | None:
        """None: each verification step draws its outcome, so no two steps are known alike
        (:meth:`advance_steps` is the fast path instead)."""
        return None

    def stats(self) -> dict[str, int]:
        return self.spec.stats()

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput()
        if self.n:
            self._schedule_running_spec(out)
        if self.waiting and not out.preempted:
            self._schedule_waiting(out, now)
        m, k1 = out.num_decode, self.k + 1
        if m:
            # Verification is charged as a (k+1)-token chunk per decoding request over its context.
            context = self.num_computed_tokens[:m]
            out.cost_shape = BatchShape([k1] * m + out.admitted_tokens,
                                        context + (out.prefill_context or [0] * len(out.admitted)),
                                        0, 0, m * k1 + len(out.admitted))
            out.extra_s = self.proposal_time_s(m, out.decode_context_sum)
        return out

    def _schedule_running_spec(self, out: SchedulerOutput) -> None:
        n, k1, kv = self.n, self.k + 1, self.kv
        bs = kv.block_size
        need = 0                                    # lookahead blocks for k + 1 tokens per request
        for c in self.num_computed_tokens:
            need += -(-(c + k1) // bs) + (-c // bs)
        keep = n
        if need > kv.num_free_blocks:
            computed = self.num_computed_tokens
            need_rows = [-(-(c + k1) // bs) + (-c // bs) for c in computed]
            keep = kv.release_tail_until_fits(self.req_id, computed, need_rows)
            self._preempt_rows(keep, out)
            need = sum(need_rows[:keep])
        ok = self.kv.allocate(need)
        assert ok
        out.num_decode = keep
        out.decode_ids = self.req_id
        out.decode_context_sum = self.context_total + keep
        out.decode_budget_tokens = keep * k1

    def update_from_output(self, out: SchedulerOutput, now: float) -> list[int]:
        m, n = out.num_decode, self.n
        if m:
            if m == n:                                   # the decoding rows are every row: in place
                computed, remaining = self.num_computed_tokens, self.num_remaining_tokens
            else:
                computed, remaining = self.num_computed_tokens[:m], self.num_remaining_tokens[:m]
            self.spec.verify_rows(computed, remaining, self.spec.emitted_list(m))
            if m < n:
                self.num_computed_tokens[:m] = computed
                self.num_remaining_tokens[:m] = remaining
        remaining = self.num_remaining_tokens
        for row in range(m, n):                          # admitted requests' first tokens
            remaining[row] -= 1
        self._record_first_tokens(out, now)
        return self._finish(now)


class ChunkedSpeculativeScheduler(ChunkedPrefillScheduler):
    """Chunked prefill whose decoding requests propose and verify up to ``k`` tokens per step."""


    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, table: RequestTable, *,
                 spec: SpeculativeConfig, rng: np.random.Generator,
                 proposal_time_s: Callable[[int, int], float]) -> None:
        super().__init__(config, kv, table)
        self.spec = Speculation(self, spec, rng, proposal_time_s, caps_lookahead=True)
        self.k = spec.num_speculative_tokens
        self.proposal_time_s = proposal_time_s

    def advance_steps(self, t: float, horizon: float, cost: Any,
                      log: StepLogger) -> tuple[float, list[int], float | None]:
        """Verification steps on lists while nothing else can happen (:meth:`Speculation.advance_steps`):
        no prompt chunk left, and a budget that cannot bind."""
        only_verifies = self.num_prefilling == 0 and self.n * (self.k + 1) <= self.config.max_num_batched_tokens
        return self.spec.advance_steps(t, horizon, cost, log, only_verifies)

    def apply_planned_step(self, now: float) -> list[int]:
        return self.spec.apply_planned_step(now)

    def plan_decode_run(self, out: SchedulerOutput, now: float, next_event_time: float,
                        prices: DecodePrices) -> DecodeRun | None:
        """None: each verification step draws its outcome, so no two steps are known alike
        (:meth:`advance_steps` is the fast path instead)."""
        return None

    def stats(self) -> dict[str, int]:
        return self.spec.stats()

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        if self.n:
            budget = self._schedule_running_mixed(out, budget, self.k + 1)
        if self.waiting and not out.preempted and budget > 0 and self.n < self.max_num_seqs:
            self._admit_chunks(out, now, budget)
        tok = out.row_tokens
        if tok is None:
            return out
        # On lists, like the running rows' walk: a chunk per scheduled row, each sampling its
        # verified positions (decoding rows) or its first token (a prompt's last chunk).
        m = len(tok)
        chunk_tokens, chunk_context = [], []
        sampled = num_verify = verify_context = 0
        for t, p, c in zip(tok, self.num_pending[:m], self.num_computed_tokens[:m],
                           strict=True):
            if t > 0:
                chunk_tokens.append(t)
                chunk_context.append(c)
                if p == 0:
                    sampled += t
                    num_verify += 1
                    verify_context += c
                elif t == p:
                    sampled += 1
        out.cost_shape = BatchShape(chunk_tokens, chunk_context, 0, 0, sampled)
        if num_verify:
            out.extra_s = self.proposal_time_s(num_verify, verify_context + num_verify)
        return out

    def update_from_output(self, out: SchedulerOutput, now: float) -> list[int]:
        tokens = out.row_tokens
        assert tokens is not None   # every step of this scheduler describes its rows
        m = len(tokens)
        pending, computed, remaining = self.num_pending, self.num_computed_tokens, self.num_remaining_tokens
        num_verify = sum(1 for t, p in zip(tokens, pending, strict=False) if t > 0 and p == 0)   # rows [0, m)
        emitted = self.spec.emitted_list(num_verify) if num_verify else []
        bs = self.kv.block_size
        j = total = freed = drafted = emitted_sum = 0
        completed = []                     # rows whose last prompt chunk this step was
        for row in range(m):
            t, p, c = tokens[row], pending[row], computed[row]
            if p > 0:                      # a prompt chunk
                p -= t
                pending[row] = p
                if p == 0:
                    completed.append(row)
                    remaining[row] -= 1    # its first token
                step = t
            elif t > 0:                    # verification: accepted proposals plus one, within the row's tokens
                e = emitted[j]
                j += 1
                if e > t:
                    e = t
                r = remaining[row]
                if e > r:
                    e = r
                remaining[row] = r - e
                freed += -(-(c + t) // bs) + (-(c + e) // bs)   # the unused lookahead blocks
                drafted += t - 1
                emitted_sum += e
                step = e
            else:
                step = 0
            computed[row] = c + step
            total += step
        self.context_total += total
        if num_verify:
            self.kv.free(freed)
            spec = self.spec
            spec.num_draft_tokens += drafted
            spec.num_accepted_tokens += emitted_sum - num_verify
            spec.num_verify_steps += num_verify
            spec.num_emitted_decode_tokens += emitted_sum
        if completed:
            self.num_prefilling -= len(completed)
            ids = np.asarray([self.req_id[row] for row in completed], dtype=np.int64)
            first = ids[np.isnan(self.table.first_token_time[ids])]
            self.table.first_token_time[first] = now
        return self._finish(now)
