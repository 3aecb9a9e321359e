"""Per-op tables as the cost models read them: :data:`~simulator.cost.op_table.OpRows`, loaded
without pandas, and kept checked (and made monotone) in a per-user cache.

A ``kernel_table`` or ``table`` cost model needs the table's shape columns and median times as numpy
columns. :func:`load_rows` reads them with the standard library and numpy (pandas costs a
``llmplan simulate`` more start-up time than the whole roofline run takes), and only for a table
written the plain way (the way every writer here writes one: no quotes, no blank lines, plain
numbers, known columns) whose every check passes; any other file goes through
:func:`~simulator.cost.op_table.read_table`, so a bad table gets the very error it got before and
an unusual but valid one the very values.

The rows a model builds from (checked, and with ``monotone`` the isotonic fit of
:func:`~simulator.cost.op_table.monotone_rows`) are cached in ``$LLMPLAN_CACHE_DIR``, else
``$XDG_CACHE_HOME/llmplan``, else ``~/.cache/llmplan`` (``tables/<sha256 of the file>-...npy``):
keyed by the file's bytes and name suffixes, this module's :data:`ROWS_VERSION`, numpy's version
and a fingerprint of the logarithm and exponential the fit uses on this machine, so a hit is the
array a miss would build, to the bit. Writes go to a temporary file renamed into place (planner workers may race);
an unreadable or malformed entry is rebuilt; a cache that cannot be written is skipped. It holds
at most :data:`MAX_ENTRIES` entries, the least recently used removed first (a hit renews its entry):
a table edited again and again, or ``calibrate --from-observation``'s scaled table per evaluation,
does not fill the disk. ``LLMPLAN_TABLE_CACHE=0`` turns it off.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import re
import tempfile
import zlib
from pathlib import Path

import numpy as np

from simulator.cost.op_table import (
    FAMILIES,
    OP_FAMILY,
    OPTIONAL_COLUMNS,
    SHAPE_COLUMNS,
    TABLE_COLUMNS,
    TABLE_SCHEMA,
    TEXT_COLUMNS,
    USED_BY,
    OpRows,
    monotone_rows,
    read_table,
    rows_dtype,
    to_rows,
)

ROWS_VERSION = 1
"""Bump when what :func:`load_rows` builds from the same bytes changes (the cache keys on it)."""

_ODD = re.compile(r"[^A-Za-z0-9,._+\-\n]")
"""A character a table written the plain way does not hold: a table with one (quotes, blanks, carriage
returns, a byte-order mark, other whitespace) is read by pandas."""
_WORD = re.compile(r"[a-z][a-z0-9_]*")
_NOT_TEXT = {"nan", "null", "inf", "infinity", "true", "false"}
"""Words pandas reads as something other than the text itself."""


#: Entries the cache keeps (the least recently used go first): every shipped profile's rows and
#: monotone rows (about 30) with room to spare.
MAX_ENTRIES = 64


def load_rows(path: str | Path, *, sha256: str | None = None, schema: int | None = TABLE_SCHEMA,
              field: str = "hardware.table", monotone: bool = False) -> OpRows:
    """The rows of the per-op table at ``path`` (:func:`~simulator.cost.op_table.read_table`'s checks
    and errors, its values as :func:`~simulator.cost.op_table.to_rows` gives them), made monotone
    along each curve's size with ``monotone``.

    Raises:
        ScenarioError: as :func:`~simulator.cost.op_table.read_table`.
    """
    path = Path(path)
    data = _bytes(path) if schema is None or schema == TABLE_SCHEMA else None
    digest = hashlib.sha256(data).hexdigest() if data is not None else ""
    if data is None or (sha256 is not None and digest != sha256):
        return _checked(path, sha256, schema, field, monotone)   # read_table raises its error
    entry = _entry(digest, path.name, monotone)
    cached = _load(entry)
    if cached is not None:
        return cached
    parsed = _parse(path.name, data)
    if parsed is None:
        rows = _checked(path, sha256, schema, field, monotone)
    else:
        rows = monotone_rows(parsed) if monotone else parsed
    _store(entry, rows)
    return rows


def _checked(path: Path, sha256: str | None, schema: int | None, field: str, monotone: bool) -> OpRows:
    """The rows as :func:`~simulator.cost.op_table.read_table` reads and checks them (pandas)."""
    rows = to_rows(read_table(path, sha256=sha256, schema=schema, field=field))
    return monotone_rows(rows) if monotone else rows


def _bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() else None
    except OSError:
        return None


# -- the plain reader ----------------------------------------------------------------------------------
def _parse(name: str, data: bytes) -> OpRows | None:
    """The rows of a table written the plain way whose checks all pass; None for any other file."""
    text = _text(name, data)
    if text is None or _ODD.search(text):
        return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        return None
    header = lines[0].split(",")
    width, body = len(header), lines[1:]
    if len(set(header)) != width or not set(header) <= set(TABLE_COLUMNS) \
            or set(TABLE_COLUMNS) - set(OPTIONAL_COLUMNS) - set(header) \
            or any(line.count(",") != width - 1 for line in body):
        return None
    shape = [c for c in SHAPE_COLUMNS if c in header]
    try:
        words = _columns(body, [header.index(c) for c in TEXT_COLUMNS], str)
        numbers = _columns(body, [header.index(c) for c in (*shape, "median_s")], np.float64)
    except ValueError:          # an empty number, or signs and dots that make no number
        return None
    for j, c in enumerate(TEXT_COLUMNS):
        found = set(words[:, j].tolist())
        if found & _NOT_TEXT or any(_WORD.fullmatch(w) is None for w in found) \
                or not found <= set(OP_FAMILY if c == "op" else FAMILIES if c == "family" else found):
            return None
    med = numbers[:, -1]
    if not np.all(np.isfinite(med) & (med > 0)):
        return None
    family = np.array([OP_FAMILY[op] for op in words[:, 0].tolist()], dtype=str)
    rows = np.empty(len(body), dtype=rows_dtype(words.dtype.itemsize // 4))
    for j, c in enumerate(TEXT_COLUMNS):
        rows[c] = words[:, j]
    for c in SHAPE_COLUMNS:
        if c not in shape:
            rows[c] = 0
            continue
        values = numbers[:, shape.index(c)]
        least = np.where(np.isin(family, USED_BY.get(c, ())), 1, 0)
        if not np.all(np.isfinite(values)):     # checked first: inf % 1 warns
            return None
        if not np.all((values % 1 == 0) & (values >= least) & (values < 2**62)):
            return None
        rows[c] = values.astype(np.int64)
    rows["median_s"] = med
    return rows


def _text(name: str, data: bytes) -> str | None:
    """A ``.csv`` or ``.csv.gz`` file's text; None for another name, a damaged archive or bytes that are not UTF-8."""
    lower = name.lower()
    if lower.endswith(".csv.gz") and data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            return None
    elif not lower.endswith(".csv"):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _columns(lines: list[str], columns: list[int], dtype: type) -> np.ndarray:
    """The ``columns`` of comma-separated ``lines`` as a 2-D array of ``dtype`` (numpy's C reader)."""
    return np.loadtxt(lines, delimiter=",", usecols=columns, dtype=dtype, comments=None, quotechar=None, ndmin=2)


