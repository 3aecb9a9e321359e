"""Host memory for preempted requests' KV blocks (``preemption_mode: swap``, vLLM v0's
``swap_space``): a preempted request's blocks are copied out over the device-host link while there
is room (else it recomputes its prompt), and copied back when it is admitted again; the copies
lengthen the step that makes them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SwapSpace:
    """Host memory that preempted requests' KV blocks are copied to, and its counters."""

    capacity_blocks: int
    bytes_per_block: float
    bandwidth_bytes_per_s: float
    """Device-host link, one direction (PCIe)."""
    used_blocks: int = 0
    swap_outs: int = 0
    swap_ins: int = 0
    recompute_fallbacks: int = 0

    def copy_out(self, blocks: int) -> float:
        """Copy ``blocks`` out of the device: the seconds it takes, or -1.0 when they do not fit
        (the request recomputes instead)."""
        if self.used_blocks + blocks > self.capacity_blocks:
            self.recompute_fallbacks += 1
            return -1.0
        self.used_blocks += blocks
        self.swap_outs += 1
        return blocks * self.bytes_per_block / self.bandwidth_bytes_per_s

    def copy_in(self, blocks: int) -> float:
        """Copy ``blocks`` back to the device (their host memory is freed): the seconds it takes."""
        self.used_blocks -= blocks
        self.swap_ins += 1
        return blocks * self.bytes_per_block / self.bandwidth_bytes_per_s

    def stats(self) -> dict[str, int]:
        return {"swap_outs": self.swap_outs, "swap_ins": self.swap_ins,
                "swap_recompute_fallbacks": self.recompute_fallbacks}
