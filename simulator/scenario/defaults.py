"""The scheduler fields a scenario leaves out, filled in when it is loaded, after validation.

With an engine preset (``engine: vllm-v1``) the fields left out take the preset's values, some of
which follow the GPU (vLLM v1's batch defaults are larger on GPUs of 70 GiB or more), so filling them
needs the hardware profile, read from disk. Without a preset, a policy that never splits a prompt gets
a step budget that holds the longest prompt. Both run here, in :func:`simulator.scenario.config.
scenario_from_dict`, the one path every scenario built from a dict takes (YAML files, ``--set``,
:meth:`~simulator.scenario.config.Scenario.with_overrides`, plan candidates, the dashboard's uploads),
rather than in a validator: validation stays pure (no file read), and the validated scenario is not
written into afterwards.

The values are filled after validation, not into the raw dict before it, for two reasons: the preset's
inputs (model, hardware, engine) are then known to be valid, and the filled fields stay marked as not
set (``model_fields_set``), so that ``with_overrides({"engine": ...})`` applies the new preset to them
instead of keeping the old preset's values as if the scenario had chosen them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.errors import ScenarioError
from simulator.scenario.engines import preset_scheduler
from simulator.scenario.models import MODEL_PRESETS, ModelSpec
from simulator.scenario.profiles import load_profile
from simulator.scenario.scheduler import WHOLE_PROMPT_POLICIES, SchedulerConfig

if TYPE_CHECKING:  # pragma: no cover
    from simulator.scenario.config import Scenario


def with_scheduler_defaults(scenario: Scenario) -> Scenario:
    """``scenario`` with the scheduler fields it left out filled in (:func:`scheduler_defaults`); the
    fields it set stay the only ones marked as set.

    Raises:
        pydantic.ValidationError: the preset's values and the scenario's clash (a preset's token budget
            below the scenario's ``max_num_seqs``); :func:`~simulator.scenario.config.scenario_from_dict`
            turns it into the one-line error.
    """
    values = scheduler_defaults(scenario)
    if not values:
        return scenario
    user = scenario.scheduler.model_fields_set
    merged = SchedulerConfig.model_validate({**scenario.scheduler.model_dump(include=user), **values})
    scheduler = SchedulerConfig.model_construct(set(user), **dict(merged))
    return scenario.model_copy(update={"scheduler": scheduler})


def scheduler_defaults(scenario: Scenario) -> dict[str, Any]:
    """The scheduler fields to fill in and their values ({} when none):

    * with an engine preset, the preset's values of the fields the scenario left out, for its hardware
      profile (None when the profile cannot be loaded: :func:`simulator.resolve` reports the bad
      reference) and served context;
    * without one, for a policy whose step has a token budget but never splits a prompt
      (:data:`~simulator.scenario.scheduler.WHOLE_PROMPT_POLICIES`), a ``max_num_batched_tokens`` left
      out becomes the larger of the field's default (8,192) and ``max_model_len`` (vLLM's rule without
      chunked prefill), so that changing the model never needs a second edit. An unknown policy gets
      nothing (:func:`simulator.resolve` reports it).
    """
    scheduler, user = scenario.scheduler, scenario.scheduler.model_fields_set
    if scenario.engine is not None:
        try:
            profile = load_profile(scenario.hardware, base_dir=scenario.base_dir)
        except ScenarioError:
            profile = None
        preset = preset_scheduler(scenario.engine.preset, profile, served_context(scenario))
        return {k: v for k, v in preset.items() if k not in user}
    if "max_num_batched_tokens" in user or scheduler.policy not in WHOLE_PROMPT_POLICIES:
        return {}
    budget = max(scheduler.max_num_batched_tokens, served_context(scenario) or 0)
    return {"max_num_batched_tokens": budget} if budget != scheduler.max_num_batched_tokens else {}


def served_context(scenario: Scenario) -> int | None:
    """The longest prompt + output served: ``scheduler.max_model_len``, else the model's context
    (None for an unknown model preset, which validation of the model reports)."""
    if scenario.scheduler.max_model_len:
        return scenario.scheduler.max_model_len
    if isinstance(scenario.model, ModelSpec):
        return scenario.model.max_model_len
    spec = MODEL_PRESETS.get(scenario.model)
    return spec.max_model_len if spec is not None else None
