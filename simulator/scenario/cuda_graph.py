"""An engine's CUDA-graph capture (``engine.cuda_graph``): the batch sizes it captured and which
steps replay them. Configuration, resolved from the engine preset and the scenario
(:func:`simulator.scenario.engines.resolve_cuda_graph`); what a padded step costs is the cost
model's (:mod:`simulator.cost.cuda_graph`)."""
from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class CudaGraphPadding:
    """The captured sizes (ascending, distinct, at least one) and whether steps with prompt tokens
    replay graphs too (``prefill_steps``) or only pure-decode steps do."""

    capture_sizes: tuple[int, ...]
    prefill_steps: bool = False

    def __post_init__(self) -> None:
        sizes = self.capture_sizes
        if not sizes or sizes[0] < 1 or any(b <= a for a, b in itertools.pairwise(sizes)):
            raise ValueError(f"capture sizes must be ascending, distinct and >= 1, got {sizes}")

    @property
    def max_capture_size(self) -> int:
        return self.capture_sizes[-1]

    def padded(self, num_tokens: int) -> int:
        """The captured size a step of ``num_tokens`` tokens runs at (itself above the largest)."""
        if num_tokens > self.capture_sizes[-1] or num_tokens <= 0:
            return num_tokens
        return self.capture_sizes[bisect.bisect_left(self.capture_sizes, num_tokens)]
