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
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

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
#: Longest context (prompt + output), in tokens, of a model or a scheduler.
MAX_MODEL_LEN = 16 * 1024 * 1024


def _not_bool(value: Any) -> Any:
    # YAML reads `true` as a boolean and pydantic would take it as 1: a number field wants a number.
    if isinstance(value, (bool, np.bool_)):
        raise PydanticCustomError("bool_not_number", "a number is required, not true/false")
    return value


def _finite(value: Any) -> Any:
    # Checked before the bounds, so that .nan is called what it is rather than "not >= 0".
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        raise PydanticCustomError("finite_number", "Input should be a finite number")
    return _not_bool(value)


FiniteFloat = Annotated[float, BeforeValidator(_finite), Field(allow_inf_nan=False)]
"""A float that is finite (no ``.inf``/``.nan``) and not a boolean; add bounds with ``Field(gt=...)``."""
Integer = Annotated[int, BeforeValidator(_not_bool)]
"""An integer that is not a boolean (a float such as ``3.0`` is taken; ``3.5`` is refused)."""


_LIMITS: dict[float, str] = {
    MAX_NUM_REQUESTS: f"{MAX_NUM_REQUESTS:,} (the most requests one run simulates)",
    MAX_REPLICAS: f"{MAX_REPLICAS:,} (the most replicas of one deployment, pool or region)",
    MAX_TIME_S: f"{MAX_TIME_S:.0e} s (the longest simulated span, about 3 years)",
    MAX_MODEL_LEN: f"{MAX_MODEL_LEN:,} tokens (the longest context)",
}


def limit_message(error: Any) -> str | None:
    """The message for a pydantic ``less_than_equal`` error at one of the limits above (else None)."""
    if error.get("type") != "less_than_equal":
        return None
    bound = (error.get("ctx") or {}).get("le")
    text = _LIMITS.get(bound) if isinstance(bound, (int, float)) else None
    return f"must be at most {text}; see Limits in docs/scenario-reference.md" if text else None
