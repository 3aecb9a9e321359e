"""How one replica's GPUs split the model (tensor, pipeline, expert and attention data
parallelism), and the links their collectives run over.

A replica is ``pipeline_parallel_size`` stages run one after the other, each a group of
``tensor_parallel_size`` GPUs, so it holds ``TP x PP`` GPUs; with attention data parallelism
(``data_parallel_size`` DP > 1) it holds DP such groups, ``TP x DP`` GPUs. Within a stage,
attention heads and
MLP widths split over the TP ranks (Megatron style: an all-reduce after attention and one after the
MLP of every layer). An MoE model's routed experts split one of two ways:

* ``expert_parallel_size`` 1: every GPU holds ``1/TP`` of every expert's width (vLLM's default);
* ``expert_parallel_size`` = TP (vLLM's ``--enable-expert-parallel`` with one data-parallel rank:
  EP = TP x DP): each GPU holds ``num_experts / EP`` whole experts, and the MoE block's all-reduce
  becomes an all-to-all dispatch of the tokens to their experts' ranks and a combine back;
* ``data_parallel_size`` DP > 1 with ``expert_parallel_size`` = TP x DP (vLLM's ``--data-parallel-size
  DP --enable-expert-parallel``, SGLang's ``--enable-dp-attention`` with its expert parallelism,
  "DEP"): each of the DP ranks (a TP group) runs attention, the dense layers and the shared experts
  on its own batch with its own KV cache; the routed experts are split over all ``TP x DP`` GPUs,
  and each MoE layer's all-to-all carries every rank's tokens to their experts and back;
* ``data_parallel_size`` DP > 1 with ``expert_parallel_size`` 1 (vLLM's ``--data-parallel-size DP``
  alone, SGLang's ``--enable-dp-attention``): the same ranks, every GPU holding ``1/(TP x DP)`` of
  every expert's width; each MoE layer gathers every rank's tokens on every GPU and reduce-scatters
  the output back.

GPUs are numbered stage by stage; ``interconnect.domain_gpus`` consecutive GPUs share the fast link
(NVLink, Infinity Fabric), and a collective or a stage boundary that leaves a domain runs over the
profile's ``inter_node`` link (InfiniBand, RoCE), or is refused when the profile has none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.errors import ScenarioError
from simulator.scenario.models import ModelSpec
from simulator.scenario.profiles import HardwareProfile, Interconnect


@dataclass(frozen=True, slots=True)
class Parallelism:
    """The split of one replica: TP ranks per stage, PP stages, EP ranks (1, TP, or TP x DP with
    attention data parallelism), DP attention ranks (with EP 1, the experts' widths split TP x DP ways)."""

    tensor: int = 1
    pipeline: int = 1
    expert: int = 1
    data: int = 1

    @classmethod
    def of(cls, deployment: Any) -> Parallelism:
        """The split a :class:`~simulator.scenario.deployment.DeploymentConfig` asks for."""
        return cls(deployment.tensor_parallel_size, deployment.pipeline_parallel_size,
                   deployment.expert_parallel_size, deployment.data_parallel_size)

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor * self.pipeline * self.data

    @property
    def is_tensor_only(self) -> bool:
        """No pipeline stages, no expert or data parallelism (what every cost model handles)."""
        return self.pipeline == 1 and self.expert == 1 and self.data == 1


@dataclass(frozen=True, slots=True)
class Link:
    """What one collective or point-to-point transfer runs at: per-GPU, per-direction bandwidth and
    a fixed cost per call."""

    bandwidth_bytes_per_s: float
    latency_s: float
    name: str = ""


def collective_link(profile: HardwareProfile, group_gpus: int) -> Link | None:
    """The link a collective over ``group_gpus`` GPUs of one stage runs at: the interconnect (its
    group bandwidth, see :meth:`Interconnect.group_bandwidth_bytes_per_s`) when the group fits in one
    domain, else the ``inter_node`` link (a hierarchical collective is held back by it). None when
    the profile has no such link."""
    ic = profile.interconnect
    if ic is not None and group_gpus <= ic.domain_gpus:
        return Link(ic.group_bandwidth_bytes_per_s(group_gpus), ic.latency_s, ic.name)
    return _link(profile.inter_node)


def stage_links(profile: HardwareProfile, par: Parallelism) -> list[Link | None]:
    """The link of each of the ``PP - 1`` stage boundaries: a point-to-point send inside a domain,
    or over ``inter_node`` where the boundary is also a domain boundary (boundary ``s`` lies between
    GPUs ``s x TP - 1`` and ``s x TP``). None where the needed link is missing."""
    ic = profile.interconnect
    links: list[Link | None] = []
    for s in range(1, par.pipeline):
        if ic is not None and (s * par.tensor) % ic.domain_gpus:   # GPUs s*TP - 1 and s*TP share a domain
            links.append(Link(ic.group_bandwidth_bytes_per_s(2), ic.latency_s, ic.name))
        else:
            links.append(_link(profile.inter_node))
    return links


def stage_layers(num_layers: int, pipeline: int) -> list[int]:
    """Layers of each of ``pipeline`` stages, as vLLM splits them (``get_pp_indices`` in
    ``vllm/distributed/utils.py``, vllm-project/vllm, Apache-2.0): ``num_layers // pipeline`` each,
    and the remainder one more each to the stages before the last, from the last but one backwards
    (the last stage also runs the final norm and the LM head)."""
    base, extra = divmod(num_layers, pipeline)
    layers = [base] * pipeline
    for i in range(2, extra + 2):
        layers[-i] += 1
    return layers


def _link(ic: Interconnect | None) -> Link | None:
    return Link(ic.bandwidth_bytes_per_s, ic.latency_s, ic.name) if ic is not None else None


def check_parallelism(model: ModelSpec, profile: HardwareProfile, par: Parallelism) -> None:
    """Refuse a split the model or the hardware cannot take.

    Raises:
        ScenarioError: expert or attention data parallelism on a dense model, experts that do not
            divide over the ranks; more stages than layers; a replica larger than the interconnect's domain on a
            profile without an ``inter_node`` link (each naming the sizes involved).
    """
    if par.data > 1 and not model.is_moe:
        raise ScenarioError("deployment.data_parallel_size", par.data,
                            f"{model.name} is a dense model (no num_experts): its data-parallel ranks would share "
                            "nothing, which is deployment.replicas; leave data_parallel_size at 1")
    if par.expert > 1:
        if not model.is_moe:
            raise ScenarioError("deployment.expert_parallel_size", par.expert,
                                f"{model.name} is a dense model (no num_experts): expert parallelism needs an MoE "
                                "model; leave expert_parallel_size at 1")
        if model.num_experts % par.expert:
            raise ScenarioError("deployment.expert_parallel_size", par.expert,
                                f"must divide num_experts={model.num_experts} of {model.name}")
    if par.pipeline > model.num_layers:
        raise ScenarioError("deployment.pipeline_parallel_size", par.pipeline,
                            f"more stages than {model.name}'s num_layers={model.num_layers}")
    if par.gpus_per_replica == 1 or profile.cost_model == "constant":
        return
    ic = profile.interconnect
    if ic is None:
        raise ScenarioError("hardware.interconnect", None,
                            f"{par.gpus_per_replica} GPUs per replica ({_split(par)}) need an interconnect in "
                            f"profile {profile.name!r}")
    if par.gpus_per_replica > ic.domain_gpus and profile.inter_node is None:
        field, value = (("deployment.data_parallel_size", par.data) if par.data > 1 else
                        ("deployment.pipeline_parallel_size", par.pipeline) if par.pipeline > 1 else
                        ("deployment.tensor_parallel_size", par.tensor))
        raise ScenarioError(
            field, value,
            f"{par.gpus_per_replica} GPUs per replica ({_split(par)}) span more than the {ic.domain_gpus} GPUs "
            f"profile {profile.name!r}'s {ic.name} joins "
            "(interconnect.domain_gpus), and the profile has no inter_node link; add hardware.inter_node (e.g. "
            "400 Gb/s InfiniBand per GPU: bandwidth_bytes_per_s 5.0e10) or use fewer GPUs per replica")


def _split(par: Parallelism) -> str:
    """``tensor_parallel_size 4 x pipeline_parallel_size 2`` (data_parallel_size when above 1)."""
    out = f"tensor_parallel_size {par.tensor} x pipeline_parallel_size {par.pipeline}"
    return out + (f" x data_parallel_size {par.data}" if par.data > 1 else "")
