"""Imported profiles: other people's per-op measurements converted to our table (``source: imported``).

* **Vidur** (microsoft/vidur, MIT): per-layer op times of whole model configurations on H100/A100
  (``data/profiling/compute/<gpu>/<model>/mlp.csv``; a copy of some lives in
  ``shared/data/llm_traces/vidur_profiling/``) and NCCL all-reduce times
  (``network/<node>/all_reduce.csv``). Its attention tables are not in that copy, so imported
  Vidur profiles time attention with the datasheet roofline of the GPU (the ``table`` cost model
  says so in its ``sources``).
* **AIConfigurator** (``aiconfigurator-core`` on PyPI, Apache-2.0): NVIDIA's per-op kernel
  database (GEMM ``m x n x k`` in bf16 and fp8, context and generation attention with 16-bit and
  fp8 KV caches, the frameworks' all-reduce and NCCL) for H100/H200/B200/A100/L40S, read from the
  wheel file, an unpacked wheel or the installed package (:class:`AicDatabase`).
* **The shipped defaults** (:func:`import_default`): a compact grid of the AIConfigurator tables
  plus Vidur's elementwise tables where Vidur measured the GPU, with roofline efficiencies fitted
  to the measured rows for what neither measured (``cost_model: kernel_table``).

No torch here: importing needs pandas only. Each importer takes the datasheet profile of the same
GPU (``<gpu>-datasheet``) as the base (memory, peaks, interconnect, price), adds the table, and
records where every number came from.
"""
from __future__ import annotations

import datetime as _dt
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from simulator.cost.op_table import TABLE_COLUMNS, TABLE_SCHEMA, file_sha256, written_columns
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
    return _write(out, name or f"{VIDUR_GPUS[gpu]}-vidur", f"{VIDUR_GPUS[gpu]}-datasheet", table, prov)


# -- AIConfigurator ---------------------------------------------------------------------------------------
AIC_SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "a100_sxm": "a100-80gb",
               "l40s": "l40s"}
"""AIConfigurator system folder -> the name of our profile of that GPU."""
AIC_FRAMEWORKS = ("vllm", "sglang", "trtllm")
"""The frameworks AIConfigurator measures kernels under (``--framework``)."""
AIC_PACKAGE = "aiconfigurator_core"
AIC_GEMM_KERNELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "bf16": ("bfloat16", ("torch.nn.functional.linear", "vllm_default", "torch_flow")),
    "fp8": ("fp8", ("CutlassFP8ScaledMMLinearKernel", "torch_flow")),
}
"""Our dtype -> (AIConfigurator ``gemm_dtype``, kernel sources in order of preference): 16-bit
``F.linear`` (cuBLAS) and vLLM's W8A8 per-tensor fp8 GEMM (what an fp8 checkpoint runs on Hopper/Ada);
``torch_flow`` is TensorRT-LLM's (``--framework trtllm``)."""
AIC_KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}

#: The compact grid the shipped profiles keep (``--compact``): GEMM rows ``m`` (AIConfigurator also
#: measures ``m + 1`` beside most of these, and every 256 up to 4,352), GEMM widths ``n`` and ``k``
#: (both from this list), attention shapes per shard ``(heads, kv_heads, head_dim)``: the GQA
#: layouts of Llama-3 8B/70B, Mistral and Qwen2.5 at TP 1-8, and MHA for prefill).
COMPACT_GEMM_M = (1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
                  4096, 8192, 16384, 32768)
COMPACT_GEMM_NK = (1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 16384, 65536)
COMPACT_HEADS = ((4, 1, 128), (8, 1, 128), (8, 2, 128), (16, 2, 128), (16, 4, 128), (32, 4, 128), (32, 8, 128),
                 (64, 8, 128), (8, 8, 128), (16, 16, 128), (32, 32, 128), (64, 64, 128),
                 (32, 8, 64))
COMPACT_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
                  12288, 16384, 24576, 32768)
"""Token counts kept from Vidur's elementwise tables (it measures every 8 up to 4,096 or 32,768)."""


