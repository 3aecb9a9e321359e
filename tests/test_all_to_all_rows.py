"""Measured expert-parallel all-to-all rows: imported into the default profiles with their provenance
(DeepEP under vLLM where AIConfigurator has it, NCCL's all-to-all elsewhere), read by the
``kernel_table`` model for attention data parallelism (DEP) inside one node, the link pricing where
they are absent or do not apply, and nothing else changed (dense models, EP 1 and EP = TP price
the same to the bit with and without the rows)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.cost.factory import make_cost_model
from simulator.cost.kernel_table import KernelTableCostModel, _a2a_remote_bytes, _monotone_table
from simulator.cost.op_table import OP_FAMILY, LogCurve, file_sha256, points, read_table
from simulator.scenario.models import MODEL_PRESETS
from simulator.scenario.parallel import Parallelism, collective_link
from simulator.scenario.profiles import HardwareProfile, load_profile
from simulator.scenario.quantization import resolve_precision

SERVED = {"deepseek-v3": "fp8", "qwen3-30b-a3b": None, "llama-3-70b": None, "mixtral-8x7b": None}
DEEPEP = ("h100-sxm", "h200", "b200")
NCCL = ("a100-80gb", "l40s")


def cost_model(profile: str | HardwareProfile, model: str, tp: int, dp: int = 1,
               ep: int | None = None) -> KernelTableCostModel:
    p, m = load_profile(profile), MODEL_PRESETS[model]
    par = Parallelism(tp, 1, tp * dp if ep is None else ep, dp)
    cm = make_cost_model(p, m, tp, resolve_precision(m, p, SERVED[model]), par)
    assert isinstance(cm, KernelTableCostModel)
    return cm


def without_all_to_all(name: str, tmp_path: Path) -> HardwareProfile:
    """The shipped profile with its table less the all-to-all rows: the table as it was before them."""
    p = load_profile(name)
    assert p.table is not None
    df = read_table(p.table, sha256=p.table_sha256)
    out = tmp_path / f"{name}-ops.csv"
    kept = pd.read_csv(p.table)
    kept = kept[df["family"] != "all_to_all"]
    kept.to_csv(out, index=False)
    return p.model_copy(update={"table": str(out), "table_sha256": file_sha256(out)})


def measured(profile: str, op: str, hidden: int, top_k: int, experts: int, ep: int) -> LogCurve:
    p = load_profile(profile)
    assert p.table is not None
    rows = _monotone_table(p.table, p.table_sha256, 1)
    sel = rows[(rows["op"] == op) & (rows["width"] == hidden) & (rows["top_k"] == top_k)
               & (rows["num_experts"] == experts) & (rows["world_size"] == ep)]
    pts = points(sel)
    return LogCurve(*pts, lambda v, x0=float(pts[0][0]): np.maximum(v, x0))


# -- the import --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", DEEPEP)
def test_default_profiles_hold_deepep_rows_with_provenance(name: str) -> None:
    p = load_profile(name)
    assert p.table is not None
    df = read_table(p.table, sha256=p.table_sha256)
    a2a = df[df["family"] == "all_to_all"]
    assert set(a2a["op"]) == {"moe_dispatch", "moe_combine"}
    assert set(a2a["world_size"]) == {8}
    assert {(7168, 8, 256), (4096, 6, 256)} <= set(zip(a2a["width"], a2a["top_k"], a2a["num_experts"], strict=True))
    assert a2a["tokens"].min() == 1 and a2a["tokens"].max() == 65536
    assert (a2a["message_bytes"] == 2 * a2a["tokens"] * a2a["width"]).all()
    prov = p.provenance
    sysname = prov["system"]
    assert f"systems/data/{sysname}/comm/vllm/0.24.0/moe_a2a_perf.parquet" in prov["files"]
    assert prov["all_to_all"]["image"].startswith("vllm/vllm-openai:v0.24.0@sha256:")
    assert prov["all_to_all"]["collected_at"] not in ("", "not recorded")
    assert "deepep_ll" in prov["kernels"]["moe_dispatch"] and "deepep_ht" in prov["kernels"]["moe_combine"]
    assert prov["versions"]["moe_dispatch"] == "0.24.0"


@pytest.mark.parametrize("name", NCCL)
def test_profiles_without_the_vllm_table_hold_nccl_all_to_all(name: str) -> None:
    p = load_profile(name)
    assert p.table is not None
    df = read_table(p.table, sha256=p.table_sha256)
    a2a = df[df["family"] == "all_to_all"]
    assert set(a2a["op"]) == {"all_to_all"} and set(a2a["world_size"]) == {2, 4, 8}
    assert p.provenance["kernels"]["all_to_all"] == "NCCL alltoall"
    assert p.provenance["all_to_all"]["source"].endswith("nccl_perf.parquet")


def test_all_to_all_ops_belong_to_their_family() -> None:
    assert {OP_FAMILY[op] for op in ("moe_dispatch", "moe_combine", "all_to_all")} == {"all_to_all"}


# -- the cost model ----------------------------------------------------------------------------------
def test_dep_reads_the_measured_rows_on_the_grid() -> None:
    """DeepSeek-V3 DEP8 on h200 at 16 tokens per rank (a measured count): each of the 58 MoE layers
    costs the measured dispatch plus combine, not the link's two transfers."""
    cm = cost_model("h200", "deepseek-v3", 1, dp=8)
    assert cm.sources["all_to_all"] == ("measured all-to-all rows (moe_dispatch + moe_combine), EP 8, "
                                        "hidden 7168, top-8 of 256 experts")
    t = 16
    disp, comb = (measured("h200", op, 7168, 8, 256, 8).scalar(t) for op in ("moe_dispatch", "moe_combine"))
    assert cm._comm_s(t) == pytest.approx(58 * (disp + comb), rel=1e-12)       # TP 1: no all-reduce
    link = collective_link(load_profile("h200"), 8)
    assert link is not None
    by_link = 2 * 58 * (link.latency_s + t * 7168 * 2 * 7 / 8 / link.bandwidth_bytes_per_s)
    assert 58 * (disp + comb) > 2 * by_link            # DeepEP's fixed cost per call dwarfs 16 tokens' bytes