# -- the cache -------------------------------------------------------------------------------------------
def cache_dir() -> Path | None:
    """Where cached rows live (module docstring); None when ``LLMPLAN_TABLE_CACHE`` turns the cache off."""
    if os.environ.get("LLMPLAN_TABLE_CACHE", "").strip().lower() in ("0", "false", "no", "off"):
        return None
    base = os.environ.get("LLMPLAN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "llmplan")
    return Path(base) / "tables"


def _fingerprint(name: str) -> str:
    """What else the rows depend on: the file name's suffixes (pandas reads a ``.gz`` and a ``.csv``
    differently), numpy's version and what its log and exp give here (the monotone fit's float operations)."""
    probe = np.exp(np.log(np.geomspace(1e-7, 3.0, 29)) * 0.73)
    suffixes = "".join(Path(name).suffixes)
    return hashlib.sha256(f"{suffixes}|{np.__version__}|".encode() + probe.tobytes()).hexdigest()[:16]


def _entry(digest: str, name: str, monotone: bool) -> Path | None:
    where = cache_dir()
    if where is None:
        return None
    kind = "monotone" if monotone else "rows"
    return where / f"{digest}-{kind}-v{ROWS_VERSION}-{_fingerprint(name)}.npy"


def _load(entry: Path | None) -> OpRows | None:
    if entry is None:
        return None
    try:
        rows = np.load(entry, allow_pickle=False)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    with contextlib.suppress(OSError):
        os.utime(entry)                                     # recently used: the last to be pruned
    names = rows.dtype.names
    if rows.ndim != 1 or names is None or names != (*TEXT_COLUMNS, *SHAPE_COLUMNS, "median_s") \
            or any(rows.dtype[c] != np.int64 for c in SHAPE_COLUMNS) or rows.dtype["median_s"] != np.float64 \
            or any(rows.dtype[c].kind != "U" for c in TEXT_COLUMNS):
        return None
    return rows


def _store(entry: Path | None, rows: OpRows) -> None:
    if entry is None:
        return
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, rows, allow_pickle=False)
        os.replace(tmp, entry)
        tmp = None
        _prune(entry.parent)
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _prune(where: Path) -> None:
    """Keep the :data:`MAX_ENTRIES` most recently used entries (another worker may prune the same ones)."""
    entries = []
    for p in where.glob("*.npy"):
        with contextlib.suppress(OSError):
            entries.append((p.stat().st_mtime, p.name, p))
    for _, _, p in sorted(entries, reverse=True)[MAX_ENTRIES:]:
        with contextlib.suppress(OSError):
            p.unlink()
