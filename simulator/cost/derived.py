"""The base of a cost model that gives only its breakdown and step time: every other form the
engine asks for (:class:`~simulator.cost.base.CostModel`) derived from :meth:`step_time_s`.

A new cost model subclasses :class:`BaseCostModel`, implements ``breakdown`` and ``step_time_s``,
and registers a factory (:data:`~simulator.cost.base.COST_MODELS`); the engine then prices decode
runs step by step through ``step_time_s`` (numpy form: one call per step), which is exact by
construction, only slower. A model that can do better overrides the forms it has: the affine form
(closed-form runs), a step function on floats (short runs), a verification step with its
batch-size terms computed once; each must give ``step_time_s``'s float for the same shape.

Not one of the compiled modules (setup.py): the compiled cost models (``constant``, ``roofline``)
implement every form themselves, and an interpreted class may not subclass a compiled one.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from simulator.cost.base import BatchShape, DecodeSteps, StepTime, VerifyStep, slowest_rank_s


class BaseCostModel(ABC):
    """``breakdown`` and ``step_time_s`` to implement; the decode forms derived (module docstring)."""

    @abstractmethod
    def breakdown(self, shape: BatchShape) -> StepTime:
        """One step's time, broken down into linear, attention, elementwise, comm and overhead."""

    @abstractmethod
    def step_time_s(self, shape: BatchShape) -> float:
        """``breakdown(shape).total_s`` (the same float), as fast as the model can give it."""

    def stage_times_s(self, shape: BatchShape) -> list[float]:
        """One stage (a model that splits no pipeline): the whole step."""
        return [self.step_time_s(shape)]

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        step_time_s, decode = self.step_time_s, BatchShape.decode
        return np.array([step_time_s(decode(num_decodes, int(c))) for c in decode_context_tokens], dtype=np.float64)

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: int) -> float:
        return self.step_time_s(BatchShape.decode(num_decodes, decode_context_tokens))

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        return None

    def decode_step_fn(self, num_decodes: int) -> Callable[[float], float] | None:
        return None

    def decode_steps_fn(self, num_decodes: int) -> DecodeSteps | None:
        return None

    def decode_step_terms(self, num_decodes: int) -> tuple[float, float] | None:
        return None

    def verify_step_fn(self, num_seqs: int, num_query_tokens: int) -> VerifyStep | None:
        return None

    def group_step_time_s(self, shapes: Sequence[BatchShape]) -> float:
        """Data-parallel ranks that share nothing: the slowest rank's step (a model that runs routed
        experts over every rank's tokens overrides it: :func:`~simulator.cost.base.lockstep_time_s`)."""
        return slowest_rank_s(self.step_time_s, shapes)
