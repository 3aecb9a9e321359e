"""The scenario: a frozen, validated description of one serving system and its traffic.

A scenario is inert data (Ciw's "network", vLLM's configs): the model, the hardware profile, the
deployment, the scheduler limits, the workload and the SLO. :func:`load_scenario` reads YAML,
applies ``--set`` overrides and validates everything through one path, so the CLI, the UI and
Python callers see the same one-line errors naming the field, the value and what is allowed.
Nothing here simulates; :func:`simulator.simulate` takes a scenario and builds fresh objects.

This module assembles :class:`Scenario` from its sections, one module each: :mod:`~simulator.scenario.
workload`, :mod:`~simulator.scenario.deployment` (with the fleet), :mod:`~simulator.scenario.scheduler`
(scheduler, engine, speculative decoding), :mod:`~simulator.scenario.request_path` (client, admission,
pipeline, response cache, coalescing, network) and :mod:`~simulator.scenario.slo`; it re-exports their
models, so ``from simulator.scenario.config import SchedulerConfig`` keeps working. The checks across
sections live on :class:`Scenario`; loading adds the engine preset's defaults
(:mod:`~simulator.scenario.defaults`) and the run-size limits (:mod:`~simulator.scenario.run_size`).
"""
from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import BaseModel, Field, ValidationError, model_validator

from simulator.arguments import check_overrides, check_path
from simulator.errors import FieldError, ScenarioError, field_error_of
from simulator.scenario.defaults import with_scheduler_defaults
from simulator.scenario.deployment import (
    AffinityConfig,
    AutoscalerConfig,
    DeploymentConfig,
    FleetClientConfig,
    FleetConfig,
    FleetRegionConfig,
    OutageConfig,
    PoolConfig,
    PoolRoutingConfig,
    PromptThreshold,
)
from simulator.scenario.files import read_yaml, require_file
from simulator.scenario.frozen import Frozen
from simulator.scenario.limits import (
    MAX_NAME_LENGTH,
    MAX_NUM_REQUESTS,
    MAX_TIME_S,
    FiniteFloat,
    Integer,
    Name,
    limit_message,
)
from simulator.scenario.models import ModelSpec
from simulator.scenario.overrides import parse_overrides, set_dotted
from simulator.scenario.request_path import (
    AdmissionConfig,
    ClientConfig,
    CoalescingConfig,
    NetworkConfig,
    PipelineConfig,
    RequestClientConfig,
    ResponseCacheConfig,
    StageConfig,
    StageLatencyConfig,
)
from simulator.scenario.run_size import check_run_size, check_span
from simulator.scenario.scheduler import CudaGraphConfig, EngineConfig, SchedulerConfig, SpeculativeConfig
from simulator.scenario.slo import SLOConfig
from simulator.scenario.workload import (
    ArrivalConfig,
    Burst,
    ClosedLoopArrival,
    DiurnalArrival,
    EmpiricalLength,
    FixedLength,
    GammaArrival,
    GeometricLength,
    LengthConfig,
    LognormalLength,
    OfflineArrival,
    PoissonArrival,
    PrefixConfig,
    PromptPopularityConfig,
    SessionsConfig,
    TierConfig,
    TraceArrival,
    UniformLength,
    WorkloadConfig,
    lengths_from_trace,
)

__all__ = [
    "AdmissionConfig", "AffinityConfig", "ArrivalConfig", "AutoscalerConfig", "Burst", "ClientConfig",
    "ClosedLoopArrival", "CoalescingConfig", "CudaGraphConfig", "DeploymentConfig", "DiurnalArrival",
    "EmpiricalLength", "EngineConfig", "FixedLength", "FleetClientConfig", "FleetConfig", "FleetRegionConfig",
    "GammaArrival", "GeometricLength", "LengthConfig", "LognormalLength", "NetworkConfig", "OfflineArrival",
    "OutageConfig", "PipelineConfig", "PoissonArrival", "PoolConfig", "PoolRoutingConfig", "PrefixConfig",
    "PromptPopularityConfig", "PromptThreshold", "RequestClientConfig", "ResponseCacheConfig", "SLOConfig",
    "Scenario", "SchedulerConfig", "SessionsConfig", "SpeculativeConfig", "StageConfig", "StageLatencyConfig",
    "TierConfig", "TraceArrival", "UniformLength", "WorkloadConfig", "check_run_size", "check_span",
    "load_scenario", "parse_overrides", "scenario_from_dict",
]


