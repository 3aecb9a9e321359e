"""Capacity planning: GPUs per region per quarter under p99 SLOs.

``load_plan(path)`` -> :class:`LoadedPlan` (validated plan file) -> ``plan(...)`` ->
:class:`PlanResult` (worksheet, per-candidate and per-quarter DataFrames). The CLI's
``llmplan plan`` and the dashboard both call :func:`plan`; see the README, "Capacity planning".
"""
from simulator.planner.capacity import CapacityBound, capacity_bound
from simulator.planner.config import LoadedPlan, PlanConfig, load_plan
from simulator.planner.run import HOURS_PER_QUARTER, PlanProgress, PlanResult, build_tasks, plan
from simulator.planner.tables import WORKSHEET_COLUMNS
from simulator.planner.worksheet import spreadsheet_safe, write_worksheets

__all__ = ["HOURS_PER_QUARTER", "WORKSHEET_COLUMNS", "CapacityBound", "LoadedPlan", "PlanConfig", "PlanProgress",
           "PlanResult", "build_tasks", "capacity_bound", "load_plan", "plan", "spreadsheet_safe",
           "write_worksheets"]
