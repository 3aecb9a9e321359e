"""The dashboard's knobs: one table of the scenario fields the What-if page lets a user change.

Each :class:`Knob` row names the scenario field it sets (a dotted path such as
``scheduler.max_num_batched_tokens``), how the page draws it (label, widget, bounds, step, group)
and how a shared link spells it (its query parameter). Everything the library already knows about
the field is read from the library at run time rather than restated here: the help text is the
field's own documentation (its attribute docstring in the scenario models), the choices of a
``Literal`` field are its allowed values, the value type comes from the annotation, and the
token-budget rule on ``max_num_batched_tokens`` is derived from the batching policies' own flags
(:func:`token_budget_rule`). A new scheduler knob is therefore one row here (and its field in the
scenario); the page loops over :data:`KNOBS`.

The round trip is :func:`knob_values` (a scenario -> the knobs' values, what a fresh view starts
from) and :func:`apply_knobs` (a base scenario and the knobs' values -> a new validated scenario).
:func:`values_from_query` and :func:`query_of` read and write the shareable URL. No streamlit here:
``tests/test_knobs.py`` checks the table against the scenario models directly.
"""
from __future__ import annotations

import ast
import inspect
import itertools
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from simulator.capabilities import FEATURES, POLICY_FEATURES, POLICY_SUPPORT, YES
from simulator.cluster.router import ROUTERS
from simulator.engine.policies import POLICIES
from simulator.report.analysis import with_arrival_rate
from simulator.scenario.config import GammaArrival, PoissonArrival, Scenario
from simulator.scenario.engines import ENGINE_PRESETS
from simulator.scenario.models import MODEL_PRESETS
from simulator.scenario.profiles import available_profiles
from simulator.scenario.quantization import KV_CACHE_DTYPES, QUANTIZATIONS

FROM_FILE = "(as in the file)"
"""A name knob's value when the scenario gives the thing inline (a model spec, a hardware dict)."""
NO_ENGINE = "(none)"
"""The engine knob's value for a scenario without an ``engine`` section."""
SPEC_OFF = "off"
"""The speculative-method knob's value for a scenario without ``speculative_config``."""

Widget = Literal["number", "slider", "select", "toggle"]

GROUPS: tuple[tuple[str, bool], ...] = (
    ("Traffic", True), ("System", True), ("Batching (per replica)", False), ("Speculative decoding", False),
    ("Timeouts and load shedding (0 = off)", False), ("SLO (p99 thresholds; 0 = none)", False),
)
"""The sidebar sections in order, and whether each starts open."""
TRAFFIC, SYSTEM, BATCHING, SPECULATIVE, SHEDDING, SLO = (name for name, _ in GROUPS)