class AicDatabase:
    """NVIDIA AIConfigurator's kernel database (``aiconfigurator-core`` on PyPI, Apache-2.0), read
    where it lies: the wheel file itself (a zip: nothing is installed, its Rust extension is never
    loaded), a folder the wheel was unpacked into, or the installed package. Paths are relative to
    the package folder, e.g. ``systems/data/h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet``.

    Raises:
        ScenarioError: the source is not a wheel or folder of the package, or (no source given)
            the package is not installed.
    """

    def __init__(self, source: str | Path | None = None) -> None:
        self._zip: zipfile.ZipFile | None = None
        self.sha256: str | None = None
        if source is None:
            import importlib.util

            spec = importlib.util.find_spec(AIC_PACKAGE)
            if spec is None or not spec.submodule_search_locations:
                raise ScenarioError("--wheel", None, "aiconfigurator-core is not installed: give its wheel with "
                                    "--wheel (pip download aiconfigurator-core --no-deps -d DIR) or pip install it")
            self.root = Path(next(iter(spec.submodule_search_locations)))
            from importlib.metadata import version

            self.version, self.origin = version("aiconfigurator-core"), f"installed package at {self.root}"
            return
        path = Path(source)
        if path.is_file() and path.suffix == ".whl":
            self._zip = zipfile.ZipFile(path)
            self._names = {n[len(AIC_PACKAGE) + 1:] for n in self._zip.namelist() if n.startswith(AIC_PACKAGE + "/")}
            meta = next((n for n in self._zip.namelist() if n.endswith(".dist-info/METADATA")), None)
            text = self._zip.read(meta).decode() if meta else ""
            self.sha256 = file_sha256(path)
            self.origin = f"wheel {path.name} (sha256 {self.sha256})"
        elif path.is_dir():
            self.root = path / AIC_PACKAGE if (path / AIC_PACKAGE).is_dir() else path
            metas = sorted(self.root.parent.glob("aiconfigurator_core-*.dist-info/METADATA"))
            text = metas[-1].read_text() if metas else ""
            self.origin = f"unpacked wheel at {path}"
        else:
            raise ScenarioError("--wheel", str(source), "not an aiconfigurator-core wheel (.whl) or a folder")
        found = [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Version:")]
        self.version = found[0] if found else "unknown"
        if not self.exists("systems/data"):
            raise ScenarioError("--wheel", str(source), "has no systems/data folder: not aiconfigurator-core")

    def exists(self, rel: str) -> bool:
        if self._zip is not None:
            return rel in self._names or any(n.startswith(rel.rstrip("/") + "/") for n in self._names)
        return (self.root / rel).exists()

    def listdir(self, rel: str) -> list[str]:
        """Names directly under folder ``rel`` (sorted)."""
        if self._zip is not None:
            pre = rel.rstrip("/") + "/"
            return sorted({n[len(pre):].split("/", 1)[0] for n in self._names if n.startswith(pre)})
        d = self.root / rel
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

    def read_bytes(self, rel: str) -> bytes:
        if self._zip is not None:
            return self._zip.read(f"{AIC_PACKAGE}/{rel}")
        return (self.root / rel).read_bytes()

    def read_parquet(self, rel: str) -> pd.DataFrame:
        return pd.read_parquet(io.BytesIO(self.read_bytes(rel)))

    def read_yaml(self, rel: str) -> Any:
        return yaml.safe_load(self.read_bytes(rel).decode())

    def versions(self, rel: str) -> list[str]:
        """Version folders under ``rel``, oldest first (PEP 440 order; unparsable names first)."""
        from packaging.version import InvalidVersion, Version

        def key(name: str) -> Any:
            try:
                return Version(name)
            except InvalidVersion:
                return Version("0")
        return sorted(self.listdir(rel), key=key)

    def newest(self, rel: str) -> str:
        """The newest version folder under ``rel``, as a path relative to the package."""
        versions = self.versions(rel)
        if not versions:
            raise ScenarioError("aiconfigurator", rel, "no versions in the package data")
        return f"{rel}/{versions[-1]}"


def _main_kernel(df: pd.DataFrame) -> str:
    """The kernel with the most rows: the engine's default path (others are partial sweeps)."""
    return str(df["kernel_source"].value_counts().idxmax())


@dataclass
class AicTables:
    """One system's tables from the database, filtered to what a dense Llama-style model runs."""

    system: str
    framework: str
    device: str
    rows: list[dict[str, Any]]
    files: list[str]
    kernels: dict[str, str]
    """Table -> the kernel source its rows come from."""
    versions: dict[str, str]
    """Table -> framework (or NCCL) version of the measurement."""
    spec: dict[str, Any]
    """The system's YAML (AIConfigurator's hardware facts and empirical constants)."""
    full_gemm: pd.DataFrame
    """Every GEMM row of the chosen kernels (ours: ``dtype, tokens, n, k, median_s``), before any thinning."""


def aiconfigurator_tables(db: AicDatabase, system: str, framework: str = "vllm", compact: bool = False) -> AicTables:
    """GEMMs (16-bit ``F.linear`` and W8A8 fp8), context attention (batch 1, no sliding window, no
    cached prefix) and generation attention (batch x context) with 16-bit and fp8 KV caches, and the
    framework's all-reduce (vLLM's custom all-reduce under CUDA graphs; NCCL where the framework
    has no table), converted to our rows: milliseconds to seconds, all-reduce ``message_size``
    (elements of a 16-bit tensor) to bytes. ``compact`` keeps only the grid of :data:`COMPACT_GEMM_M`,
    :data:`COMPACT_GEMM_NK` and :data:`COMPACT_HEADS`.

    Raises:
        ScenarioError: an unknown system or a framework without GEMM tables for it.
    """
    base = f"systems/data/{system}"
    if not db.exists(base):
        known = [s for s in db.listdir("systems/data") if s in AIC_SYSTEMS] or db.listdir("systems/data")
        raise ScenarioError("--system", system, f"not in aiconfigurator-core; known: {', '.join(known)}")
    rows: list[dict[str, Any]] = []
    files: list[str] = []
    kernels: dict[str, str] = {}
    versions: dict[str, str] = {}
    spec = db.read_yaml(f"systems/{system}.yaml") if db.exists(f"systems/{system}.yaml") else {}
    if not db.exists(f"{base}/gemm/{framework}"):
        have = ", ".join(db.listdir(f"{base}/gemm"))
        raise ScenarioError("--framework", framework, f"no GEMM tables for {system} ({have})")
    vdir = db.newest(f"{base}/gemm/{framework}")
    g = db.read_parquet(f"{vdir}/gemm_perf.parquet")
    device = str(g["device"].iloc[0])
    files.append(f"{vdir}/gemm_perf.parquet")
    full = []
    for ours, (aic_dtype, preferred) in AIC_GEMM_KERNELS.items():
        sel = g[g["gemm_dtype"] == aic_dtype]
        kernel = next((k for k in preferred if (sel["kernel_source"] == k).any()), None)
        if kernel is None:
            continue
        sel = sel[sel["kernel_source"] == kernel]
        kernels[f"gemm {ours}"], versions[f"gemm {ours}"] = kernel, str(sel["version"].iloc[0])
        full.append(pd.DataFrame({"dtype": ours, "tokens": sel["m"], "n": sel["n"], "k": sel["k"],
                                  "median_s": sel["latency"] / 1e3}))
        if compact:
            sel = sel[sel["m"].isin(COMPACT_GEMM_M) & sel["n"].isin(COMPACT_GEMM_NK) & sel["k"].isin(COMPACT_GEMM_NK)]
        rows += [_row("gemm", "gemm", ours, r["latency"] / 1e3, tokens=r["m"], n=r["n"], k=r["k"])
                 for r in sel.to_dict("records")]
    if db.exists(f"{base}/attention/{framework}"):
        vdir = db.newest(f"{base}/attention/{framework}")
        for table, op in (("context_attention_perf", "attn_prefill"), ("generation_attention_perf", "attn_decode")):
            a = db.read_parquet(f"{vdir}/{table}.parquet")
            files.append(f"{vdir}/{table}.parquet")
            if "window_size" in a:
                a = a[a["window_size"] == 0]
            if op == "attn_prefill":
                a = a[(a["batch_size"] == 1) & (a["step"] == 0)]
            if compact:
                keep = pd.Series(list(zip(a["num_heads"], a["num_key_value_heads"], a["head_dim"], strict=True)),
                                 index=a.index).isin(COMPACT_HEADS)
                a = a[keep]
            for aic_kv, ours in AIC_KV_DTYPES.items():
                sel = a[a["kv_cache_dtype"] == aic_kv]
                if sel.empty:
                    continue
                kernel = _main_kernel(sel)
                sel = sel[sel["kernel_source"] == kernel]
                kernels[f"{op} kv {ours}"], versions[f"{op} kv {ours}"] = kernel, str(sel["version"].iloc[0])
                keys = ["batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim"]
                sel = sel.groupby(keys, as_index=False)["latency"].median()
                for r in sel.to_dict("records"):
                    if op == "attn_prefill":
                        rows.append(_row(op, op, ours, r["latency"] / 1e3, tokens=r["isl"], batch=1, context=0,
                                         num_heads=r["num_heads"], num_kv_heads=r["num_key_value_heads"],
                                         head_dim=r["head_dim"]))
                    else:   # a decode after ``step`` generated tokens of a 1-token prompt: step + 1 cached
                        rows.append(_row(op, op, ours, r["latency"] / 1e3, tokens=r["batch_size"],
                                         batch=r["batch_size"], context=r["step"] + 1, num_heads=r["num_heads"],
                                         num_kv_heads=r["num_key_value_heads"], head_dim=r["head_dim"]))
    rows += _aic_all_reduce(db, base, framework, spec, files, kernels, versions)
    rows += _aic_moe(db, base, framework, files, kernels, versions, compact)
    rows += _aic_mla(db, base, framework, files, kernels, versions, compact)
    return AicTables(system, framework, device, rows, files, kernels, versions, spec,
                     pd.concat(full, ignore_index=True))


def _aic_all_reduce(db: AicDatabase, base: str, framework: str, spec: dict[str, Any], files: list[str],
                    kernels: dict[str, str], versions: dict[str, str]) -> list[dict[str, Any]]:
    """The framework's own all-reduce (vLLM: its custom all-reduce replayed in CUDA graphs, which
    hands large messages to NCCL itself), else NCCL's, 16-bit; ``message_size`` counts elements."""
    comm = f"{base}/comm/{framework}"
    vdir = next((f"{comm}/{v}" for v in reversed(db.versions(comm))
                 if db.exists(f"{comm}/{v}/custom_allreduce_perf.parquet")), None)
    if vdir is not None:
        c = db.read_parquet(f"{vdir}/custom_allreduce_perf.parquet")
        graph = c[c["kernel_source"].str.contains("graph")]
        c = graph if not graph.empty else c
        files.append(f"{vdir}/custom_allreduce_perf.parquet")
        kernels["all_reduce"], versions["all_reduce"] = _main_kernel(c), str(c["version"].iloc[0])
        c = c[c["kernel_source"] == kernels["all_reduce"]]
        return [_row("all_reduce", "comm", "bf16", r["latency"] / 1e3, message_bytes=2 * r["message_size"],
                     world_size=r["num_gpus"], tokens=max(1, int(r["message_size"])))
                for r in c.to_dict("records")]
    if not db.exists(f"{base}/comm/nccl"):
        return []
    wanted = str((spec.get("misc") or {}).get("nccl_version", ""))
    vdir = f"{base}/comm/nccl/{wanted}" if wanted and db.exists(f"{base}/comm/nccl/{wanted}") else \
        db.newest(f"{base}/comm/nccl")
    n = db.read_parquet(f"{vdir}/nccl_perf.parquet")
    n = n[(n["op_name"] == "all_reduce") & (n["nccl_dtype"] == "half")]
    files.append(f"{vdir}/nccl_perf.parquet")
    kernels["all_reduce"], versions["all_reduce"] = "NCCL", f"NCCL {vdir.rsplit('/', 1)[-1]}"
    return [_row("all_reduce", "comm", "bf16", r["latency"] / 1e3, message_bytes=2 * r["message_size"],
                 world_size=r["num_gpus"], tokens=max(1, int(r["message_size"])))
            for r in n.to_dict("records")]


AIC_MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "int4_wo": "int4",
                  "w4a16_mxfp4": "mxfp4", "nvfp4": "nvfp4"}
