"""Building a cost model from a profile: every implementation registered, one lookup."""
from __future__ import annotations

from simulator.cost import analytic as _analytic  # noqa: F401  (registers constant, roofline)
from simulator.cost import kernel_table as _kernel_table  # noqa: F401  (registers kernel_table)
from simulator.cost import table as _table  # noqa: F401  (registers table)
from simulator.cost.base import COST_MODELS, CostModel
from simulator.scenario.models import ModelSpec
from simulator.scenario.profiles import HardwareProfile
from simulator.scenario.quantization import Precision


def make_cost_model(profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int,
                    precision: Precision | None = None) -> CostModel:
    """The profile's cost model for ``model`` on one tensor-parallel group; ``precision`` (weight
    quantization, KV-cache dtype) is passed on only when given: only to cost models that
    :data:`simulator.capabilities.COST_MODEL_SUPPORT` says model it (checked when the scenario resolves)."""
    factory = COST_MODELS.lookup(profile.cost_model)
    if precision is not None:
        return factory(profile, model, tensor_parallel_size, precision=precision)
    return factory(profile, model, tensor_parallel_size)


