"""llmplan's simulator: a SimPy model of LLM inference serving.

Scenario (frozen, validated) -> :func:`simulate` -> :class:`SimulationResult` (request and step
records as pandas DataFrames, plus a JSON-able summary). The simulator never imports torch,
streamlit or plotly.
"""
from .config import Scenario, load_scenario, scenario_from_dict
from .errors import ScenarioError
from .models import MODEL_PRESETS, ModelSpec
from .profiles import HardwareProfile, available_profiles, load_profile
from .simulation import SimulationResult, resolve, simulate

__all__ = [
    "HardwareProfile", "MODEL_PRESETS", "ModelSpec", "Scenario", "ScenarioError", "SimulationResult",
    "available_profiles", "load_profile", "load_scenario", "resolve", "scenario_from_dict", "simulate",
]
