"""Reading the files a user hands over: scenarios, plans, hardware profiles, traces and tables.

Every reader here refuses, with one :class:`~simulator.errors.ScenarioError` naming the file, what
would otherwise hang, exhaust memory or end in a traceback later:

* YAML (:func:`read_yaml`, :func:`parse_yaml`): at most ``MAX_YAML_BYTES``, UTF-8, safe tags only
  (no Python objects), no aliases (a 1 KB "billion laughs" file of nested aliases expands to
  gigabytes once a validator walks it), nesting at most ``MAX_YAML_DEPTH`` levels (a 5,000-deep
  list would overflow the recursion of every walker after the parser);
* text (:func:`decode_text`): UTF-8, naming the line of the first bad byte;
* CSV (:func:`read_csv`, :func:`parse_csv`): a ``.gz`` that is not gzip, a truncated archive, text
  that is not UTF-8 or not CSV, a row with more values than the header has columns (pandas took a
  first such row's values as an index, shifting every column by one).

The dashboard's uploads go through the same functions (:mod:`simulator.scenario.io`).
"""
from __future__ import annotations

import csv
import gzip
import io
import re
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import ScenarioError
from simulator.scenario.limits import MAX_YAML_BYTES, MAX_YAML_DEPTH

# libyaml's parser (when PyYAML was built with it) is about ten times faster than the pure-Python one.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path, source: str | None = None, *, what: str = "a YAML file",
              max_bytes: int = MAX_YAML_BYTES) -> Any:
    """The parsed contents of a YAML file (see the module docstring for what is refused).

    Args:
        path: the file.
        source: how errors name the file (default: its path).
        what: what the file is, for the size message ("a scenario file").
        max_bytes: size limit.

    Raises:
        ScenarioError: too large, unreadable, not UTF-8, not YAML, aliases, too deep.
    """
    p = Path(path)
    source = source or str(path)
    data = read_bytes(p, source, max_bytes=max_bytes, what=what)
    return parse_yaml(decode_text(data, source), source)


def require_file(path: Path, field: str, value: Any, what: str, *, missing: str | None = None) -> None:
    """Refuse ``path`` unless it is a regular file, saying what is there instead: nothing (``missing``,
    default "<what> not found"), a directory, or something else (a device such as /dev/null, a pipe, a
    socket). ``what`` is what the file should be ("scenario file").

    Raises:
        ScenarioError: naming ``field`` and ``value``.
    """
    if path.is_file():
        return
    if not path.exists():
        why = missing or f"{what} not found"
    elif path.is_dir():
        why = f"a directory, not a {what}"
    else:
        why = f"not a regular file (a device, pipe or socket), not a {what}"
    raise ScenarioError(field, value, why)


def read_bytes(path: Path, source: str, *, max_bytes: int, what: str) -> bytes:
    """A file's bytes, refusing one larger than ``max_bytes`` before reading it."""
    try:
        check_size(path.stat().st_size, source, max_bytes=max_bytes, what=what)   # before reading it
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ScenarioError(source, str(path), f"cannot read the file ({exc.strerror or type(exc).__name__})") from None
    check_size(len(data), source, max_bytes=max_bytes, what=what)   # it may have grown meanwhile
    return data


def check_size(size: int, source: str, *, max_bytes: int, what: str) -> None:
    """Refuse a file of ``size`` bytes over ``max_bytes`` (``what``: "a scenario file")."""
    if size > max_bytes:
        raise ScenarioError(source, f"{size:,} bytes", f"file too large; {what} may be at most {max_bytes:,} bytes")


