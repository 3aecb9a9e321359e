"""Capacity planning: GPUs per region per quarter under p99 SLOs.

``load_plan(path)`` -> :class:`LoadedPlan` (validated plan file) -> ``plan(...)`` ->
:class:`PlanResult` (worksheet, per-candidate and per-quarter DataFrames). The CLI's
``llmplan plan`` and the dashboard both call :func:`plan`; see the README, "Capacity planning".
"""
from .capacity import CapacityBound, capacity_bound
from .config import LoadedPlan, PlanConfig, load_plan
from .run import HOURS_PER_QUARTER, WORKSHEET_COLUMNS, PlanProgress, PlanResult, build_tasks, plan
from .worksheet import spreadsheet_safe, write_worksheets

__all__ = ["CapacityBound", "HOURS_PER_QUARTER", "LoadedPlan", "PlanConfig", "PlanProgress", "PlanResult",
           "WORKSHEET_COLUMNS", "build_tasks", "capacity_bound", "load_plan", "plan", "spreadsheet_safe",
           "write_worksheets"]