"""AIConfigurator ``moe_dtype`` -> our MoE row dtype (bf16 weights; fp8 per-tensor W8A8; fp8 with 128x128
block scales (DeepSeek-V3's checkpoint); int4 weight-only (Marlin); MXFP4 weights with 16-bit activations
(gpt-oss's checkpoint); NVFP4 (Blackwell))."""
AIC_MOE_DISTRIBUTION = "power_law_1.01"
"""Token-to-expert routing the MoE rows were measured under: AIConfigurator's default (``power_law`` with
alpha 1.01, its DeepSeek setting; within a few per cent of its 1.2 and above ``balanced`` from ~64 tokens)."""
COMPACT_MOE_TP = (1, 2, 4, 8)
"""Tensor-parallel degrees the experts are split over that the compact grid keeps (expert parallelism 1)."""
COMPACT_MOE_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
"""Token counts of the MoE rows the compact grid keeps (AIConfigurator measures 27 between 1 and 16,384)."""
COMPACT_MLA_HEADS = (8, 16, 32, 64, 128)
"""Heads per shard of the MLA rows the compact grid keeps: DeepSeek-V3's 128 heads at TP 1-16."""
AIC_MLA_DTYPES = {"bfloat16": 16, "fp8_block": 8}
"""AIConfigurator MLA ``gemm_type`` -> ``weight_bits`` of our MLA rows."""


