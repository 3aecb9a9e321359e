"""Cross-check one GPU's profiles op by op: datasheet roofline vs imported tables vs our measurement.

For llama-3-8b (TP1, bf16) on h100-sxm by default: each op at a few token counts, as predicted
from the datasheet profile (the roofline's peaks and assumed efficiencies, per op), from the
Vidur import (``hwprofiles/h100-sxm-vidur``), from the AIConfigurator kernel database (if
``aiconfigurator-core`` is installed; converted to a temporary folder, never into the repo) and
from a measured profile when one exists (``--measured NAME``). Each imported cell says whether
the op was measured at exactly that shape or scaled from the nearest measured one.

    python benchmarks/crosscheck_profiles.py [--model llama-3-8b] [--measured my-h100] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from simulator.errors import ScenarioError  # noqa: E402
from simulator.models import MODEL_PRESETS  # noqa: E402
from simulator.profiles import load_profile  # noqa: E402
from simulator.table_cost_model import TableCostModel  # noqa: E402

CASES = [("qkv_proj", 1, 0), ("qkv_proj", 128, 0), ("qkv_proj", 2048, 0),
         ("o_proj", 1, 0), ("o_proj", 2048, 0),
         ("gate_up_proj", 1, 0), ("gate_up_proj", 128, 0), ("gate_up_proj", 2048, 0),
         ("down_proj", 1, 0), ("down_proj", 2048, 0), ("lm_head", 32, 0),
         ("attn_prefill", 2048, 0), ("attn_decode", 32, 1024), ("attn_decode", 128, 4096),
         ("rmsnorm", 2048, 0), ("silu_mul", 2048, 0)]


def datasheet_model(name: str, model, tp: int, tmp: Path) -> TableCostModel:
    """The datasheet profile's per-op roofline: a table model over an empty table falls back to the
    profile's peaks and efficiencies for every op (the same formulas as the ``roofline`` model)."""
    from simulator.op_table import TABLE_COLUMNS

    empty = tmp / "empty.csv"
    empty.write_text(",".join(TABLE_COLUMNS) + "\n")
    data = load_profile(name).model_dump(exclude_none=True)
    data.update(cost_model="table", table=str(empty))
    return TableCostModel(load_profile(data), model, tp)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--vidur", default="h100-sxm-vidur")
    ap.add_argument("--measured", default=None, help="a measured profile of the same GPU, if you have one")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    model = MODEL_PRESETS[args.model]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        columns = {"datasheet": datasheet_model(args.hardware, model, 1, tmp),
                   "vidur (imported)": TableCostModel(load_profile(args.vidur), model, 1)}
        try:
            from calibrate.importers import import_aiconfigurator

            system = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "a100-80gb": "a100_sxm",
                      "l40s": "l40s"}[args.hardware]
            path = import_aiconfigurator(system, tmp / "aic")
            columns["aiconfigurator (imported)"] = TableCostModel(load_profile(str(path)), model, 1)
        except ScenarioError as exc:
            print(f"aiconfigurator column left out: {exc}", file=sys.stderr)
        if args.measured:
            columns["measured"] = TableCostModel(load_profile(args.measured), model, 1)
        rows = []
        for op, tokens, ctx in CASES:
            row = {"op": op, "shape": f"{tokens} tok" + (f" x {ctx} ctx" if ctx else "")}
            for col, cm in columns.items():
                t = cm.op_time_s(op, tokens, ctx)
                src = cm.sources.get(op, "")
                row[col] = f"{t * 1e6:,.1f}" + ("" if col == "datasheet" or src == "measured" else
                                                "*" if src.startswith("scaled") else " (roofline)")
            if "measured" not in columns:
                row["measured (ours)"] = "n/a (no GPU)"
            rows.append(row)
    df = pd.DataFrame(rows)
    print(f"{args.model} TP1 on {args.hardware}: one layer's op time in microseconds "
          "(* = scaled from the nearest measured shape; (roofline) = no rows, datasheet fallback)")
    print(df.to_markdown(index=False) if _has_tabulate() else df.to_string(index=False))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False


if __name__ == "__main__":
    main()