class Scenario(Frozen):
    """One serving system under one workload; the input of :func:`simulator.simulate`."""

    name: Name = Field(default="scenario", max_length=MAX_NAME_LENGTH)
    seed: Integer = Field(default=0, ge=0)
    num_requests: Integer | None = Field(default=None, ge=1, le=MAX_NUM_REQUESTS)
    duration_s: FiniteFloat | None = Field(default=None, gt=0, le=MAX_TIME_S)
    """Generate arrivals for this long (instead of ``num_requests``); the run then drains."""
    warmup_s: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TIME_S)
    """Requests arriving before this instant are left out of the statistics."""
    cooldown_s: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TIME_S)
    """Requests arriving within this long of the last arrival are left out of the statistics."""
    max_sim_time_s: FiniteFloat | None = Field(default=None, gt=0, le=MAX_TIME_S)
    """Stop the clock here even if requests are still in flight (they are counted ``in_flight``)."""
    model: str | ModelSpec
    hardware: str | dict[str, Any]
    deployment: DeploymentConfig = DeploymentConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    workload: WorkloadConfig
    slo: SLOConfig = SLOConfig()
    client: RequestClientConfig = RequestClientConfig()
    admission: AdmissionConfig = AdmissionConfig()
    pipeline: PipelineConfig | None = None
    """Pre- and post-processing stages around the engine (None: none)."""
    response_cache: ResponseCacheConfig | None = None
    """A cache of whole answers in front of the engine (None: none)."""
    coalescing: CoalescingConfig | None = None
    """Identical prompts in flight share one engine request (None: off)."""
    engine: EngineConfig | None = None
    """Engine preset (``vllm-v1``, ``vllm-v0.6``, ``sglang``, ``trtllm``): fills in the scheduler
    fields left out; None: the scheduler fields' own defaults."""
    speculative_config: SpeculativeConfig | None = None
    """Speculative decoding (with the continuous or chunked_prefill policy); None: off."""
    network: NetworkConfig | None = None
    """Client RTTs and connection set-up added to client-perceived TTFT and E2E (none: server-side only)."""
    fleet: FleetConfig | None = None
    """Several regions with geo routing, spillover and outages (replaces ``deployment.replicas``)."""
    base_dir: str = "."
    """Directory relative paths resolve against (the scenario file's folder when loaded)."""

    @model_validator(mode="after")
    def _size(self) -> Scenario:
        arrival = self.workload.arrival
        is_trace = isinstance(arrival, TraceArrival) or (isinstance(arrival, ClosedLoopArrival)
                                                          and arrival.replay is not None)
        if self.num_requests is None and self.duration_s is None and not is_trace:
            raise FieldError("num_requests", None, "the run needs a length: give num_requests (requests to send) "
                             "or duration_s (seconds of arrivals); neither is set")
        return self

    @model_validator(mode="after")
    def _window(self) -> Scenario:
        """Every request arrives before ``duration_s`` (without sessions, whose later turns may not): when
        ``warmup_s`` and ``cooldown_s`` cover it, the measurement window is sure to be empty."""
        offline = isinstance(self.workload.arrival, OfflineArrival)
        trimmed = self.warmup_s + self.cooldown_s
        if self.duration_s is not None and self.workload.sessions is None and not offline and trimmed > 0 \
                and trimmed >= self.duration_s:
            field, value = ("warmup_s", self.warmup_s) if self.warmup_s else ("cooldown_s", self.cooldown_s)
            raise FieldError(field, value, f"warmup_s + cooldown_s = {trimmed:g} s cover the whole duration_s "
                             f"({self.duration_s:g} s; every request arrives within it): no request is left in the "
                             "measurement window [warmup_s, last arrival - cooldown_s]; lower them or lengthen "
                             "duration_s")
        return self

    @model_validator(mode="after")
    def _task_slo_needs_sessions(self) -> Scenario:
        if self.workload.sessions is None:
            slos = [("slo", self.slo)] + [(f"workload.tiers.{i}.slo", t.slo)
                                          for i, t in enumerate(self.workload.tiers or ())]
            for where, slo in slos:
                for p in (50, 90, 95, 99):
                    value = getattr(slo, f"task_ttua_p{p}_ms") if slo is not None else None
                    if value is not None:
                        raise FieldError(f"{where}.task_ttua_p{p}_ms", value, "judges whole sessions (agent tasks): "
                                         f"give workload.sessions, or use {where}.ttua_p{p}_ms for single requests")
        return self

    @model_validator(mode="after")
    def _prompt_identity(self) -> Scenario:
        arrival = self.workload.arrival
        popularity = self.workload.prompt_popularity
        if popularity is not None and lengths_from_trace(arrival):
            raise FieldError("workload.prompt_popularity", popularity.model_dump(), "draws prompt lengths per "
                             "distinct prompt, but the trace gives every request's length: set "
                             "workload.arrival.use_trace_lengths: false" if isinstance(arrival, TraceArrival)
                             else "distinct prompt, but the closed loop's trace gives every request's length")
        if popularity is None:
            if self.response_cache is not None and self.response_cache.kind == "exact":
                raise FieldError("response_cache.kind", "exact", "hits repeated prompts: give "
                                 "workload.prompt_popularity (distinct_prompts, zipf_s), or use kind: semantic with "
                                 "a hit_rate")
            if self.coalescing is not None:
                raise FieldError("coalescing", self.coalescing.model_dump(), "merges identical prompts: give "
                                 "workload.prompt_popularity (distinct_prompts, zipf_s)")
        return self

    def resolve_path(self, path: str) -> Path:
        p = Path(path).expanduser()
        if p.is_absolute():
            return p
        here = Path(self.base_dir) / p
        return here if here.exists() or not p.exists() else p

    def with_overrides(self, overrides: dict[str, Any]) -> Scenario:
        """A new validated scenario with dotted-path overrides applied (``{"seed": 3}``)."""
        data = self.model_dump(mode="python", exclude_none=True)
        # Only the scheduler fields the scenario set: an engine preset (perhaps a new one) fills the rest.
        data["scheduler"] = self.scheduler.model_dump(mode="python", include=self.scheduler.model_fields_set)
        for key, value in overrides.items():
            set_dotted(data, key, value)
        return scenario_from_dict(data)


