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
decode runs are advanced one step per event (no fast-forward): the README states the cost.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from simulator.cost.base import BatchShape
from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.request import RequestTable
from simulator.engine.scheduler import Scheduler, SchedulerOutput
from simulator.scenario.config import SchedulerConfig, SpeculativeConfig


def expected_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """``(1 - alpha^(k+1)) / (1 - alpha)``: tokens one verification step emits on average."""
    a, k = acceptance_rate, num_speculative_tokens
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


class SpeculativeScheduler(Scheduler):
    """Continuous batching whose decode steps propose and verify ``k`` tokens per request."""

    supports_decode_runs = False

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, table: RequestTable, *,
                 spec: SpeculativeConfig, rng: np.random.Generator,
                 proposal_time_s: Callable[[int, int], float]) -> None:
        super().__init__(config, kv, table)
        self.k = spec.num_speculative_tokens
        self.alpha = spec.acceptance_rate
        self.rng = rng
        self.proposal_time_s = proposal_time_s
        self.num_draft_tokens = 0
        """Tokens proposed (vLLM's metric name)."""
        self.num_accepted_tokens = 0
        self.num_verify_steps = 0
        self.num_emitted_decode_tokens = 0
        self._draws = np.zeros(0, dtype=np.int64)
        self._next_draw = 0

    def _accepted(self, m: int) -> np.ndarray:
        """Accepted proposals of ``m`` requests: geometric counts truncated at k, drawn in blocks."""
        if self.alpha >= 1.0:
            return np.full(m, self.k, dtype=np.int64)
        if self._next_draw + m > len(self._draws):
            fresh = np.minimum(self.rng.geometric(1.0 - self.alpha, size=max(4096, m)) - 1, self.k)
            self._draws = np.concatenate((self._draws[self._next_draw:], fresh))
            self._next_draw = 0
        out = self._draws[self._next_draw:self._next_draw + m]
        self._next_draw += m
        return out

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput()
        if self.n:
            self._schedule_running_spec(out)
        if self.waiting and not out.preempted:
            self._schedule_waiting(out, now)
        m, k1 = out.num_decode, self.k + 1
        if m:
            # Verification is charged as a (k+1)-token chunk per decoding request over its context.
            context = self.num_computed_tokens[:m].tolist()
            out.cost_shape = BatchShape([k1] * m + out.admitted_tokens,
                                        context + (out.prefill_context or [0] * len(out.admitted)),
                                        0, 0, m * k1 + len(out.admitted))
            out.extra_s = self.proposal_time_s(m, out.decode_context_sum)
        return out

    def _schedule_running_spec(self, out: SchedulerOutput) -> None:
        n, k1, kv = self.n, self.k + 1, self.kv
        computed = self.num_computed_tokens[:n]
        need_rows = kv.blocks_for(computed + k1) - kv.blocks_for(computed)   # lookahead for k + 1 tokens
        keep = n
        need = int(need_rows.sum())
        if need > kv.num_free_blocks:
            keep = kv.release_tail_until_fits(self.req_id[:n], computed, need_rows)
            self._preempt_rows(keep, out)
            need = int(need_rows[:keep].sum())
        ok = self.kv.allocate(need)
        assert ok
        out.num_decode = keep
        out.decode_ids = self.req_id[:keep]
        out.decode_context_sum = self.context_total + keep
        out.decode_budget_tokens = keep * k1

    def update_from_output(self, out: SchedulerOutput, now: float) -> np.ndarray:
        m, n, k, blocks_for = out.num_decode, self.n, self.k, self.kv.blocks_for
        if m:
            accepted = self._accepted(m)
            before = self.num_computed_tokens[:m].copy()
            emitted = np.minimum(accepted + 1, self.num_remaining_tokens[:m])
            self.num_computed_tokens[:m] += emitted
            self.num_remaining_tokens[:m] -= emitted
            self.context_total += int(emitted.sum())
            # Return the lookahead blocks the rejected (or never needed) positions reserved.
            self.kv.free(int((blocks_for(before + k + 1) - blocks_for(before + emitted)).sum()))
            self.num_draft_tokens += m * k
            self.num_accepted_tokens += int((emitted - 1).sum())
            self.num_verify_steps += m
            self.num_emitted_decode_tokens += int(emitted.sum())
        if n > m:
            self.num_remaining_tokens[m:n] -= 1          # admitted requests' first tokens
        if out.admitted_first:
            self.table.first_token_time[out.admitted_first] = now
        return self._finish(now)

    def stats(self) -> dict[str, int]:
        return {"num_draft_tokens": self.num_draft_tokens, "num_accepted_tokens": self.num_accepted_tokens,
                "num_verify_steps": self.num_verify_steps,
                "num_emitted_decode_tokens": self.num_emitted_decode_tokens}
