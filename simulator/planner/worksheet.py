"""Writing the plan's worksheets as CSV files that are safe to open in a spreadsheet.

Names come from user files (regions, candidates, quarters), so every text cell goes through
:func:`simulator.output.spreadsheet_safe` (formula starts quoted, control characters escaped).
Numbers are written as numbers (the finance files' at fixed decimals per column). The files are written
all or nothing: as a staged folder (:func:`simulator.output.output_folder`), or, for a ``.csv`` name, as
temporary files renamed at the end.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from simulator.errors import ScenarioError
from simulator.output import check_output_folder, check_path_name, output_folder, spreadsheet_safe, write_csv

__all__ = ["assumptions_text", "check_out", "companion_paths", "spreadsheet_safe", "worksheet_path",
           "write_worksheets"]


def worksheet_path(out: Path) -> Path:
    """Where ``--out`` puts the worksheet: a name ending in ``.csv`` (and not an existing folder) is the
    worksheet itself; anything else is a folder (``plan-out/`` by default) holding ``worksheet.csv``."""
    if out.name.lower().endswith(".csv") and not out.is_dir():
        return out
    return out / "worksheet.csv"


def companion_paths(out: Path) -> dict[str, Path]:
    """``worksheet.csv`` (or a folder) -> the worksheet, ``worksheet-totals.csv``,
    ``worksheet-candidates.csv``, ``worksheet-assumptions.yaml`` and (with ``--compare``)
    ``worksheet-delta.csv``."""
    ws = worksheet_path(out)
    stem = ws.name[:-4]
    return {"worksheet": ws, "totals": ws.with_name(f"{stem}-totals.csv"),
            "candidates": ws.with_name(f"{stem}-candidates.csv"),
            "assumptions": ws.with_name(f"{stem}-assumptions.yaml"), "delta": ws.with_name(f"{stem}-delta.csv")}


def check_out(out: Path, force: bool = False) -> None:
    """Fail before planning when the worksheets could not be written: a folder that is a file or already
    holds results (unless ``force``), a ``.csv`` name whose companion files exist (unless ``force``), or no
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


def assumptions_text(assumptions: dict[str, Any]) -> str:
    """The assumptions as commented YAML (read back by :func:`simulator.planner.compare.read_previous`)."""
    head = ("# What the worksheet's numbers rest on (llmplan plan). Units: rates in requests/s, prices per\n"
            f"# GPU-hour in {assumptions.get('currency', 'USD')} before each region's price_multiplier, hours "
            "of each period in UTC days x 24.\n")
    return head + yaml.safe_dump(assumptions, sort_keys=False, allow_unicode=True, width=100)


def write_worksheets(result, out: Path, *, force: bool = False,   # PlanResult
                     delta: pd.DataFrame | None = None, extra: dict[str, str] | None = None) -> dict[str, Path]:
    """Write the CSVs and the assumptions file next to each other; all or nothing (see the module docstring).

    ``worksheet.csv`` is the finance summary (``result.summary``: each number column at fixed decimals,
    :func:`simulator.planner.tables.finance_decimals`) and ``worksheet-totals.csv`` its totals;
    ``worksheet-candidates.csv`` has every engineering column of every candidate (6 significant digits);
    ``worksheet-assumptions.yaml`` what they rest on; ``worksheet-delta.csv``, with ``delta``, the changes
    from an earlier plan (:mod:`simulator.planner.compare`). ``extra`` (path relative to the folder -> text,
    e.g. ``--export k8s``'s manifests) is written in the same folder, in the same step; it needs a folder."""
    paths = companion_paths(out)
    check_out(out, force=force)
    if extra and _is_csv_name(out):
        raise ScenarioError("--out", str(out), "is a worksheet file name; exported files need a folder")
    summary = result.summary if result.summary is not None else result.worksheet
    frames = {"worksheet": summary, "totals": result.totals, "candidates": result.candidates}
    if delta is not None:
        frames["delta"] = delta
    formats = {"candidates": "%.6g"}
    texts = {"assumptions": assumptions_text(result.assumptions)} if result.assumptions is not None else {}
    written = {k: paths[k] for k in (*frames, *texts)}

    def write_all(where: Callable[[str], Path]) -> None:
        for key, frame in frames.items():
            write_csv(frame, where(key), float_format=formats.get(key))
        for key, text in texts.items():
            where(key).write_text(text, encoding="utf-8")

    if not _is_csv_name(out):
        with output_folder(out, force=force) as stage:
            write_all(lambda key: stage / paths[key].name)
            for rel, text in (extra or {}).items():
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                (stage / rel).write_text(text, encoding="utf-8")
        return written
    try:
        paths["worksheet"].parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError("--out", str(out), f"cannot create the folder ({exc.strerror})") from None
    tmp = {k: p.with_name(f".{p.name}.partial") for k, p in written.items()}
    try:
        write_all(lambda key: tmp[key])
        for key in written:
            tmp[key].replace(paths[key])
    except BaseException as exc:   # an error or Ctrl-C: no partial files left behind
        for p in tmp.values():
            with contextlib.suppress(OSError):
                p.unlink()
        if isinstance(exc, OSError):
            raise ScenarioError("--out", str(out), f"cannot write ({exc.strerror})") from None
        raise
    return written
