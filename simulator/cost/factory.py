"""Building a cost model from a profile: every implementation registered, one lookup."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from simulator.cost import analytic as _analytic  # noqa: F401  (registers constant, roofline)
from simulator.cost import kernel_table as _kernel_table  # noqa: F401  (registers kernel_table)
from simulator.cost import table as _table  # noqa: F401  (registers table)
from simulator.cost.base import COST_MODELS, BatchShape, CostModel, StepTime, VerifyStep, verify_step_fn
from simulator.cost.cuda_graph import CudaGraphPadded, CudaGraphPadding
from simulator.cost.derived import BaseCostModel
from simulator.scenario.models import ModelSpec
from simulator.scenario.parallel import Parallelism
from simulator.scenario.profiles import HardwareProfile, Overhead
from simulator.scenario.quantization import Precision


def make_cost_model(profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int,
                    precision: Precision | None = None, parallel: Parallelism | None = None,
                    cuda_graph: CudaGraphPadding | None = None) -> CostModel:
    """The profile's cost model for ``model`` on one tensor-parallel group; ``precision`` (weight
    quantization, KV-cache dtype) is passed on only when given, and ``parallel`` (pipeline stages,
    expert parallelism) only when it splits more than the tensor-parallel ranks: only to cost models
    that :data:`simulator.capabilities.COST_MODEL_SUPPORT` says model it (checked when the scenario
    resolves). ``cuda_graph`` (the engine's capture, ``ResolvedSystem.cuda_graph``) pads the steps
    that replay a graph (:class:`~simulator.cost.cuda_graph.CudaGraphPadded`), inside the async
    scheduling wrapper: the padded GPU time is what the CPU overhead overlaps. The ``constant``
    cost model, whose step time does not depend on the batch, takes neither."""
    factory = COST_MODELS.lookup(profile.cost_model)
    overhead = profile.overhead
    overlapped = overhead.async_scheduling and profile.cost_model != "constant"
    if overlapped:   # the GPU part alone, then max(GPU, CPU) per step
        profile = profile.model_copy(update={"overhead": overhead.model_copy(update={
            "step_s": 0.0, "per_seq_s": 0.0, "per_token_s": 0.0})})
    kwargs: dict[str, object] = {}
    if precision is not None:
        kwargs["precision"] = precision
    if parallel is not None and not parallel.is_tensor_only:
        kwargs["parallel"] = parallel
    inner = factory(profile, model, tensor_parallel_size, **kwargs)
    if cuda_graph is not None and profile.cost_model != "constant":
        inner = CudaGraphPadded(inner, cuda_graph)
    return AsyncScheduled(inner, overhead) if overlapped else inner


class AsyncScheduled(BaseCostModel):
    """A cost model whose CPU overhead overlaps the GPU work (vLLM's async scheduling): a step
    takes ``max(GPU time, CPU overhead)``; the breakdown's ``overhead_s`` is the part the GPU
    time does not hide. Decode runs are summed step by step (``max`` is not affine)."""

    def __init__(self, inner: CostModel, overhead: Overhead) -> None:
        self.inner = inner
        self.step_s, self.per_seq_s, self.per_token_s = overhead.step_s, overhead.per_seq_s, overhead.per_token_s

    def _cpu_s(self, num_seqs: int, num_tokens: int) -> float:
        return self.step_s + self.per_seq_s * num_seqs + self.per_token_s * num_tokens

    def breakdown(self, shape: BatchShape) -> StepTime:
        bd = self.inner.breakdown(shape)
        return dataclasses.replace(bd, overhead_s=max(0.0, self._cpu_s(shape.num_seqs, shape.num_tokens) - bd.total_s))

    def step_time_s(self, shape: BatchShape) -> float:
        return max(self.inner.step_time_s(shape), self._cpu_s(shape.num_seqs, shape.num_tokens))

    def stage_times_s(self, shape: BatchShape) -> list[float]:
        """The inner model's stages, the first at least the CPU overhead: the engine schedules the
        next batch while the stages work, one batch per overhead at most."""
        stages = self.inner.stage_times_s(shape)
        stages[0] = max(stages[0], self._cpu_s(shape.num_seqs, shape.num_tokens))
        return stages

    def group_step_time_s(self, shapes: Sequence[BatchShape]) -> float:
        """The ranks' GPU work in lockstep, or the slowest rank's CPU time when that is longer (each
        rank's engine core schedules its next batch while the group's step runs)."""
        cpu = 0.0
        for shape in shapes:
            cpu = max(cpu, self._cpu_s(shape.num_seqs, shape.num_tokens))
        return max(self.inner.group_step_time_s(shapes), cpu)

    def verify_step_fn(self, num_seqs: int, num_query_tokens: int) -> VerifyStep:
        gpu = verify_step_fn(self.inner, num_seqs, num_query_tokens)
        cpu = self._cpu_s(num_seqs, num_seqs * num_query_tokens)
        return lambda computed: max(gpu(computed), cpu)

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        return np.maximum(self.inner.decode_run_times(num_decodes, decode_context_tokens),
                          self._cpu_s(num_decodes, num_decodes))

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: int) -> float:
        return max(self.inner.decode_step_time_s(num_decodes, decode_context_tokens),
                   self._cpu_s(num_decodes, num_decodes))

    def decode_step_fn(self, num_decodes: int) -> Callable[[float], float] | None:
        gpu = self.inner.decode_step_fn(num_decodes)
        if gpu is None:
            return None
        cpu = self._cpu_s(num_decodes, num_decodes)
        return lambda s: max(gpu(s), cpu)