@dataclass(frozen=True)
class Knob:
    """One widget that sets one scenario field.

    ``unset`` is the widget value standing for the field left out (None): ``0`` for the "0 = off"
    number inputs, ``"none"`` for the quantization, :data:`NO_ENGINE`, :data:`SPEC_OFF`; writing it
    writes None. ``default`` is what the widget shows while the field's section is absent (a
    speculative ``k`` before speculation is switched on); it is never written for an absent section.
    ``when`` shows the knob only while another knob has one of the listed values (a hidden knob keeps
    its value); ``disable_hidden`` draws it disabled instead of hiding it.
    """

    key: str
    """The knob's name: the widget key (after the page prefix) and its key in the values dict."""
    path: str
    """The scenario field it sets, as ``with_overrides`` spells it."""
    label: str
    group: str
    widget: Widget = "number"
    query: str = ""
    """Its URL query parameter (empty: the key)."""
    min_value: int | float | None = None
    max_value: int | float | None = None
    step: int | float | None = None
    choices: Callable[[], Sequence[Any]] | None = None
    """A select's options (None: the field's ``Literal`` values)."""
    unset: Any = None
    default: Any = None
    names_a_file: bool = False
    """A name (model, hardware) that the scenario may give inline instead: then :data:`FROM_FILE`."""
    when: tuple[str, tuple[Any, ...]] | None = None
    disable_hidden: bool = False
    note: str = ""
    """What the page adds to the field's documentation: how the widget behaves (never a rule the
    library states; those come from the library)."""

    @property
    def query_name(self) -> str:
        return self.query or self.key

    @property
    def models(self) -> list[type[BaseModel]]:
        """The scenario models holding the field (several for a field of a union, such as an arrival's rate)."""
        return field_owners(self.path)

    @property
    def field(self) -> FieldInfo:
        return self.models[0].model_fields[self.leaf]

    @property
    def leaf(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def description(self) -> str:
        """The field's documentation in the scenario models (empty when it has none)."""
        return next((d for m in self.models if (d := field_description(m, self.leaf))), "")

    @property
    def help(self) -> str:
        """The tooltip: the field's documentation, the rule the library derives for it, the page's note."""
        rule = DERIVED_RULES[self.path]() if self.path in DERIVED_RULES else ""
        support = policy_support(self.path, self.section if self.switches_section else "")
        return " ".join(part for part in (self.description, rule, support, self.note) if part)

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0]

    @property
    def switches_section(self) -> bool:
        """Whether this knob turns an optional section (:data:`SECTIONS`) on and off (at ``unset``)."""
        return self.section in SECTIONS and self.unset is not None

    @property
    def value_type(self) -> Callable[[Any], Any]:
        """How a query string becomes the knob's value: ``flag``, ``int``, ``float`` or ``str``."""
        kinds = set(_scalar_types(self.field.annotation))
        if self.widget == "toggle" or kinds == {bool}:
            return flag
        for kind in (int, float):
            if kind in kinds:
                return kind
        return str

    def options(self, current: Any, inline: bool = False) -> list[Any]:
        """A select's options: its choices, the current value if they lack it (a preset's block size,
        a model from a link), and :data:`FROM_FILE` when the scenario gives the thing ``inline``."""
        raw = list(self.choices() if self.choices is not None else _literal_values(self.field.annotation))
        if self.unset is not None:       # "off" first
            raw = [self.unset] + [v for v in raw if v != self.unset]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in raw) and isinstance(current, int):
            return sorted(set(raw) | {current})
        if self.names_a_file and inline:
            raw.append(FROM_FILE)
        return raw + ([current] if current not in raw and current is not None else [])

    def shown(self, values: Mapping[str, Any]) -> bool:
        """Whether the knob is drawn (enabled) with the other knobs at ``values``."""
        return self.when is None or values.get(self.when[0]) in self.when[1]


def flag(raw: object) -> bool:
    """A boolean from a query string ("true"/"1"/"yes")."""
    return str(raw).strip().lower() in ("1", "true", "yes")


# -- the library's own words ---------------------------------------------------------------------------
def token_budget_rule() -> str:
    """Which batching policies need ``max_num_batched_tokens >= max_model_len``, from the policies' flags
    (``uses_token_budget``, ``splits_prompts``) that ``simulator.run.resolve`` checks the budget by."""
    whole = _policies_where(lambda p: p.uses_token_budget and not p.splits_prompts)
    split = _policies_where(lambda p: p.uses_token_budget and p.splits_prompts)
    none = _policies_where(lambda p: not p.uses_token_budget)
    return (f"Must be >= max_model_len under {_join(whole)}, which never {_verb(whole, 'split')} a prompt (as vLLM "
            f"requires without chunked prefill); {_join(split)} {_verb(split, 'split')} prompts over steps; "
            f"{_join(none)} {_verb(none, 'have', 'has')} no token budget.")


DERIVED_RULES: dict[str, Callable[[], str]] = {"scheduler.max_num_batched_tokens": token_budget_rule}
"""Rules on a field that the library enforces elsewhere than in the field (here: in ``resolve``),
stated from the same flags the check reads; added to the field's help."""


def _verb(names: Sequence[str], plural: str, singular: str = "") -> str:
    return plural if len(names) > 1 else singular or plural + "s"


def policy_support(path: str, section: str = "") -> str:
    """Which batching policies model the feature that the field at ``path`` (or the ``section`` it
    switches on) turns on, from the capability table (empty when every policy does)."""
    texts = []
    for name in POLICY_FEATURES:
        feature = FEATURES[name]
        if feature.yaml.split(":")[0].split(" ")[0] not in (path, section):   # "scheduler.x: true", "x > 1"
            continue
        supported = [p for p, row in sorted(POLICY_SUPPORT.items()) if row.get(name) is YES]
        if len(supported) < len(POLICY_SUPPORT):
            texts.append(f"Batching policies that model {feature.title}: {_join(supported)}.")
    return " ".join(texts)


