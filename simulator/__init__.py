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
"""
from simulator.errors import ScenarioError
from simulator.run.records import SimulationResult
from simulator.run.resolve import resolve
from simulator.run.simulate import simulate
from simulator.scenario.config import Scenario, load_scenario, scenario_from_dict
from simulator.scenario.models import MODEL_PRESETS, ModelSpec
from simulator.scenario.profiles import HardwareProfile, available_profiles, load_profile

__all__ = [
    "MODEL_PRESETS", "HardwareProfile", "ModelSpec", "Scenario", "ScenarioError", "SimulationResult",
    "available_profiles", "load_profile", "load_scenario", "resolve", "scenario_from_dict", "simulate",
]
