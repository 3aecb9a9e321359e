"""Cross-check one GPU's profiles op by op: datasheet roofline vs imported tables vs our measurement.

For llama-3-8b (TP1, bf16) on h100-sxm by default: each op at a few token counts, as predicted
from the datasheet profile (``<gpu>-datasheet``: the roofline's peaks and assumed efficiencies, per
op), from the shipped default (``<gpu>``: AIConfigurator's kernel tables on a compact grid, plus
Vidur's elementwise ops on H100/A100), from the Vidur import (``hwprofiles/h100-sxm-vidur``), from
AIConfigurator's whole database (``--wheel`` or the installed ``aiconfigurator-core``; converted to
a temporary folder, never into the repo) and from a measured profile when one exists
(``--measured NAME``). Each imported cell says whether the op was measured at exactly that shape
or scaled from the nearest measured one.

    python benchmarks/crosscheck_profiles.py [--hardware h100-sxm] [--model llama-3-8b] [--wheel AIC.whl]
                                             [--measured my-h100] [--out FILE.json]
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
from simulator.report.studies import crosscheck  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--hardware", default="h100-sxm",
                    help="the GPU's default profile; its roofline is <name>-datasheet")
    ap.add_argument("--vidur", default="h100-sxm-vidur", help="a Vidur import of the same GPU, or 'none'")
    ap.add_argument("--wheel", default=None, help="the aiconfigurator-core wheel (default: the installed package)")
    ap.add_argument("--measured", default=None, help="a measured profile of the same GPU, if you have one")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        profiles = {"default (measured kernels)": args.hardware}
        if args.vidur != "none":
            profiles["vidur (imported)"] = args.vidur
        try:
            from calibrate.importers import AIC_SYSTEMS, import_aiconfigurator

            system = {v: k for k, v in AIC_SYSTEMS.items()}[args.hardware]
            profiles["aiconfigurator, whole grid (imported)"] = str(
                import_aiconfigurator(system, Path(tmpdir) / "aic", source=args.wheel))
        except ScenarioError as exc:
            print(f"aiconfigurator column left out: {exc}", file=sys.stderr)
        if args.measured:
            profiles["measured"] = args.measured
        long = crosscheck(args.model, f"{args.hardware}-datasheet", profiles)   # simulator/report/studies.py
    rows = []
    for (op, shape), g in long.groupby(["op", "shape"], sort=False):
        row = {"op": op, "shape": shape}
        for r in g.itertuples():
            row[r.profile] = f"{r.time_us:,.1f}" + _mark(r.profile, r.source)
        if "measured" not in profiles:
            row["measured (ours)"] = "n/a (no GPU)"
        rows.append(row)
    df = pd.DataFrame(rows)
    print(f"{args.model} TP1 on {args.hardware}: one layer's op time in microseconds "
          "(* = scaled from the nearest measured shape; (roofline) = no rows, datasheet fallback)")
    print(df.to_markdown(index=False) if _has_tabulate() else df.to_string(index=False))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


def _mark(profile: str, source: str) -> str:
    """'' at a measured shape, '*' where scaled from another shape or precision, ' (roofline)' where
    the table has no rows for the op."""
    if profile == "datasheet" or source.startswith("measured"):
        return ""
    return " (roofline)" if source.startswith("roofline") else "*"


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False


if __name__ == "__main__":
    main()
