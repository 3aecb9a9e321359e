"""llmplan's simulator: a SimPy model of LLM inference serving.

Scenario (frozen, validated) -> :func:`simulate` -> :class:`SimulationResult` (request and step
records as pandas DataFrames, plus a JSON-able summary). The simulator never imports torch,
streamlit or plotly. The sub-packages read in the order a run flows through them:

* ``scenario/``: the frozen configuration, its text forms, model presets, hardware profiles;
* ``workload/``: arrivals, token lengths, shared prefixes and sessions, client levers;
* ``engine/``: one replica: request table, KV memory and prefix cache, schedulers, deadlines,
  the SimPy engine loop; ``cost/``: how long each engine step takes;
* ``cluster/``: routers, affinity, model pools, regions, the autoscaler, the network;
* ``run/``: resolve a scenario, wire everything, simulate, collect records;
* ``metrics``: latency, throughput and SLO statistics of a run; ``report/``: what the dashboard
  and notebooks show; ``planner/``: GPUs per region and quarter; ``cli``: the command line.

The public names below are imported on first use (PEP 562), so that ``import simulator.cli``
(``llmplan --help``) does not pay for pandas, scipy and the engine, and the ``llmplan`` command's
entry point (:func:`simulator.cli.main`) can take charge of a Ctrl-C before the slow imports start.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from simulator import native

native.install()   # the compiled engine, where an install built it (simulator.native)

if TYPE_CHECKING:  # pragma: no cover
    from simulator.errors import ScenarioError
    from simulator.run.records import SimulationResult
    from simulator.run.resolve import resolve
    from simulator.run.simulate import simulate
    from simulator.scenario.config import Scenario, load_scenario, scenario_from_dict
    from simulator.scenario.models import MODEL_PRESETS, ModelSpec
    from simulator.scenario.profiles import HardwareProfile, available_profiles, load_profile

#: Public name -> the module that defines it.
_EXPORTS = {
    "ScenarioError": "simulator.errors", "SimulationResult": "simulator.run.records",
    "resolve": "simulator.run.resolve", "simulate": "simulator.run.simulate",
    "Scenario": "simulator.scenario.config", "load_scenario": "simulator.scenario.config",
    "scenario_from_dict": "simulator.scenario.config", "MODEL_PRESETS": "simulator.scenario.models",
    "ModelSpec": "simulator.scenario.models", "HardwareProfile": "simulator.scenario.profiles",
    "available_profiles": "simulator.scenario.profiles", "load_profile": "simulator.scenario.profiles",
}

__all__ = [
    "MODEL_PRESETS", "HardwareProfile", "ModelSpec", "Scenario", "ScenarioError", "SimulationResult",
    "available_profiles", "load_profile", "load_scenario", "resolve", "scenario_from_dict", "simulate",
]
assert sorted(__all__) == sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value     # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
