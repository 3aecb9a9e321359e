"""Writing results: whole folders or nothing, and CSV cells a spreadsheet shows as text.

**Folders.** :func:`output_folder` stages a command's files in a hidden sibling folder and renames it
into place when all were written, so an interrupt, a full disk or an error leaves either the previous
results or nothing, never truncated files or new ``requests.*`` beside stale ``summary.json``. An
existing folder with files in it is refused unless the command was given ``--force``
(:func:`check_output_folder`, called before the work starts, so a long run is not wasted).

**CSV cells.** A text cell starting with ``=``, ``+``, ``-`` or ``@`` is run as a formula by Excel and
LibreOffice (CSV injection, OWASP), and a bare carriage return or other control character splits the
row or hides text. Names come from user files (regions, candidates, tiers, quarters), so every CSV the
project writes goes through :func:`spreadsheet_safe`: control characters become visible escapes
(``\\r``, ``\\x1b``) and a cell that would start a formula gets a leading apostrophe. Numbers are
written as numbers; a frame whose ``attrs["decimals"]`` names columns gets those at fixed decimals.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.arguments import CONTROL_CHARACTERS, check_name
from simulator.errors import ScenarioError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
_ESCAPES = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def safe_cell(value: Any) -> Any:
    """One CSV cell as a spreadsheet should show it: text with control characters escaped and a leading
    apostrophe before a formula start; anything that is not text unchanged."""
    if not isinstance(value, str):
        return value
    text = CONTROL_CHARACTERS.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                                               else f"\\u{ord(m.group()):04x}"), value)
    return "'" + text if value.startswith(_FORMULA_START) else text


def spreadsheet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` whose text cells and column names are safe in a spreadsheet (see :func:`safe_cell`)."""
    import pandas as pd  # here, not at the top: `llmplan --help` imports this module and no pandas

    out = df.copy()
    for col in out.columns:
        dtype = out[col].dtype
        if isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_object_dtype(dtype) \
                or pd.api.types.is_string_dtype(dtype):
            out[col] = out[col].astype(object).map(safe_cell)
    out.columns = [safe_cell(c) for c in out.columns]
    return out


