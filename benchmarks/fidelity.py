"""Fidelity: the simulator's TTFT/TPOT/E2E tails against the reference torch engine, side by side.

One command, prints the table, writes JSON/CSV (and the plot when plotly is installed). Same as
``llmplan validate`` with the defaults the README's "Fidelity" table was measured with:

    python benchmarks/fidelity.py [--clock wall|thread] [--repeats 3] [--profile cpu-amd-epyc-tiny-llama]
                                  [--out benchmarks/results/fidelity-<clock>]

Take the figures on a quiet machine (``uptime`` load average below ~1.5 on this 2-core box); on a
shared machine use ``--clock thread`` and read the noise column.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibrate.validate import ValidateSettings, format_table, run_validation  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clock", default="wall", choices=["wall", "thread"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", default="cpu-amd-epyc-tiny-llama")
    ap.add_argument("--loads", default="0.2,0.4,0.6,0.8")
    ap.add_argument("--num-requests", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    out = a.out or ROOT / "benchmarks" / "results" / f"fidelity-{a.clock}"
    s = ValidateSettings(profile=a.profile, clock=a.clock, repeats=a.repeats, num_requests=a.num_requests,
                         loads=tuple(float(x) for x in a.loads.split(",")))
    doc = run_validation(s, out, log=lambda m: print(m, file=sys.stderr),
                         command="python benchmarks/fidelity.py " + " ".join(sys.argv[1:]))
    print(format_table(doc))
    print(f"overhead fit: {doc['overhead']}")
    print(f"wrote {out}/validation.json; {doc['plot']}")


if __name__ == "__main__":
    main()