def _join(names: Sequence[str]) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


@cache
def field_owners(path: str) -> list[type[BaseModel]]:
    """The models, reached from :class:`Scenario` through ``model_fields``, that hold ``path``'s last
    field (a union such as ``workload.arrival`` gives every variant that has it)."""
    *sections, leaf = path.split(".")
    models: list[type[BaseModel]] = [Scenario]
    for name in sections:
        models = [sub for m in models if name in m.model_fields for sub in _models_in(m.model_fields[name].annotation)]
    owners = [m for m in models if leaf in m.model_fields]
    if not owners:
        raise KeyError(f"{path}: no such scenario field")
    return owners


def _models_in(ann: Any) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for arg in typing.get_args(ann) for m in _models_in(arg)]


def _scalar_types(ann: Any) -> list[type]:
    if ann in (bool, int, float, str):
        return [ann]
    if typing.get_origin(ann) is Literal:
        return [type(v) for v in typing.get_args(ann)]
    if typing.get_origin(ann) in (typing.Union, types.UnionType, typing.Annotated):
        return [t for arg in typing.get_args(ann) for t in _scalar_types(arg)]
    return []


def _literal_values(ann: Any) -> list[Any]:
    if typing.get_origin(ann) is Literal:
        return list(typing.get_args(ann))
    return [v for arg in typing.get_args(ann) for v in _literal_values(arg)]