def _aic_moe(db: AicDatabase, base: str, framework: str, files: list[str], kernels: dict[str, str],
             versions: dict[str, str], compact: bool) -> list[dict[str, Any]]:
    """One MoE layer's routed experts (vLLM's fused MoE: routing, grouped GEMMs, activation, combine),
    per weight dtype: the kernel with the most rows at expert parallelism 1, under
    :data:`AIC_MOE_DISTRIBUTION` routing; ``compact`` keeps TP degrees :data:`COMPACT_MOE_TP`."""
    folder = f"{base}/moe/{framework}"
    if not db.exists(folder):
        return []
    vdir = db.newest(folder)
    m = db.read_parquet(f"{vdir}/moe_perf.parquet")
    files.append(f"{vdir}/moe_perf.parquet")
    m = m[(m["moe_ep_size"] == 1) & (m["distribution"] == AIC_MOE_DISTRIBUTION)]
    if compact:
        m = m[m["moe_tp_size"].isin(COMPACT_MOE_TP) & m["num_tokens"].isin(COMPACT_MOE_TOKENS)]
    rows: list[dict[str, Any]] = []
    for aic, ours in AIC_MOE_DTYPES.items():
        sel = m[m["moe_dtype"] == aic]
        if sel.empty:
            continue
        kernel = _main_kernel(sel)
        sel = sel[sel["kernel_source"] == kernel]
        kernels[f"moe {ours}"], versions[f"moe {ours}"] = kernel, str(sel["version"].iloc[0])
        rows += [_row("moe", "moe", ours, r["latency"] / 1e3, tokens=r["num_tokens"], n=r["inter_size"],
                      k=r["hidden_size"], num_experts=r["num_experts"], top_k=r["topk"], world_size=r["moe_tp_size"])
                 for r in sel.to_dict("records")]
    return rows


def _aic_mla(db: AicDatabase, base: str, framework: str, files: list[str], kernels: dict[str, str],
             versions: dict[str, str], compact: bool) -> list[dict[str, Any]]:
    """One multi-head-latent-attention block (DeepSeek-V3's: q/kv down-projections, norms, rotary,
    up-projections, attention over the latent cache, output projection), vLLM's ``mla_*_module``
    tables, per projection dtype (bf16, fp8 block) and KV-cache dtype: prefill at batch 1 over a
    prompt of ``tokens`` without a cached prefix, decode per batch x context. ``head_dim`` is the
    cached width per token (``kv_lora_rank + qk_rope_head_dim`` = 576), ``num_kv_heads`` 1 (one
    latent shared by every head). ``compact`` keeps :data:`COMPACT_MLA_HEADS`."""
    folder = f"{base}/mla/{framework}"
    if not db.exists(folder):
        return []
    vdir = db.newest(folder)
    rows: list[dict[str, Any]] = []
    for table, op in (("mla_context_module_perf", "mla_prefill"), ("mla_generation_module_perf", "mla_decode")):
        if not db.exists(f"{vdir}/{table}.parquet"):
            continue
        a = db.read_parquet(f"{vdir}/{table}.parquet")
        files.append(f"{vdir}/{table}.parquet")
        if op == "mla_prefill":
            a = a[(a["batch_size"] == 1) & (a["step"] == 0)]
        if compact:
            a = a[a["num_heads"].isin(COMPACT_MLA_HEADS)]
        for (gemm, kv), sel in a.groupby(["gemm_type", "kv_cache_dtype"]):
            if gemm not in AIC_MLA_DTYPES or kv not in AIC_KV_DTYPES:
                continue
            kernel = _main_kernel(sel)
            sel = sel[sel["kernel_source"] == kernel]
            bits, ours = AIC_MLA_DTYPES[gemm], AIC_KV_DTYPES[kv]
            kernels[f"{op} w{bits} kv {ours}"] = kernel
            versions[f"{op} w{bits} kv {ours}"] = str(sel["version"].iloc[0])
            sel = sel.groupby(["batch_size", "isl", "step", "num_heads"], as_index=False)["latency"].median()
            for r in sel.to_dict("records"):
                if op == "mla_prefill":
                    rows.append(_row(op, op, ours, r["latency"] / 1e3, tokens=r["isl"], batch=1, context=0,
                                     num_heads=r["num_heads"], num_kv_heads=1, head_dim=576, weight_bits=bits))
                else:
                    rows.append(_row(op, op, ours, r["latency"] / 1e3, tokens=r["batch_size"], batch=r["batch_size"],
                                     context=r["step"] + 1, num_heads=r["num_heads"], num_kv_heads=1, head_dim=576,
                                     weight_bits=bits))
    return rows


