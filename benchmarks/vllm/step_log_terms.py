"""What vLLM's own step times are made of, from its per-step log lines.

    python benchmarks/vllm/step_log_terms.py FOLDER                  # an unpacked vllm-cpu-observations.tar.gz
    python benchmarks/vllm/step_log_terms.py FOLDER --shape-cache 32

Each ``<load>.steps.log`` (vLLM's ``--enable-logging-iteration-details`` lines, the model runner's
time per step; :mod:`calibrate.engine_steps`) is regressed by least squares on
``1, context requests, context tokens, generation requests``, per load over every repeat, and the
coefficients are printed: a fixed time per step, per request whose prompt is computed in the step,
per prompt token and per decoding request.

``--shape-cache N`` adds one more term: whether the step's token count missed a least-recently-used
cache of the last N distinct token counts (vLLM's CPU GEMMs keep N = 32 oneDNN primitives per weight
shape, ``create_onednn_mm(weight, 32)``, and build one for a token count not among them), replayed
over each log from its first line, and prints its coefficient and what it leaves of the cost per
prompt.
"""
from __future__ import annotations

import argparse
import sys
from collections import OrderedDict, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from calibrate.engine_steps import parse_iterations


def cache_misses(token_counts: np.ndarray, capacity: int) -> np.ndarray:
    """1.0 where a step's token count is not among the last ``capacity`` distinct counts, else 0.0."""
    recent: OrderedDict[int, None] = OrderedDict()
    out = np.zeros(len(token_counts))
    for i, m in enumerate(token_counts.tolist()):
        if m in recent:
            recent.move_to_end(m)
            continue
        out[i] = 1.0
        recent[m] = None
        if len(recent) > capacity:
            recent.popitem(last=False)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--shape-cache", type=int, default=0, metavar="N",
                    help="add a term for a step whose token count missed an LRU cache of N counts")
    args = ap.parse_args()
    if args.shape_cache < 0:
        ap.error(f"--shape-cache = {args.shape_cache}: give a cache size of at least 1 (0: no such term)")
    by_load: dict[str, list[np.ndarray]] = defaultdict(list)
    for path in sorted(args.folder.glob("repeat-*/*.steps.log")):
        rows = parse_iterations(path.read_text())
        miss = cache_misses((rows[:, 1] + rows[:, 3]).astype(np.int64), args.shape_cache) if args.shape_cache \
            else np.zeros(len(rows))
        by_load[path.name.split(".steps")[0]].append(np.column_stack([rows, miss]))
    if not by_load:
        sys.exit(f"error: {args.folder} holds no repeat-*/<load>.steps.log files: unpack "
                 "benchmarks/results/vllm-cpu-observations.tar.gz into it")
    extra = f" {'per miss':>9s} {'misses':>7s}" if args.shape_cache else ""
    print(f"{'load':12s} {'steps':>6s} {'per step':>9s} {'per prompt':>11s} {'per prompt token':>17s} "
          f"{'per decode':>11s}{extra}")
    for load, parts in by_load.items():
        rows = np.concatenate(parts)
        cols = [np.ones(len(rows)), rows[:, 0], rows[:, 1], rows[:, 2]] + ([rows[:, 5]] if args.shape_cache else [])
        c = np.linalg.lstsq(np.column_stack(cols), rows[:, 4], rcond=None)[0]
        tail = f" {c[4]:6.2f} ms {100 * rows[:, 5].mean():6.1f}%" if args.shape_cache else ""
        print(f"{load:12s} {len(rows):6d} {c[0]:6.2f} ms {c[1]:8.2f} ms {c[2] * 1e3:11.1f} us {c[3]:8.3f} ms{tail}")


if __name__ == "__main__":
    main()
