"""What every cost model provides: the step-time breakdown, the protocol and the registry."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simulator.registry import Registry


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step's time, broken down (seconds)."""

    linear_s: float = 0.0
    attention_s: float = 0.0
    elementwise_s: float = 0.0
    comm_s: float = 0.0
    overhead_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.linear_s + self.attention_s + self.elementwise_s + self.comm_s + self.overhead_s


class CostModel(Protocol):
    """What the engine asks of a cost model.

    ``prefill_tokens[i]`` new prompt tokens are computed for prefill request ``i`` on top of
    ``prefill_context[i]`` already-cached tokens; ``num_decode`` requests decode one token each,
    attending over ``decode_context_sum`` tokens in total (their cached tokens plus the new one);
    ``num_sampled`` rows go through the LM head (decodes plus prefills that finish their prompt).
    """

    def breakdown(self, prefill_tokens: list[int], prefill_context: list[int], num_decode: int,
                  decode_context_sum: int, num_sampled: int) -> StepTime: ...

    def step_time_s(self, prefill_tokens: list[int], prefill_context: list[int], num_decode: int,
                    decode_context_sum: int, num_sampled: int) -> float: ...

    def decode_run_times(self, num_decode: int, decode_context_sums: np.ndarray) -> np.ndarray:
        """Durations of consecutive pure-decode steps, one per entry of ``decode_context_sums``.
        Must not decrease as the context sum grows (the engine relies on it to bound runs)."""
        ...

    def decode_step_time_s(self, num_decode: int, decode_context_sum: int) -> float:
        """Duration of one pure-decode step (same as ``decode_run_times`` for one entry)."""
        ...

    # Optional: ``decode_affine(num_decode) -> (a, b) | None``: (a, b) when a pure-decode step takes
    # exactly ``a + b * decode_context_sum`` seconds (the engine then plans decode runs in closed
    # form), None when it does not (the engine sums ``decode_run_times``).


COST_MODELS: Registry[Callable[..., CostModel]] = Registry("cost model", "hardware.cost_model")
register = COST_MODELS.register
"""Class decorator adding a cost model to :data:`COST_MODELS` under a name."""