def import_aiconfigurator(system: str, out: Path, framework: str = "vllm", name: str | None = None,
                          source: str | Path | None = None, compact: bool = False) -> Path:
    """Convert one system's tables (:func:`aiconfigurator_tables`) into an imported ``kernel_table``
    profile in ``out`` (on top of the datasheet profile of the same GPU; its efficiencies are the
    datasheet's assumptions, unlike :func:`import_default`'s fitted ones)."""
    if system not in AIC_SYSTEMS:
        raise ScenarioError("--system", system, f"known: {', '.join(AIC_SYSTEMS)}")
    if framework not in AIC_FRAMEWORKS:
        raise ScenarioError("--framework", framework, f"allowed: {', '.join(AIC_FRAMEWORKS)}")
    db = AicDatabase(source)
    t = aiconfigurator_tables(db, system, framework, compact=compact)
    table = _dedupe(pd.DataFrame(t.rows, columns=list(TABLE_COLUMNS)))
    prov = {"imported_from": f"aiconfigurator-core {db.version} kernel database ({system}, {framework}); {db.origin}",
            "license": "Apache-2.0 (c) NVIDIA; derived from the package's data",
            "files": t.files, "kernels": t.kernels, "versions": t.versions, "device_reported": t.device,
            "notes": "GEMMs keyed by m x n x k (bf16 F.linear, fp8 W8A8 per-tensor); context attention at batch 1 "
                     "without cached prefix; generation attention per batch x context; attention rows' dtype is "
                     "the KV-cache dtype; all-reduce message_size converted from elements to bytes"}
    base = f"{AIC_SYSTEMS[system]}-datasheet"
    return _write(out, name or f"{AIC_SYSTEMS[system]}-aiconfigurator", base, table, prov, cost_model="kernel_table")


def _dedupe(table: pd.DataFrame) -> pd.DataFrame:
    """One row per shape (the same GEMM shape may come from several models): the median time."""
    keys = ["op", "family", "dtype", "tokens", "n", "k", "batch", "context", "num_heads", "num_kv_heads",
            "head_dim", "width", "message_bytes", "world_size", "num_experts", "top_k", "weight_bits"]
    agg = {"median_s": "median", "p10_s": "min", "p90_s": "max", "std_s": "max", "repeats": "sum"}
    return table.groupby(keys, as_index=False, sort=False).agg(agg)[list(TABLE_COLUMNS)]


def _write(out: Path, name: str, base_profile: str, table: pd.DataFrame, prov: dict[str, Any],
           cost_model: str = "table", efficiency: dict[str, float] | None = None,
           header: str | None = None, table_file: str = "ops.csv") -> Path:
    """``table_file`` (``ops.csv``, or ``ops.csv.gz``: gzip without a timestamp, so the same table
    gives the same bytes) and ``profile.yaml`` into ``out`` (each written under a temporary name,
    then renamed): the base profile's numbers with the table, ``source: imported``, the provenance
    and, when given, efficiencies that replace the base's assumed ones. A table of the other name
    left in ``out`` by an earlier import is removed."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (table_file + ".tmp")
    cols = written_columns(table)
    if table_file.endswith(".gz"):
        table[cols].to_csv(tmp, index=False, float_format="%.6g", compression={"method": "gzip", "mtime": 0})
    else:
        table[cols].to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, out / table_file)
    for stale in ("ops.csv", "ops.csv.gz"):
        if stale != table_file and (out / stale).is_file():
            (out / stale).unlink()
    base = load_profile(base_profile)
    data = base.model_dump(mode="json", exclude_none=True)
    data.update(name=name, source="imported", cost_model=cost_model, table=table_file,
                table_sha256=file_sha256(out / table_file), table_schema=TABLE_SCHEMA)
    if efficiency:
        data["efficiency"] = {**data.get("efficiency", {}), **efficiency}
    kept = "efficiencies fitted to the rows (provenance.roofline_fit)" if efficiency else \
        "efficiencies for ops without rows"
    data["provenance"] = {**prov, "base_profile": f"{base_profile} (datasheet: memory, peaks, interconnect, price, "
                                                  f"engine overhead; {kept})",
                          "date": _dt.date.today().isoformat(), "rows": len(table)}
    tmp = out / "profile.yaml.tmp"
    head = header or f"# Imported per-op measurements (see provenance); base numbers from {base_profile}.\n"
    tmp.write_text(head + yaml.safe_dump(data, sort_keys=False, width=110))
    os.replace(tmp, out / "profile.yaml")
    return out / "profile.yaml"


# -- the shipped defaults -----------------------------------------------------------------------------------
VIDUR_FOR_AIC = {"h100_sxm": "h100", "a100_sxm": "a100"}
"""AIConfigurator systems Vidur also measured (its elementwise tables join the defaults)."""
_FAMILY_ORDER = {"gemm": 0, "attn_prefill": 1, "attn_decode": 2, "elementwise": 3, "sampling": 4, "comm": 5,
                 "moe": 6, "mla_prefill": 7, "mla_decode": 8}


def vidur_elementwise_rows(data_dir: Path, gpu: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Vidur's RMSNorm, rotary, SiLU-and-multiply and residual-add rows for ``gpu`` (fp16, every
    model and TP degree Vidur measured), at the token counts of :data:`COMPACT_TOKENS`."""
    files = sorted(Path(data_dir).glob(f"compute_{gpu}_*_mlp.csv"))
    rows = [r for f in files for r in vidur_rows(f) if r["family"] == "elementwise" and r["tokens"] in COMPACT_TOKENS]
    return rows, [f.name for f in files]


