"""Decode runs: many identical pure-decode steps planned, priced and applied as one event.

While nobody waits and nothing outside a replica happens, every engine step of continuous batching
is the same step: each running request decodes one token, attending over one more token than in the
step before. Such a stretch is a :class:`DecodeRun`, planned here in three parts:

* **Where it ends** (:func:`plan_run`): at the first of the step in which a running request emits
  its last token, the last step whose new KV blocks still fit, and the step during which the next
  external event (an arrival, a deadline) passes. The KV blocks come in closed form: a row that has
  cached ``c`` tokens needs a new block exactly when ``c % block_size == 0``, so the histogram of
  ``c % block_size`` over the batch (``residues``), turned by the steps taken, gives every step's
  allocations (:func:`blocks_needed_by_steps`).
* **What it costs**, in one of two pricings, chosen per run by :class:`DecodePrices` (derived once
  per cost model): a cost model whose pure-decode step is affine in the context sum,
  ``a + b * context`` (``CostModel.decode_affine``), gives the run's total and the step that
  crosses the event in closed form (a quadratic); any other is priced step by step, on plain floats
  for runs of at most :data:`LIST_STEPS` steps (``decode_steps_fn`` / ``decode_step_fn``) and with
  numpy beyond (``decode_run_times``).
* **Why both pricings give the same run**: the cost models promise that their float and numpy forms
  perform the same float operations element for element (tested for each,
  ``tests/test_speed.py``), the step that crosses the event is found from the same running sum
  (``np.cumsum`` adds in order, as the float loop does), and the total of a float-priced run is
  summed by :func:`numpy_sum`, numpy's own pairwise order: a run's durations and total do not
  depend on which pricing found them, and one event per step gives the same floats
  (``fast_forward=False``, tested bit for bit).

The scheduler keeps the batch (:class:`~simulator.engine.scheduler.Scheduler`'s
``plan_decode_run``, ``plan_decode_continuation``, ``plan_tracked_run``); this module holds what
does not depend on how the batch is kept.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from simulator.cost.base import CostModel, DecodeSteps, decode_steps_from


class DecodeRun:
    """``num_steps`` consecutive pure-decode steps of ``num_seqs`` requests, planned as one event.

    Step ``j`` (0-based) lasts ``a + b * (context_sum + num_seqs * j)`` when the cost model is
    affine in the context (``durations`` is None), else ``durations[j]``. A plain class rather than
    a dataclass (one is built per run; see :class:`~simulator.engine.output.SchedulerOutput`).
    """

    def __init__(self, num_steps: int, num_seqs: int, total_s: float, extra_blocks: int, finishes: bool,
                 kv_used_first: int, residues: list[int], context_sum: int, affine: tuple[float, float] | None,
                 durations: np.ndarray | list[float] | None, num_padded: int = 0, steps_to_finish: int = 0) -> None:
        self.num_steps = num_steps
        self.num_seqs = num_seqs
        self.total_s = total_s
        self.extra_blocks = extra_blocks
        """Blocks allocated by steps 2..num_steps (step 1's were allocated by ``schedule``)."""
        self.finishes = finishes
        """Whether some request emits its last token in the last step."""
        self.kv_used_first = kv_used_first
        self.residues = residues
        self.context_sum = context_sum
        self.affine = affine
        self.durations = durations
        self.num_padded = num_padded
        """Of ``num_seqs``, slots that compute but emit nothing (finished requests of a static batch)."""
        self.steps_to_finish = steps_to_finish
        """Steps until the first running request emits its last token, counted from the run's start."""

    def __repr__(self) -> str:
        return (f"DecodeRun(num_steps={self.num_steps}, num_seqs={self.num_seqs}, total_s={self.total_s!r}, "
                f"finishes={self.finishes})")

    def durations_s(self) -> np.ndarray:
        if self.durations is not None:
            return np.asarray(self.durations, dtype=np.float64)
        a, b = self.affine  # type: ignore[misc]
        return a + b * (self.context_sum + self.num_seqs * np.arange(self.num_steps, dtype=np.float64))

    def kv_blocks_used(self) -> np.ndarray:
        return self.kv_used_first + blocks_needed_by_steps(self.residues, self.num_steps)


def blocks_needed_by_steps(residues: list[int], num_steps: int) -> np.ndarray:
    """New blocks allocated by steps 2..j of a decode run, for j = 1..num_steps (0 for j = 1).

    Step j needs a block for every row whose cached count before the run, ``c``, has
    ``(c + j - 1) % block_size == 0``; ``residues`` is the histogram of ``c % block_size``.
    """
    bs = len(residues)
    j = np.arange(2, num_steps + 1)
    return np.concatenate(([0], np.cumsum(np.asarray(residues, dtype=np.int64)[(1 - j) % bs])))


def turned(residues: list[int], steps: int) -> list[int]:
    """The residue histogram after every row cached ``steps`` more tokens (a new list)."""
    s = steps % len(residues)
    return residues[-s:] + residues[:-s] if s else list(residues)


def steps_to_reach(delta: float, affine: tuple[float, float] | None, cost: CostModel, n: int, ctx1: int,
                    k_cap: int) -> tuple[int, np.ndarray | None]:
    """Smallest step count k (<= k_cap) whose cumulative duration reaches ``delta`` seconds, and,
    for a cost model that is not affine, the durations of at least k steps it summed (else None)."""
    if delta <= 0:
        return 1, None
    if affine is not None:
        a, b = affine
        a1 = a + b * ctx1                   # first step
        if b == 0 or n == 0:
            k = math.ceil(delta / a1)
        else:
            # cum(k) = k a1 + b n k (k - 1) / 2 >= delta  (quadratic in k)
            c2 = b * n / 2.0
            c1 = a1 - c2
            k = math.ceil((-c1 + math.sqrt(c1 * c1 + 4 * c2 * delta)) / (2 * c2))
        # Guard the floating-point edge: step back while k - 1 steps already reach delta. Clamp first: a
        # far-off delta (k ~ 1e300) would otherwise step back one at a time, forever, once k - 1 == k in floats.
        k = min(k, k_cap)
        while k > 1 and (k - 1) * a1 + b * n * (k - 1) * (k - 2) / 2.0 >= delta:
            k -= 1
        return max(1, min(k, k_cap)), None
    first = cost.decode_step_time_s(n, ctx1)
    k_guess = min(k_cap, int(delta / first) + 2)
    durations = cost.decode_run_times(n, ctx1 + n * np.arange(k_guess, dtype=np.float64))
    return min(k_guess, int(np.searchsorted(np.cumsum(durations), delta)) + 1), durations


LIST_STEPS = 64
"""Decode runs of at most this many steps are priced on Python floats (``decode_steps_fn``), longer
ones with numpy (``decode_run_times``); both give the same floats."""


def list_steps_to_reach(delta: float, steps_fn: DecodeSteps, cost: CostModel, n: int, ctx1: int,
                         k_cap: int) -> tuple[int, np.ndarray | list[float] | None]:
    """:func:`steps_to_reach` for a cost model that is not affine, one step at a time on plain
    floats while that takes at most :data:`LIST_STEPS` steps: the same step count, and the same
    durations (a running sum in the order ``np.cumsum`` adds)."""
    if delta <= 0:
        return 1, None
    durations, reached = steps_fn(ctx1, min(k_cap, LIST_STEPS), delta)
    if reached:
        return len(durations), durations
    if k_cap <= LIST_STEPS:
        return k_cap, durations
    return steps_to_reach(delta, None, cost, n, ctx1, k_cap)


def numpy_sum(values: list[float]) -> float:
    """``float(np.sum(values))`` on a list, without building the array: numpy's pairwise
    summation, the same additions in the same order (a run's total must not depend on whether
    its durations were priced with numpy or on floats)."""
    return _pairwise_sum(values, 0, len(values))


def _pairwise_sum(a: list[float], lo: int, n: int) -> float:
    # numpy's pairwise_sum (numpy/_core/src/umath/loops_utils.h.src): plain below 8 values, eight
    # accumulators up to its block of 128, halves (rounded to a multiple of 8) above.
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo:lo + 8]
        i, end = lo + 8, lo + n - n % 8
        while i < end:
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for i in range(end, lo + n):
            res += a[i]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_sum(a, lo, n2) + _pairwise_sum(a, lo + n2, n - n2)




