"""Building a cost model from a profile: every implementation registered, one lookup."""
from __future__ import annotations

from simulator.cost import analytic as _analytic  # noqa: F401  (registers constant, roofline)
from simulator.cost import table as _table  # noqa: F401  (registers table)
from simulator.cost.base import COST_MODELS, CostModel
from simulator.scenario.models import ModelSpec
from simulator.scenario.profiles import HardwareProfile
from simulator.scenario.quantization import Precision


def make_cost_model(profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int,
                    precision: Precision | None = None) -> CostModel:
    """The profile's cost model for ``model`` on one tensor-parallel group; ``precision`` (weight
    quantization, KV-cache dtype) is passed on only when given."""
    from simulator.errors import ScenarioError

    factory = COST_MODELS.lookup(profile.cost_model)
    if precision is not None:
        import inspect

        if "precision" not in inspect.signature(factory).parameters:
            raise ScenarioError("deployment.quantization", precision.quantization,
                                f"cost model {profile.cost_model!r} of profile {profile.name!r} times the model in "
                                f"its own dtype only (kv_cache_dtype {precision.kv_cache_dtype!r}); quantization "
                                "and kv_cache_dtype need a roofline profile")
        return factory(profile, model, tensor_parallel_size, precision=precision)
    return factory(profile, model, tensor_parallel_size)