# -- loading and errors ---------------------------------------------------------------------------
def scenario_from_dict(data: dict[str, Any], base_dir: str | Path | None = None) -> Scenario:
    """Validate a plain dict (from YAML, the UI or Python) into a :class:`Scenario`, with the scheduler
    fields it leaves out filled in from its engine preset (:mod:`simulator.scenario.defaults`). This is
    how every scenario is built: ``Scenario.model_validate`` alone checks the fields but fills in nothing.

    Raises:
        ScenarioError: naming the first bad field, its value and what is allowed.
    """
    if not isinstance(data, dict):
        raise ScenarioError("scenario", data, "must be a mapping of fields (YAML key: value)")
    data = dict(data)
    if base_dir is not None:
        base_dir = check_path("base_dir", base_dir, "a folder path")
        data.setdefault("base_dir", str(base_dir))
    try:
        scenario = with_scheduler_defaults(Scenario.model_validate(data))
    except ValidationError as exc:
        raise _to_scenario_error(exc, data) from None
    check_run_size(scenario)
    return scenario


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> Scenario:
    """Read a YAML scenario file, apply overrides (a list of ``"key.path=value"`` strings, as ``--set``
    takes, or a dict ``{"key.path": value}``) and validate it.

    Raises:
        ScenarioError: a bad argument, an unreadable file, or the first bad field.
    """
    p = check_path("path", path, "a scenario file path")
    check_overrides("overrides", overrides)
    require_file(p, "scenario", str(path), "scenario file", missing="file not found")
    data = read_yaml(p, str(path), what="a scenario file")
    if not isinstance(data, dict):
        raise ScenarioError(str(path), data, "a scenario file must be a YAML mapping")
    for key, value in parse_overrides(overrides).items():
        set_dotted(data, key, value)
    return scenario_from_dict(data, base_dir=p.resolve().parent)


_UNION_TAGS = {"poisson", "gamma", "trace", "diurnal", "lognormal", "geometric", "fixed", "uniform", "empirical",
               "closed_loop", "offline", "str", "ModelSpec", "dict[str,any]", "function-after[_order(), UniformLength]"}


