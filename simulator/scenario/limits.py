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
from pydantic import AfterValidator, BeforeValidator, Field
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
#: Most requests in one running batch (``max_num_seqs``; the engine keeps arrays of this size).
MAX_NUM_SEQS = 65_536
#: Largest KV-cache block, in tokens.
MAX_BLOCK_SIZE = 4096
#: Least bandwidth (bytes/s) or peak FLOP/s a hardware profile may state, and least efficiency: below
#: them one engine step takes longer than the simulated clock can hold.
MIN_DEVICE_RATE = 1.0e6
MIN_EFFICIENCY = 1.0e-3
#: Every integer lies within +-2^62, so that it fits the simulator's int64 arrays with room to add.
INT_LIMIT = 2**62


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
    # Checked before the bounds, so that .nan is called what it is rather than "not >= 0".
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        raise PydanticCustomError("finite_number", "Input should be a finite number")
    return _not_bool(value)


FiniteFloat = Annotated[float, BeforeValidator(_finite), Field(allow_inf_nan=False)]
"""A float that is finite (no ``.inf``/``.nan``) and not a boolean; add bounds with ``Field(gt=...)``."""
# Bounds are validators, not Field(ge=..., le=...): a field's own Field(ge=1) would not override them.
Integer = Annotated[int, BeforeValidator(_not_bool), AfterValidator(_int64)]
"""An integer that is not a boolean and lies within +-2^62 (a float such as ``3.0`` is taken; ``3.5`` is
refused)."""


# Bounds that are limits of this simulator (documented under Limits), not facts of the field.
_CEILINGS = {MAX_NUM_REQUESTS, MAX_REPLICAS, MAX_TIME_S, MAX_TIME_MS, MAX_MODEL_LEN, MAX_NUM_SEQS, MAX_BLOCK_SIZE,
             MAX_PEAK_RPS, MAX_SWAP_GIB}
_FLOORS = {MIN_DEVICE_RATE, MIN_EFFICIENCY}


def limit_message(error: Any) -> str | None:
    """The message for a pydantic bound error at one of the limits above (else None)."""
    kind, ctx = error.get("type"), error.get("ctx") or {}
    if kind == "less_than_equal" and ctx["le"] in _CEILINGS:
        word, bound = "at most", ctx["le"]
    elif kind == "greater_than_equal" and ctx["ge"] in _FLOORS:
        word, bound = "at least", ctx["ge"]
    else:
        return None
    shown = f"{bound:,}" if isinstance(bound, int) else f"{bound:g}"
    return f"must be {word} {shown} (a limit of this simulator: see Limits in docs/scenario-reference.md)"