def import_default(system: str, out: Path, source: str | Path | None = None, vidur_dir: Path | None = None,
                   name: str | None = None, command: str | None = None) -> Path:
    """Build the shipped profile of one GPU: AIConfigurator's vLLM tables on the compact grid
    (bf16 and fp8 GEMMs, attention with 16-bit and fp8 KV, all-reduce), Vidur's elementwise rows
    where Vidur measured the GPU, and the ``efficiency`` block fitted to those rows
    (:mod:`calibrate.roofline_fit`) for whatever the ``kernel_table`` model must extrapolate.
    Provenance records the sources, versions, kernels, licences, what is measured and what is
    extrapolated, the held-out error of the table and what the compact grid costs."""
    from calibrate.roofline_fit import fit_efficiency, streaming_errors
    from simulator.cost.op_table import fit_summary, leave_one_out

    if system not in AIC_SYSTEMS:
        raise ScenarioError("--system", system, f"known: {', '.join(AIC_SYSTEMS)}")
    gpu = AIC_SYSTEMS[system]
    db = AicDatabase(source)
    t = aiconfigurator_tables(db, system, "vllm", compact=True)
    rows = list(t.rows)
    vidur_files: list[str] = []
    if vidur_dir is not None and system in VIDUR_FOR_AIC:
        extra, vidur_files = vidur_elementwise_rows(Path(vidur_dir), VIDUR_FOR_AIC[system])
        rows += extra
    table, spikes = drop_spikes(_dedupe(pd.DataFrame(rows, columns=list(TABLE_COLUMNS))))
    table = table.sort_values(["family", "dtype", "op", "num_heads", "num_kv_heads", "head_dim", "n", "k", "width",
                               "world_size", "num_experts", "top_k", "weight_bits", "batch", "context", "tokens",
                               "message_bytes"],
                              key=lambda c: c.map(_FAMILY_ORDER) if c.name == "family" else c,
                              kind="stable").reset_index(drop=True)
    base_name = f"{gpu}-datasheet"
    base = load_profile(base_name)
    peak16 = float(base.peak_flops_for("bf16"))
    bw = float(base.memory_bandwidth_bytes_per_s or 0.0)
    eff, fit_report = fit_efficiency(table, peak16, bw)
    latency = float(((t.spec.get("gpu") or {}).get("mem_empirical_constant_latency")) or 3e-6)
    eff["kernel_latency_s"] = latency
    elem = table[table["family"] == "elementwise"]
    if len(elem):
        fit_report["elementwise_fallback_vs_vidur"] = streaming_errors(elem, bw, eff["memory"], latency)
    peaks = {d: float(base.peak_flops_for(d)) for d in ("bf16", "fp8")}
    full = t.full_gemm[(t.full_gemm["n"] >= 1024) & (t.full_gemm["k"] >= 1024)]
    compaction = gemm_compaction_errors(full, table, peaks, bw)
    loo = fit_summary(leave_one_out(table, peak=peak16, bw=bw))
    loo_report = {r["family"]: {"points": int(r["points"]), "median_abs_error": round(float(r["median_abs_error"]), 4),
                                "p90_abs_error": round(float(r["p90_abs_error"]), 4)}
                  for r in loo.to_dict("records")}
    if command and source is not None:      # the wheel by its file name (provenance has its sha256), not a local path
        command = command.replace(str(source), Path(source).name)
    prov = _default_provenance(db, t, vidur_files, eff, fit_report, compaction, loo_report, command)
    prov["dropped_spikes"] = {
        "rule": f"a point more than {SPIKE_FACTOR}x both neighbours on its curve (drop_spikes)",
        "rows": {f"{fam} {dt}": int(n) for (fam, dt), n in spikes.groupby(["family", "dtype"]).size().items()}}
    header = (f"# Default profile of the {base.device}: measured kernel tables (NVIDIA AIConfigurator"
              + (", Vidur" if vidur_files else "")
              + f"),\n# built by `llmplan import-profile default --system {system}`. The vendor-peak roofline of the "
              f"same GPU\n# is `{base_name}`. See provenance and hwprofiles/README.md.\n")
    return _write(out, name or gpu, base_name, table, prov, cost_model="kernel_table", efficiency=eff, header=header,
                  table_file="ops.csv.gz")


