"""The plan as Kubernetes settings: per quarter and region, a vLLM Deployment and its autoscaler.

``llmplan plan P --export k8s --out DIR`` writes ``DIR/k8s/<quarter>/<region>.yaml``, each a list of
manifests a platform team applies with ``kubectl apply -f``:

* a ``Deployment`` (apps/v1) of the chosen candidate's engine (the ``vllm/vllm-openai`` image, its
  scheduler limits as ``vllm serve`` flags, ``nvidia.com/gpu`` = GPUs per replica). Its ``replicas``
  is the count the plan verified at the design load (peak + the failover share, x (1 + headroom)):
  the N+1 fleet;
* for a candidate with ``deployment.autoscaler``, a ``HorizontalPodAutoscaler`` (autoscaling/v2):
  ``minReplicas`` the autoscaler's floor, ``maxReplicas`` the verified peak fleet (the plan's
  budget: the autoscaler never runs more than was reserved), the target the scenario's autoscaler
  scales on (``target_outstanding_per_replica``: requests running + waiting per replica, as the
  Pods metric ``vllm_num_requests_outstanding``) and ``scale_down_delay_s`` as the scale-down
  stabilization window. The Deployment then starts at the floor and the HPA owns the count.
  A candidate without an autoscaler is a fixed fleet: the Deployment alone.
* with model pools (``deployment.pools``), one Deployment per pool at its verified count.

The numbers each object rests on are in its ``llmplan/*`` annotations. Cells without a verified count
(``infeasible``) get no file (:func:`k8s_manifests` says which in ``skipped``).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from simulator.errors import ScenarioError

#: The engine image of every Deployment; a user pins the vLLM release they run.
VLLM_IMAGE = "vllm/vllm-openai:latest"
#: The per-pod metric the HPA scales on, served by a metrics adapter (docs/planner.md shows the rule).
OUTSTANDING_METRIC = "vllm_num_requests_outstanding"
#: Kubernetes caps an HPA's stabilization window at one hour.
MAX_STABILIZATION_S = 3600


@dataclass
class Export:
    """Files to write under ``--out`` (relative path -> text) and the cells given no file, with why."""

    files: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def dns_name(*parts: str) -> str:
    """A Kubernetes object name (RFC 1123 label: lowercase letters, digits, '-', at most 63) from
    free-form names such as regions and candidates."""
    text = "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts if p)
    text = re.sub(r"-+", "-", text).strip("-")[:63].rstrip("-")
    return text or "llmplan"


def check_export(kind: str, loaded: Any, out: Any) -> None:
    """Refuse an unknown ``--export`` kind, a worksheet-file ``--out`` or a plan this kind cannot write,
    before any simulation."""
    from simulator.planner.worksheet import worksheet_path

    if kind not in EXPORTS:
        raise ScenarioError("--export", kind, f"allowed: {', '.join(EXPORTS)}")
    if worksheet_path(out) == out:
        raise ScenarioError("--out", str(out), f"--export {kind} writes a folder of files: give a folder, not a "
                            ".csv name")
    EXPORTS[kind].check(loaded)


def check_k8s_export(loaded: Any) -> None:
    """Refuse, before any simulation, a plan whose candidates cannot be written as these objects.

    Raises:
        ScenarioError: a disaggregated candidate (prefill and decode replicas), or an autoscaler whose
            scale-down delay is longer than Kubernetes allows for a stabilization window.
    """
    for i, cand in enumerate(loaded.config.candidates):
        dep = loaded.candidate_scenarios[cand.name].deployment
        if dep.prefill_replicas is not None or dep.decode_replicas is not None:
            raise ScenarioError(f"candidates[{i}] ({cand.name})", "prefill_replicas/decode_replicas",
                                "--export k8s writes one Deployment per engine; disaggregated prefill/decode "
                                "is not exported")
        auto = dep.autoscaler
        if auto is not None and auto.scale_down_delay_s > MAX_STABILIZATION_S:
            raise ScenarioError(f"candidates[{i}] ({cand.name}): deployment.autoscaler.scale_down_delay_s",
                                auto.scale_down_delay_s, f"--export k8s: an HPA's scale-down stabilization window "
                                f"is at most {MAX_STABILIZATION_S} s")


def k8s_manifests(loaded: Any, worksheet: Any) -> Export:
    """The manifests of every feasible cell of ``worksheet`` (a :class:`PlanResult`'s ``worksheet``: the
    chosen candidate per quarter and region)."""
    from simulator.run.resolve import resolve

    out = Export()
    plan_name = loaded.config.name
    for row in worksheet.to_dict("records"):
        quarter, region = str(row["quarter"]), str(row["region"])
        if row["status"] != "ok" or row["replicas"] is None or _missing(row["replicas"]):
            out.skipped.append(f"{quarter} {region}: no candidate meets the SLO")
            continue
        sc = loaded.candidate_scenarios[row["candidate"]]
        system = resolve(sc)
        notes = {"llmplan/plan": plan_name, "llmplan/quarter": quarter, "llmplan/region": region,
                 "llmplan/candidate": str(row["candidate"]), "llmplan/peak-rps": _g(row["peak_rps"]),
                 "llmplan/failover-rps": _g(row["failover_rps"]), "llmplan/headroom": _g(row["headroom"]),
                 "llmplan/design-rps": _g(row["design_rps"]),
                 "llmplan/verified-replicas": str(int(row["replicas"]))}
        docs: list[dict[str, Any]] = []
        if sc.deployment.pools:
            counts = _pool_counts(str(row["pool_replicas"]))
            for pool, (_, pool_system) in zip(sc.deployment.pools, system.pools, strict=True):
                pool_sc = sc.model_copy(update={"scheduler": sc.scheduler.model_copy(update={
                    "max_num_seqs": pool.max_num_seqs or sc.scheduler.max_num_seqs})})
                tp = pool.tensor_parallel_size or sc.deployment.tensor_parallel_size
                docs.append(_deployment(dns_name(plan_name, region, pool.name), counts[pool.name], pool_sc,
                                        pool_system, tp, pool.quantization or sc.deployment.quantization,
                                        pool.kv_cache_dtype or sc.deployment.kv_cache_dtype,
                                        {**notes, "llmplan/pool": pool.name}))
        else:
            name = dns_name(plan_name, region)
            dep = sc.deployment
            n = int(row["replicas"])
            auto = dep.autoscaler
            floor = auto.min_replicas if auto is not None else n
            docs.append(_deployment(name, floor, sc, system, dep.gpus_per_replica,
                                    dep.quantization, dep.kv_cache_dtype, notes,
                                    tensor_parallel=dep.tensor_parallel_size, split=_split_args(dep)))
            if auto is not None:
                docs.append(_hpa(name, auto, n, notes))
        header = (f"# llmplan plan {_line(plan_name)}: {_line(quarter)}, region {_line(region)}, candidate "
                  f"{_line(str(row['candidate']))}.\n"
                  f"# Verified {int(row['replicas'])} replicas at the design load {_g(row['design_rps'])} req/s = "
                  f"(peak {_g(row['peak_rps'])} + failover share {_g(row['failover_rps'])}) x (1 + headroom "
                  f"{_g(row['headroom'])}).\n# Set --model to your weights (a Hugging Face id or a path) and pin the "
                  "image's vLLM release before applying.\n")
        path = f"k8s/{_file_name(quarter)}/{_file_name(region)}.yaml"
        out.files[path] = header + yaml.safe_dump_all(docs, sort_keys=False)
    return out


def _split_args(dep: Any) -> list[str]:
    """The ``vllm serve`` flags of the replica's split beyond TP (none for a TP-only replica)."""
    args: list[str] = []
    if dep.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(dep.pipeline_parallel_size)]
    if dep.data_parallel_size > 1:
        args += ["--data-parallel-size", str(dep.data_parallel_size)]
    if dep.expert_parallel_size > 1:
        args += ["--enable-expert-parallel"]
    return args


