"""Reading fidelity results (``llmplan validate``'s ``validation.json``) for the dashboard and notebooks.

``calibrate.validate`` writes one ``validation.json`` per run: ``settings`` (clock, model, loads...),
the fitted engine ``overhead``, the saturated ``capacity``, and ``rows`` (one per load and metric:
measured median of the engine runs, the simulator's prediction, relative error, run-to-run noise,
target). This module checks such a document field by field (every problem is one
:class:`~simulator.errors.ScenarioError` naming the file and the field) and reshapes it into tables;
it imports neither torch nor plotly, so the simulator package stays free of both.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.errors import ScenarioError
from simulator.scenario.io import decode_upload

#: Largest validation.json accepted from an upload (a 4-load run is about 20 KB).
MAX_VALIDATION_BYTES = 1024 * 1024

_ROW_NUMBERS = ("load", "rate_per_s", "measured", "predicted", "error", "noise", "target")
_CAPACITY_NUMBERS = ("measured_rps", "predicted_rps", "error", "noise")

#: Latency metrics (seconds in the file; the tables show milliseconds), in display order.
LATENCY_METRICS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99")


def _number(source: str, field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ScenarioError(f"{source}: {field}", repr(value)[:60], "expected a finite number")
    return float(value)


def check_validation(doc: Any, source: str = "validation.json") -> dict[str, Any]:
    """Check that ``doc`` has what the tables need; return it unchanged.

    Required: ``rows`` (a non-empty list of objects with ``metric`` and the numbers ``load``,
    ``rate_per_s``, ``measured``, ``predicted``, ``error``, ``noise``, ``target``) and ``settings``
    (an object). ``capacity``, ``overhead``, ``machine``, ``step_error`` are optional but must be
    objects when present (``capacity`` with its four numbers).

    Raises:
        ScenarioError: naming ``<source>: <field>``, the value and what is expected.
    """
    if not isinstance(doc, dict):
        raise ScenarioError(source, type(doc).__name__, "expected a JSON object as written by `llmplan validate`")
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows:
        raise ScenarioError(f"{source}: rows", repr(rows)[:60], "expected a non-empty list of measured vs "
                            "predicted rows (is this a validation.json from `llmplan validate`?)")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ScenarioError(f"{source}: rows[{i}]", repr(row)[:60], "expected an object")
        if not isinstance(row.get("metric"), str):
            raise ScenarioError(f"{source}: rows[{i}].metric", repr(row.get("metric"))[:60], "expected a metric name")
        for key in _ROW_NUMBERS:
            _number(source, f"rows[{i}].{key}", row.get(key))
    for key in ("settings", "capacity", "overhead", "machine", "step_error"):
        if (key in doc or key == "settings") and not isinstance(doc.get(key), dict):
            raise ScenarioError(f"{source}: {key}", repr(doc.get(key))[:60], "expected an object")
    if "capacity" in doc:
        for key in _CAPACITY_NUMBERS:
            _number(source, f"capacity.{key}", doc["capacity"].get(key))
    return doc


def validation_from_json_bytes(data: bytes, *, source: str = "validation.json",
                               max_bytes: int = MAX_VALIDATION_BYTES) -> dict[str, Any]:
    """Parse and check an uploaded ``validation.json`` (size limit, UTF-8, plain JSON: no code runs).

    Raises:
        ScenarioError: too large, not UTF-8, not JSON, or a missing/ill-typed field (named).
    """
    text = decode_upload(data, source, max_bytes, "a validation.json", "a validation.json")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(source, f"line {exc.lineno} column {exc.colno}", f"not valid JSON ({exc.msg})") from None
    return check_validation(doc, source)


def load_validation(folder: str | Path) -> dict[str, Any]:
    """The checked ``validation.json`` of a results folder (as written by ``llmplan validate --out``)."""
    path = Path(folder) / "validation.json"
    if not path.is_file():
        raise ScenarioError(str(path), "missing", "no validation.json in this folder; run `llmplan validate --out "
                            f"{folder}` or `python benchmarks/fidelity.py`")
    return validation_from_json_bytes(path.read_bytes(), source=str(path))


def validation_folders(root: str | Path) -> list[Path]:
    """Folders ``root/fidelity-*`` holding a ``validation.json``, newest file first (ties by name)."""
    found = [p for p in Path(root).glob("fidelity-*") if (p / "validation.json").is_file()]
    return sorted(found, key=lambda p: (-(p / "validation.json").stat().st_mtime, p.name))


def _status(row: dict[str, Any]) -> str:
    if abs(row["error"]) <= row["target"]:
        return "met"
    return "within noise" if abs(row["error"]) <= row["target"] + row["noise"] else "missed"


def validation_table(doc: dict[str, Any]) -> pd.DataFrame:
    """One row per load and metric: measured and predicted (ms for latencies, req/s or tok/s for
    throughput), relative error (predicted / measured - 1), noise (half the range of the engine
    runs over their median), target and status (met, within noise, missed), plus a ``capacity`` row
    when the document has one (load NaN)."""
    out = []
    for r in doc["rows"]:
        m = r["metric"]
        scale, unit = (1.0, "req/s" if m.endswith("rps") else "tok/s") if m.startswith("throughput") else (1e3, "ms")
        out.append({"load": r["load"], "rate_per_s": r["rate_per_s"], "metric": m, "unit": unit,
                    "measured": r["measured"] * scale, "predicted": r["predicted"] * scale,
                    "error": r["error"], "noise": r["noise"], "target": r["target"], "status": _status(r)})
    cap = doc.get("capacity")
    if cap:
        row = {"error": cap["error"], "noise": cap["noise"], "target": 0.10}
        out.append({"load": float("nan"), "rate_per_s": float("nan"), "metric": "capacity", "unit": "req/s",
                    "measured": cap["measured_rps"], "predicted": cap["predicted_rps"], **row,
                    "status": _status(row)})
    return pd.DataFrame(out, columns=["load", "rate_per_s", "metric", "unit", "measured", "predicted", "error",
                                      "noise", "target", "status"])


def error_matrix(doc: dict[str, Any]) -> pd.DataFrame:
    """Relative error per load (rows) and latency/throughput metric (columns), as the README's table."""
    frame = pd.DataFrame(doc["rows"])
    order = [m for m in (*LATENCY_METRICS, "throughput_rps", "throughput_tok_s") if m in set(frame["metric"])]
    order += sorted(set(frame["metric"]) - set(order))
    return frame.pivot_table(index="load", columns="metric", values="error", aggfunc="first")[order]


