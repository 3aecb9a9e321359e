"""Measured decode attention as one piecewise-linear table per batch size (the ``kernel_table``
model's decode attention), with the scalar and step-by-step forms the engine's decode runs price
with: the same float operations as the table's numpy form, so a step priced alone, inside a short
run on floats, or inside a long run with numpy gives the same float."""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.cost.base import DecodeSteps
from simulator.cost.op_table import DecodeCurves


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d(a, b)`` (the sorted distinct values of both) without ``np.unique``, whose first call
    imports ``numpy.ma`` (8 ms of a simulation's start-up)."""
    u = np.sort(np.concatenate((a, b)))
    keep = np.ones(len(u), dtype=bool)
    keep[1:] = u[1:] != u[:-1]
    return u[keep]


class PiecewiseDecode:
    """:class:`~simulator.cost.op_table.DecodeCurves` (times ``ratio``) flattened, per decode batch
    size, into one piecewise-linear table over the context sum: the breakpoints of the one or two
    measured batches it interpolates between, their values, and the slope beyond the last. Between
    and beyond the breakpoints every term is linear, so the table is the same function (to float
    rounding); it costs one ``np.interp`` where the curves cost two interpolations and their edge
    tests (3x faster simulations of long decode runs). Below the first breakpoint (under 2 tokens
    of context per sequence) the curves themselves are used."""

    __slots__ = ("curves", "ratio", "_tables", "_scalar_fns")

    def __init__(self, curves: DecodeCurves, ratio: float) -> None:
        self.curves, self.ratio = curves, ratio
        self._tables: dict[float, tuple[np.ndarray, np.ndarray, float, list[float], list[float]]] = {}
        self._scalar_fns: dict[float, Callable[[float], float]] = {}

    def _table(self, n: float) -> tuple[np.ndarray, np.ndarray, float, list[float], list[float]]:
        c, bs = self.curves, self.curves.batches
        if n <= bs[0] or n >= bs[-1]:
            i = 0 if n <= bs[0] else len(bs) - 1
            xs = c.sums[i] * (n / bs[i])
        else:
            i = bisect.bisect_right(bs, n) - 1
            xs = c.sums[i] if n == bs[i] else _union(c.sums[i], c.sums[i + 1])
        ys = c(n, xs) * self.ratio
        slope = float((c(n, 2.0 * xs[-1]) * self.ratio - ys[-1]) / xs[-1])
        got = self._tables[n] = (xs, ys, slope, xs.tolist(), ys.tolist())
        return got

    def __call__(self, n: float, s: float | np.ndarray) -> Any:
        if isinstance(s, int | float):
            return (self._scalar_fns.get(n) or self.scalar_fn(n))(float(s))
        xs, ys, slope, _, _ = self._tables.get(n) or self._table(n)
        s = np.asarray(s, dtype=np.float64)
        y = np.interp(s, xs, ys)
        hi = s > xs[-1]
        if hi.any():
            y = np.where(hi, ys[-1] + slope * (s - xs[-1]), y)
        lo = s < xs[0]
        if lo.any():
            y = np.where(lo, self.curves(n, s) * self.ratio, y)
        return y


    def scalar_fn(self, n: float) -> Callable[[float], float]:
        """The table at batch ``n`` as a function of one context sum, element for element what
        ``self(n, array)`` gives (the engine's short decode runs and single steps, without numpy's
        per-call cost): the same float operations as ``np.interp`` (``slope * (s - x[j]) + y[j]``,
        ``y[j]`` at a breakpoint), so a step and the same step inside a decode run agree to the bit."""
        got = self._scalar_fns.get(n)
        if got is not None:
            return got
        _, _, slope, x, y = self._tables.get(n) or self._table(n)
        x_first, x_last, y_last = x[0], x[-1], y[-1]
        curves, ratio, bisect_right = self.curves, self.ratio, bisect.bisect_right

        def attn(s: float) -> float:
            if s > x_last:
                return y_last + slope * (s - x_last)
            if s < x_first:
                return float(curves(n, s) * ratio)
            if s == x_last:
                return y_last
            j = bisect_right(x, s) - 1
            if s == x[j]:
                return y[j]
            return (y[j + 1] - y[j]) / (x[j + 1] - x[j]) * (s - x[j]) + y[j]
        self._scalar_fns[n] = attn
        return attn

    def steps_fn(self, n: int, layers: float, lin: float, elem: float, comm: float,
                 overhead: float) -> DecodeSteps:
        """:data:`~simulator.cost.base.DecodeSteps` for pure-decode steps of ``n`` sequences that take
        ``lin + layers * attention + elem + comm + overhead`` (the table cost model's step), with
        :meth:`scalar_fn`'s attention inlined: the same float operations step for step, without a
        function call and a bisection per step (the context grows, so the segment is found again only
        when the context leaves it)."""
        _, _, slope, x, y = self._tables.get(n) or self._table(n)
        x_first, x_last, y_last = x[0], x[-1], y[-1]
        curves, ratio, bisect_right = self.curves, self.ratio, bisect.bisect_right

        def steps(ctx1: int, k: int, delta: float) -> tuple[list[float], bool]:
            out: list[float] = []
            append = out.append
            cum = 0.0
            x_lo = x_hi = y_lo = rise = math.nan        # the segment [x_lo, x_hi) the context is in
            for j in range(k):
                s = float(ctx1 + n * j)
                if s > x_last:
                    a = y_last + slope * (s - x_last)
                elif s < x_first:
                    a = float(curves(n, s) * ratio)
                elif s == x_last:
                    a = y_last
                else:
                    if not x_lo <= s < x_hi:
                        i = bisect_right(x, s) - 1
                        x_lo, x_hi, y_lo = x[i], x[i + 1], y[i]
                        rise = (y[i + 1] - y_lo) / (x_hi - x_lo)
                    a = y_lo if s == x_lo else rise * (s - x_lo) + y_lo
                d = lin + layers * a + elem + comm + overhead
                append(d)
                cum += d
                if cum >= delta:
                    return out, True
            return out, False
        return steps
