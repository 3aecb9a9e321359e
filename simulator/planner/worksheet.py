"""Writing the plan's worksheets as CSV files that are safe to open in a spreadsheet.

Names come from user files (regions, candidates, quarters), so every text cell goes through
:func:`simulator.output.spreadsheet_safe` (formula starts quoted, control characters escaped).
Numbers are written as numbers. The three files are written all or nothing: as a staged folder
(:func:`simulator.output.output_folder`), or, for a ``.csv`` name, as temporary files renamed at the end.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

from simulator.errors import ScenarioError
from simulator.output import check_output_folder, check_path_name, output_folder, spreadsheet_safe, write_csv

__all__ = ["check_out", "companion_paths", "spreadsheet_safe", "worksheet_path", "write_worksheets"]


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


def check_out(out: Path, force: bool = False) -> None:
    """Fail before planning when the worksheets could not be written: a folder that is a file or already
    holds results (unless ``force``), a ``.csv`` name whose three files exist (unless ``force``), or no
    writable folder to create them in."""
    if not _is_csv_name(out):
        check_output_folder(out, force=force)
        return
    check_output_folder(out.parent, whole=False)   # the folder may hold other files
    check_path_name(out, extra=len(".-candidates.partial"))   # the longest name written beside it
    if not force:
        existing = [p.name for p in companion_paths(out).values() if p.exists()]
        if existing:
            raise ScenarioError("--out", str(out), f"already exists ({', '.join(existing)}); pass --force to "
                                "replace it, or choose another name")


def _is_csv_name(out: Path) -> bool:
    return worksheet_path(out) == out


def write_worksheets(result, out: Path, *, force: bool = False,  # PlanResult
                     extra: dict[str, str] | None = None) -> dict[str, Path]:
    """Write the three CSVs next to each other; all or nothing (see the module docstring).

    ``worksheet.csv`` is the finance summary (``result.summary``: rounded, whole numbers as such, no
    exponents) and ``worksheet-totals.csv`` its totals; ``worksheet-candidates.csv`` has every
    engineering column of every candidate (6 significant digits). ``extra`` (path relative to the
    folder -> text, e.g. ``--export k8s``'s manifests) is written in the same folder, in the same step;
    it needs a folder ``out``."""
    paths = companion_paths(out)
    check_out(out, force=force)
    if extra and _is_csv_name(out):
        raise ScenarioError("--out", str(out), "is a worksheet file name; exported files need a folder")
    summary = result.summary if result.summary is not None else result.worksheet
    frames = {"worksheet": summary, "totals": result.totals, "candidates": result.candidates}
    formats = {"worksheet": None, "totals": None, "candidates": "%.6g"}
    if not _is_csv_name(out):
        with output_folder(out, force=force) as stage:
            for key, frame in frames.items():
                write_csv(frame, stage / paths[key].name, float_format=formats[key])
            for rel, text in (extra or {}).items():
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                (stage / rel).write_text(text, encoding="utf-8")
        return paths
    try:
        paths["worksheet"].parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError("--out", str(out), f"cannot create the folder ({exc.strerror})") from None
    tmp = {k: p.with_name(f".{p.name}.partial") for k, p in paths.items()}
    try:
        for key, frame in frames.items():
            write_csv(frame, tmp[key], float_format=formats[key])
        for key in frames:
            tmp[key].replace(paths[key])
    except BaseException as exc:   # an error or Ctrl-C: no partial files left behind
        for p in tmp.values():
            with contextlib.suppress(OSError):
                p.unlink()
        if isinstance(exc, OSError):
            raise ScenarioError("--out", str(out), f"cannot write ({exc.strerror})") from None
        raise
    return paths
