"""What a configuration may hold: finite numbers, integers that are not booleans, and the largest
sizes a run accepts.

Every number of a scenario, a plan and a hardware profile is declared with :data:`FiniteFloat` or
:data:`Integer`, so that ``.inf``, ``.nan`` and ``true`` are refused where they are read, with one
error naming the field, instead of passing validation and crashing (or, worse, giving plausible
numbers) deep inside a run. The ``MAX_*`` bounds keep a tiny input from asking for a run that
cannot fit in memory or time; ``docs/scenario-reference.md`` ("Limits") lists them for users.
"""
from __future__ import annotations

import math
import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any

import annotated_types
import numpy as np
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from simulator.arguments import CONTROL_MESSAGE, INT_LIMIT, has_control_characters

#: Largest YAML file read (scenario, plan, hardware profile): a scenario is a few hundred bytes;
#: traces and length tables are files of their own, referenced by path.
MAX_YAML_BYTES = 256 * 1024
#: Deepest nesting of mappings and lists in a YAML file (a scenario nests about 6 levels).
MAX_YAML_DEPTH = 32
#: Most requests one run simulates (a million takes about a minute and 2 GiB).
MAX_NUM_REQUESTS = 1_000_000
#: Most session turns drawn for one run (sessions x turns each): the turns are drawn before the first
#: ``num_requests`` of them by arrival are kept.
MAX_SESSION_TURNS_DRAWN = 5 * MAX_NUM_REQUESTS
#: Most replicas in one pool, region or deployment (each holds its own KV cache and queues).
MAX_REPLICAS = 4096
#: Longest simulated time span, in seconds (about 3 years). Arrival instants and deadlines beyond it
#: would lose the clock's resolution (a float64 at 1e8 s still resolves 15 ns; at 1e20 s, steps
#: of milliseconds vanish and every latency reads 0).
MAX_TIME_S = 1.0e8
#: The same span in milliseconds (a waiting time given in ms, e.g. ``scheduler.max_wait_ms``).
MAX_TIME_MS = MAX_TIME_S * 1000
#: Most host memory per GPU for swapped KV (``scheduler.swap_space_gib``): 64 TiB, more than any server.
MAX_SWAP_GIB = 65536.0
#: Longest scenario or plan ``name`` (it titles every table and plot).
MAX_NAME_LENGTH = 256
#: Longest context (prompt + output), in tokens, of a model or a scheduler; also the largest token
#: count anywhere (a length, a budget, a prefix).
MAX_MODEL_LEN = 16 * 1024 * 1024
#: Highest forecast peak of one region, requests/s (a day of it, in tokens, must fit an int64).
MAX_PEAK_RPS = 1.0e6
#: Most searches one plan runs (forecast cells x candidates): each is a search over replica counts,
#: several simulations of ``simulation.num_requests`` requests at each (about 0.25 s to a few seconds
#: a search on one core), so 5,000 is hours of work; a bigger plan is refused before it starts.
MAX_PLAN_SEARCHES = 5000
#: Most requests in one running batch (``max_num_seqs``; the engine keeps arrays of this size).
MAX_NUM_SEQS = 65_536
#: Largest KV-cache block, in tokens.
MAX_BLOCK_SIZE = 4096
#: Least bandwidth (bytes/s) or peak FLOP/s a hardware profile may state, and least efficiency: below
#: them one engine step takes longer than the simulated clock can hold.
MIN_DEVICE_RATE = 1.0e6
MIN_EFFICIENCY = 1.0e-3
# INT_LIMIT (2^62, defined in simulator.arguments): every integer lies within it, so that it fits the
# simulator's int64 arrays with room to add.


def _not_bool(value: Any) -> Any:
    # YAML reads `true` as a boolean and pydantic would take it as 1: a number field wants a number.
    if isinstance(value, (bool, np.bool_)):
        raise PydanticCustomError("bool_not_number", "a number is required, not true/false")
    return value


def _int64(value: int) -> int:
    if not -INT_LIMIT <= value <= INT_LIMIT:
        raise PydanticCustomError("int64_range", "must be between -2^62 and 2^62")
    return value


def _finite(value: Any) -> Any:
    # Checked before the bounds, so that .nan is called what it is rather than "not >= 0"; text too
    # ("nan" from a CSV cell or a YAML string), which pydantic would read as a float after the bounds.
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return value   # not a number at all: pydantic says so
    if isinstance(number, (float, np.floating)) and not math.isfinite(number):
        raise PydanticCustomError("finite_number", "Input should be a finite number")
    return _not_bool(value)


def _printable(value: str) -> str:
    if has_control_characters(value):
        raise PydanticCustomError("control_characters", CONTROL_MESSAGE)
    return value


FiniteFloat = Annotated[float, BeforeValidator(_finite), Field(allow_inf_nan=False)]
"""A float that is finite (no ``.inf``/``.nan``) and not a boolean; add bounds with ``Field(gt=...)``."""
Name = Annotated[str, AfterValidator(_printable)]
"""A name a user gives (scenario, plan, tier, region, candidate, pool, profile): text without control
characters (:func:`simulator.arguments.check_name` is the same rule for a CLI option)."""
# Bounds are validators, not Field(ge=..., le=...): a field's own Field(ge=1) would not override them.
Integer = Annotated[int, BeforeValidator(_not_bool), AfterValidator(_int64)]
"""An integer that is not a boolean and lies within +-2^62 (a float such as ``3.0`` is taken; ``3.5`` is
refused)."""


