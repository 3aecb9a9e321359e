"""Dashboard responsiveness: wall time of each page action through streamlit's AppTest (the app's
own script run, without a browser or network), first with an empty cache, then the same scenario
again (served from ``st.cache_data``).

Actions: open the What-if page; run the default scenario (examples/chat-h100.yaml, 20,000
requests); run it again (cached); re-open it after a knob change and back (cached); open the
Load curve page and run its default sweep (8 rates x 3,000 requests); run the sweep again
(cached); open the Hardware profiles page. Median of ``--repeats`` fresh sessions, each starting
from an empty cache.

    python benchmarks/bench_app.py [--repeats 3] [--out benchmarks/results/app.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402


def timed(fn) -> float:
    t0 = time.perf_counter()
    at = fn()
    elapsed = time.perf_counter() - t0
    assert not at.exception, [e.message for e in at.exception]
    return elapsed


def one_session() -> dict[str, float]:
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    out = {"open What-if": timed(at.run)}
    out["run default scenario (cold)"] = timed(lambda: at.button(key="wi_run").click().run())
    assert len(at.metric) == 11     # the KPI cards of a run (TTFT, TPOT, E2E, TTUA, throughput, SLO, cost)
    out["run it again (cached)"] = timed(lambda: at.button(key="wi_run").click().run())
    at.number_input(key="wi_seed").set_value(8).run()
    at.number_input(key="wi_seed").set_value(7).run()
    out["knob changed and back, run (cached)"] = timed(lambda: at.button(key="wi_run").click().run())
    out["open Load curve"] = timed(lambda: at.switch_page("app_pages/load_curve.py").run())
    out["run default sweep (cold)"] = timed(lambda: at.button(key="lc_run").click().run())
    out["run sweep again (cached)"] = timed(lambda: at.button(key="lc_run").click().run())
    out["open Hardware profiles"] = timed(lambda: at.switch_page("app_pages/hardware.py").run())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "app.json")
    args = ap.parse_args()
    runs = [one_session() for _ in range(args.repeats)]
    rows = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    width = max(map(len, rows))
    print(f"{'action':<{width}}  wall s (median of {args.repeats})")
    for k, v in rows.items():
        print(f"{k:<{width}}  {v:8.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"median_wall_s": rows, "runs": runs, "repeats": args.repeats,
                                    "python": platform.python_version(), "machine": platform.machine(),
                                    "streamlit": st.__version__}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
