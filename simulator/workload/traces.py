"""Request traces a scenario replays (``workload.arrival: {process: trace, path, format}``).

Each format is a :class:`TraceFormat` in :data:`TRACE_FORMATS`, keyed by the ``format`` string the
YAML uses; its reader returns one row per request with ``arrival_time`` (seconds, any origin),
``num_prompt_tokens``, ``max_tokens`` and ``source_row`` (the file's row or line, for errors), and
optionally ``hash_ids`` (Mooncake), ``session``, ``prefix``/``prefix_tokens`` and ``tier`` (the
``requests`` format). :func:`load_trace` checks what every format shares and shifts the arrivals to
start at 0.

* ``azure``: CSV ``TIMESTAMP,ContextTokens,GeneratedTokens`` (Splitwise, ISCA'24).
* ``mooncake``: JSONL ``{timestamp (ms), input_length, output_length, hash_ids}`` (FAST'25).
* ``requests``: a generic request log, CSV with a header or JSONL: ``timestamp`` (seconds as a number,
  or ISO 8601 text), ``prompt_tokens``, ``output_tokens``, and optionally ``session_id``,
  ``prefix_hash`` with ``prefix_tokens``, and ``tier``.
* ``openai``: JSONL of OpenAI-style completion responses (OpenAI's API, vLLM's OpenAI-compatible
  server, as a gateway or client logs them; or OpenAI Batch API output lines, whose
  ``response.body`` holds one): ``created`` (Unix seconds) and ``usage.prompt_tokens`` /
  ``usage.completion_tokens``. ``created`` counts whole seconds, so the requests of one second
  are spread evenly over it in file order (the log says nothing finer).
"""
from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.errors import ScenarioError
from simulator.registry import Registry
from simulator.scenario.files import read_csv, require_file, trace_timestamps
from simulator.scenario.limits import MAX_MODEL_LEN, MAX_TIME_S

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass(frozen=True)
class TraceFormat:
    """One trace format: its reader, the source names of its (prompt, output, time) columns for
    messages, and what one record is called (``row`` of a CSV, ``line`` of a JSONL file)."""

    read: Callable[[Path, str], pd.DataFrame]
    columns: tuple[str, str, str]
    unit: str


TRACE_FORMATS: Registry[TraceFormat] = Registry("trace format", "workload.arrival.format")


def load_trace(path: Path, fmt: str, field: str = "path") -> pd.DataFrame:
    """Read a trace into columns ``arrival_time`` (s from the first request), ``num_prompt_tokens``,
    ``max_tokens`` (and the format's optional columns), sorted by arrival.

    Raises:
        ScenarioError: unknown format, missing or empty file, missing columns or an unreadable row
        (naming the file, the row or line and the column).
    """
    spec = TRACE_FORMATS.lookup(fmt)
    require_file(path, field, str(path), "trace file")
    if path.stat().st_size == 0:
        raise ScenarioError(field, str(path), "trace file is empty")
    df = spec.read(path, field)
    if df.empty:
        raise ScenarioError(field, str(path), "trace has no requests")
    unit = df.attrs.get("unit", spec.unit)    # the requests format is CSV rows or JSONL lines
    prompt_col, output_col, time_col = spec.columns
    for col, src in (("num_prompt_tokens", prompt_col), ("max_tokens", output_col)):
        bad = np.flatnonzero(df[col].to_numpy() < 1)
        if len(bad):
            first = int(df["source_row"].iloc[bad].min())   # earliest in the file, not in time
            row = df[df["source_row"] == first].iloc[0]
            raise ScenarioError(f"{path} {unit} {first} column {src}", int(row[col]), "must be >= 1")
    df["arrival_time"] -= df["arrival_time"].min()
    df = df.sort_values("arrival_time", kind="stable").reset_index(drop=True)
    last = df.iloc[-1]
    if last["arrival_time"] > MAX_TIME_S:
        raise ScenarioError(f"{path} {unit} {int(last['source_row'])} column {time_col}",
                            f"{last['arrival_time']:.3g} s after the first request",
                            f"the trace may span at most {MAX_TIME_S:.0e} s (about 3 years)")
    return df.drop(columns="source_row")