def _to_scenario_error(exc: ValidationError, data: dict[str, Any]) -> ScenarioError:
    errors = exc.errors(include_url=False)
    # For "str | ModelSpec" unions pydantic reports every branch; prefer the structured one.
    errors.sort(key=lambda e: (e["loc"][-1:] == ("str",), len(e["loc"])), reverse=False)
    err = errors[0]
    loc = [str(p) for p in _field_path(err["loc"])]
    field = ".".join(loc) or "scenario"
    value = err.get("input")
    msg = err["msg"]
    named = field_error_of(err)
    if named is not None:    # a check across fields named the one at fault, relative to its model
        return ScenarioError(".".join([*loc, named.field]), named.value, named.message)
    if err["type"] == "extra_forbidden":
        parent_model = _model_at(tuple(err["loc"])[:-1])
        allowed = sorted(parent_model.model_fields) if parent_model else []
        hint = difflib.get_close_matches(loc[-1], allowed, n=1)
        msg = "unknown field" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        if allowed:
            msg += f"; allowed: {', '.join(a for a in allowed if a != 'base_dir')}"
    elif err["type"] == "missing":
        value = None
        msg = "required field is missing"
    elif err["type"] == "union_tag_invalid":
        ctx = err.get("ctx", {})
        value = ctx.get("tag", value)
        msg = f"unknown kind; allowed: {ctx.get('expected_tags', '')}"
    elif limit_message(err, Scenario):
        msg = str(limit_message(err, Scenario))
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    return ScenarioError(field, value, msg)


def _field_path(loc: tuple[Any, ...]) -> list[Any]:
    """The YAML field of an error location: pydantic's union branches (a discriminated union's tag, the
    ``str``/``ModelSpec`` branch, validator wrappers) left out. A tag is the branch only right after the
    field it selects for: after a tag, the same word is a field of that branch (an unknown ``trace:``
    under a ``closed_loop`` arrival is ``workload.arrival.trace``)."""
    out: list[Any] = []
    after_tag = False
    for part in loc:
        if isinstance(part, str) and part.startswith("function-"):
            continue
        if _is_tag(part) and not after_tag:
            after_tag = True
            continue
        out.append(part)
        after_tag = False
    return out


def _is_tag(part: Any) -> bool:
    return isinstance(part, str) and (part in _UNION_TAGS or part.startswith("function-"))


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class found by walking an error location (pydantic's, union tags included)
    from :class:`Scenario`: a discriminated union's branch is the one whose tag follows the field."""
    model: Any = Scenario
    parts = [p for p in loc if isinstance(p, str) and not p.startswith("function-")]   # list indexes left out
    i = 0
    while i < len(parts):
        field = model.model_fields.get(parts[i]) if isinstance(model, type) and issubclass(model, BaseModel) \
            else None
        if field is None:
            return None
        candidates = _models_in(field.annotation)
        tag = parts[i + 1] if i + 1 < len(parts) and _is_tag(parts[i + 1]) else None
        if len(candidates) > 1:      # a discriminated union: the branch whose tag is next
            candidates = [c for c in candidates if any(f.default == tag for f in c.model_fields.values())]
        if tag is not None:          # the branch pydantic names after the field (a tag, "ModelSpec")
            i += 1
        if len(candidates) != 1:
            return None
        model = candidates[0]
        i += 1
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _models_in(ann: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds: its union's branches, a list's or a mapping's items."""
    out: list[type[BaseModel]] = []
    for a in _flatten(ann):
        if isinstance(a, type) and issubclass(a, BaseModel):
            out.append(a)
        elif typing.get_origin(a) in (list, tuple, dict):
            for arg in typing.get_args(a):
                out.extend(m for m in _models_in(arg) if m not in out)
    return out


def _flatten(ann: Any) -> list[Any]:
    origin = typing.get_origin(ann)
    if origin is Annotated:
        return _flatten(typing.get_args(ann)[0])
    if origin is Union or origin is types.UnionType:   # Optional[X] and X | None
        out: list[Any] = []
        for a in typing.get_args(ann):
            out.extend(_flatten(a))
        return out
    return [ann]