class DecodePrices:
    """What decode runs are priced with, derived once per cost model (one per replica): per batch
    size, the affine form ``(a, b)`` of a pure-decode step where the cost model has one, else its
    steps on plain floats (``decode_steps_fn``, else built from ``decode_step_fn``; None when it
    has neither, and runs are priced with numpy). Both are pure functions of the batch size, so
    they are looked up once per size rather than once per run."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self._affine: dict[int, tuple[float, float] | None] = {}
        self._steps: dict[int, DecodeSteps | None] = {}

    def affine(self, num_decodes: int) -> tuple[float, float] | None:
        """``(a, b)``: a pure-decode step of ``num_decodes`` rows takes ``a + b * context`` seconds."""
        if num_decodes in self._affine:
            return self._affine[num_decodes]
        got = self._affine[num_decodes] = self.cost.decode_affine(num_decodes)
        return got

    def steps(self, num_decodes: int) -> DecodeSteps | None:
        """The cost model's pure-decode steps of ``num_decodes`` rows on plain floats (or None)."""
        if num_decodes in self._steps:
            return self._steps[num_decodes]
        cost = self.cost
        steps = cost.decode_steps_fn(num_decodes)
        if steps is None:
            step: Callable[[float], float] | None = cost.decode_step_fn(num_decodes)
            steps = decode_steps_from(step, num_decodes) if step is not None else None
        self._steps[num_decodes] = steps
        return steps


