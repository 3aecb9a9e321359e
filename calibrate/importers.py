"""Imported profiles: other people's per-op measurements converted to our table (``source: imported``).

* **Vidur** (microsoft/vidur, MIT): per-layer op times of whole model configurations on H100/A100
  (``data/profiling/compute/<gpu>/<model>/mlp.csv``; a copy of some lives in
  ``shared/data/llm_traces/vidur_profiling/``) and NCCL all-reduce times
  (``network/<node>/all_reduce.csv``). Its attention tables are not in that copy, so imported
  Vidur profiles time attention with the datasheet roofline of the GPU (the ``table`` cost model
  says so in its ``sources``).
* **AIConfigurator** (``aiconfigurator-core`` on PyPI, Apache-2.0, optional): NVIDIA's per-op
  kernel database (GEMM ``m x n x k``, context and generation attention, NCCL collectives) for
  H100/H200/B200/A100/L40S, read from the installed package; the converted table is written to
  your ``--out`` folder and never copied into this repository.

No torch here: importing needs pandas only. Each importer takes a datasheet profile for the same
GPU as the base (memory, peaks, interconnect, price), adds the table, and records where every
number came from.
"""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from simulator.cost.op_table import TABLE_COLUMNS, TABLE_SCHEMA, file_sha256
from simulator.errors import ScenarioError
from simulator.scenario.profiles import load_profile

VIDUR_OPS = {  # Vidur op -> (our op, how to compute n/k or width)
    "attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "gate_up_proj",
    "mlp_down_proj": "down_proj", "input_layernorm": "rmsnorm", "attn_rope": "rotary", "mlp_act": "silu_mul",
    "add": "residual_add",
}
VIDUR_GPUS = {"h100": "h100-sxm", "a100": "a100-80gb"}


def _row(op: str, family: str, dtype: str, median_s: float, p10_s: float = np.nan, p90_s: float = np.nan,
         std_s: float = np.nan, repeats: int = 0, **shape: int) -> dict[str, Any]:
    row: dict[str, Any] = {c: 0 for c in TABLE_COLUMNS}
    row.update(op=op, family=family, dtype=dtype, median_s=median_s, p10_s=p10_s, p90_s=p90_s, std_s=std_s,
               repeats=repeats)
    row.update({k: int(v) for k, v in shape.items()})
    return row


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
            rows.append(_row(op, fam, "fp16", med / 1e3, r[f"{col}.min"] / 1e3, r[f"{col}.max"] / 1e3,
                             r[f"{col}.std"] / 1e3, 20, tokens=m, **shapes[op]))
    return rows


