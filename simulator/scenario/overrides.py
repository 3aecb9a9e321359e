"""``--set key.path=value`` overrides: parsed from the command line (values as YAML) and applied to a
scenario's (or a plan's) plain dict before it is validated."""
from __future__ import annotations

from typing import Any

from simulator.errors import ScenarioError
from simulator.scenario.files import parse_yaml_value


def parse_overrides(overrides: list[str] | dict[str, Any] | None) -> dict[str, Any]:
    """Turn ``["a.b=1", "c=x"]`` into ``{"a.b": 1, "c": "x"}``; values are parsed as YAML."""
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ScenarioError("--set", item, "expected key.path=value, e.g. workload.arrival.rate_per_s=12")
        key = key.strip()
        _key_path(key, "--set", item)
        out[key] = parse_yaml_value(raw, f"--set {key}") if raw.strip() else None
    return out


def _key_path(key: str, field: str, value: Any) -> list[str]:
    """The field names of a dotted override key, refusing an empty key or an empty name in it (``.``,
    ``a..b``, ``a.``), which would set a field named ``''``."""
    parts = key.split(".")
    if not all(part.strip() for part in parts):
        what = "is empty" if not key.strip() else "has an empty name (a dot at either end, or two dots in a row)"
        raise ScenarioError(field, value, f"the key path {key!r} {what}; give field names joined by dots, "
                            "e.g. workload.arrival.rate_per_s=12")
    return parts


#: Top-level fields whose string form names one field of their mapping (``engine: sglang`` is
#: ``engine: {preset: sglang}``): a dotted key into one keeps the name.
SHORTHAND_FIELD = {"engine": "preset"}


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``key`` "a.b.c", creating the mappings on the way (a
    :data:`SHORTHAND_FIELD` given as a string becomes its mapping: ``engine: sglang`` then
    ``engine.async_scheduling=false`` is ``{preset: sglang, async_scheduling: false}``).

    Raises:
        ScenarioError: an empty name in ``key``, or a step through a preset name (``model``, ``hardware``
            given as a string), which has no fields to set.
    """
    parts = _key_path(key, key or "key path", value)
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if isinstance(child, str) and part in ("model", "hardware"):
            raise ScenarioError(key, value, f"{'.'.join(parts[:i + 1])} is the preset name {child!r}; "
                                "replace it with an inline mapping to set its fields")
        if isinstance(child, str) and i == 0 and part in SHORTHAND_FIELD:
            child = node[part] = {SHORTHAND_FIELD[part]: child}
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value