def scatter_points(doc: dict[str, Any]) -> pd.DataFrame:
    """Latency rows for a predicted-vs-measured scatter: metric, load, measured_ms, predicted_ms,
    noise_ms (the engine's run-to-run noise in ms), error, target."""
    rows = [r for r in doc["rows"] if not r["metric"].startswith("throughput") and r["measured"] > 0]
    return pd.DataFrame({"metric": [r["metric"] for r in rows], "load": [r["load"] for r in rows],
                         "measured_ms": [r["measured"] * 1e3 for r in rows],
                         "predicted_ms": [r["predicted"] * 1e3 for r in rows],
                         "noise_ms": [r["noise"] * r["measured"] * 1e3 for r in rows],
                         "error": [r["error"] for r in rows], "target": [r["target"] for r in rows]})


def targets_summary(doc: dict[str, Any]) -> dict[str, int]:
    """How many rows (capacity included) met their target, were within target + noise, or missed."""
    counts = validation_table(doc)["status"].value_counts().to_dict()
    return {k: int(counts.get(k, 0)) for k in ("met", "within noise", "missed")}


def provenance(doc: dict[str, Any]) -> dict[str, Any]:
    """Where the figures come from: clock, model, device, policy, profile, command, overhead fit,
    machine (load averages), and the engine's wall time (missing fields are left out)."""
    s, o, mach = doc.get("settings", {}), doc.get("overhead", {}), doc.get("machine", {})
    info: dict[str, Any] = {k: s[k] for k in ("clock", "model", "device", "policy", "max_num_seqs", "num_requests",
                                                "repeats", "seed", "threads") if k in s}
    for key in ("base_profile", "profile", "command"):
        if key in doc:
            info[key] = doc[key]
    if o:
        info["overhead"] = (f"{o.get('step_s', 0) * 1e3:.2f} ms/step + {o.get('per_seq_s', 0) * 1e6:.0f} us/request"
                            f" + {o.get('per_token_s', 0) * 1e6:.1f} us/token")
        if "kernel_share" in o:
            info["kernel_share"] = o["kernel_share"]
    for key in ("platform", "cpu_count", "torch", "load_average_before", "load_average_after"):
        if key in mach:
            info[key] = mach[key]
    if "wall_s" in doc:
        info["wall_s"] = doc["wall_s"]
    return info
