"""Vidur (microsoft/vidur, MIT): per-layer op times of whole model configurations on H100/A100
(``data/profiling/compute/<gpu>/<model>/mlp.csv``; a copy of some lives in
``shared/data/llm_traces/vidur_profiling/``) and NCCL all-reduce times (``network/<node>/all_reduce.csv``).
Its attention tables are not in that copy, so imported Vidur profiles time attention with the datasheet
roofline of the GPU (the ``table`` cost model says so in its ``sources``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibrate.importers.writing import dedupe_shapes, op_row, write_profile
from simulator.cost.op_table import TABLE_COLUMNS
from simulator.errors import ScenarioError

VIDUR_OPS = {  # Vidur op -> (our op, how to compute n/k or width)
    "attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
    "mlp_down_proj": "down_proj", "input_layernorm": "rmsnorm", "attn_rope": "rotary", "mlp_act": "silu_mul",
    "add": "residual_add",
}
VIDUR_GPUS = {"h100": "h100-sxm", "a100": "a100-80gb"}


def vidur_rows(mlp_csv: Path) -> list[dict[str, Any]]:
    """Our table rows from one Vidur ``mlp.csv`` (ms -> s; ``p10_s``/``p90_s`` carry Vidur's
    min/max, its files keep no percentiles; 20 timed runs each, fp16)."""
    d = pd.read_csv(mlp_csv)
    rows: list[dict[str, Any]] = []
    for r in d.to_dict("records"):
        tp = int(r["num_tensor_parallel_workers"])
        h, inter = int(r["n_embd"]), int(r["n_expanded_embd"])
        heads, kvh = int(r["n_head"]), int(r["n_kv_head"])
        hd = h // heads
        q, kv = heads // tp * hd, max(1, kvh // tp) * hd
        gate = 2 if bool(r["use_gated_mlp"]) else 1
        shapes = {"qkv_proj": dict(n=q + 2 * kv, k=h), "o_proj": dict(n=h, k=q),
                  "gate_up_proj": dict(n=gate * inter // tp, k=h), "down_proj": dict(n=h, k=inter // tp),
                  "rmsnorm": dict(width=h), "rotary": dict(width=q + kv, head_dim=hd),
                  "silu_mul": dict(width=inter // tp), "residual_add": dict(width=h)}
        m = int(r["num_tokens"])
        for vop, op in VIDUR_OPS.items():
            col = f"time_stats.{vop}"
            med = r.get(f"{col}.median")
            if med is None or not np.isfinite(med) or med <= 0:
                continue
            fam = "gemm" if op.endswith("_proj") else "elementwise"
            rows.append(op_row(op, fam, "fp16", med / 1e3, r[f"{col}.min"] / 1e3, r[f"{col}.max"] / 1e3,
                               r[f"{col}.std"] / 1e3, 20, tokens=m, **shapes[op]))
    return rows


def vidur_all_reduce_rows(csv: Path) -> list[dict[str, Any]]:
    """Rank-0 NCCL all-reduce times (``size`` is bytes of fp16) for every world size."""
    d = pd.read_csv(csv)
    d = d[(d["rank"] == 0) & (d["collective"] == "all_reduce")]
    return [op_row("all_reduce", "comm", "fp16", r["time_stats.all_reduce.median"] / 1e3,
                   r["time_stats.all_reduce.min"] / 1e3, r["time_stats.all_reduce.max"] / 1e3,
                   r["time_stats.all_reduce.std"] / 1e3, 3, message_bytes=int(r["size"]),
                   world_size=int(r["num_workers"]), tokens=max(1, int(r["size"]) // 2))
            for r in d.to_dict("records")]


def import_vidur(data_dir: Path, gpu: str, out: Path, name: str | None = None) -> Path:
    """Convert every Vidur compute table for ``gpu`` (and, for H100, the DGX all-reduce table)
    under ``data_dir`` into an imported profile in ``out``."""
    if gpu not in VIDUR_GPUS:
        raise ScenarioError("--gpu", gpu, f"Vidur profiles are for {', '.join(VIDUR_GPUS)}")
    files = sorted(Path(data_dir).glob(f"compute_{gpu}_*_mlp.csv"))
    if not files:
        raise ScenarioError("--data", str(data_dir), f"no Vidur compute_{gpu}_*_mlp.csv files there")
    rows = [row for f in files for row in vidur_rows(f)]
    net = Path(data_dir) / f"network_{gpu}_dgx_all_reduce.csv"
    if net.is_file():
        rows += vidur_all_reduce_rows(net)
        files.append(net)
    table = dedupe_shapes(pd.DataFrame(rows, columns=list(TABLE_COLUMNS)))
    prov = {"imported_from": "Vidur profiling data (microsoft/vidur @ 7d47513, data/profiling/)",
            "license": "MIT (c) Microsoft; see the Vidur repository",
            "files": [f.name for f in files],
            "notes": "per-layer op times measured by Vidur on real GPUs (fp16, 20 runs, CUDA timers); p10_s/p90_s "
                     "hold Vidur's min/max. No attention, LM head, KV-write or sampling tables in this copy: "
                     "those ops come from the datasheet roofline (or are scaled from the nearest measured GEMM)."}
    return write_profile(out, name or f"{VIDUR_GPUS[gpu]}-vidur", f"{VIDUR_GPUS[gpu]}-datasheet", table, prov)

