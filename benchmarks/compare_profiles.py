"""Step times of the default (measured-kernel) GPU profiles beside the datasheet roofline and Vidur.

For each GPU with a measured default: one engine step of Llama-3 8B (TP1) and Llama-3 70B (TP4,
so that it fits every GPU here) as the cost model predicts it from ``<gpu>`` (kernel tables),
``<gpu>-datasheet`` (vendor peaks, assumed efficiencies) and, where Vidur measured the GPU,
``<gpu>-vidur`` (Vidur's linear and elementwise ops; attention from the datasheet roofline).
Prefill: one prompt of 512-8,192 tokens; decode: 1-256 requests at 1,024 tokens of context each.
Prints a markdown table (milliseconds) and, per GPU, the median and range of default / datasheet.

    python benchmarks/compare_profiles.py [--precision fp8] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from simulator.cost.base import BatchShape  # noqa: E402
from simulator.cost.factory import make_cost_model  # noqa: E402
from simulator.scenario.models import MODEL_PRESETS  # noqa: E402
from simulator.scenario.profiles import available_profiles, load_profile  # noqa: E402
from simulator.scenario.quantization import resolve_precision  # noqa: E402

GPUS = ("a100-80gb", "h100-sxm", "h200", "l40s", "b200")
MODELS = (("llama-3-8b", 1), ("llama-3-70b", 4))
PREFILL = (512, 1024, 2048, 4096, 8192)
DECODE = (1, 8, 32, 128, 256)
CONTEXT = 1024


def step_ms(profile: str, model: str, tp: int, shape: BatchShape, precision: str | None) -> float | None:
    p, m = load_profile(profile), MODEL_PRESETS[model]
    if precision and p.cost_model == "table":       # Vidur's tables time fp16 only
        return None
    prec = resolve_precision(m, p, precision, "fp8" if precision == "fp8" else "auto") if precision else None
    cm = make_cost_model(p, m, tp, prec) if prec else make_cost_model(p, m, tp)
    return 1e3 * cm.step_time_s(shape)


def rows(precision: str | None) -> list[dict]:
    names = available_profiles()
    out = []
    for gpu in GPUS:
        for model, tp in MODELS:
            shapes = [(f"prefill {n}", BatchShape.prefill(n)) for n in PREFILL]
            shapes += [(f"decode {b} x {CONTEXT}", BatchShape.decode(b, b * (CONTEXT + 1))) for b in DECODE]
            for label, shape in shapes:
                r = {"gpu": gpu, "model": f"{model} TP{tp}", "step": label,
                     "default_ms": step_ms(gpu, model, tp, shape, precision),
                     "datasheet_ms": step_ms(f"{gpu}-datasheet", model, tp, shape, precision),
                     "vidur_ms": step_ms(f"{gpu}-vidur", model, tp, shape, precision)
                     if f"{gpu}-vidur" in names else None}
                out.append(r)
    return out


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:,.1f}" if x >= 10 else f"{x:.2f}"


def markdown(rs: list[dict]) -> str:
    lines = ["| GPU | model | step | default (measured kernels) | datasheet | default / datasheet | Vidur |",
             "|---|---|---|---|---|---|---|"]
    for r in rs:
        ratio = r["default_ms"] / r["datasheet_ms"]
        lines.append(f"| {r['gpu']} | {r['model']} | {r['step']} | {_ms(r['default_ms'])} | {_ms(r['datasheet_ms'])} "
                     f"| {ratio:.2f} | {_ms(r['vidur_ms'])} |")
    return "\n".join(lines)


def summary(rs: list[dict]) -> str:
    lines = ["| GPU | prefill: default / datasheet, median (range) | decode: default / datasheet, median (range) "
             "| default / Vidur, median (range) |", "|---|---|---|---|"]
    for gpu in GPUS:
        cells = []
        for kind in ("prefill", "decode"):
            r = np.array([x["default_ms"] / x["datasheet_ms"] for x in rs
                          if x["gpu"] == gpu and x["step"].startswith(kind)])
            cells.append(f"{np.median(r):.2f} ({r.min():.2f}-{r.max():.2f})")
        v = np.array([x["default_ms"] / x["vidur_ms"] for x in rs if x["gpu"] == gpu and x["vidur_ms"]])
        cells.append(f"{np.median(v):.2f} ({v.min():.2f}-{v.max():.2f})" if len(v) else "–")
        lines.append(f"| {gpu} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", default=None, help="a deployment.quantization (fp8: fp8 weights and KV cache)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rs = rows(args.precision)
    print(markdown(rs))
    print()
    print(summary(rs))
    if args.out:
        Path(args.out).write_text(json.dumps(rs, indent=2) + "\n")


if __name__ == "__main__":
    main()