def _first_bad(mask: np.ndarray, path: Path, column: str, raw: Any, unit: str = "row", rows: Any = None,
               what: str = "") -> None:
    """Refuse the first row where ``mask`` holds, naming the file, its row (``rows[i]``, or the CSV
    row with the header as row 1) and ``column``."""
    import pandas as pd
    bad = np.flatnonzero(mask)
    if len(bad):
        i = int(bad[0])
        value = raw.iloc[i] if hasattr(raw, "iloc") else raw[i]
        shown = "(empty)" if value is None or (not isinstance(value, (list, dict)) and pd.isna(value)) or value == "" \
            else value
        number = int(rows[i]) if rows is not None else i + 2
        raise ScenarioError(f"{path} {unit} {number} column {column}", shown,
                            what or f"not a valid value (integer token count up to {MAX_MODEL_LEN:,}, or timestamp)")


# -- azure ----------------------------------------------------------------------------------------------
def _read_azure(path: Path, field: str) -> pd.DataFrame:
    import pandas as pd
    raw = read_csv(path, field)
    need = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    missing = [c for c in need if c not in raw.columns]
    if missing:
        raise ScenarioError(field, str(path), f"azure trace lacks column(s) {', '.join(missing)}; "
                            f"expected {','.join(need)}, found {','.join(map(str, raw.columns))}")
    ts = trace_timestamps(raw["TIMESTAMP"], path)
    _first_bad(ts.isna().to_numpy(), path, "TIMESTAMP", raw["TIMESTAMP"])
    lengths = {}
    for src, dst in (("ContextTokens", "num_prompt_tokens"), ("GeneratedTokens", "max_tokens")):
        col = pd.to_numeric(raw[src], errors="coerce")
        _first_bad((col.isna() | (col % 1 != 0) | (col.abs() > MAX_MODEL_LEN)).to_numpy(), path, src, raw[src])
        lengths[dst] = col.astype(np.int64)
    seconds = (ts - ts.min()).dt.total_seconds().to_numpy()
    # source_row: the file row, counting the header as row 1 (as a spreadsheet shows it).
    return pd.DataFrame({"arrival_time": seconds, **lengths, "source_row": np.arange(len(raw)) + 2})


# -- mooncake -------------------------------------------------------------------------------------------
def _read_mooncake(path: Path, field: str) -> pd.DataFrame:
    import pandas as pd
    rows = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.decode("utf-8", errors="replace")   # for the message; json.loads checks the bytes
            if not line.strip():
                continue
            try:
                rec = json.loads(raw)
                lengths = [rec["input_length"], rec["output_length"]]
                if any(isinstance(v, bool) or not float(v).is_integer() or abs(v) > MAX_MODEL_LEN for v in lengths):
                    raise ValueError(f"token counts must be integers up to {MAX_MODEL_LEN:,}, got {lengths}")
                stamp = rec["timestamp"]
                if isinstance(stamp, bool) or not math.isfinite(float(stamp)):
                    raise ValueError(f"timestamp must be a finite number of milliseconds, got {stamp}")
                hash_ids = rec.get("hash_ids", [])
                if not isinstance(hash_ids, list) or not all(
                        isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 2**63 for h in hash_ids):
                    raise ValueError(f"hash_ids must be a list of integers in [0, 2^63), got {str(hash_ids)[:40]}")
                rows.append((float(stamp) / 1000.0, int(lengths[0]), int(lengths[1]), hash_ids, lineno))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ScenarioError(f"{path} line {lineno}", line.strip()[:60],
                                    f"not a mooncake record ({type(exc).__name__}: {exc}); expected JSON with "
                                    "timestamp, input_length, output_length") from None
    return pd.DataFrame(rows, columns=["arrival_time", "num_prompt_tokens", "max_tokens", "hash_ids", "source_row"])


# -- JSON lines shared by requests and openai -------------------------------------------------------------
def _is_jsonl(path: Path) -> bool:
    """JSONL by name (``.jsonl``, ``.ndjson``, ``.json``, each optionally ``.gz``), else by the first
    non-blank character (``{``)."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return True
    if name.endswith((".csv", ".tsv")):
        return False
    with _open_text(path) as fh:
        for line in fh:
            if line.strip():
                return line.lstrip().startswith("{")
    return False


def _open_text(path: Path) -> Any:
    opener: Any = gzip.open if path.name.lower().endswith(".gz") else open
    return opener(path, "rt", encoding="utf-8", errors="replace")


def _json_records(path: Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line, refusing a line that is not a JSON object."""
    out = []
    try:
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ScenarioError(f"{path} line {lineno}", line.strip()[:60],
                                        f"not JSON ({exc.msg}); expected one {what} object per line") from None
                if not isinstance(rec, dict):
                    raise ScenarioError(f"{path} line {lineno}", line.strip()[:60],
                                        f"not a JSON object; expected one {what} object per line")
                out.append((lineno, rec))
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ScenarioError("workload.arrival.path", str(path), f"cannot read the file ({exc})") from None
    return out