def decode_text(data: bytes, source: str, hint: str = "") -> str:
    """``data`` as UTF-8 text (a leading byte-order mark is dropped), or an error naming the line and
    byte of the first invalid byte; ``hint`` is appended ("upload a YAML scenario file")."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ScenarioError(source, f"byte {exc.start}", f"not UTF-8 text (line {line})"
                            + (f"; {hint}" if hint else "")) from None


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text with safe tags only, refusing aliases, nesting deeper than ``MAX_YAML_DEPTH``
    and a key given twice in one mapping (YAML loaders keep the last silently).

    Raises:
        ScenarioError: naming ``source`` and the line of the problem.
    """
    try:
        # Per open collection: a mapping's keys so far (with the line of each; None for a sequence), and
        # the nodes seen in it (in a mapping, an even count means a key comes next).
        keys_of: list[dict[str, int] | None] = []
        nodes: list[int] = []

        def node(event: Any) -> None:   # a node starts in the innermost collection
            keys = keys_of[-1] if keys_of else None
            if keys is not None and nodes[-1] % 2 == 0 and isinstance(event, yaml.ScalarEvent):
                line = event.start_mark.line + 1 if event.start_mark is not None else 0
                if event.value in keys:
                    raise ScenarioError(source, event.value, f"key given twice in one mapping (lines "
                                        f"{keys[event.value]} and {line}); YAML would keep the last silently: "
                                        "remove one")
                keys[event.value] = line

        def done() -> None:             # that node ended
            if nodes:
                nodes[-1] += 1

        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise ScenarioError(source, f"*{event.anchor}", f"YAML aliases are not accepted ({_line(event)}); "
                                    "write the value out")
            if isinstance(event, yaml.CollectionStartEvent):
                node(event)
                keys_of.append({} if isinstance(event, yaml.MappingStartEvent) else None)
                nodes.append(0)
                if len(nodes) > MAX_YAML_DEPTH:
                    raise ScenarioError(source, _line(event), f"nested more than {MAX_YAML_DEPTH} levels deep")
            elif isinstance(event, yaml.CollectionEndEvent):
                keys_of.pop()
                nodes.pop()
                done()
            elif isinstance(event, yaml.ScalarEvent):
                node(event)
                done()
        return yaml.load(text, Loader=_LOADER)
    except ScenarioError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        if problem and "nesting depth" in str(problem):   # PyYAML >= 6.0.4's scanner stops runaway nesting first
            raise ScenarioError(source, f"line {mark.line + 1}" if mark is not None else "line ?",
                                f"nested more than {MAX_YAML_DEPTH} levels deep") from None
        raise ScenarioError(source, "YAML", f"not valid YAML{where}" + (f": {problem}" if problem else "")) from None
    except (ValueError, OverflowError) as exc:   # e.g. an integer of more than 4,300 digits
        raise ScenarioError(source, "YAML", f"not valid YAML: {exc}") from None


def parse_yaml_value(text: str, source: str) -> Any:
    """One ``--set`` value: YAML when it parses (``12``, ``{a: 1}``), else the text itself."""
    try:
        return parse_yaml(text, source)
    except ScenarioError as exc:
        if exc.value == "YAML":
            return text
        raise


def _line(event: Any) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}" if mark is not None else "line ?"


def read_csv(path: Path, source: str, **kwargs: Any) -> Any:
    """``pandas.read_csv`` (compression inferred from the name), with every way a file can fail to be
    a CSV turned into one error naming ``source``: a ``.gz`` that is not gzip, a truncated archive,
    bytes that are not UTF-8, unparsable or empty text, rows with more values than columns
    (:func:`parse_csv`)."""
    if path.name.lower().endswith(".gz"):
        try:
            with path.open("rb") as fh:
                magic = fh.read(2)
        except OSError as exc:
            raise ScenarioError(source, str(path), f"cannot read the file ({exc.strerror})") from None
        if magic != b"\x1f\x8b":
            raise ScenarioError(source, str(path), "named .gz but not gzip-compressed; compress it with gzip "
                                "or drop the .gz from its name")
    def lines() -> Any:
        opener: Any = gzip.open if path.name.lower().endswith(".gz") else open
        return opener(path, "rt", encoding="utf-8", errors="replace", newline="")

    try:
        return parse_csv(path, source, str(path), path.name, lines, **kwargs)
    except UnicodeDecodeError:
        raise ScenarioError(source, str(path), f"not UTF-8 text ({_first_bad_line(path)}); save it as UTF-8") \
            from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise ScenarioError(source, str(path), f"a damaged compressed file ({type(exc).__name__})") from None
    except OSError as exc:
        raise ScenarioError(source, str(path), f"cannot read the file ({exc.strerror or type(exc).__name__})") \
            from None


_RAGGED = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")
_OPEN_QUOTE = re.compile(r"EOF inside string starting at row (\d+)")


