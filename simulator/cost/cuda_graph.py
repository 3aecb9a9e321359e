"""CUDA-graph padding (``engine.cuda_graph``): a step that replays a captured graph computes its
linear layers at the captured size.

Engines capture one CUDA graph per batch size in a list (vLLM ``cudagraph_capture_sizes``, SGLang
``cuda_graph_bs``, TensorRT-LLM ``cuda_graph_config.batch_sizes``); a step whose token count is at
most the largest captured size runs the graph of the next size at or above it, the extra rows being
padding, and a larger step runs eagerly. Which steps may replay a graph depends on the engine: vLLM
v1 pads any step by its total token count (full graphs for pure-decode batches, piecewise graphs for
the others, ``vllm/v1/cudagraph_dispatcher.py``); vLLM 0.6, SGLang's decode graphs and TensorRT-LLM
pad pure-decode steps only (:attr:`~simulator.scenario.cuda_graph.CudaGraphPadding.prefill_steps`).

What the padded rows cost, and what they do not:

* the linear layers (the MoE experts included), the elementwise ops and the tensor-parallel
  all-reduces run over the padded token count (they are inside the graph, on the padded buffers:
  vLLM slices ``input_ids[:num_input_tokens]``, the padded count);
* attention does not: the padded rows are not in the attention metadata (vLLM's piecewise graphs
  run attention outside the graph over the real tokens; its full decode graphs and SGLang's decode
  graphs give the padded requests zero or unit sequence lengths), so attention is priced over the
  real requests and their context, as without padding;
* the LM head and sampling run on the real rows only (vLLM computes logits on
  ``hidden_states[logits_indices]`` outside the graph), and the engine's CPU overhead counts the
  real requests and tokens.

So a padded step costs the unpadded step plus the difference of the linear, elementwise and
communication terms between the padded and the real token count, taken from the wrapped cost
model's own breakdown (of pure-decode shapes without context and without sampled rows, whose only
terms that depend on the token count are those three). The difference does not depend on the
context, so decode runs stay affine where the wrapped model's are.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from simulator.cost.base import BatchShape, CostModel, StepTime, VerifyStep, verify_step_fn
from simulator.cost.derived import BaseCostModel
from simulator.scenario.cuda_graph import CudaGraphPadding


class CudaGraphPadded(BaseCostModel):
    """``inner`` with CUDA-graph padding (see the module docstring): steps that replay a graph add
    the linear, elementwise and communication time of their padded rows."""

    def __init__(self, inner: CostModel, padding: CudaGraphPadding) -> None:
        self.inner = inner
        self.padding = padding
        self._max = padding.max_capture_size
        self._extra: dict[int, tuple[float, float, float, float]] = {}
        self._affine: dict[int, tuple[float, float] | None] = {}

    def _token_terms(self, num_tokens: int) -> tuple[float, float, float]:
        bd = self.inner.breakdown(BatchShape((), (), num_tokens, 0, 0))
        return bd.linear_s, bd.elementwise_s, bd.comm_s

    def extra(self, num_tokens: int) -> tuple[float, float, float, float]:
        """(linear, elementwise, comm, total) seconds the padding adds to a step of ``num_tokens``
        tokens that replays a graph (zeros at a captured size and above the largest)."""
        got = self._extra.get(num_tokens)
        if got is None:
            padded = self.padding.padded(num_tokens)
            if padded == num_tokens:
                got = (0.0, 0.0, 0.0, 0.0)
            else:
                (lp, ep, cp), (lr, er, cr) = self._token_terms(padded), self._token_terms(num_tokens)
                d = (max(0.0, lp - lr), max(0.0, ep - er), max(0.0, cp - cr))
                got = (*d, d[0] + d[1] + d[2])
            self._extra[num_tokens] = got
        return got

    def _replays(self, shape: BatchShape) -> int:
        """The step's token count when it replays a graph (0 when it runs eagerly)."""
        if shape.prefill_tokens and not self.padding.prefill_steps:
            return 0
        tokens = shape.num_tokens
        return tokens if 0 < tokens <= self._max else 0

    # -- the CostModel interface --------------------------------------------------------------------
    def breakdown(self, shape: BatchShape) -> StepTime:
        bd = self.inner.breakdown(shape)
        tokens = self._replays(shape)
        if not tokens:
            return bd
        lin, elem, comm, total = self.extra(tokens)
        if not total:
            return bd
        return dataclasses.replace(bd, linear_s=bd.linear_s + lin, elementwise_s=bd.elementwise_s + elem,
                                   comm_s=bd.comm_s + comm)

    def step_time_s(self, shape: BatchShape) -> float:
        t = self.inner.step_time_s(shape)
        tokens = self._replays(shape)
        return t + self.extra(tokens)[3] if tokens else t

    def stage_times_s(self, shape: BatchShape) -> list[float]:
        """The inner model's stages, the padding shared in proportion to their times."""
        stages = self.inner.stage_times_s(shape)
        tokens = self._replays(shape)
        pad = self.extra(tokens)[3] if tokens else 0.0
        total = sum(stages)
        if not pad or total <= 0.0:
            return stages
        return [t + pad * t / total for t in stages]

    def group_step_time_s(self, shapes: Sequence[BatchShape]) -> float:
        """The inner model's lockstep step plus the largest padding among the ranks' steps (each
        rank replays its own graph; the padded rows of the routed experts are counted in the
        padding, not in the shared part)."""
        pad = 0.0
        for shape in shapes:
            tokens = self._replays(shape)
            if tokens:
                pad = max(pad, self.extra(tokens)[3])
        return self.inner.group_step_time_s(shapes) + pad

    def verify_step_fn(self, num_seqs: int, num_query_tokens: int) -> VerifyStep:
        inner = verify_step_fn(self.inner, num_seqs, num_query_tokens)
        tokens = num_seqs * num_query_tokens
        if not num_seqs or not self.padding.prefill_steps or not 0 < tokens <= self._max:
            return inner                # as _replays: verification entries are prefill entries
        pad = self.extra(tokens)[3]
        return lambda computed: inner(computed) + pad

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        t = self.inner.decode_run_times(num_decodes, decode_context_tokens)
        return t + self.extra(num_decodes)[3] if 0 < num_decodes <= self._max else t

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: int) -> float:
        t = self.inner.decode_step_time_s(num_decodes, decode_context_tokens)
        return t + self.extra(num_decodes)[3] if 0 < num_decodes <= self._max else t

    def decode_step_fn(self, num_decodes: int) -> Callable[[float], float] | None:
        real = self.inner.decode_step_fn(num_decodes)
        if real is None or not 0 < num_decodes <= self._max:
            return real
        pad = self.extra(num_decodes)[3]
        return lambda s: real(s) + pad

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        """The wrapped model's ``(a, b)`` with the padding added to ``a`` (None where it has none)."""
        if num_decodes in self._affine:
            return self._affine[num_decodes]
        got = self.inner.decode_affine(num_decodes)
        if got is not None and 0 < num_decodes <= self._max:
            got = (got[0] + self.extra(num_decodes)[3], got[1])
        self._affine[num_decodes] = got
        return got