# -- requests: the generic request log --------------------------------------------------------------------
#: Column names of the ``requests`` format: required, then optional.
REQUEST_COLUMNS = ("timestamp", "prompt_tokens", "output_tokens")
REQUEST_OPTIONAL = ("session_id", "prefix_hash", "prefix_tokens", "tier")


def _read_requests(path: Path, field: str) -> pd.DataFrame:
    import pandas as pd
    if _is_jsonl(path):
        records = _json_records(path, "request")
        unit = "line"
        rows = np.array([n for n, _ in records], dtype=np.int64)
        keys = {k for _, rec in records for k in rec}
        raw = pd.DataFrame({k: [rec.get(k) for _, rec in records] for k in
                            [*REQUEST_COLUMNS, *REQUEST_OPTIONAL] if k in keys})
        missing = [c for c in REQUEST_COLUMNS if c not in keys]
        found = sorted(keys)
    else:
        raw = read_csv(path, field, dtype=str, keep_default_na=False)
        raw.columns = [str(c).strip() for c in raw.columns]
        unit = "row"
        rows = np.arange(len(raw), dtype=np.int64) + 2      # the header is row 1
        missing = [c for c in REQUEST_COLUMNS if c not in raw.columns]
        found = list(raw.columns)
    if missing:
        raise ScenarioError(field, str(path), f"requests trace lacks column(s) {', '.join(missing)}; expected "
                            f"{', '.join(REQUEST_COLUMNS)} (optional: {', '.join(REQUEST_OPTIONAL)}), found "
                            f"{', '.join(map(str, found)) or 'none'}")
    out: dict[str, Any] = {"arrival_time": _seconds(raw["timestamp"], path, unit, rows)}
    for src, dst in (("prompt_tokens", "num_prompt_tokens"), ("output_tokens", "max_tokens")):
        out[dst] = _tokens(raw[src], path, unit, rows, src, least=1)
    for src in ("session_id", "prefix_hash", "tier"):
        if src in raw.columns:
            out[src.removesuffix("_id").removesuffix("_hash")] = _labels(raw[src])
    if "prefix" in out:
        if "prefix_tokens" not in raw.columns:
            raise ScenarioError(field, str(path), "requests trace has prefix_hash but no prefix_tokens column "
                                "(how many leading prompt tokens the prefix covers)")
        has = out["prefix"].notna().to_numpy()
        tokens = _tokens(raw["prefix_tokens"].where(has, "0"), path, unit, rows, "prefix_tokens", least=0)
        _first_bad(has & (tokens < 1), path, "prefix_tokens", raw["prefix_tokens"], unit, rows,
                   "must be >= 1 where prefix_hash is given")
        _first_bad(tokens > out["num_prompt_tokens"], path, "prefix_tokens", raw["prefix_tokens"], unit, rows,
                   "exceeds the row's prompt_tokens (the prefix is part of the prompt)")
        out["prefix_tokens"] = tokens
    if "tier" in out:
        _first_bad(out["tier"].isna().to_numpy(), path, "tier", raw["tier"], unit, rows,
                   "empty; give every row a tier name (one of workload.tiers) or drop the column")
    out["source_row"] = rows
    df = pd.DataFrame(out)
    df.attrs["unit"] = unit
    return df


def _seconds(raw: Any, path: Path, unit: str, rows: np.ndarray) -> np.ndarray:
    """Timestamps as float seconds: all numbers (seconds, any origin) or all ISO 8601 text."""
    import pandas as pd
    text = raw.map(lambda v: "" if v is None else str(v).strip())
    numeric = pd.to_numeric(text, errors="coerce")
    is_num = numeric.notna().to_numpy() & np.isfinite(numeric.to_numpy(dtype=float, na_value=np.nan))
    _first_bad((text == "").to_numpy(), path, "timestamp", text, unit, rows, "empty; every request needs a timestamp")
    if is_num.all():
        return numeric.to_numpy(dtype=float)
    if is_num.any():
        i = int(np.flatnonzero(is_num != is_num[0])[0])
        kind = "a number" if is_num[i] else "text"
        _first_bad(np.arange(len(text)) == i, path, "timestamp", text, unit, rows,
                   f"is {kind} but row {int(rows[0])}'s is not; give every timestamp as seconds or every one as "
                   "ISO 8601 text")
    ts = trace_timestamps(text, path, column="timestamp", rows=rows, unit=unit)
    _first_bad(ts.isna().to_numpy(), path, "timestamp", text, unit, rows,
               "not a timestamp: give seconds (a number) or ISO 8601 text such as 2025-03-01T12:00:00.250Z")
    return (ts - ts.min()).dt.total_seconds().to_numpy()


