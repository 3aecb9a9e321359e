"""Writing the plan's worksheets as CSV files that are safe to open in a spreadsheet.

A text cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return would be run as a
formula by Excel or LibreOffice (CSV injection, OWASP); names come from user files (regions,
candidates, quarters), so such cells get a leading apostrophe. Numbers are written as numbers.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from simulator.errors import ScenarioError

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or isinstance(out[col].dtype, pd.StringDtype):
            out[col] = out[col].map(lambda v: "'" + v if isinstance(v, str) and v.startswith(_FORMULA_START) else v)
    return out


def worksheet_path(out: Path) -> Path:
    """Where ``--out`` puts the worksheet: a name ending in ``.csv`` (and not an existing folder) is the
    worksheet itself; anything else is a folder (``plan-out/`` by default) holding ``worksheet.csv``."""
    if out.name.lower().endswith(".csv") and not out.is_dir():
        return out
    return out / "worksheet.csv"


def companion_paths(out: Path) -> dict[str, Path]:
    """``worksheet.csv`` (or a folder) -> the worksheet, ``worksheet-totals.csv``,
    ``worksheet-candidates.csv``."""
    ws = worksheet_path(out)
    stem = ws.name[:-4]
    return {"worksheet": ws, "totals": ws.with_name(f"{stem}-totals.csv"),
            "candidates": ws.with_name(f"{stem}-candidates.csv")}


def check_out(out: Path) -> None:
    """Fail before planning when the worksheets could not be written: the folder that would hold them
    must exist or be creatable (its nearest existing ancestor a writable folder)."""
    folder = worksheet_path(out).parent
    if folder.exists() and not folder.is_dir():
        which = "it" if folder == out else str(folder)
        raise ScenarioError("--out", str(out), f"{which} exists and is not a directory; give a folder "
                            "(or a file name ending in .csv)")
    missing, ancestor = [], folder.absolute()
    while not ancestor.exists() and ancestor != ancestor.parent:
        missing.append(ancestor)
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ScenarioError("--out", str(out), f"cannot create the folder: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ScenarioError("--out", str(out), f"cannot create the folder: {ancestor} is not writable")
    # Create the missing folders now and remove them again: os.access says yes to root everywhere.
    created: list[Path] = []
    try:
        for d in reversed(missing):
            d.mkdir()
            created.append(d)
    except OSError as exc:
        raise ScenarioError("--out", str(out), f"cannot create the folder {d} ({exc.strerror})") from None
    finally:
        for d in reversed(created):
            d.rmdir()


def write_worksheets(result, out: Path) -> dict[str, Path]:  # PlanResult
    """Write the three CSVs next to each other; all or nothing (temporary files, then renamed).

    ``worksheet.csv`` is the finance summary (``result.summary``: rounded, whole numbers as such, no
    exponents) and ``worksheet-totals.csv`` its totals; ``worksheet-candidates.csv`` has every
    engineering column of every candidate (6 significant digits)."""
    paths = companion_paths(out)
    check_out(out)
    try:
        paths["worksheet"].parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError("--out", str(out), f"cannot create the folder ({exc.strerror})") from None
    summary = result.summary if result.summary is not None else result.worksheet
    frames = {"worksheet": summary, "totals": result.totals, "candidates": result.candidates}
    formats = {"worksheet": None, "totals": None, "candidates": "%.6g"}
    tmp = {k: p.with_name(p.name + ".tmp") for k, p in paths.items()}
    try:
        for key, frame in frames.items():
            spreadsheet_safe(frame).to_csv(tmp[key], index=False, float_format=formats[key])
        for key in frames:
            tmp[key].replace(paths[key])
    except OSError as exc:
        for p in tmp.values():
            p.unlink(missing_ok=True)
        raise ScenarioError("--out", str(out), f"cannot write ({exc.strerror})") from None
    return paths