@cache
def _attribute_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the string literal written right after it in the class body (base classes first)."""
    docs: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
        for stmt, nxt in itertools.pairwise(cls.body) if cls is not None else ():
            target = stmt.target if isinstance(stmt, ast.AnnAssign) else None
            if (isinstance(target, ast.Name) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def field_description(model: type[BaseModel], name: str) -> str:
    """A field's documentation as one line: ``Field(description=...)``, else its attribute docstring
    (what pydantic's ``use_attribute_docstrings`` would read), in Markdown as
    ``docs/scenario-reference.md`` prints it (```x``` for ````x```` and ``:role:`x```)."""
    text = model.model_fields[name].description or _attribute_docstrings(model).get(name, "")
    text = re.sub(r"``(.+?)``", r"`\1`", re.sub(r":[a-z]+:`([^`]+)`", r"`\1`", text), flags=re.S)
    return " ".join(text.split())


TP_SIZES = (1, 2, 4, 8)
BLOCK_SIZES = (8, 16, 32)
DEFAULT_DRAFT = "llama-3.2-1b"


def _policies_where(test: Callable[[Any], bool]) -> tuple[str, ...]:
    return tuple(name for name, cls in sorted(POLICIES.items()) if test(cls))


def _allowed(path: str) -> tuple[Any, ...]:
    """The values a ``Literal`` scenario field allows."""
    *_, leaf = path.split(".")
    return tuple(_literal_values(field_owners(path)[0].model_fields[leaf].annotation))


SPEC_METHODS = _allowed("speculative_config.method")


KNOBS: tuple[Knob, ...] = (
    # -- traffic: each applies only to the arrival process (and run length) that has the field
    Knob("rate", "workload.arrival.rate_per_s", "Arrival rate (req/s)", TRAFFIC, min_value=0.001, max_value=1e5,
         step=1.0, note="Mean requests per second over all replicas"),
    Knob("cv", "workload.arrival.cv", "Burstiness: CV of gaps", TRAFFIC, min_value=0.05, max_value=20.0, step=0.25),
    Knob("speedup", "workload.arrival.speedup", "Trace speedup", TRAFFIC, min_value=0.01, max_value=1000.0, step=0.5),
    Knob("clients", "workload.arrival.concurrency", "Clients (closed loop)", TRAFFIC, min_value=1, max_value=100_000,
         step=1),
    Knob("think_s", "workload.arrival.think_time_s", "Think time (s)", TRAFFIC, query="think", min_value=0.0,
         max_value=3600.0),
    Knob("num_requests", "num_requests", "Requests", TRAFFIC, query="n", min_value=10, max_value=200_000, step=1000),
    Knob("duration_s", "duration_s", "Duration (s)", TRAFFIC, query="dur", min_value=1.0, max_value=36_000.0),
    Knob("seed", "seed", "Seed", TRAFFIC, min_value=0, max_value=2**31 - 1, step=1),
    # -- system
    Knob("model", "model", "Model", SYSTEM, "select", choices=lambda: list(MODEL_PRESETS), names_a_file=True),
    Knob("quantization", "deployment.quantization", "Weight quantization", SYSTEM, "select", query="quant",
         choices=lambda: list(QUANTIZATIONS), unset="none"),
    Knob("kv_dtype", "deployment.kv_cache_dtype", "KV cache dtype", SYSTEM, "select", query="kvdtype",
         choices=lambda: list(KV_CACHE_DTYPES)),
    Knob("hardware", "hardware", "Hardware profile", SYSTEM, "select", query="hw",
         choices=lambda: list(available_profiles()), names_a_file=True),
    Knob("tp", "deployment.tensor_parallel_size", "Tensor parallel (GPUs per replica)", SYSTEM, "select",
         choices=lambda: TP_SIZES),
    Knob("replicas", "deployment.replicas", "Replicas", SYSTEM, min_value=1, max_value=256, step=1),
    Knob("router", "deployment.router", "Router", SYSTEM, "select", choices=lambda: sorted(ROUTERS)),
    # -- batching
    Knob("engine", "engine.preset", "Engine preset", BATCHING, "select", choices=lambda: list(ENGINE_PRESETS),
         unset=NO_ENGINE, note="Choosing one sets the scheduler knobs below to that engine's defaults "
                               "(docs/engines.md); each stays adjustable."),
    Knob("async", "engine.async_scheduling", "async scheduling", BATCHING, "toggle", default=False,
         when=("engine", tuple(ENGINE_PRESETS)), disable_hidden=True, note="Needs an engine preset."),
    Knob("policy", "scheduler.policy", "Batching policy", BATCHING, "select", choices=lambda: sorted(POLICIES)),
    Knob("scheduling", "scheduler.scheduling_policy", "scheduling_policy", BATCHING, "select", query="sched"),
    Knob("long_prefill", "scheduler.long_prefill_token_threshold", "long_prefill_token_threshold (0 = the budget)",
         BATCHING, query="lpt", min_value=0, max_value=1_048_576, step=256, unset=0,
         when=("policy", ("chunked_prefill",))),
    Knob("max_wait_ms", "scheduler.max_wait_ms", "max_wait_ms", BATCHING, query="wait", min_value=0.0,
         max_value=600_000.0, step=10.0, when=("policy", ("dynamic", "static"))),
    Knob("adaptive", "scheduler.adaptive_batching", "adaptive_batching", BATCHING, "toggle",
         when=("policy", ("dynamic",))),
    Knob("num_scheduler_steps", "scheduler.num_scheduler_steps", "num_scheduler_steps (multi-step)", BATCHING,
         query="steps", min_value=1, max_value=64, step=1, when=("policy", ("continuous",))),
    Knob("prefix_caching", "scheduler.enable_prefix_caching", "enable_prefix_caching", BATCHING, "toggle",
         query="prefix"),
    Knob("preemption", "scheduler.preemption_mode", "preemption_mode", BATCHING, "select", query="preempt"),
    Knob("swap_gib", "scheduler.swap_space_gib", "swap_space_gib (host memory per GPU)", BATCHING, query="swap",
         min_value=0.0, max_value=4096.0, step=1.0, when=("preemption", ("swap",))),
    Knob("max_num_seqs", "scheduler.max_num_seqs", "max_num_seqs", BATCHING, query="seqs", min_value=1,
         max_value=4096, step=16),
    Knob("max_num_batched_tokens", "scheduler.max_num_batched_tokens", "max_num_batched_tokens", BATCHING,
         query="mbt", min_value=1, max_value=1_048_576, step=1024),
    Knob("block_size", "scheduler.block_size", "block_size (tokens per KV block)", BATCHING, "select", query="bs",
         choices=lambda: BLOCK_SIZES),
    Knob("gmu", "scheduler.gpu_memory_utilization", "gpu_memory_utilization", BATCHING, "slider", min_value=0.30,
         max_value=0.99, step=0.01),
    Knob("max_model_len", "scheduler.max_model_len", "max_model_len (0 = the model's context)", BATCHING,
         query="mml", min_value=0, max_value=1_048_576, step=1024, unset=0),
    # -- speculative decoding: the section exists while the method is not "off"
    Knob("spec_method", "speculative_config.method", "Method", SPECULATIVE, "select", query="spec", unset=SPEC_OFF),
    Knob("spec_k", "speculative_config.num_speculative_tokens", "num_speculative_tokens (k)", SPECULATIVE,
         query="k", min_value=1, max_value=16, step=1, default=4, when=("spec_method", SPEC_METHODS)),
    Knob("spec_alpha", "speculative_config.acceptance_rate", "acceptance_rate (alpha)", SPECULATIVE, "slider",
         query="alpha", min_value=0.0, max_value=1.0, step=0.05, default=0.8,
         when=("spec_method", SPEC_METHODS)),
    Knob("spec_draft", "speculative_config.draft_model", "Draft model", SPECULATIVE, "select", query="draft",
         choices=lambda: list(MODEL_PRESETS), default=DEFAULT_DRAFT, names_a_file=True,
         when=("spec_method", ("draft",))),
    # -- timeouts and load shedding
    Knob("timeout_s", "client.timeout_s", "Client timeout (s)", SHEDDING, query="timeout", min_value=0.0,
         max_value=36_000.0, step=5.0, unset=0.0),
    Knob("max_queue_len", "admission.max_queue_len", "Shed when this many wait (per replica)", SHEDDING,
         query="qlen", min_value=0, max_value=1_000_000, step=10, unset=0),
    Knob("max_queue_delay_s", "admission.max_queue_delay_s", "Shed after waiting (s)", SHEDDING, query="qdelay",
         min_value=0.0, max_value=36_000.0, step=1.0, unset=0.0),
    # -- SLO
    Knob("slo_ttft_ms", "slo.ttft_p99_ms", "TTFT p99 (ms)", SLO, query="ttft", min_value=0.0, step=50.0, unset=0.0),
    Knob("slo_tpot_ms", "slo.tpot_p99_ms", "TPOT p99 (ms)", SLO, query="tpot", min_value=0.0, step=5.0, unset=0.0),
    Knob("slo_e2e_ms", "slo.e2e_p99_ms", "E2E p99 (ms)", SLO, query="e2e", min_value=0.0, step=1000.0, unset=0.0),
)
"""Every What-if knob, in the order the page draws them."""
KNOB: dict[str, Knob] = {k.key: k for k in KNOBS}
KNOB_AT: dict[str, Knob] = {k.path: k for k in KNOBS}
"""The knob that sets a scenario path (an engine preset's scheduler fields -> the knobs that show them)."""
SECTIONS = ("engine", "speculative_config")
"""Optional sections a knob switches on and off as a whole (its ``unset`` value drops the section)."""

SESSIONS_LABEL = "Sessions started (per s)"
SESSIONS_NOTE = ("Mean sessions (conversations or agent tasks) started per second; each sends "
                 "workload.sessions.turns requests")


def knobs_in(group: str) -> Iterator[Knob]:
    return (k for k in KNOBS if k.group == group)


def label_and_help(knob: Knob, base: Scenario) -> tuple[str, str]:
    """The knob's label and tooltip for this scenario: with sessions, the rate starts sessions."""
    if knob.key == "rate" and base.workload.sessions is not None:
        return SESSIONS_LABEL, SESSIONS_NOTE
    return knob.label, knob.help


# -- scenario <-> knob values --------------------------------------------------------------------------
_ABSENT = object()


def _read(scenario: Scenario, path: str) -> Any:
    """The value at ``path``; None when a section on the way is None; ``_ABSENT`` when the model there
    has no such field (another arrival process)."""
    obj: Any = scenario
    for name in path.split("."):
        if obj is None:
            return None
        if name not in type(obj).model_fields:
            return _ABSENT
        obj = getattr(obj, name)
    return obj


def knob_values(scenario: Scenario) -> dict[str, Any]:
    """The knobs' values as the scenario has them (what a fresh view starts from); None for a knob that
    does not apply to it (a rate for a trace, a duration when the run is a number of requests)."""
    values: dict[str, Any] = {}
    for knob in KNOBS:
        raw = _read(scenario, knob.path)
        if raw is _ABSENT:
            values[knob.key] = None
        elif raw is None:
            values[knob.key] = knob.unset if knob.unset is not None else knob.default
        elif knob.names_a_file and not isinstance(raw, str):
            values[knob.key] = FROM_FILE
        else:
            cast = knob.value_type
            values[knob.key] = bool(raw) if cast is flag else cast(raw)
    arrival, engine = scenario.workload.arrival, scenario.engine
    rate_based = isinstance(arrival, PoissonArrival | GammaArrival)
    values["rate"] = values["rate"] if rate_based else None
    values["cv"] = float(arrival.cv) if isinstance(arrival, GammaArrival) else 1.0 if rate_based else None
    if scenario.num_requests is not None:
        values["duration_s"] = None
    values["async"] = engine.runs_async if engine is not None else False
    return values


def apply_knobs(base: Scenario, values: Mapping[str, Any]) -> Scenario:
    """The base scenario with the knobs at ``values`` (validated; raises ScenarioError).

    A knob that does not apply to ``base`` is left alone, so is a name knob at :data:`FROM_FILE`; a
    knob at its ``unset`` value writes None. The optional sections (:data:`SECTIONS`) are written whole:
    the engine keeps the file's settings that have no knob (CPU overhead, CUDA-graph capture), the
    speculative section only the knobs shown for its method. The rate and the gaps' CV go through
    :func:`~simulator.report.analysis.with_arrival_rate` (a CV of 1 is Poisson, else gamma).
    """
    applies = knob_values(base)
    ov: dict[str, Any] = {}
    sections: dict[str, dict[str, Any] | None] = {}
    for knob in KNOBS:
        value = values.get(knob.key)
        if applies[knob.key] is None or value is None or knob.key in ("rate", "cv"):
            continue
        section, _, leaf = knob.path.partition(".")
        if section in SECTIONS:
            _set_in_section(sections, base, knob, values, section, leaf)
        elif not (knob.names_a_file and value == FROM_FILE):
            ov[knob.path] = None if knob.unset is not None and value == knob.unset else value
    scenario = base.with_overrides({**ov, **sections})
    if applies["rate"] is not None and values.get("rate") is not None:
        scenario = with_arrival_rate(scenario, values["rate"], values["cv"])
    return scenario


def _set_in_section(sections: dict[str, dict[str, Any] | None], base: Scenario, knob: Knob,
                    values: Mapping[str, Any], section: str, leaf: str) -> None:
    if section not in sections:           # the first knob of a section is the one that switches it
        if values[knob.key] == knob.unset:
            sections[section] = None
            return
        kept = getattr(base, section)
        sections[section] = {name: value for name, value in
                             (kept.model_dump(exclude_unset=True) if kept is not None else {}).items()
                             if value is not None and f"{section}.{name}" not in KNOB_AT}
    fields = sections[section]
    if fields is None or not knob.shown(values):
        return
    value = values[knob.key]
    if knob.names_a_file and value == FROM_FILE:
        value = _read(base, knob.path)
    fields[leaf] = value


# -- the shareable URL ---------------------------------------------------------------------------------
KNOB_OF_QUERY: dict[str, Knob] = {k.query_name: k for k in KNOBS}


def values_from_query(values: dict[str, Any], query: Mapping[str, str]) -> list[str]:
    """Set ``values`` from a link's query parameters (knobs that apply only); returns a warning per
    parameter whose text is not a value of its knob's type."""
    warnings = []
    for name, raw in query.items():
        knob = KNOB_OF_QUERY.get(name)
        if knob is None or values.get(knob.key) is None:
            continue
        try:
            values[knob.key] = knob.value_type(raw)
        except (TypeError, ValueError):
            warnings.append(f"Ignored query parameter {name}={raw!r}: not a {knob.value_type.__name__}.")
    return warnings


def query_of(values: Mapping[str, Any]) -> dict[str, str]:
    """The query parameters that reproduce ``values`` (knobs that apply only)."""
    return {k.query_name: str(values[k.key]) for k in KNOBS if values.get(k.key) is not None}
