"""What vLLM's own step times are made of, from its per-step log lines.

    python benchmarks/vllm/step_log_terms.py FOLDER     # an unpacked vllm-cpu-observations.tar.gz

Each ``<load>.steps.log`` (vLLM's ``--enable-logging-iteration-details`` lines, the model runner's
time per step; :mod:`calibrate.engine_steps`) is regressed by least squares on
``1, context requests, context tokens, generation requests``, per load over every repeat, and the
coefficients are printed: a fixed time per step, per request whose prompt is computed in the step,
per prompt token and per decoding request.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from calibrate.engine_steps import parse_iterations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    folder = ap.parse_args().folder
    by_load: dict[str, list[np.ndarray]] = defaultdict(list)
    for path in sorted(folder.glob("repeat-*/*.steps.log")):
        by_load[path.name.split(".steps")[0]].append(parse_iterations(path.read_text()))
    print(f"{'load':12s} {'steps':>6s} {'per step':>9s} {'per prompt':>11s} {'per prompt token':>17s} "
          f"{'per decode':>11s}")
    for load, parts in by_load.items():
        rows = np.concatenate(parts)
        a = np.column_stack([np.ones(len(rows)), rows[:, 0], rows[:, 1], rows[:, 2]])
        c = np.linalg.lstsq(a, rows[:, 4], rcond=None)[0]
        print(f"{load:12s} {len(rows):6d} {c[0]:6.2f} ms {c[1]:8.2f} ms {c[2] * 1e3:11.1f} us {c[3]:8.3f} ms")


if __name__ == "__main__":
    main()