def test_dep_step_moves_by_measured_minus_link(tmp_path: Path) -> None:
    old = cost_model(without_all_to_all("h200", tmp_path), "deepseek-v3", 1, dp=8)
    new = cost_model("h200", "deepseek-v3", 1, dp=8)
    assert "not measured" in old.sources["all_to_all"]
    for t in (16, 256, 4096):
        delta = new.decode_step_time_s(t, t * 1000) - old.decode_step_time_s(t, t * 1000)
        assert delta == pytest.approx(new._comm_s(t) - old._comm_s(t), rel=1e-9)


def test_another_shape_is_read_at_equal_bytes_per_rank() -> None:
    """Qwen3-30B-A3B (hidden 2048, top-8 of 128) DEP8 on h100-sxm: the nearest measured shape's curves
    read at the tokens that move the same bytes per rank."""
    cm = cost_model("h100-sxm", "qwen3-30b-a3b", 1, dp=8)
    src = cm.sources["all_to_all"]
    assert "scaled from hidden 3072, top-8 of 256 experts" in src and "equal bytes per rank" in src
    r = _a2a_remote_bytes(2048, 8, 128, 8) / _a2a_remote_bytes(3072, 8, 256, 8)
    for t in (1, 64, 1024):
        want = sum(measured("h100-sxm", op, 3072, 8, 256, 8).scalar(t * r) for op in ("moe_dispatch", "moe_combine"))
        assert cm._comm_s(t) == pytest.approx(48 * want, rel=1e-12)


def test_remote_bytes_count_the_ranks_a_token_reaches() -> None:
    assert _a2a_remote_bytes(1, 1, 8, 8) == pytest.approx(7 / 8)      # one expert: remote 7 times in 8
    assert _a2a_remote_bytes(1, 8, 8, 8) == pytest.approx(7.0)        # every expert: every other rank
    assert _a2a_remote_bytes(2, 2, 64, 8) == pytest.approx(2 * _a2a_remote_bytes(1, 2, 64, 8))


def test_nccl_rows_price_dep_where_deepep_was_not_measured() -> None:
    cm = cost_model("a100-80gb", "qwen3-30b-a3b", 1, dp=4)
    assert cm.sources["all_to_all"].startswith("measured NCCL all-to-all on 4 GPUs")
    p = load_profile("a100-80gb")
    assert p.table is not None
    rows = _monotone_table(p.table, p.table_sha256, 1)
    sel = rows[(rows["op"] == "all_to_all") & (rows["world_size"] == 4)]
    pts = points(sel, "message_bytes")
    curve = LogCurve(*pts, lambda v, x0=float(pts[0][0]): np.maximum(v, x0))
    t = 128
    assert cm._comm_s(t) == pytest.approx(48 * 2 * curve.scalar(t * 2048 * 2), rel=1e-12)


def test_fallback_to_the_link_without_rows(tmp_path: Path) -> None:
    cm = cost_model(without_all_to_all("h200", tmp_path), "deepseek-v3", 1, dp=8)
    link = collective_link(load_profile("h200"), 8)
    assert link is not None and "not measured" in cm.sources["all_to_all"]
    t = 64
    assert cm._comm_s(t) == pytest.approx(2 * 58 * (link.latency_s + t * 7168 * 2 * 7 / 8
                                                    / link.bandwidth_bytes_per_s), rel=1e-12)


def test_one_data_parallel_rank_keeps_the_link_pricing() -> None:
    """EP = TP without attention DP: the engines keep the MoE all-reduce (vLLM runs its all-to-all
    backend only with DP > 1), so the measured DeepEP rows do not apply."""
    cm = cost_model("h200", "deepseek-v3", 8)
    assert "not measured" in cm.sources["all_to_all"] and "one data-parallel rank" in cm.sources["all_to_all"]


@pytest.mark.parametrize(("model", "tp", "dp", "ep"), [
    ("llama-3-70b", 4, 1, 1),          # dense
    ("deepseek-v3", 8, 1, 1),            # MoE, experts TP-sharded
    ("deepseek-v3", 8, 1, 8),            # EP = TP: the link prices it, as before
    ("mixtral-8x7b", 2, 1, 1),
])
def test_other_deployments_price_the_same_to_the_bit(tmp_path: Path, model: str, tp: int, dp: int, ep: int) -> None:
    old = cost_model(without_all_to_all("h200", tmp_path), model, tp, dp, ep)
    new = cost_model("h200", model, tp, dp, ep)
    for n in (1, 32, 256):
        assert new.decode_step_time_s(n, n * 2000) == old.decode_step_time_s(n, n * 2000)
    assert new._per_tokens(4096) == old._per_tokens(4096)       # the prefill-sized step's GEMMs, norms and comm