def _for_csv(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`spreadsheet_safe`, and the number columns named in ``df.attrs["decimals"]`` (``{column:
    decimals}``) as text with exactly that many decimals (``2160.0``, ``23232.30``; empty where missing)."""
    import pandas as pd

    decimals = df.attrs.get("decimals") or {}
    out = spreadsheet_safe(df)
    for col, d in decimals.items():
        if col in df.columns:
            out[safe_cell(col)] = [("" if pd.isna(x) else f"{float(x):.{int(d)}f}") for x in df[col]]
    return out


def write_csv(df: pd.DataFrame, path: str | Path, **kwargs: Any) -> None:
    """``df.to_csv(path, index=False, **kwargs)`` with every text cell made spreadsheet-safe (and fixed
    decimals where ``df.attrs["decimals"]`` names them)."""
    _for_csv(df).to_csv(path, index=False, **kwargs)


def csv_text(df: pd.DataFrame, **kwargs: Any) -> str:
    """The CSV :func:`write_csv` writes, as text (for download buttons)."""
    return str(_for_csv(df).to_csv(index=False, **kwargs))


# -- folders ------------------------------------------------------------------------------------------
#: Characters a staged folder's name adds to the name of the folder it becomes (``.NAME.partial-1a2b3c4d``).
STAGED_NAME_EXTRA = len("..partial-") + 8


def check_path_name(out: Path, option: str = "--out", *, extra: int = 0) -> None:
    """Refuse an output path no file system would take, before any work: a control character in it (a
    folder named with a newline), a part of it longer than the file system allows (``extra``: characters
    the name gets while it is written, e.g. :data:`STAGED_NAME_EXTRA`), or a whole path too long.

    Raises:
        ScenarioError: naming ``option`` and the path.
    """
    check_name(option, str(out))
    absolute = out.absolute()
    length, path_max = len(os.fsencode(str(absolute))), _fs_limit(Path(absolute.anchor), "PC_PATH_MAX", 4096)
    if length + extra >= path_max:
        raise ScenarioError(option, str(out), f"the path is {length} bytes long; at most {path_max - extra - 1} "
                            "here: choose a shorter path")
    folder, last = Path(absolute.anchor), len(absolute.parts) - 1
    for i, part in enumerate(absolute.parts[1:], 1):   # each part against the folder it would be made in
        name_max = _fs_limit(folder, "PC_NAME_MAX", 255)
        room = name_max - (extra if i == last else 0)
        if len(os.fsencode(part)) > room:
            why = f"the file system allows {name_max}; it gets {extra} more while the results are written" \
                if room < name_max else "the file system's limit"
            raise ScenarioError(option, str(out), f"the name {part[:24]!r}... is {len(os.fsencode(part))} bytes "
                                f"long; at most {room} ({why}): choose a shorter name")
        if (folder / part).is_dir():
            folder = folder / part


def _fs_limit(folder: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(folder, name))
    except (OSError, ValueError):
        return default


def check_output_folder(out: Path, *, force: bool = False, option: str = "--out", whole: bool = True) -> None:
    """Fail before any work when ``out`` could not receive the results: a name no folder can have
    (:func:`check_path_name`), it is a file, it already holds files (unless ``force``), or its nearest
    existing ancestor is not a writable folder. ``whole=False``: ``out`` only receives files beside
    others (a plan's ``.csv`` name), it is not replaced."""
    check_path_name(out, option, extra=STAGED_NAME_EXTRA if whole else 0)
    if out.exists() and not out.is_dir():
        raise ScenarioError(option, str(out), "exists and is not a directory")
    here = Path.cwd().resolve()
    if whole and out.resolve() in (here, *here.parents):   # replaced whole: it cannot be one you are in
        raise ScenarioError(option, str(out), "is the working folder or holds it; name a folder for the results")
    if whole and out.is_dir() and not force:
        held = sorted(p.name for p in out.iterdir())
        if held:
            shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
            raise ScenarioError(option, str(out), f"already holds results ({shown}); pass --force to replace "
                                "them, or choose another folder")
    ancestor = out.absolute()
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ScenarioError(option, str(out), f"cannot create the folder: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ScenarioError(option, str(out), f"cannot create the folder: {ancestor} is not writable")


@contextlib.contextmanager
def output_folder(out: Path, *, force: bool = False, option: str = "--out") -> Iterator[Path]:
    """Yield a fresh staging folder beside ``out``; when the block ends normally, it becomes ``out``
    (replacing an existing one only with ``force``). If the block raises (an error, Ctrl-C), the staging
    folder and any parent folders made for it are removed and ``out`` is left as it was.

    Raises:
        ScenarioError: ``out`` is a file, holds results and ``force`` is off, or cannot be created.
    """
    check_output_folder(out, force=force, option=option)
    made = _make_parents(out.parent, option, out)
    stage = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        try:
            stage.mkdir()
            yield stage
        except OSError as exc:   # a full disk, a read-only folder: named, like any bad input
            raise ScenarioError(option, str(out), f"cannot write the results ({exc.strerror or exc})") from None
        _swap_into_place(stage, out, option)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for folder in made:   # deepest first; only the ones this call made, and only if still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _make_parents(parent: Path, option: str, out: Path) -> list[Path]:
    missing = []
    folder = parent.absolute()
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    try:
        for folder in reversed(missing):
            folder.mkdir()
    except OSError as exc:
        raise ScenarioError(option, str(out), f"cannot create the folder {folder} ({exc.strerror})") from None
    return missing


def _swap_into_place(stage: Path, out: Path, option: str) -> None:
    old = None
    try:
        if out.exists():
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            out.rename(old)
        stage.rename(out)
    except OSError as exc:
        if old is not None and not out.exists():
            old.rename(out)
        raise ScenarioError(option, str(out), f"cannot move the results into place ({exc.strerror})") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
