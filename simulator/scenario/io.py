"""Scenarios as text: canonical YAML/JSON for caching and sharing, and safe parsing of uploads.

The dashboard keys its result cache on :func:`scenario_key` (the frozen scenario's canonical
JSON), offers :func:`scenario_to_yaml` as a download, and reads uploaded files only through
:func:`scenario_from_yaml_bytes`: a size limit, then the CLI's own YAML reader
(:mod:`simulator.scenario.files`: UTF-8, safe tags, no aliases, bounded nesting) and validation, so
every bad file ends in one :class:`~simulator.errors.ScenarioError` naming the field.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simulator.errors import ScenarioError
from simulator.scenario.config import Scenario, scenario_from_dict
from simulator.scenario.files import check_size, decode_text, parse_csv, parse_yaml, text_lines
from simulator.scenario.profiles import available_profiles
from simulator.scenario.workload import EmpiricalLength, TraceArrival

#: Largest scenario file accepted from an upload (a scenario is a few hundred bytes; traces are
#: referenced by path, never uploaded inline).
MAX_SCENARIO_BYTES = 64 * 1024


def decode_upload(data: bytes, source: str, max_bytes: int, what: str, upload_hint: str) -> str:
    """An uploaded file's text: at most ``max_bytes`` and UTF-8, else a :class:`ScenarioError`
    naming the file (``what``: "a scenario file"; ``upload_hint``: what to upload instead)."""
    check_size(len(data), source, max_bytes=max_bytes, what=what)
    return decode_text(data, source, hint=f"upload {upload_hint}")


def scenario_key(scenario: Scenario) -> str:
    """Canonical JSON of a scenario: equal scenarios give equal strings (the cache key)."""
    return scenario.model_dump_json(exclude_none=True)


def scenario_from_key(key: str) -> Scenario:
    """Inverse of :func:`scenario_key`. A key writes out every field of a loaded scenario, the engine
    preset's scheduler values included, so validating it is the whole of loading it: nothing is left
    for :mod:`simulator.scenario.defaults` to fill in."""
    return Scenario.model_validate_json(key)


def scenario_to_yaml(scenario: Scenario, *, keep_base_dir: bool = False) -> str:
    """The scenario as a YAML document :func:`simulator.load_scenario` reads back to an equal scenario.

    ``base_dir`` is dropped unless ``keep_base_dir`` (then written as an absolute path, so that
    relative trace and profile paths still resolve wherever the file is saved).
    """
    data: dict[str, Any] = scenario.model_dump(mode="json", exclude_none=True)
    base = data.pop("base_dir", ".")
    if keep_base_dir:
        data["base_dir"] = str(Path(base).resolve())
    return yaml.safe_dump(data, sort_keys=False)


def scenario_from_yaml_bytes(data: bytes, *, source: str = "upload", base_dir: str | Path = ".",
                             max_bytes: int = MAX_SCENARIO_BYTES, allowed_root: str | Path | None = None) -> Scenario:
    """Parse and validate an uploaded scenario file.

    Args:
        data: the file's bytes.
        source: how to name the file in errors (its file name).
        base_dir: folder relative paths in the scenario resolve against.
        max_bytes: size limit.
        allowed_root: if given, every file the scenario references (trace, empirical lengths, a
            hardware profile given as a path) must lie under this folder, so that an upload cannot
            make the server read arbitrary files.

    Raises:
        ScenarioError: too large, not UTF-8, not YAML, YAML aliases, not a mapping, a referenced
            file outside ``allowed_root``, or any invalid field (named as in the CLI's errors).
    """
    text = decode_upload(data, source, max_bytes, "a scenario file", "a YAML scenario file")
    parsed = parse_yaml(text, source)
    if not isinstance(parsed, dict):
        raise ScenarioError(source, parsed, "a scenario file must be a YAML mapping (name: ..., model: ..., ...)")
    parsed.pop("base_dir", None)   # an upload cannot choose where paths resolve on the server
    scenario = scenario_from_dict(parsed, base_dir=base_dir)
    if allowed_root is not None:
        root = Path(allowed_root).resolve()
        for field, path in referenced_paths(scenario):
            if not scenario.resolve_path(path).resolve().is_relative_to(root):
                raise ScenarioError(field, path, f"an uploaded scenario may only reference files under {root}")
    return scenario


def referenced_paths(scenario: Scenario) -> list[tuple[str, str]]:
    """``(field, path)`` of every file a scenario reads: trace, empirical lengths, a profile path."""
    out: list[tuple[str, str]] = []
    wl = scenario.workload
    if isinstance(wl.arrival, TraceArrival):
        out.append(("workload.arrival.path", wl.arrival.path))
    for name in ("prompt_tokens", "output_tokens"):
        dist = getattr(wl, name)
        if isinstance(dist, EmpiricalLength):
            out.append((f"workload.{name}.path", dist.path))
    if isinstance(scenario.hardware, str) and scenario.hardware not in available_profiles():
        out.append(("hardware", scenario.hardware))
    return out


def scenario_diff(before: Scenario, after: Scenario) -> list[tuple[str, Any, Any]]:
    """Fields that differ between two scenarios as ``(dotted.field, before, after)``, sorted."""
    def flat(data: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(data, dict):
            out: dict[str, Any] = {}
            for k, v in data.items():
                out.update(flat(v, f"{prefix}{k}."))
            return out
        return {prefix[:-1]: data}

    a = flat(before.model_dump(mode="json", exclude_none=True))
    b = flat(after.model_dump(mode="json", exclude_none=True))
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k) and k != "base_dir"]


#: Largest forecast CSV accepted from an upload (a forecast is a few rows per region and quarter).
MAX_FORECAST_BYTES = 256 * 1024


def forecast_rows_from_csv_bytes(data: bytes, *, source: str = "forecast.csv",
                                 max_bytes: int = MAX_FORECAST_BYTES) -> list[dict[str, Any]]:
    """Rows of an uploaded forecast CSV as plain dicts (empty cells become ``None``), for a plan's
    inline ``forecast``; the planner then validates every row and column by name.

    Raises:
        ScenarioError: too large, not UTF-8, not a CSV, or no rows.
    """
    import io

    import pandas as pd

    text = decode_upload(data, source, max_bytes, "a forecast CSV", "a CSV file")
    frame = parse_csv(io.StringIO(text), source, "CSV", source, text_lines(text), dtype={"quarter": str, "region": str})
    if frame.empty:
        raise ScenarioError(source, list(frame.columns), "the forecast has no rows; expected quarter, region, "
                            "peak_rps[, avg_prompt_tokens, avg_output_tokens]")
    return [{str(k): (None if pd.isna(v) else v.item() if hasattr(v, "item") else v) for k, v in row.items()}
            for row in frame.to_dict("records")]
