"""Writing the plan's worksheets as CSV files that are safe to open in a spreadsheet.

A text cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return would be run as a
formula by Excel or LibreOffice (CSV injection, OWASP); names come from user files (regions,
candidates, quarters), so such cells get a leading apostrophe. Numbers are written as numbers.
"""
from __future__ import annotations

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


def companion_paths(out: Path) -> dict[str, Path]:
    """``worksheet.csv`` -> itself, ``worksheet-totals.csv`` and ``worksheet-candidates.csv``."""
    stem = out.name[:-4] if out.name.lower().endswith(".csv") else out.name
    return {"worksheet": out, "totals": out.with_name(f"{stem}-totals.csv"),
            "candidates": out.with_name(f"{stem}-candidates.csv")}


def check_out(out: Path) -> None:
    """Fail before planning when the worksheet could not be written."""
    if out.exists() and out.is_dir():
        raise ScenarioError("--out", str(out), "is a directory; give a file name such as worksheet.csv")
    if not out.parent.is_dir():
        raise ScenarioError("--out", str(out), f"folder {out.parent} does not exist")


def write_worksheets(result, out: Path) -> dict[str, Path]:  # noqa: ANN001 - PlanResult
    """Write the three CSVs next to each other; all or nothing (temporary files, then renamed)."""
    paths = companion_paths(out)
    check_out(out)
    frames = {"worksheet": result.worksheet, "totals": result.totals, "candidates": result.candidates}
    tmp = {k: p.with_name(p.name + ".tmp") for k, p in paths.items()}
    try:
        for key, frame in frames.items():
            spreadsheet_safe(frame).to_csv(tmp[key], index=False, float_format="%.6g")
        for key in frames:
            tmp[key].replace(paths[key])
    except OSError as exc:
        for p in tmp.values():
            p.unlink(missing_ok=True)
        raise ScenarioError("--out", str(out), f"cannot write ({exc.strerror})") from None
    return paths