def plan_run(n: int, num_padded: int, residues: list[int], k_fin: int, k_cap: int, ctx1: int,
             affine: tuple[float, float] | None, now: float, next_event_time: float, prices: DecodePrices,
             free: int, used: int) -> DecodeRun:
    """The run of ``n`` decoding rows (and ``num_padded`` padded slots that compute too) starting at
    ``now``, its first step's blocks allocated: ``residues`` is the rows' ``num_computed_tokens %
    block_size`` histogram, ``k_fin`` the steps until one finishes, ``k_cap`` (<= ``k_fin``) the most
    steps the scheduler allows (a multi-step run ends at its last step), ``ctx1`` the first step's
    context sum, ``affine`` the cost's ``(a, b)`` at ``n + num_padded`` rows (None: priced step by
    step), ``free`` and ``used`` the cache's blocks; see the module docstring."""
    bs = len(residues)
    nc = n + num_padded
    k = k_cap
    cost = prices.cost
    durations: np.ndarray | list[float] | None = None
    steps_fn = None
    if affine is None:       # a short run is priced on plain floats, a long one with numpy
        steps_fn = prices.steps(nc)
    if next_event_time != np.inf and k > 1:
        if steps_fn is not None:
            reach, durations = list_steps_to_reach(next_event_time - now, steps_fn, cost, nc, ctx1, k)
        else:
            reach, durations = steps_to_reach(next_event_time - now, affine, cost, nc, ctx1, k)
        k = min(k, reach)
    if k > 1 and n * (-(-(k - 1) // bs)) > free:     # every row's blocks for k - 1 more tokens
        # The KV cache may run out during the run: find the last step whose blocks fit.
        prefix = np.concatenate(([0], np.cumsum(residues[::-1])))   # steps 2, 3, ... in order
        q, r = divmod(free, n)
        within = int(np.searchsorted(prefix, r, side="right")) - 1
        k = min(k, 1 + q * bs + within)
    extra = 0
    if k > 1:
        # Steps 2..k: every full period of block_size steps allocates one block per row; the
        # remaining t steps allocate for the rows whose residues come first in step order.
        periods, t = divmod(k - 1, bs)
        extra = periods * n + (sum(residues[bs - t:]) if t else 0)
    if affine is not None:
        a, b = affine
        total = k * a + b * (k * ctx1 + nc * k * (k - 1) / 2.0)
        durations = None
    else:
        # The first k of the durations summed to find the horizon's step, if there are (a cost
        # model's decode_run_times is element for element: a step's duration is its context's).
        if durations is None or len(durations) < k:
            if steps_fn is not None and k <= LIST_STEPS:
                durations = steps_fn(ctx1, k, math.inf)[0]
            else:
                durations = cost.decode_run_times(nc, ctx1 + nc * np.arange(k, dtype=np.float64))
        else:
            durations = durations[:k]
        total = float(durations.sum()) if isinstance(durations, np.ndarray) else numpy_sum(durations)
    return DecodeRun(k, nc, total, extra, k == k_fin, used, residues, ctx1, affine, durations, num_padded, k_fin)