def _default_provenance(db: AicDatabase, t: AicTables, vidur_files: list[str], eff: dict[str, float],
                        fit_report: dict[str, Any], compaction: dict[str, Any], loo: dict[str, Any],
                        command: str | None) -> dict[str, Any]:
    measured = [f"GEMM {k.split()[1]}: m x n x k grid, m 1-32768, n and k 1024-65536 ({t.kernels[k]}, "
                f"{t.framework} {t.versions[k]})" for k in t.kernels if k.startswith("gemm")]
    measured += [f"{k.split()[0]} with a {k.split()[-1]} KV cache ({t.kernels[k]}, {t.framework} {t.versions[k]})"
                 for k in t.kernels if k.startswith("attn")]
    measured += [f"MoE routed experts, {k.split()[1]} weights: one layer's fused MoE by tokens x hidden x "
                 f"expert width x experts x top-k x TP (expert parallelism 1, {AIC_MOE_DISTRIBUTION} routing; "
                 f"{t.kernels[k]}, {t.framework} {t.versions[k]})" for k in t.kernels if k.startswith("moe ")]
    measured += [f"MLA block ({'prefill' if k.startswith('mla_prefill') else 'decode'}, {k.split()[1][1:]}-bit "
                 f"projections, {k.split()[-1]} KV cache): DeepSeek-V3's attention block per layer by heads x "
                 f"{'prompt' if k.startswith('mla_prefill') else 'batch x context'} ({t.kernels[k]}, "
                 f"{t.framework} {t.versions[k]})" for k in t.kernels if k.startswith("mla_")]
    if "all_reduce" in t.kernels:
        measured.append(f"all-reduce of 16-bit tensors on 2, 4 and 8 GPUs ({t.kernels['all_reduce']}, "
                        f"{t.versions['all_reduce']})")
    if vidur_files:
        measured.append("RMSNorm, rotary, SiLU-and-multiply, residual add: Vidur (fp16, 20 runs each)")
    extrapolated = [
        "GEMM widths off the grid (e.g. Llama-3 MLP widths 14336/28672, the LM head's vocabulary): the nearest "
        "measured n x k scaled by the roofline ratio of the two shapes (compaction.scaled_shape is that method's "
        "error on AIConfigurator shapes left out of this table)",
        "GEMM rows between grid points: log-log interpolation (compaction.thinned_m: its error on the rows left out)",
        "prefill attention after cached tokens (chunked prefill, prefix-cache hits): the batch-1 no-prefix curve "
        "times the roofline ratio of the two shapes",
        "decode attention beyond the measured batch or context: the last segment continued",
        "quantization int8/int4 and fp8 where the table has no fp8 rows: 16-bit rows x roofline ratio of the "
        "precisions; fp8 KV without fp8 rows: 16-bit rows read at the same bytes",
        "ops with no rows (KV-cache write, sampling" + ("" if vidur_files else ", RMSNorm, rotary, SiLU, residual add")
        + "): kernel_latency_s + bytes / (bandwidth x efficiency.memory), efficiencies fitted to this table",
        "engine CPU overhead (overhead.step_s, overhead.per_seq_s): assumed, from the datasheet profile; no kernel "
        "table measures the scheduler (llmplan validate fits it on a real engine)",
        "TP degrees other than 2, 4, 8 and tensor sizes beyond the all-reduce table: the interconnect roofline / "
        "the table's last point",
        "MoE shapes, TP degrees or dtypes off the table: the nearest measured MoE shape scaled by the ratio of the "
        "two shapes' MoE rooflines; a dtype without rows: the bf16 rows x the roofline ratio of the precisions; "
        "beyond 16,384 tokens: the roofline ratio from the last point; expert parallelism and its all-to-all: "
        "not modelled by kernel_table",
        "MLA heads per shard off the grid: the nearest measured heads x the heads ratio; prefill after cached "
        "tokens: the no-prefix prompt of equal causal work",
    ]
    meta = db.read_bytes(t.files[0].rsplit("/", 1)[0] + "/collection_meta.yaml").decode() \
        if db.exists(t.files[0].rsplit("/", 1)[0] + "/collection_meta.yaml") else ""
    legacy = "provenance: legacy" in meta
    prov: dict[str, Any] = {
        "imported_from": f"NVIDIA AIConfigurator kernel database: aiconfigurator-core {db.version} (PyPI), {db.origin}",
        "license": "AIConfigurator data: Apache-2.0 (c) NVIDIA Corporation & affiliates; this table is a derived "
                   "subset (compact grid, ms -> s, elements -> bytes)"
                   + ("; Vidur rows: MIT (c) Microsoft, microsoft/vidur @ 7d47513 data/profiling/" if vidur_files
                      else ""),
        "system": t.system, "device_reported": t.device, "framework": t.framework,
        "versions": t.versions, "kernels": t.kernels, "files": t.files + vidur_files,
        "date_measured": ("not recorded: the database's collection metadata for these tables says 'provenance: "
                          "legacy' (no collection date); the measurements predate the package release"
                          if legacy else "see the collection_meta.yaml of each file"),
        "measured": measured, "extrapolated": extrapolated,
        "compact_grid": {"gemm_m": ", ".join(map(str, COMPACT_GEMM_M)),
                         "gemm_n_and_k": ", ".join(map(str, COMPACT_GEMM_NK)),
                         "attention_heads/kv_heads/head_dim": ", ".join("/".join(map(str, h)) for h in COMPACT_HEADS),
                         "elementwise_tokens": ", ".join(map(str, COMPACT_TOKENS)) if vidur_files else "-",
                         "moe_tokens": ", ".join(map(str, COMPACT_MOE_TOKENS)),
                         "moe_tp": ", ".join(map(str, COMPACT_MOE_TP)),
                         "mla_heads": ", ".join(map(str, COMPACT_MLA_HEADS))},
        "compaction": compaction,
        "fit_leave_one_out": loo,
        "roofline_fit": {"efficiency": eff, **fit_report,
                         "kernel_latency_note": "kernel_latency_s is AIConfigurator's mem_empirical_constant_latency "
                                                f"for {t.system} (its systems/{t.system}.yaml), not fitted here"},
    }
    if command:
        prov["command"] = command
    return prov


