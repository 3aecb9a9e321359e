"""AIConfigurator (``aiconfigurator-core`` on PyPI, Apache-2.0): NVIDIA's per-op kernel database (GEMM
``m x n x k`` in bf16 and fp8, context and generation attention with 16-bit and fp8 KV caches, MoE and
MLA, the frameworks' all-reduce and NCCL) for H100/H200/B200/A100/L40S, read from the wheel file, an
unpacked wheel or the installed package (:class:`AicDatabase`), and the compact grid the shipped
profiles keep."""
from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from calibrate.importers.writing import dedupe_shapes, op_row, write_profile
from simulator.cost.op_table import TABLE_COLUMNS, file_sha256
from simulator.errors import ScenarioError

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
    all_to_all: dict[str, Any] = field(default_factory=dict)
    """Where the expert-parallel all-to-all rows came from (:func:`_aic_all_to_all`); empty without them."""


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
        rows += [op_row("gemm", "gemm", ours, r["latency"] / 1e3, tokens=r["m"], n=r["n"], k=r["k"])
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
                        rows.append(op_row(op, op, ours, r["latency"] / 1e3, tokens=r["isl"], batch=1, context=0,
                                           num_heads=r["num_heads"], num_kv_heads=r["num_key_value_heads"],
                                           head_dim=r["head_dim"]))
                    else:   # a decode after ``step`` generated tokens of a 1-token prompt: step + 1 cached
                        rows.append(op_row(op, op, ours, r["latency"] / 1e3, tokens=r["batch_size"],
                                           batch=r["batch_size"], context=r["step"] + 1, num_heads=r["num_heads"],
                                           num_kv_heads=r["num_key_value_heads"], head_dim=r["head_dim"]))
    rows += _aic_all_reduce(db, base, framework, spec, files, kernels, versions)
    rows += _aic_moe(db, base, framework, files, kernels, versions, compact)
    rows += _aic_mla(db, base, framework, files, kernels, versions, compact)
    a2a_rows, a2a = _aic_all_to_all(db, base, framework, spec, files, kernels, versions)
    rows += a2a_rows
    return AicTables(system, framework, device, rows, files, kernels, versions, spec,
                     pd.concat(full, ignore_index=True), a2a)


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
        return [op_row("all_reduce", "comm", "bf16", r["latency"] / 1e3, message_bytes=2 * r["message_size"],
                       world_size=r["num_gpus"], tokens=max(1, int(r["message_size"])))
                for r in c.to_dict("records")]
    if not db.exists(f"{base}/comm/nccl"):
        return []
    vdir = _nccl_folder(db, base, spec)
    n = db.read_parquet(f"{vdir}/nccl_perf.parquet")
    n = n[(n["op_name"] == "all_reduce") & (n["nccl_dtype"] == "half")]
    files.append(f"{vdir}/nccl_perf.parquet")
    kernels["all_reduce"], versions["all_reduce"] = "NCCL", f"NCCL {vdir.rsplit('/', 1)[-1]}"
    return [op_row("all_reduce", "comm", "bf16", r["latency"] / 1e3, message_bytes=2 * r["message_size"],
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
        rows += [op_row("moe", "moe", ours, r["latency"] / 1e3, tokens=r["num_tokens"], n=r["inter_size"],
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
                    rows.append(op_row(op, op, ours, r["latency"] / 1e3, tokens=r["isl"], batch=1, context=0,
                                       num_heads=r["num_heads"], num_kv_heads=1, head_dim=576, weight_bits=bits))
                else:
                    rows.append(op_row(op, op, ours, r["latency"] / 1e3, tokens=r["batch_size"], batch=r["batch_size"],
                                       context=r["step"] + 1, num_heads=r["num_heads"], num_kv_heads=1, head_dim=576,
                                       weight_bits=bits))
    return rows


AIC_A2A_LOW_LATENCY = "deepep_ll"
AIC_A2A_HIGH_THROUGHPUT = "deepep_ht"
"""The DeepEP kernels of ``moe_a2a_perf`` the all-to-all rows keep: vLLM's ``--all2all-backend``
``deepep_low_latency`` (its docs: decode-dominated workloads; CUDA graphs, masked layout) and
``deepep_high_throughput`` (prefill-dominated; vLLM's 20 SMs), the pair a wide-EP deployment runs
(AIConfigurator prices generation with the first and context with the second)."""


def _nccl_folder(db: AicDatabase, base: str, spec: dict[str, Any]) -> str:
    """The NCCL version folder the system's YAML names (``misc.nccl_version``), else the newest."""
    wanted = str((spec.get("misc") or {}).get("nccl_version", ""))
    return f"{base}/comm/nccl/{wanted}" if wanted and db.exists(f"{base}/comm/nccl/{wanted}") else \
        db.newest(f"{base}/comm/nccl")


def _aic_all_to_all(db: AicDatabase, base: str, framework: str, spec: dict[str, Any], files: list[str],
                    kernels: dict[str, str], versions: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One MoE layer's expert-parallel dispatch and combine (``moe_dispatch``, ``moe_combine``) from vLLM's
    ``moe_a2a_perf`` (DeepEP under vLLM, one node): per phase, hidden size, top-k, experts and EP size,
    by tokens per rank (AIConfigurator's comm ops key per-rank tokens), the low-latency kernel's rows up
    to its largest measured count (256) and the high-throughput kernel's above it (a decode batch and a
    prefill chunk, as the two run in a wide-EP deployment). A system without that table (or another
    framework) gets NCCL's ``alltoall`` of 16-bit tensors (``all_to_all``, ``message_size`` elements to
    bytes), as the all-reduce falls back; neither: no rows. Returns the rows and their provenance."""
    comm = f"{base}/comm/{framework}"
    vdir = next((f"{comm}/{v}" for v in reversed(db.versions(comm))
                 if db.exists(f"{comm}/{v}/moe_a2a_perf.parquet")), None) if framework == "vllm" else None
    if vdir is not None:
        a = db.read_parquet(f"{vdir}/moe_a2a_perf.parquet")
        a = a[(a["op_name"] == "moe_a2a") & (a["node_num"] == 1)]
        ll = a[a["comm_backend"] == AIC_A2A_LOW_LATENCY]
        ht = a[a["comm_backend"] == AIC_A2A_HIGH_THROUGHPUT]
        if not ll.empty and not ht.empty:
            split = int(ll["num_tokens"].max())
            a = pd.concat([ll, ht[ht["num_tokens"] > split]], ignore_index=True)
            files.append(f"{vdir}/moe_a2a_perf.parquet")
            version = str(a["version"].iloc[0])
            ht_sms = sorted({int(x) for x in ht["sms"]})
            for phase in ("dispatch", "combine"):
                kernels[f"moe_{phase}"] = (f"DeepEP {AIC_A2A_LOW_LATENCY} up to {split} tokens per rank, "
                                           f"{AIC_A2A_HIGH_THROUGHPUT} ({'/'.join(map(str, ht_sms))} SMs) above")
                versions[f"moe_{phase}"] = version
            meta = db.read_yaml(f"{vdir}/collection_meta.yaml") if db.exists(f"{vdir}/collection_meta.yaml") else {}
            runtime = (meta or {}).get("runtime") or {}
            table = ((meta or {}).get("tables") or {}).get("moe_a2a_perf") or {}
            abis = runtime.get("backend_abis") or {}
            prov = {"source": f"{vdir}/moe_a2a_perf.parquet", "framework": f"{framework} {version}",
                    "image": runtime.get("image", "not recorded"),
                    "deep_ep": {b: (abis.get(b) or {}).get("deep_ep", "not recorded")
                                for b in (AIC_A2A_LOW_LATENCY, AIC_A2A_HIGH_THROUGHPUT)},
                    "collected_at": str(table.get("collected_at", "not recorded")),
                    "fabric": (runtime.get("abi") or {}).get("fabric_identity", "not recorded"),
                    "ep_sizes": sorted({int(x) for x in a["ep_size"]}), "nodes": 1,
                    "shapes": sorted({f"hidden {int(h)}, top-{int(k)} of {int(e)} experts" for h, k, e in
                                                          zip(a["hidden_size"], a["topk"], a["num_experts"],
                                                              strict=True)}),
                    "tokens_per_rank": f"{int(a['num_tokens'].min())}-{int(a['num_tokens'].max())}",
                    "backend_rule": f"{AIC_A2A_LOW_LATENCY} rows at <= {split} tokens per rank, "
                                    f"{AIC_A2A_HIGH_THROUGHPUT} rows above (vLLM --all2all-backend "
                                    "deepep_low_latency / deepep_high_throughput); the wire format is DeepEP's "
                                    "default under vLLM (the table's comm_dtype 'default')"}
            rows = [op_row(f"moe_{r['phase']}", "all_to_all", "bf16", r["latency"] / 1e6, tokens=r["num_tokens"],
                           width=r["hidden_size"], message_bytes=2 * r["num_tokens"] * r["hidden_size"],
                           world_size=r["ep_size"], num_experts=r["num_experts"], top_k=r["topk"])
                    for r in a.sort_values(["phase", "hidden_size", "topk", "num_experts", "ep_size",
                                            "num_tokens"]).to_dict("records")]
            return rows, prov
    if not db.exists(f"{base}/comm/nccl"):
        return [], {}
    vdir = _nccl_folder(db, base, spec)
    n = db.read_parquet(f"{vdir}/nccl_perf.parquet")
    n = n[(n["op_name"] == "alltoall") & (n["nccl_dtype"] == "half")]
    if n.empty:
        return [], {}
    if f"{vdir}/nccl_perf.parquet" not in files:
        files.append(f"{vdir}/nccl_perf.parquet")
    kernels["all_to_all"], versions["all_to_all"] = "NCCL alltoall", f"NCCL {vdir.rsplit('/', 1)[-1]}"
    prov = {"source": f"{vdir}/nccl_perf.parquet", "framework": f"NCCL {vdir.rsplit('/', 1)[-1]} (nccl-tests style "
            "alltoall of 16-bit tensors, no engine)", "gpus": sorted({int(x) for x in n["num_gpus"]}),
            "message_bytes": f"{2 * int(n['message_size'].min())}-{2 * int(n['message_size'].max())}"}
    rows = [op_row("all_to_all", "all_to_all", "bf16", r["latency"] / 1e3, message_bytes=2 * r["message_size"],
                   world_size=r["num_gpus"], tokens=max(1, int(r["message_size"])))
            for r in n.to_dict("records")]
    return rows, prov


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
    table = dedupe_shapes(pd.DataFrame(t.rows, columns=list(TABLE_COLUMNS)))
    prov = {"imported_from": f"aiconfigurator-core {db.version} kernel database ({system}, {framework}); {db.origin}",
            "license": "Apache-2.0 (c) NVIDIA; derived from the package's data",
            "files": t.files, "kernels": t.kernels, "versions": t.versions, "device_reported": t.device,
            **({"all_to_all": t.all_to_all} if t.all_to_all else {}),
            "notes": "GEMMs keyed by m x n x k (bf16 F.linear, fp8 W8A8 per-tensor); context attention at batch 1 "
                     "without cached prefix; generation attention per batch x context; attention rows' dtype is "
                     "the KV-cache dtype; all-reduce message_size converted from elements to bytes"}
    base = f"{AIC_SYSTEMS[system]}-datasheet"
    return write_profile(out, name or f"{AIC_SYSTEMS[system]}-aiconfigurator", base, table, prov,
                         cost_model="kernel_table")
