"""The engine's own step times: ``llmplan calibrate --from-observation ... --engine-steps LOG``.

vLLM logs one line per engine step when served with ``--enable-logging-iteration-details``::

    Iteration(812): 3 context requests, 1024 context tokens, 9 generation requests, 9 generation
    tokens, iteration elapsed time: 41.20 ms, GPU KV cache usage: 12.0%

``elapsed`` is the time the engine core waited on its model for that step (the forward pass, the
sampler and the model runner's CPU work to prepare them), not its scheduler or its output handling.
Those lines measure the kernels of the engine a user serves with, step by step, under the real
batches (on GPUs when it is served with ``--no-async-scheduling``: under vLLM's default async
scheduling there the next step is scheduled while the model runs and the wait times only the rest
of the forward pass; vLLM on CPUs always runs synchronous steps, docs/calibration.md), which no
microbenchmark of torch's reference kernels does (a CPU vLLM runs oneDNN pre-packed GEMMs; a GPU
vLLM runs CUDA graphs, FlashAttention and fused MoE).

:func:`fit_kernel_scale` regresses them on the base profile's kernel time of the same step:
``elapsed = execute_s + kernel_scale x kernels(step)``, by least squares with the steps whose
residual lies beyond 4 median absolute deviations dropped (a garbage-collector pause or a
descheduled thread is not a kernel) and the fit repeated, three rounds at most. The log gives each
step's counts, not each request's context, so a decode's context is taken as the observed runs'
mean (prompt plus half the answer): attention at other contexts is priced by the base profile's
shape. vLLM counts a request resumed after preemption as a generation request, its recomputed
prompt and answer among the generation tokens; those tokens are priced as a prompt
(:func:`kernel_times_s`). The result also gives, per kind of step as vLLM logs it (decode only,
prefill only, both), the median of measured over fitted time: a profile whose prefill and decode
are priced in the wrong proportion shows it there, whatever the fitted scale.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import ScenarioError

#: One step's line (vLLM's ``LoggingStatLogger._log_iteration_details``).
LINE = re.compile(r"Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, (\d+) generation requests, "
                  r"(\d+) generation tokens, iteration elapsed time: ([\d.]+) ms")
#: Residuals beyond this many median absolute deviations are dropped before the fit is repeated.
OUTLIER_MADS = 4.0


@dataclass(frozen=True)
class EngineSteps:
    """Step counts and times read from one or more server logs (one row per step)."""

    context_requests: np.ndarray
    context_tokens: np.ndarray
    generation_requests: np.ndarray
    elapsed_s: np.ndarray
    paths: tuple[str, ...]
    generation_tokens: np.ndarray | None = None
    """Tokens the generation requests computed (None: one each). More than one per request where a
    request resumed after preemption recomputes its prompt and answer so far: vLLM counts any request
    that has an output token as a generation request (``compute_iteration_details``), so the
    recomputation is logged among the generation tokens, not the context tokens."""

    def __len__(self) -> int:
        return len(self.elapsed_s)


def parse_iterations(text: str) -> np.ndarray:
    """Rows ``(context requests, context tokens, generation requests, generation tokens, elapsed ms)``
    of the iteration lines in ``text`` (an empty ``(0, 5)`` array when there are none)."""
    rows = [[float(g) for g in m.groups()[1:]] for m in LINE.finditer(text)]
    return np.array(rows, dtype=float).reshape(-1, 5)


def read_engine_steps(paths: tuple[str, ...], field: str = "--engine-steps") -> EngineSteps:
    """Every step line of ``paths``.

    Raises:
        ScenarioError: a file that cannot be read or holds no step line (named, with the flag that
            makes vLLM write them).
    """
    parts = []
    for p in paths:
        try:
            text = Path(p).read_text(errors="replace")
        except OSError as e:
            raise ScenarioError(field, p, f"cannot be read ({e.strerror or e}): give a `vllm serve` log") from None
        rows = parse_iterations(text)
        if not len(rows):
            raise ScenarioError(field, p, "holds no engine step lines ('Iteration(N): ... iteration elapsed time: "
                                "T ms'): serve with `vllm serve ... --enable-logging-iteration-details` and give "
                                "its log")
        parts.append(rows)
    rows = np.concatenate(parts)
    return EngineSteps(rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64), rows[:, 2].astype(np.int64),
                       rows[:, 4] / 1e3, tuple(paths), rows[:, 3].astype(np.int64))


def kernel_times_s(cost: Any, steps: EngineSteps, decode_context_tokens: float, *,
                   recompute: bool = True) -> np.ndarray:
    """The cost model's time of each logged step less its CPU overhead: each context request's share
    of the context tokens computed from scratch, each generation request at ``decode_context_tokens``.

    With ``recompute`` (an engine without speculative decoding), a step's generation tokens beyond
    one per generation request are a resumed request's recomputation
    (:attr:`EngineSteps.generation_tokens`): one generation request is priced as a prompt of those
    tokens plus one instead (several resumed in one step, as one). Without it (a speculative-decoding
    engine, whose generation requests verify several tokens each) every generation request is priced
    as one decode."""
    from simulator.cost.base import BatchShape

    out = np.empty(len(steps))
    ctx = max(1, int(round(decode_context_tokens)))
    tokens = steps.generation_tokens if recompute else None
    for i in range(len(steps)):
        cr, ct, gr = int(steps.context_requests[i]), int(steps.context_tokens[i]), int(steps.generation_requests[i])
        prefill = [ct // cr + (1 if j < ct % cr else 0) for j in range(cr)] if cr else []
        extra = int(tokens[i]) - gr if tokens is not None and gr else 0
        if extra > 0:                  # a resumed request: its prompt and answer so far, computed again
            prefill.append(extra + 1)
            gr -= 1
        n = len(prefill)
        b = cost.breakdown(BatchShape(prefill, [0] * n, gr, gr * ctx, gr + n))
        out[i] = b.total_s - b.overhead_s
    return out


def fit_kernel_scale(kernels_s: np.ndarray, steps: EngineSteps) -> dict[str, Any]:
    """``elapsed = execute_s + kernel_scale x kernels_s`` by trimmed least squares (module docstring).

    Raises:
        ScenarioError: fewer than 10 steps, or steps too alike to tell a scale from a constant.
    """
    y, x = steps.elapsed_s, kernels_s
    if len(y) < 10:
        raise ScenarioError("--engine-steps", list(steps.paths), f"has {len(y)} step lines; a fit needs at least 10")
    if float(np.ptp(x)) <= 0.05 * float(np.mean(x)):
        raise ScenarioError("--engine-steps", list(steps.paths), "steps all of one size cannot tell a per-step "
                            "cost from a kernel scale: log runs with different batches (a light and a heavy load)")
    keep = np.ones(len(y), dtype=bool)
    for _ in range(3):
        a = np.vstack([np.ones(int(keep.sum())), x[keep]]).T
        (execute_s, scale), *_ = np.linalg.lstsq(a, y[keep], rcond=None)
        r = y - (execute_s + scale * x)
        mad = float(np.median(np.abs(r[keep] - np.median(r[keep])))) or 1e-12
        new = np.abs(r - np.median(r[keep])) <= OUTLIER_MADS * 1.4826 * mad
        if (new == keep).all():
            break
        keep = new
    if not (np.isfinite(scale) and scale > 0):
        raise ScenarioError("--engine-steps", list(steps.paths), f"the steps' times do not grow with their kernels "
                            f"(fitted scale {scale:.3g}): are they from this model and engine?")
    fitted = execute_s + scale * x
    kinds = {"decode": steps.context_requests == 0, "prefill": steps.generation_requests == 0,
             "mixed": (steps.context_requests > 0) & (steps.generation_requests > 0)}
    ratio = y / fitted
    return {"kernel_scale": float(scale), "execute_s": float(execute_s), "steps": len(y),
            "steps_used": int(keep.sum()),
            "r2": float(1 - np.sum((y[keep] - fitted[keep]) ** 2) / np.sum((y[keep] - y[keep].mean()) ** 2)),
            "measured_over_fitted": {k: {"steps": int(m.sum()), "median": float(np.median(ratio[m])),
                                         "p10": float(np.percentile(ratio[m], 10)),
                                         "p90": float(np.percentile(ratio[m], 90))}
                                     for k, m in kinds.items() if m.any()},
            "logs": list(steps.paths)}