def gemm_compaction_errors(full: pd.DataFrame, table: pd.DataFrame, peaks: dict[str, float],
                           bandwidth: float) -> dict[str, dict[str, Any]]:
    """How much the compact grid costs: every GEMM row of ``full`` (AIConfigurator's whole grid)
    that ``table`` dropped, predicted from ``table`` the way the cost model predicts it: along
    ``m`` by the log-log curve of its own ``n x k`` when that shape was kept (``thinned_m``), else
    scaled from the nearest kept shape by the roofline ratio (``scaled_shape``: the error a model
    whose widths are not in the table sees). Per dtype: rows, median and p90 |relative error|."""
    from simulator.cost.op_table import LogCurve, gemm_roof
    from simulator.cost.table import _nearest

    out: dict[str, dict[str, Any]] = {}
    for dtype, f in full.groupby("dtype"):
        kept = table[(table["family"] == "gemm") & (table["dtype"] == dtype)]
        if kept.empty:
            continue
        eb = 1.0 if dtype == "fp8" else 2.0
        peak = peaks.get(dtype, peaks.get("bf16", 1e15))
        curves = {}
        for (n, k), g in kept.groupby(["n", "k"]):
            pts = g.groupby("tokens")["median_s"].median()
            curves[(n, k)] = LogCurve(pts.index.to_numpy(np.float64), pts.to_numpy(),
                                      gemm_roof(n, k, peak, bandwidth, eb))
        shapes = pd.DataFrame(list(curves), columns=["n", "k"])
        errs: dict[str, list[float]] = {"thinned_m": [], "scaled_shape": []}
        for (n, k), g in f.groupby(["n", "k"]):
            m, t = g["tokens"].to_numpy(np.float64), g["median_s"].to_numpy(np.float64)
            if (n, k) in curves:
                known = set(kept[(kept["n"] == n) & (kept["k"] == k)]["tokens"])
                drop = np.array([x not in known for x in m])
                pred = curves[(n, k)](m[drop])
                errs["thinned_m"] += list(pred / t[drop] - 1.0)
            else:
                near = _nearest(shapes, ["n", "k"], [n, k])
                n0, k0 = int(near["n"]), int(near["k"])
                ratio = gemm_roof(n, k, peak, bandwidth, eb)(m) / gemm_roof(n0, k0, peak, bandwidth, eb)(m)
                errs["scaled_shape"] += list(curves[(n0, k0)](m) * ratio / t - 1.0)
        out[dtype] = {}
        for what, e in errs.items():
            a = np.abs(np.array(e))
            if len(a):
                out[dtype][what] = {"rows": len(a), "median_abs_error": round(float(np.median(a)), 4),
                                    "p90_abs_error": round(float(np.percentile(a, 90)), 4)}
    return out


#: Per family: the size a curve runs along, and the factor by which a point must exceed both its
#: neighbours on that curve to be dropped as a spike (a measurement hiccup, not a kernel).
SPIKE_AXES = {"gemm": "tokens", "attn_prefill": "tokens", "attn_decode": "context", "comm": "message_bytes",
              "moe": "tokens", "mla_prefill": "tokens", "mla_decode": "context"}
SPIKE_FACTOR = 1.5


def drop_spikes(table: pd.DataFrame, factor: float = SPIKE_FACTOR) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``table`` without isolated spikes, and the dropped rows: a point of a curve (one shape,
    along :data:`SPIKE_AXES`) more than ``factor`` times *both* its neighbours (the first point: both
    points after it). A real
    kernel change moves every later point; a spike moves one (A100 decode attention, batch 4 at
    512 tokens of context: 93.7 us between 22.6 and 27.4). The ``table`` models' decode curves
    are made non-decreasing along the context, so one spike would lift every longer context."""
    shape = ["op", "family", "dtype", "n", "k", "batch", "context", "num_heads", "num_kv_heads", "head_dim", "width",
             "world_size", "num_experts", "top_k", "weight_bits"]
    drop: list[int] = []
    for fam, axis in SPIKE_AXES.items():
        sel = table[table["family"] == fam]
        for _, g in sel.groupby([c for c in shape if c != axis], sort=False):
            if len(g) < 3:
                continue
            g = g.sort_values(axis)
            t = g["median_s"].to_numpy(np.float64)
            spike = t[1:-1] > factor * np.maximum(t[:-2], t[2:])
            drop += g.index[1:-1][spike].tolist()
            if t[0] > factor * max(t[1], t[2]):       # the smallest size costing more than the next two
                drop.append(g.index[0])
    return table.drop(index=drop), table.loc[drop]
