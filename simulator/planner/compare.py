"""``llmplan plan P --compare previous-out/``: what changed since an earlier plan, and why.

The earlier plan's ``worksheet.csv`` and ``worksheet-assumptions.yaml`` (as :func:`write_worksheets`
wrote them) are set beside the new result, cell by cell (quarter x region) and per quarter. Each cell
whose peak GPUs, cost or pick changed gets the inputs that changed with it, in a fixed vocabulary
(the ``reasons`` column): ``traffic`` (the forecast's ``peak_rps``), ``tokens`` (its mean lengths),
``design rate`` (headroom, failover rule, or another region's traffic moving the failover share),
``SLO``, ``hardware/candidate`` (another pick, or the picked candidate's serving configuration changed),
``pricing`` (prices, multipliers, reservation and cost-line inputs), ``period`` (the hours of the
quarter), ``simulation`` (the verification settings). A change with none of them is reported as such
(``none of the plan's inputs``: the simulator or a hardware profile changed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from simulator.errors import ScenarioError
from simulator.output import safe_cell
from simulator.planner.worksheet import companion_paths, worksheet_path

REASONS = ("traffic", "tokens", "design rate", "SLO", "hardware/candidate", "pricing", "period", "simulation")
"""The reasons a cell can name, in the order they are listed."""


@dataclass(frozen=True)
class Previous:
    """An earlier plan's worksheet (as written: text cells spreadsheet-safe) and its assumptions (None when
    the folder predates them: then SLO, design and pricing reasons cannot be told)."""

    source: Path
    worksheet: pd.DataFrame
    assumptions: dict[str, Any] | None


def read_previous(path: Path) -> Previous:
    """Read the ``--out`` folder (or worksheet ``.csv``) of an earlier ``llmplan plan``.

    Raises:
        ScenarioError: ``--compare`` names no worksheet, or one that cannot be read.
    """
    path = Path(path)
    ws = worksheet_path(path)
    if not ws.is_file():
        raise ScenarioError("--compare", str(path), f"no worksheet at {ws}; give the --out folder (or the "
                            "worksheet .csv) of an earlier llmplan plan")
    try:
        frame = pd.read_csv(ws, dtype={"quarter": str, "region": str}, keep_default_na=True)
    except (OSError, ValueError) as exc:
        raise ScenarioError("--compare", str(ws), f"cannot read the worksheet ({exc})") from None
    missing = [c for c in ("quarter", "region", "status", "candidate", "gpus_peak") if c not in frame.columns]
    if missing:
        raise ScenarioError("--compare", str(ws), f"not a plan worksheet: no column {', '.join(missing)}")
    assumptions = None
    a_path = companion_paths(ws)["assumptions"]
    if a_path.is_file():
        try:
            assumptions = yaml.safe_load(a_path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ScenarioError("--compare", str(a_path), f"cannot read the assumptions file ({exc})") from None
        if not isinstance(assumptions, dict):
            raise ScenarioError("--compare", str(a_path), "not an assumptions file (a YAML mapping)")
    return Previous(ws, frame, assumptions)


# -- the report ------------------------------------------------------------------------------------------
def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _same(a: Any, b: Any, rel: float = 1e-6) -> bool:
    fa, fb = _num(a), _num(b)
    if math.isnan(fa) or math.isnan(fb):
        return math.isnan(fa) and math.isnan(fb)
    return abs(fa - fb) <= rel * max(abs(fa), abs(fb), 1e-12)


def _g(x: Any) -> str:
    v = _num(x)
    return "-" if math.isnan(v) else f"{v:,.6g}"


def _pct(a: Any, b: Any) -> str:
    fa, fb = _num(a), _num(b)
    return f" ({(fb - fa) / fa:+.1%})" if fa and not math.isnan(fa) and not math.isnan(fb) else ""


def _cost_column(frame: pd.DataFrame) -> str | None:
    return next((c for c in frame.columns if c.startswith("cost_") and len(c) == 8), None)


def _diff(before: Any, after: Any, name: str) -> list[str]:
    """``name.key a -> b`` for each key of two mappings that differs."""
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for k in dict.fromkeys([*before, *after]):
            out += _diff(before.get(k), after.get(k), f"{name}.{k}")
        return out
    return [f"{name} {before if before is not None else 'unset'} -> {after if after is not None else 'unset'}"]


def _cell_reasons(old: dict[str, Any], new: dict[str, Any], before: dict[str, Any] | None,
                  after: dict[str, Any]) -> list[tuple[str, str]]:
    """``(reason, detail)`` for every input of the cell that changed."""
    out: list[tuple[str, str]] = []
    if not _same(old.get("peak_rps"), new["peak_rps"]):
        out.append(("traffic", f"peak_rps {_g(old.get('peak_rps'))} -> {_g(new['peak_rps'])}"
                               f"{_pct(old.get('peak_rps'), new['peak_rps'])}"))
    tokens = [f"{c} {_g(old.get(c))} -> {_g(new[c])}" for c in ("avg_prompt_tokens", "avg_output_tokens")
              if c in old and not _same(old.get(c), new[c])]
    if tokens:
        out.append(("tokens", ", ".join(tokens)))
    b = before or {}
    design = _diff(b.get("headroom"), after["headroom"], "headroom") + \
        _diff(b.get("failover"), after["failover"], "failover")
    if "design_rps" in old and not design:   # the same rule: the failover share moved with another region
        share_old = _num(old["design_rps"]) / (1 + b.get("headroom", 0)) - _num(old["peak_rps"])
        share_new = _num(new["design_rps"]) / (1 + after["headroom"]) - _num(new["peak_rps"])
        if abs(share_old - share_new) > 1e-3 * max(abs(share_old), abs(share_new), 1.0):
            design.append(f"failover share {_g(share_old)} -> {_g(share_new)} rps (another region's traffic "
                          "changed)")
    if design:
        out.append(("design rate", "; ".join(design) + (f" (design_rps {_g(old.get('design_rps'))} -> "
                                                         f"{_g(new['design_rps'])})" if "design_rps" in old else "")))
    if before is not None and before.get("slo") != after["slo"]:
        out.append(("SLO", "; ".join(_diff(before.get("slo"), after["slo"], "slo")).replace("slo.", "")))
    cand_old, cand_new = str(old.get("candidate")), str(new["candidate"])
    if cand_old != cand_new:
        hw = f" (hardware {old.get('hardware')} -> {new['hardware']})" if old.get("hardware") != new["hardware"] else ""
        out.append(("hardware/candidate", f"candidate {cand_old} -> {cand_new}{hw}"))
    elif before is not None:
        id_old = ((before.get("candidates") or {}).get(cand_new) or {}).get("serving_config_id")
        id_new = after["candidates"][cand_new]["serving_config_id"]
        if id_old is not None and id_old != id_new:
            out.append(("hardware/candidate", f"candidate {cand_new}'s serving configuration changed"))
    prices = [c for c in new if c.startswith(("price_per_gpu_hour_", "reserved_price_per_gpu_hour_"))]
    pricing = [f"{c} {_g(old.get(c))} -> {_g(new[c])}" for c in prices if c in old and not _same(old[c], new[c])]
    if cand_old == cand_new and before is not None:
        pricing += _diff(before.get("pricing"), after["pricing"], "pricing")
        pricing += _diff((before.get("price_multipliers") or {}).get(new["region"]),
                         after["price_multipliers"].get(new["region"]), "price_multiplier")
    if pricing:
        out.append(("pricing", "; ".join(pricing)))
    if "period_hours" in old and not _same(old["period_hours"], new["period_hours"]):
        out.append(("period", f"period_hours {_g(old['period_hours'])} -> {_g(new['period_hours'])}"))
    if before is not None and before.get("simulation") != after["simulation"]:
        out.append(("simulation", "; ".join(_diff(before.get("simulation"), after["simulation"], "simulation"))))
    return out


def delta_report(previous: Previous, summary: pd.DataFrame, assumptions: dict[str, Any]) -> pd.DataFrame:
    """One row per quarter x region of either plan, then one per quarter (``region = all regions``):
    peak GPUs, cost and pick before and after, ``change`` (changed, unchanged, added, removed), the
    ``reasons`` (``;``-separated, from :data:`REASONS`) and an ``explanation`` in words."""
    old = previous.worksheet
    cur_new = _cost_column(summary) or "cost_usd"
    cur_old = _cost_column(old)
    currency = cur_new.removeprefix("cost_").upper()
    old_rows = {(str(r["quarter"]), str(r["region"])): r for r in old.to_dict("records")}
    new_rows = {(safe_cell(str(r["quarter"])), safe_cell(str(r["region"]))): r for r in summary.to_dict("records")}
    rows: list[dict[str, Any]] = []
    for key in [*new_rows, *(k for k in old_rows if k not in new_rows)]:
        o, n = old_rows.get(key), new_rows.get(key)
        src = n if n is not None else o
        assert src is not None
        row: dict[str, Any] = {
            "quarter": src["quarter"], "region": src["region"],
            "gpus_peak_before": _num(o["gpus_peak"]) if o is not None else math.nan,
            "gpus_peak_after": _num(n["gpus_peak"]) if n is not None else math.nan,
            f"cost_{currency.lower()}_before": _num(o[cur_old]) if o is not None and cur_old else math.nan,
            f"cost_{currency.lower()}_after": _num(n[cur_new]) if n is not None else math.nan,
            "candidate_before": o["candidate"] if o is not None else "",
            "candidate_after": n["candidate"] if n is not None else ""}
        if o is None or n is None:
            row.update(change="added" if o is None else "removed", reasons="traffic",
                       explanation="a new forecast cell" if o is None else "no longer in the forecast")
            rows.append(row)
            continue
        reasons = _cell_reasons(o, n, previous.assumptions, assumptions)
        c = currency.lower()
        same = (_same(row["gpus_peak_before"], row["gpus_peak_after"])
                and row["candidate_before"] == row["candidate_after"]
                and _same(round(_num(row[f"cost_{c}_before"]), 2), round(_num(row[f"cost_{c}_after"]), 2), 1e-12)
                and str(o["status"]) == str(n["status"]))
        row["change"] = "unchanged" if same else "changed"
        if not reasons and not same:
            reasons = [("", "none of the plan's inputs changed (the simulator or a hardware profile did)")]
        row["reasons"] = ";".join(r for r, _ in reasons if r)
        row["explanation"] = _explain(row, currency, reasons, str(o["status"]), str(n["status"]))
        rows.append(row)
    frame = pd.DataFrame(rows)
    quarters = []
    for q, part in frame.groupby("quarter", sort=False):
        before, after = part["gpus_peak_before"].sum(min_count=1), part["gpus_peak_after"].sum(min_count=1)
        c = currency.lower()
        named = [r for r in REASONS if any(r in str(x).split(";") for x in part["reasons"])]
        changed = part[part["change"] != "unchanged"]
        qrow = {"quarter": q, "region": "all regions", "gpus_peak_before": before, "gpus_peak_after": after,
                f"cost_{c}_before": part[f"cost_{c}_before"].sum(min_count=1),
                f"cost_{c}_after": part[f"cost_{c}_after"].sum(min_count=1), "candidate_before": "",
                "candidate_after": "", "change": "changed" if len(changed) else "unchanged",
                "reasons": ";".join(named)}
        qrow["explanation"] = (f"{q}: {_g(before)} -> {_g(after)} GPUs at the peak" +
                               (f" because of {', '.join(named)} in {', '.join(map(str, changed['region']))}"
                                if len(changed) and named else ""))
        quarters.append(qrow)
    out = pd.concat([frame, pd.DataFrame(quarters)], ignore_index=True)
    c = currency.lower()
    out.insert(out.columns.get_loc("gpus_peak_after") + 1, "gpus_peak_change",
               out["gpus_peak_after"] - out["gpus_peak_before"])
    out.insert(out.columns.get_loc(f"cost_{c}_after") + 1, f"cost_{c}_change",
               out[f"cost_{c}_after"] - out[f"cost_{c}_before"])
    for col in ("gpus_peak_before", "gpus_peak_after", "gpus_peak_change"):
        out[col] = pd.to_numeric(out[col]).round(0).astype("Int64")
    out = out[["quarter", "region", "change", "gpus_peak_before", "gpus_peak_after", "gpus_peak_change",
               f"cost_{c}_before", f"cost_{c}_after", f"cost_{c}_change", "candidate_before", "candidate_after",
               "reasons", "explanation"]]
    for col in (f"cost_{c}_before", f"cost_{c}_after", f"cost_{c}_change"):
        out[col] = out[col].astype(float).round(2)
    out.attrs["decimals"] = {f"cost_{c}_before": 2, f"cost_{c}_after": 2, f"cost_{c}_change": 2}
    return out


def _explain(row: dict[str, Any], currency: str, reasons: list[tuple[str, str]], status_old: str,
             status_new: str) -> str:
    c = currency.lower()
    gpus = f"{_g(row['gpus_peak_before'])} -> {_g(row['gpus_peak_after'])} GPUs at the peak"
    cost = (f"cost {_g(round(_num(row[f'cost_{c}_before']), 2))} -> {_g(round(_num(row[f'cost_{c}_after']), 2))} "
            f"{currency}{_pct(row[f'cost_{c}_before'], row[f'cost_{c}_after'])}")
    status = f", {status_old} -> {status_new}" if status_old != status_new else ""
    why = "; ".join(f"{r}: {d}" if r else d for r, d in reasons)
    if row["change"] == "unchanged":
        return (f"{row['quarter']} {row['region']}: unchanged ({_g(row['gpus_peak_after'])} GPUs at the peak)"
                + (f", though {why}" if why else ""))
    return f"{row['quarter']} {row['region']}: {gpus}, {cost}{status} because {why}"