# Bounds that are limits of this simulator (documented under Limits), not facts of the field.
_CEILINGS = {MAX_NUM_REQUESTS, MAX_REPLICAS, MAX_TIME_S, MAX_TIME_MS, MAX_MODEL_LEN, MAX_NUM_SEQS, MAX_BLOCK_SIZE,
             MAX_PEAK_RPS, MAX_SWAP_GIB}
_FLOORS = {MIN_DEVICE_RATE, MIN_EFFICIENCY}


_LIMIT_NOTE = "(a limit of this simulator: see Limits in docs/scenario-reference.md)"


def limit_message(error: Any, root: type[BaseModel] | None = None) -> str | None:
    """The message for a pydantic bound error at one of the limits above (else None). ``root``, the model
    validated, lets an integer outside +-2^62 be told the field's own bounds (those of an optional field
    are checked after the +-2^62 one)."""
    kind, ctx = error.get("type"), error.get("ctx") or {}
    if kind == "int64_range":
        lo, hi = _int_bounds(root, error.get("loc", ())) if root is not None else (-INT_LIMIT, INT_LIMIT)
        at_limit = hi in _CEILINGS or hi == INT_LIMIT or lo == -INT_LIMIT
        return f"must be between {_int_text(lo)} and {_int_text(hi)}" + (f" {_LIMIT_NOTE}" if at_limit else "")
    if kind == "less_than_equal" and ctx["le"] in _CEILINGS:
        word, bound = "at most", ctx["le"]
    elif kind == "greater_than_equal" and ctx["ge"] in _FLOORS:
        word, bound = "at least", ctx["ge"]
    else:
        return None
    shown = f"{bound:,}" if isinstance(bound, int) else f"{bound:g}"
    return f"must be {word} {shown} {_LIMIT_NOTE}"


def _int_text(bound: int) -> str:
    return "2^62" if bound == INT_LIMIT else "-2^62" if bound == -INT_LIMIT else f"{bound:,}"


def _int_bounds(root: type[BaseModel], loc: Sequence[Any]) -> tuple[int, int]:
    """The least and greatest integer the field at the pydantic error location ``loc`` (from ``root``)
    accepts: its own ``ge``/``gt``/``le``/``lt`` within +-2^62."""
    lo, hi = -INT_LIMIT, INT_LIMIT
    for bound in _constraints_at(root, loc):
        value: Any = getattr(bound, type(bound).__name__.lower(), None)   # Ge(ge=1).ge, Lt(lt=9).lt
        if isinstance(bound, annotated_types.Ge):
            lo = max(lo, math.ceil(value))
        elif isinstance(bound, annotated_types.Gt):
            lo = max(lo, math.floor(value) + 1)
        elif isinstance(bound, annotated_types.Le):
            hi = min(hi, math.floor(value))
        elif isinstance(bound, annotated_types.Lt):
            hi = min(hi, math.ceil(value) - 1)
    return lo, hi


def _constraints_at(root: type[BaseModel], loc: Sequence[Any]) -> list[Any]:
    """The constraint metadata (``Ge(1)``, ``Le(100)``) of the value at ``loc``: through model fields, list
    items (an int in ``loc``), mapping values, and the union tags pydantic puts in ``loc`` (``poisson``,
    ``ModelSpec``), which are stepped over. Empty when ``loc`` leads nowhere known."""
    at: list[tuple[Any, list[Any]]] = [(root, [])]   # (annotation, the field's own metadata) per candidate
    for part in loc:
        step: list[tuple[Any, list[Any]]] = []
        for ann, _ in at:
            for member in _members(ann):
                origin, args = typing.get_origin(member), typing.get_args(member)
                if isinstance(member, type) and issubclass(member, BaseModel) and part in member.model_fields:
                    field = member.model_fields[part]
                    step.append((field.annotation, list(field.metadata)))
                elif isinstance(part, int) and origin in (list, tuple, set, frozenset) and args:
                    step.append((args[0], []))
                elif isinstance(part, str) and origin is dict and len(args) == 2:
                    step.append((args[1], []))
        if step:
            at = step
        else:   # a union tag: keep the members it names, if it names any
            tagged: list[tuple[Any, list[Any]]] = [(m, []) for ann, _ in at for m in _members(ann)
                                                   if _tagged(m, part)]
            at = tagged or at
    if not at:
        return []
    ann, own = at[0]
    return own + _metadata(ann)


def _members(ann: Any) -> list[Any]:
    """The alternatives of an annotation, with ``Annotated`` and ``Optional`` unwrapped."""
    origin = typing.get_origin(ann)
    if origin is Annotated:
        return _members(typing.get_args(ann)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [m for a in typing.get_args(ann) if a is not type(None) for m in _members(a)]
    return [ann]


def _tagged(member: Any, tag: Any) -> bool:
    """Whether a union tag in an error location (a discriminator value, a class name) names ``member``."""
    if not (isinstance(member, type) and issubclass(member, BaseModel)):
        return False
    return member.__name__ == tag or any(f.default == tag for f in member.model_fields.values()
                                          if typing.get_origin(f.annotation) is typing.Literal)


def _metadata(ann: Any) -> list[Any]:
    """The constraints written in ``Annotated[...]`` around an annotation (``Field(ge=1)`` included)."""
    out: list[Any] = []
    origin = typing.get_origin(ann)
    if origin is Annotated:
        base, *meta = typing.get_args(ann)
        for m in meta:
            out.extend(m.metadata if isinstance(m, FieldInfo) else [m])
        out.extend(_metadata(base))
    elif origin is typing.Union or origin is types.UnionType:
        for a in typing.get_args(ann):
            if a is not type(None):
                out.extend(_metadata(a))
    return out