def _tokens(raw: Any, path: Path, unit: str, rows: np.ndarray, column: str, least: int = 0) -> np.ndarray:
    import pandas as pd
    values = pd.to_numeric(raw.map(lambda v: None if v is None or isinstance(v, bool) or v == "" else v),
                           errors="coerce")
    bad = (values.isna() | (values % 1 != 0) | (values < least) | (values.abs() > MAX_MODEL_LEN)).to_numpy()
    _first_bad(bad, path, column, raw, unit, rows,
               f"not a token count: an integer from {least} to {MAX_MODEL_LEN:,}")
    return values.to_numpy(dtype=np.int64)


def _labels(raw: Any) -> Any:
    """An optional text column: None where empty, else the value as text."""
    return raw.map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == ""
                   else str(v).strip())


# -- openai: completion responses --------------------------------------------------------------------------
def _read_openai(path: Path, field: str) -> pd.DataFrame:
    import pandas as pd
    created, prompt, output, rows = [], [], [], []
    for lineno, rec in _json_records(path, "completion response"):
        body = rec
        response = rec.get("response")
        if isinstance(response, dict) and isinstance(response.get("body"), dict):   # Batch API output line
            body = response["body"]
        usage = body.get("usage")
        where = f"{path} line {lineno}"
        if not isinstance(usage, dict):
            raise ScenarioError(f"{where} column usage", usage, "missing: an openai record needs usage.prompt_tokens "
                                "and usage.completion_tokens (a completion response, or a Batch API output line)")
        stamp = body.get("created")
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
            raise ScenarioError(f"{where} column created", stamp, "must be the response's Unix time in seconds")
        counts = []
        for key in ("prompt_tokens", "completion_tokens"):
            v = usage.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer() \
                    or abs(v) > MAX_MODEL_LEN:
                raise ScenarioError(f"{where} column usage.{key}", v,
                                    f"not a token count: an integer up to {MAX_MODEL_LEN:,}")
            counts.append(int(v))
        created.append(float(stamp))
        prompt.append(counts[0])
        output.append(counts[1])
        rows.append(lineno)
    t = np.asarray(created, dtype=float)
    if len(t):   # spread the requests of each whole second evenly over it, in file order
        order = np.argsort(t, kind="stable")
        sec = t[order]
        start = np.r_[0, np.flatnonzero(np.diff(sec)) + 1]
        counts_per = np.diff(np.r_[start, len(sec)])
        rank = np.arange(len(sec)) - np.repeat(start, counts_per)
        spread = np.empty_like(t)
        spread[order] = sec + rank / np.repeat(counts_per, counts_per)
        t = spread
    return pd.DataFrame({"arrival_time": t, "num_prompt_tokens": np.asarray(prompt, dtype=np.int64),
                         "max_tokens": np.asarray(output, dtype=np.int64), "source_row": np.asarray(rows)})


TRACE_FORMATS.add("azure", TraceFormat(_read_azure, ("ContextTokens", "GeneratedTokens", "TIMESTAMP"), "row"))
TRACE_FORMATS.add("mooncake", TraceFormat(_read_mooncake, ("input_length", "output_length", "timestamp"), "line"))
TRACE_FORMATS.add("requests", TraceFormat(_read_requests, ("prompt_tokens", "output_tokens", "timestamp"), "row"))
TRACE_FORMATS.add("openai", TraceFormat(_read_openai, ("usage.prompt_tokens", "usage.completion_tokens", "created"),
                                        "line"))


def _read_observation(path: Path, field: str) -> pd.DataFrame:
    from simulator.workload.observation import trace_frame

    return trace_frame(path, field)


TRACE_FORMATS.add("observation", TraceFormat(_read_observation, ("prompt_tokens", "output_tokens", "send_s"),
                                             "request"))
