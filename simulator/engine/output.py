"""What one engine step computes: the scheduler's plan of a step (vLLM v1's ``SchedulerOutput``,
``vllm/v1/core/sched/output.py``), reduced to what costs time and what the step log records."""
from __future__ import annotations

from simulator.cost.base import BatchShape


class SchedulerOutput:
    """The plan of one engine step (vLLM's ``SchedulerOutput``, reduced to what costs time).

    Rows ``[0, num_decode)`` of the running batch decode one token each; ``admitted`` requests
    were appended after them and prefill ``admitted_tokens`` tokens each from scratch.

    A plain class rather than a dataclass: the compiled engine builds one per step, and a
    dataclass's generated ``__init__`` would run as Python there.
    """

    def __init__(self, num_decode: int = 0, decode_context_sum: int = 0) -> None:
        self.num_decode = num_decode
        self.decode_context_sum = decode_context_sum
        """Tokens the decoding requests attend over (cached tokens + the new one, summed)."""
        self.admitted: list[int] = []
        self.admitted_tokens: list[int] = []
        self.admitted_first: list[int] = []
        """Admitted requests that have not produced a token yet (their first token ends this step)."""
        self.preempted: list[int] = []
        self.decode_ids: list[int] | None = None
        """Ids of the decoding rows: its first ``num_decode`` entries (it may be the running batch's own
        list of ids: valid until the step is applied)."""
        self.residues: list[int] | None = None
        """Histogram of decoding rows' ``num_computed_tokens % block_size`` before the step."""
        self.prefill_context: list[int] | None = None
        """Cached tokens each ``admitted`` entry's new tokens attend over (None: all zero)."""
        self.num_partial = 0
        """``admitted`` entries whose prompt is not finished by this step (chunked prefill): no token."""
        self.cost_shape: BatchShape | None = None
        """What the cost model is charged for, when not the scheduled tokens themselves (padded slots
        of a static batch, speculative verification); see :meth:`batch_shape`."""
        self.row_tokens: list[int] | None = None
        """Tokens scheduled per running row, for policies whose rows are not decodes-then-prefills."""
        self.decode_budget_tokens: int | None = None
        """Budget the decoding rows take, when not one token each (speculative verification)."""
        self.extra_s = 0.0
        """Time the step spends outside the target's forward pass (a draft model's proposals)."""

    def __repr__(self) -> str:
        return (f"SchedulerOutput(num_decode={self.num_decode}, admitted={self.admitted}, "
                f"admitted_tokens={self.admitted_tokens}, preempted={self.preempted})")

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.admitted_tokens)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return self.num_decode + self.num_prefill_tokens

    def decoding_ids(self) -> list[int]:
        """Ids of the step's decoding rows (``decode_ids``' first ``num_decode`` entries)."""
        return self.decode_ids[:self.num_decode] if self.decode_ids is not None else []

    @property
    def num_scheduled_tokens(self) -> dict[int, int]:
        """Request id -> tokens scheduled this step (vLLM's field of the same name)."""
        out = {int(r): 1 for r in self.decoding_ids()}
        out.update(zip(self.admitted, self.admitted_tokens, strict=True))
        return out

    @property
    def is_pure_decode(self) -> bool:
        return not self.admitted and not self.preempted and self.num_decode > 0

    def batch_shape(self) -> BatchShape:
        """What the cost model is charged for this step (``CostModel.step_time_s``'s input):
        ``cost_shape`` when a policy set one, else the decodes and the admitted entries' tokens
        over their cached context; every decode and every finished prompt samples a token."""
        if self.cost_shape is not None:
            return self.cost_shape
        k = len(self.admitted)
        context = self.prefill_context if self.prefill_context is not None else [0] * k
        n = self.num_decode
        return BatchShape(self.admitted_tokens, context, n, self.decode_context_sum, n + k - self.num_partial)