def parse_csv(data: Any, source: str, shown: str, name: str, lines: Any, **kwargs: Any) -> Any:
    """``pandas.read_csv(data, **kwargs)``, refusing text that is not CSV (an error naming ``source`` with the
    value ``shown``) and a row with more values than the header has columns (naming ``name`` and the row,
    counted as a spreadsheet does: the header is row 1); a row with fewer reads its last columns as empty.
    ``lines()`` opens the text again (a context manager yielding its lines) to quote that row."""
    import pandas as pd

    try:
        frame = pd.read_csv(data, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        ragged = _RAGGED.search(str(exc))
        if ragged:
            _refuse_ragged(name, int(ragged.group(2)), lines)
        quote = _OPEN_QUOTE.search(str(exc))
        if quote:   # pandas counts the lines from 0, the header's included
            number = int(quote.group(1)) + 1
            raise ScenarioError(f"{name} row {number}", _raw_line(lines, number), "a double quote opens a value "
                                "that never closes; close it or remove it") from None
        detail = str(exc).replace("Error tokenizing data. C error: ", "").strip()
        raise ScenarioError(source, shown, f"not a readable CSV ({type(exc).__name__}: {detail[:120]})") from None
    if "index_col" not in kwargs and not frame.index.equals(pd.RangeIndex(len(frame))):
        _refuse_ragged(name, 2, lines)   # pandas made the extra values of the first row an index
    return frame


def _refuse_ragged(name: str, number: int, lines: Any) -> None:
    with lines() as fh:
        records = _records(fh, number)
    header, row = records[0], records[-1]
    text = io.StringIO()
    csv.writer(text, lineterminator="").writerow(row)
    raise ScenarioError(f"{name} row {number}", text.getvalue(),
                        f"{len(row)} values but the header has {len(header)} columns ({', '.join(header)}); give "
                        "one value per column (put a value holding a comma in double quotes)")


def _raw_line(lines: Any, number: int) -> str:
    """The ``number``-th line of the text as written (1: the header), without its line break."""
    with lines() as fh:
        for i, line in enumerate(fh, 1):
            if i == number:
                return str(line).rstrip("\r\n")
    return ""


def _records(lines: Iterable[str], number: int) -> list[list[str]]:
    """The first and the ``number``-th record of CSV text (1: the header)."""
    out: list[list[str]] = []
    for i, record in enumerate(csv.reader(lines), 1):
        if i == 1:
            out.append(record)
        if i == number:
            out.append(record)
            break
    return out


def text_lines(text: str) -> Any:
    """A :func:`parse_csv` ``lines`` for CSV text in memory."""
    return lambda: io.StringIO(text, newline="")


def _first_bad_line(path: Path) -> str:
    """Where the first byte that is not UTF-8 is (decompressing a ``.gz``), for the error message."""
    opener: Any = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return f"line {line}, byte {exc.start}"
    return "an invalid byte"


def trace_timestamps(text: Any, path: Path, column: str = "TIMESTAMP", rows: Any = None, unit: str = "row") -> Any:
    """A trace's timestamps (a pandas Series of text) as datetimes, NaT where unreadable: ISO 8601 with or
    without fractional seconds (other layouts guessed row by row), all with a time zone (then converted to
    UTC) or all without; a mix of the two is ambiguous and an error naming the first row that differs
    (``rows[i]``: the file's row or line number of entry ``i``; default a CSV's, the header being row 1)."""
    import numpy as np
    import pandas as pd

    text = text.astype("string").str.strip()
    aware = text.str.contains(r"(?:Z|[+-]\d{2}:?\d{2})$", regex=True).fillna(False).to_numpy(dtype=bool)
    if aware.any() and not aware.all():
        i = int(np.flatnonzero(aware != aware[0])[0])
        number = (lambda k: int(rows[k])) if rows is not None else (lambda k: k + 2)
        which = (f"has a time zone and {unit} {number(0)} does not" if aware[i]
                 else f"lacks the time zone {unit} {number(0)} has")
        raise ScenarioError(f"{path} {unit} {number(i)} column {column}", text.iloc[i],
                            f"{which}; give every timestamp an offset (e.g. +00:00) or none")
    utc = bool(aware.all())
    ts = pd.to_datetime(text, errors="coerce", format="ISO8601", utc=utc)
    retry = ts.isna() & text.notna()
    if retry.any():   # not ISO 8601: let pandas guess each layout (slower, so only for those rows)
        ts[retry] = pd.to_datetime(text[retry], errors="coerce", format="mixed", utc=utc)
    return ts