def _deployment(name: str, replicas: int, sc: Any, system: Any, gpus: int, quantization: str | None,
                kv_cache_dtype: str, notes: dict[str, str], *, tensor_parallel: int | None = None,
                split: list[str] | None = None) -> dict[str, Any]:
    """One engine's Deployment: ``replicas`` pods, each ``gpus`` GPUs, its limits as ``vllm serve`` flags."""
    s = sc.scheduler
    args = ["--model", system.model.name, "--served-model-name", system.model.name,
            "--tensor-parallel-size", str(tensor_parallel or gpus), *(split or []),
            "--max-num-seqs", str(s.max_num_seqs),
            "--max-num-batched-tokens", str(s.max_num_batched_tokens), "--block-size", str(s.block_size),
            "--gpu-memory-utilization", _g(s.gpu_memory_utilization)]
    if s.max_model_len is not None:
        args += ["--max-model-len", str(s.max_model_len)]
    if quantization:
        args += ["--quantization", quantization]
    if kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", kv_cache_dtype]
    if s.enable_prefix_caching:
        args += ["--enable-prefix-caching"]
    if s.policy == "chunked_prefill":
        args += ["--enable-chunked-prefill"]
    labels = _labels(name)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {**notes, "llmplan/hardware": system.profile.name}},
        "spec": {
            "replicas": int(replicas),
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": _labels(name)},
                "spec": {"containers": [{
                    "name": "vllm", "image": VLLM_IMAGE, "args": args,
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "resources": {"limits": {"nvidia.com/gpu": int(gpus)}},
                    "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
                }]},
            },
        },
    }


def _hpa(name: str, auto: Any, verified: int, notes: dict[str, str]) -> dict[str, Any]:
    target = auto.target_outstanding_per_replica
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "labels": _labels(name), "annotations": notes},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": int(auto.min_replicas),
            "maxReplicas": int(max(verified, auto.min_replicas)),
            "metrics": [{"type": "Pods", "pods": {
                "metric": {"name": OUTSTANDING_METRIC},
                "target": {"type": "AverageValue", "averageValue": _quantity(target)}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": math.ceil(auto.scale_down_delay_s)}},
        },
    }


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "llmplan"}


def _quantity(x: float) -> str:
    """A Kubernetes quantity: whole numbers as such, fractions in milli-units (``2.5`` -> ``2500m``)."""
    return str(int(x)) if float(x).is_integer() else f"{math.ceil(x * 1000)}m"


def _pool_counts(text: str) -> dict[str, int]:
    """``small=3;large=2`` (the worksheet's ``pool_replicas``) -> counts per pool."""
    out = {}
    for part in text.split(";"):
        name, _, count = part.rpartition("=")
        out[name] = int(count)
    return out


def _line(text: str) -> str:
    """A user's name inside a YAML comment: on one line."""
    return " ".join(text.split())


def _file_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "_"


def _g(x: Any) -> str:
    return "" if _missing(x) else f"{float(x):g}"


def _missing(x: Any) -> bool:
    try:
        return x is None or bool(math.isnan(float(x)))
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class Exporter:
    """One ``--export`` kind: its check before the plan runs, and what it writes from the result."""

    check: Callable[[Any], None]
    write: Callable[[Any, Any], Export]


#: ``--export`` kinds, keyed by the option's value.
EXPORTS = {"k8s": Exporter(check=check_k8s_export, write=k8s_manifests)}