def vidur_all_reduce_rows(csv: Path) -> list[dict[str, Any]]:
    """Rank-0 NCCL all-reduce times (``size`` is bytes of fp16) for every world size."""
    d = pd.read_csv(csv)
    d = d[(d["rank"] == 0) & (d["collective"] == "all_reduce")]
    return [_row("all_reduce", "comm", "fp16", r["time_stats.all_reduce.median"] / 1e3,
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
    table = _dedupe(pd.DataFrame(rows, columns=list(TABLE_COLUMNS)))
    prov = {"imported_from": "Vidur profiling data (microsoft/vidur @ 7d47513, data/profiling/)",
            "license": "MIT (c) Microsoft; see the Vidur repository",
            "files": [f.name for f in files],
            "notes": "per-layer op times measured by Vidur on real GPUs (fp16, 20 runs, CUDA timers); p10_s/p90_s "
                     "hold Vidur's min/max. No attention, LM head, KV-write or sampling tables in this copy: "
                     "those ops come from the datasheet roofline (or are scaled from the nearest measured GEMM)."}
    return _write(out, name or f"{VIDUR_GPUS[gpu]}-vidur", VIDUR_GPUS[gpu], table, prov)


# -- AIConfigurator ---------------------------------------------------------------------------------------
AIC_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8"}
AIC_SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "a100_sxm": "a100-80gb",
               "l40s": "l40s"}


def aiconfigurator_dir(system: str, framework: str) -> Path:
    """The installed package's data folder for ``system`` and ``framework`` (newest version)."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("aiconfigurator_core")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ScenarioError("aiconfigurator", "aiconfigurator-core", "not installed: "
                            "pip install aiconfigurator-core (an optional extra: pip install -e .[aiconfigurator])")
    base = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data" / system
    if not base.is_dir():
        known = sorted(p.name for p in base.parent.iterdir() if p.is_dir())
        raise ScenarioError("--system", system, f"not in aiconfigurator-core; known: {', '.join(known)}")
    return base


def _newest(folder: Path) -> Path:
    from packaging.version import InvalidVersion, Version

    def key(p: Path) -> Any:
        try:
            return Version(p.name)
        except InvalidVersion:
            return Version("0")
    versions = sorted((p for p in folder.iterdir() if p.is_dir()), key=key)
    if not versions:
        raise ScenarioError("aiconfigurator", str(folder), "no versions in the package data")
    return versions[-1]


def aiconfigurator_rows(system: str, framework: str = "vllm",
                        dtype: str = "bfloat16") -> tuple[list[dict[str, Any]], list[str]]:
    """GEMM (``torch.nn.functional.linear`` kernels), context/generation attention (no sliding
    window, 16-bit KV) and NCCL all-reduce rows from the package's parquet tables (latency in ms)."""
    base = aiconfigurator_dir(system, framework)
    ours = AIC_DTYPES[dtype]
    rows: list[dict[str, Any]] = []
    used: list[str] = []
    gdir = base / "gemm" / framework
    if gdir.is_dir():
        f = _newest(gdir) / "gemm_perf.parquet"
        g = pd.read_parquet(f)
        g = g[(g["gemm_dtype"] == dtype) & (g["kernel_source"] == "torch.nn.functional.linear")]
        rows += [_row("gemm", "gemm", ours, r["latency"] / 1e3, tokens=r["m"], n=r["n"], k=r["k"])
                 for r in g.to_dict("records")]
        used.append(str(f.relative_to(base.parents[2])))
    adir = base / "attention" / framework
    if adir.is_dir():
        v = _newest(adir)
        c = pd.read_parquet(v / "context_attention_perf.parquet")
        c = c[(c["window_size"] == 0) & (c["kv_cache_dtype"] == dtype) & (c["batch_size"] == 1)]
        c = c.groupby(["isl", "num_heads", "num_key_value_heads", "head_dim"], as_index=False)["latency"].min()
        rows += [_row("attn_prefill", "attn_prefill", ours, r["latency"] / 1e3, tokens=r["isl"], batch=1, context=0,
                      num_heads=r["num_heads"], num_kv_heads=r["num_key_value_heads"], head_dim=r["head_dim"])
                 for r in c.to_dict("records")]
        gen = pd.read_parquet(v / "generation_attention_perf.parquet")
        gen = gen[(gen["window_size"] == 0) & (gen["kv_cache_dtype"] == dtype)]
        gen = gen.groupby(["batch_size", "step", "num_heads", "num_key_value_heads", "head_dim"],
                          as_index=False)["latency"].min()
        rows += [_row("attn_decode", "attn_decode", ours, r["latency"] / 1e3, tokens=r["batch_size"],
                      batch=r["batch_size"], context=r["step"] + 1, num_heads=r["num_heads"],
                      num_kv_heads=r["num_key_value_heads"], head_dim=r["head_dim"])
                 for r in gen.to_dict("records")]
        used += [str((v / n).relative_to(base.parents[2])) for n in
                 ("context_attention_perf.parquet", "generation_attention_perf.parquet")]
    ndir = base / "comm" / "nccl"
    if ndir.is_dir():
        f = _newest(ndir) / "nccl_perf.parquet"
        n = pd.read_parquet(f)
        n = n[(n["op_name"] == "all_reduce") & (n["nccl_dtype"] == "half")]
        rows += [_row("all_reduce", "comm", ours, r["latency"] / 1e3, message_bytes=r["message_size"],
                      world_size=r["num_gpus"], tokens=max(1, int(r["message_size"]) // 2))
                 for r in n.to_dict("records")]
        used.append(str(f.relative_to(base.parents[2])))
    if not rows:
        raise ScenarioError("--framework", framework, f"no tables for it under {base}")
    return rows, used


def import_aiconfigurator(system: str, out: Path, framework: str = "vllm", name: str | None = None) -> Path:
    if system not in AIC_SYSTEMS:
        raise ScenarioError("--system", system, f"known: {', '.join(AIC_SYSTEMS)}")
    rows, used = aiconfigurator_rows(system, framework)
    table = _dedupe(pd.DataFrame(rows, columns=list(TABLE_COLUMNS)))
    from importlib.metadata import version

    prov = {"imported_from": f"aiconfigurator-core {version('aiconfigurator-core')} kernel database "
                             f"({system}, {framework})",
            "license": "Apache-2.0 (c) NVIDIA; data read from the installed package, not redistributed here",
            "files": used,
            "notes": "GEMMs keyed by m x n x k (torch.nn.functional.linear kernels), context attention at batch 1 "
                     "without cached prefix, generation attention per batch x context, NCCL all-reduce"}
    return _write(out, name or f"{AIC_SYSTEMS[system]}-aiconfigurator", AIC_SYSTEMS[system], table, prov)


def _dedupe(table: pd.DataFrame) -> pd.DataFrame:
    """One row per shape (the same GEMM shape may come from several models): the median time."""
    keys = ["op", "family", "dtype", "tokens", "n", "k", "batch", "context", "num_heads", "num_kv_heads",
            "head_dim", "width", "message_bytes", "world_size"]
    agg = {"median_s": "median", "p10_s": "min", "p90_s": "max", "std_s": "max", "repeats": "sum"}
    return table.groupby(keys, as_index=False, sort=False).agg(agg)[list(TABLE_COLUMNS)]


def _write(out: Path, name: str, base_profile: str, table: pd.DataFrame, prov: dict[str, Any]) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "ops.csv.tmp"
    table.to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, out / "ops.csv")
    base = load_profile(base_profile)
    data = base.model_dump(mode="json", exclude_none=True)
    data.update(name=name, source="imported", cost_model="table", table="ops.csv",
                table_sha256=file_sha256(out / "ops.csv"), table_schema=TABLE_SCHEMA)
    data["provenance"] = {**prov, "base_profile": f"{base_profile} (datasheet: memory, peaks, interconnect, price, "
                                                  "efficiencies for ops without rows)",
                          "date": _dt.date.today().isoformat(), "rows": len(table)}
    tmp = out / "profile.yaml.tmp"
    tmp.write_text(f"# Imported per-op measurements (see provenance); base numbers from {base_profile}.\n"
                   + yaml.safe_dump(data, sort_keys=False, width=110))
    os.replace(tmp, out / "profile.yaml")
    return out / "profile.yaml"
