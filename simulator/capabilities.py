"""What combines with what: one table of the features each batching policy and each cost model
models, and of the features that exclude each other, checked once per scenario.

* :data:`POLICY_SUPPORT`: for every ``scheduler.policy`` (the keys of
  ``simulator.engine.scheduler.POLICIES``), each feature in :data:`POLICY_FEATURES`: supported
  (``YES``) or refused (a :class:`No` saying why and what to do instead).
* :data:`COST_MODEL_SUPPORT`: the same for every ``cost_model`` of a hardware profile (the keys of
  ``simulator.cost.base.COST_MODELS``) over :data:`COST_MODEL_FEATURES`.
* :data:`EXCLUSIONS`: pairs of features not modelled together, whatever the policy.

:func:`check_capabilities` applies the table; :func:`simulator.run.resolve.resolve` calls it
first, so ``simulate``, the planner and the dashboard all refuse the same combinations with the
same :class:`~simulator.errors.ScenarioError`, which names both features. Checks of one field's
value (ranges, a profile lacking a link bandwidth, a model that does not fit) stay with the code
that uses the value. :func:`markdown` renders the table for ``docs/scenario-reference.md``
(``docs/gen_scenario_reference.py``), so the documentation is the table.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.errors import ScenarioError
from simulator.scenario.models import MODEL_PRESETS, ModelSpec

if TYPE_CHECKING:  # pragma: no cover
    from simulator.scenario.config import Scenario


@dataclass(frozen=True)
class Feature:
    """A scenario feature: its name in messages and docs, the YAML that turns it on, and a detector."""

    title: str
    """Plural-friendly name used in messages: ``policies with <title>: ...``."""
    yaml: str
    """How a scenario turns it on, as YAML (docs and messages: ``... together with <yaml>``)."""
    on: Callable[[Scenario], Any]
    """``(field, value)`` of the setting that turns it on in this scenario, or None when off."""
    implies: tuple[str, ...] = ()
    """Features always on when this one is (its exclusions apply to this one too)."""


@dataclass(frozen=True)
class No:
    """A refused combination: why it is not modelled, and what to do instead (both optional)."""

    why: str = ""
    hint: str = ""


YES = True
"""A supported combination."""


@dataclass(frozen=True)
class Exclusion:
    """``feature`` is not modelled together with ``other``; the error names ``feature``'s field."""

    feature: str
    other: str
    why: str = ""
    hint: str = ""


def _on(field: str, value: Any) -> tuple[str, Any] | None:
    return (field, value) if value is not None and value is not False else None


def _set(obj: Any) -> str | None:
    return "set" if obj is not None else None


def _pool_sizes(sc: Scenario) -> tuple[str, Any] | None:
    dep = sc.deployment
    if dep.prefill_replicas is not None:
        return "deployment.prefill_replicas", dep.prefill_replicas
    return _on("deployment.decode_replicas", dep.decode_replicas)


def _quantization(sc: Scenario) -> tuple[str, Any] | None:
    q = sc.deployment.quantization
    return _on("deployment.quantization", q if q != "none" else None)


def _kv_cache_dtype(sc: Scenario) -> tuple[str, Any] | None:
    kv = sc.deployment.kv_cache_dtype
    return _on("deployment.kv_cache_dtype", kv if kv != "auto" else None)


def _model_has(check: Callable[[ModelSpec], bool]) -> Callable[[Scenario], tuple[str, Any] | None]:
    """A detector for a property of the scenario's model (a preset name or an inline spec; an
    unknown name is left to :func:`simulator.run.resolve.resolve_model` to report)."""
    def on(sc: Scenario) -> tuple[str, Any] | None:
        spec = sc.model if isinstance(sc.model, ModelSpec) else MODEL_PRESETS.get(sc.model)
        return ("model", spec.name) if spec is not None and check(spec) else None
    return on


def _above_one(field: str) -> Callable[[Scenario], tuple[str, Any] | None]:
    def on(sc: Scenario) -> tuple[str, Any] | None:
        size = getattr(sc.deployment, field)
        return _on(f"deployment.{field}", size if size > 1 else None)
    return on


FEATURES: dict[str, Feature] = {
    "prefix_caching": Feature("prefix caching", "scheduler.enable_prefix_caching: true", lambda sc: _on(
        "scheduler.enable_prefix_caching", sc.scheduler.enable_prefix_caching)),
    "speculative_decoding": Feature("speculative decoding", "speculative_config", lambda sc: _on(
        "speculative_config", sc.speculative_config.method if sc.speculative_config else None)),
    "swap_preemption": Feature("swap preemption", "scheduler.preemption_mode: swap", lambda sc: _on(
        "scheduler.preemption_mode", "swap" if sc.scheduler.preemption_mode == "swap" else None)),
    "pool_sizes": Feature("prefill/decode pool sizes", "deployment.prefill_replicas / decode_replicas",
                          _pool_sizes),
    "client_timeout": Feature("client timeouts", "client.timeout_s",
                              lambda sc: _on("client.timeout_s", sc.client.timeout_s)),
    "queue_delay_shedding": Feature("queue-delay shedding", "admission.max_queue_delay_s", lambda sc: _on(
        "admission.max_queue_delay_s", sc.admission.max_queue_delay_s)),
    "autoscaler": Feature("the autoscaler", "deployment.autoscaler",
                          lambda sc: _on("deployment.autoscaler", _set(sc.deployment.autoscaler))),
    "fleet": Feature("fleets of regions", "fleet", lambda sc: _on("fleet", _set(sc.fleet))),
    "model_pools": Feature("model pools", "deployment.pools", lambda sc: _on(
        "deployment.pools", [p.name for p in sc.deployment.pools] if sc.deployment.pools else None)),
    "network": Feature("client networks", "network", lambda sc: _on("network", _set(sc.network))),
    "output_cap": Feature("output caps", "client.max_tokens",
                          lambda sc: _on("client.max_tokens", sc.client.max_tokens)),
    "prompt_trimming": Feature("prompt trimming", "client.max_prompt_tokens",
                               lambda sc: _on("client.max_prompt_tokens", sc.client.max_prompt_tokens)),
    "sessions": Feature("multi-turn sessions", "workload.sessions",
                        lambda sc: _on("workload.sessions", _set(sc.workload.sessions))),
    "shared_prefixes": Feature("shared prefixes", "workload.prefix",
                               lambda sc: _on("workload.prefix", _set(sc.workload.prefix))),
    "quantization": Feature("weight quantization", "deployment.quantization", _quantization),
    "kv_cache_dtype": Feature("KV-cache dtypes", "deployment.kv_cache_dtype", _kv_cache_dtype),
    "multi_step": Feature("multi-step scheduling", "scheduler.num_scheduler_steps > 1", lambda sc: _on(
        "scheduler.num_scheduler_steps", sc.scheduler.num_scheduler_steps if sc.scheduler.num_scheduler_steps > 1
        else None)),
    "closed_sessions": Feature("closed-loop sessions", "workload.sessions.loop: closed", lambda sc: _on(
        "workload.sessions.loop", "closed" if sc.workload.sessions is not None and sc.workload.sessions.loop == "closed"
        else None), implies=("sessions",)),
    "closed_loop": Feature("closed-loop clients", "workload.arrival.process: closed_loop", lambda sc: _on(
        "workload.arrival.process", sc.workload.arrival.process if sc.workload.arrival.process == "closed_loop"
        else None)),
    "offline": Feature("offline batches", "workload.arrival.process: offline", lambda sc: _on(
        "workload.arrival.process", sc.workload.arrival.process if sc.workload.arrival.process == "offline"
        else None)),
    "pipeline": Feature("processing stages", "pipeline", lambda sc: _on("pipeline", _set(sc.pipeline))),
    "response_cache": Feature("response caches", "response_cache", lambda sc: _on(
        "response_cache.kind", sc.response_cache.kind if sc.response_cache else None)),
    "coalescing": Feature("request coalescing", "coalescing", lambda sc: _on("coalescing", _set(sc.coalescing))),
    "prompt_popularity": Feature("repeated prompts", "workload.prompt_popularity", lambda sc: _on(
        "workload.prompt_popularity", _set(sc.workload.prompt_popularity))),
    "moe": Feature("mixture-of-experts models", "model with num_experts", _model_has(lambda m: m.is_moe)),
    "mla": Feature("multi-head latent attention", "model with kv_lora_rank", _model_has(lambda m: m.is_mla)),
    "sliding_window": Feature("sliding-window attention", "model with sliding_window",
                              _model_has(lambda m: m.num_sliding_layers > 0)),
    "expert_parallel": Feature("expert parallelism", "deployment.expert_parallel_size > 1",
                               _above_one("expert_parallel_size")),
    "pipeline_parallel": Feature("pipeline parallelism", "deployment.pipeline_parallel_size > 1",
                                 _above_one("pipeline_parallel_size")),
    "data_parallel": Feature("attention data parallelism", "deployment.data_parallel_size > 1",
                             _above_one("data_parallel_size"), implies=("expert_parallel",)),
}
"""Every feature the table speaks of, in the order they are checked."""

POLICY_FEATURES = ("prefix_caching", "speculative_decoding", "swap_preemption", "pool_sizes",
                   "client_timeout", "queue_delay_shedding", "autoscaler", "fleet", "model_pools", "multi_step",
                   "closed_loop", "closed_sessions", "data_parallel", "pipeline_parallel")
"""The features whose support depends on ``scheduler.policy`` (the others work with every policy)."""


ARCHITECTURE_FEATURES = ("expert_parallel", "data_parallel", "pipeline_parallel", "moe", "mla", "sliding_window")
"""Model shapes and splits a cost model must declare it models (``_all_but(..., also=...)``): a row
written without them refuses them, so a cost model that times dense operators on one
tensor-parallel group cannot time an MoE model or a pipeline as if it were one."""

_UNDECLARED = No("the cost model does not declare that it models it", "use a roofline profile")


def _all_but(features: tuple[str, ...], also: tuple[str, ...] = (), **refused: No) -> dict[str, bool | No]:
    """A full row: ``YES`` for every feature but the ``refused`` ones, and but the
    :data:`ARCHITECTURE_FEATURES` not named in ``also``."""
    assert set(refused) <= set(features), set(refused) - set(features)
    return {key: refused.get(key, YES if key not in ARCHITECTURE_FEATURES or key in also else _UNDECLARED)
            for key in features}


_EITHER = "use one or the other"
_OWN_ADMISSION = No("its admission does not go through the prefix cache's admit/release")
_MOVES = No("a request moves from a prefill to a decode replica", "use admission.max_queue_len")
_BY_HAND = No("size the pools by hand")

_ONE_STEP = No("vLLM runs multi-step scheduling with its continuous batching",
               "use scheduler.policy: continuous, or num_scheduler_steps: 1")

_DP = ("data_parallel",)
_MICRO_BATCHES = ("pipeline_parallel",)
"""The policies whose batches a pipelined replica keeps in flight (:mod:`simulator.engine.pipeline`)."""
_NO_MICRO_BATCHES = No("a pipelined replica keeps continuous batches in flight, as vLLM does",
                       "use scheduler.policy: continuous or chunked_prefill")

POLICY_SUPPORT: dict[str, dict[str, bool | No]] = {
    "continuous": _all_but(POLICY_FEATURES, _DP + _MICRO_BATCHES, pool_sizes=No()),
    "chunked_prefill": _all_but(
        POLICY_FEATURES, _DP + _MICRO_BATCHES, pool_sizes=No(),
        swap_preemption=No("vLLM v1's chunked prefill only recomputes", "use preemption_mode: recompute"),
        multi_step=_ONE_STEP),
    "dynamic": _all_but(
        POLICY_FEATURES, _DP, prefix_caching=_OWN_ADMISSION, speculative_decoding=No(), pool_sizes=No(),
        multi_step=_ONE_STEP, pipeline_parallel=_NO_MICRO_BATCHES),
    "static": _all_but(
        POLICY_FEATURES, _DP, prefix_caching=_OWN_ADMISSION, speculative_decoding=No(), pool_sizes=No(),
        multi_step=_ONE_STEP, pipeline_parallel=_NO_MICRO_BATCHES),
    "disaggregated": _all_but(
        POLICY_FEATURES, speculative_decoding=No(), client_timeout=_MOVES,
        queue_delay_shedding=_MOVES, autoscaler=_BY_HAND, fleet=_BY_HAND, model_pools=No(hint=_EITHER),
        multi_step=_ONE_STEP, data_parallel=No("a replica's data-parallel ranks step together on one colocated "
                                               "pool"),
        pipeline_parallel=No("its prefill and decode pools are not pipelined"),
        closed_loop=No("its KV transfers and the clients' wake-ups are not combined in one decode-run horizon"),
        closed_sessions=No("its KV transfers and the sessions' next turns are not combined in one decode-run "
                           "horizon", "use loop: open")),
}
"""``scheduler.policy`` -> feature -> ``YES`` or :class:`No`. A policy missing here (a plug-in
registered without a row) supports none of :data:`POLICY_FEATURES`."""

COST_MODEL_FEATURES = ("quantization", "kv_cache_dtype", "data_parallel", "expert_parallel", "pipeline_parallel",
                       "moe", "mla", "sliding_window")
"""The features whose support depends on the profile's ``cost_model``."""

_OWN_DTYPE = No("it times the model in the dtype it was measured in",
                "serve the model as calibrated, or use a roofline profile")
_DENSE_OPS = No("its per-op tables time a dense model's GEMMs and attention on one tensor-parallel group",
                "use a roofline profile (e.g. the GPU's datasheet one)")

COST_MODEL_SUPPORT: dict[str, dict[str, bool | No]] = {
    # constant: fixed step times, whatever the model (the KV plan still follows its bytes)
    "constant": _all_but(COST_MODEL_FEATURES, also=ARCHITECTURE_FEATURES),
    "roofline": _all_but(COST_MODEL_FEATURES, also=ARCHITECTURE_FEATURES),
    "table": _all_but(COST_MODEL_FEATURES, quantization=_OWN_DTYPE, kv_cache_dtype=_OWN_DTYPE, moe=_DENSE_OPS,
                      mla=_DENSE_OPS, sliding_window=_DENSE_OPS, expert_parallel=_DENSE_OPS,
                      data_parallel=_DENSE_OPS, pipeline_parallel=_DENSE_OPS),
    # kernel_table: measured kernels per precision (else the 16-bit rows scaled), MoE and MLA blocks
    # included, experts over EP ranks with the all-to-all priced from the link, pipeline stages
    # splitting its layers with their sends priced from the profile's links
    "kernel_table": _all_but(COST_MODEL_FEATURES,
                             also=("moe", "mla", "sliding_window", "expert_parallel", "data_parallel",
                                   "pipeline_parallel")),
}
"""A profile's ``cost_model`` -> feature -> ``YES`` or :class:`No` (missing: none supported)."""

_CUTS_PREFIX = "trimming keeps a prompt's last tokens and would cut the shared prefix"

EXCLUSIONS: tuple[Exclusion, ...] = (
    Exclusion("multi_step", "speculative_decoding", "a verification step is not a plain decode step",
              "turn one of them off"),
    Exclusion("prefix_caching", "swap_preemption", "swapped blocks would lose their identities",
              "use preemption_mode: recompute, where re-admission hits the cache"),
    Exclusion("autoscaler", "model_pools", hint=_EITHER),
    Exclusion("fleet", "model_pools", hint=_EITHER),
    Exclusion("fleet", "autoscaler", hint=_EITHER),
    Exclusion("network", "fleet", hint="give the client RTTs in fleet.clients instead"),
    Exclusion("output_cap", "sessions",
              "a turn's prompt is built from the previous turn's drawn answer length",
              "cap workload.output_tokens.max instead"),
    Exclusion("prompt_trimming", "shared_prefixes", _CUTS_PREFIX),
    Exclusion("prompt_trimming", "sessions", _CUTS_PREFIX),
    Exclusion("closed_loop", "sessions", "a session's turns arrive on their own schedule, not when the client's "
              "last answer ended", "use workload.prefix for shared prompts"),
    Exclusion("offline", "sessions", "a session's later turns arrive after t=0", "use workload.prefix for "
              "shared prompts"),
    Exclusion("closed_loop", "network", "a client's round trip would delay its next request, but the network "
              "is applied after the run", "add the round trip to think_time_s"),
    Exclusion("closed_loop", "fleet", "the clients' round trips to their regions would delay their next "
              "requests, but they are applied after the run", "simulate one region"),
    Exclusion("closed_loop", "autoscaler", "decode runs do not stop at the autoscaler's ticks in a closed loop",
              "fix deployment.replicas"),
    Exclusion("closed_sessions", "network", "a round trip would delay the next turn, but the network is applied "
              "after the run", "add the round trip to workload.sessions.turn_gap_s"),
    Exclusion("closed_sessions", "fleet", "the round trips to the regions would delay the next turns, but they "
              "are applied after the run", "simulate one region"),
    Exclusion("closed_sessions", "autoscaler", "decode runs do not stop at the autoscaler's ticks in a closed "
              "loop", "fix deployment.replicas"),
    *(Exclusion(path, other, "the request path is planned for arrivals known before the run", hint)
      for path in ("pipeline", "response_cache", "coalescing")
      for other, hint in (("closed_loop", "use an open-loop arrival process"),
                          ("sessions", "drop workload.sessions"))),
    *(Exclusion(path, other, "answered and merged requests never reach a region or pool", "simulate one "
                "deployment") for path in ("response_cache", "coalescing") for other in ("fleet", "model_pools")),
    Exclusion("prompt_popularity", "sessions", "a session's prompts grow with its turns", "drop workload.sessions"),
    Exclusion("coalescing", "shared_prefixes", "coalescing needs workload.prompt_popularity, whose prompt "
              "lengths are drawn per distinct prompt", "drop workload.prefix"),
    Exclusion("prompt_popularity", "shared_prefixes", "prompt lengths are drawn per distinct prompt",
              "drop workload.prefix"),
    Exclusion("pipeline_parallel", "model_pools", "a pool sizes its replicas by its tensor-parallel size only",
              "give each pool its tensor_parallel_size, or serve one model"),
    Exclusion("data_parallel", "model_pools", "the pools would share one split whatever their models",
              "serve one model"),
    Exclusion("expert_parallel", "model_pools", "the pools would share one expert split whatever their models",
              "serve one model"),
    *(Exclusion("data_parallel", other, "a replica's data-parallel ranks are modelled for a fixed set of replicas",
                "fix deployment.replicas") for other in ("autoscaler", "fleet")),
    Exclusion("data_parallel", "pipeline_parallel", "each data-parallel rank is modelled as one stage",
              "use one or the other"),
    *(Exclusion("pipeline_parallel", other, why, hint) for other, why, hint in (
        ("speculative_decoding", "a verification step's draws are not kept per batch in flight",
         "turn one of them off"),
        ("swap_preemption", "the batches in flight share one KV cache but not its host copies",
         "use preemption_mode: recompute"),
        ("multi_step", "each batch in flight is one step", "use num_scheduler_steps: 1"),
        ("client_timeout", "a request in a batch in flight cannot leave it", "drop client.timeout_s"),
        ("queue_delay_shedding", "its shedding is checked at the steps of one batch", "use admission.max_queue_len"),
    )),
)
"""Features not modelled together, whatever the policy and cost model."""


# -- the check --------------------------------------------------------------------------------------
def check_capabilities(scenario: Scenario) -> None:
    """Refuse a scenario that combines features the table does not support together.

    Loads the hardware profile(s) only when a feature whose support depends on the cost model is
    on (with ``deployment.pools``, each pool's profile, quantization and KV-cache dtype).

    Raises:
        ScenarioError: on the first refused combination, naming the field that turns one feature
            on, its value, the other feature (or the policy / cost model), why, and what is allowed.
    """
    policy = scenario.scheduler.policy
    row = POLICY_SUPPORT.get(policy, {})
    for key in POLICY_FEATURES:
        use = FEATURES[key].on(scenario)
        support = row.get(key, No())
        if use is not None and support is not YES:
            field, value = use
            raise ScenarioError(field, value, _refusal(f"scheduler.policy {policy!r}", support, key, "policies",
                                                       POLICY_SUPPORT))
    for prefix, hardware, system in _systems(scenario):
        uses = [(key, FEATURES[key].on(system)) for key in COST_MODEL_FEATURES]
        uses = [(key, use) for key, use in uses if use is not None]
        if not uses:
            continue
        from simulator.scenario.profiles import load_profile
        profile = load_profile(hardware, field=f"{prefix}hardware" if prefix else "hardware",
                               base_dir=scenario.base_dir)
        row = COST_MODEL_SUPPORT.get(profile.cost_model, {})
        for key, (field, value) in uses:
            support = row.get(key, No())
            if support is not YES:
                field = prefix + field.removeprefix("deployment.") if prefix else field
                raise ScenarioError(field, value, _refusal(
                    f"cost model {profile.cost_model!r} of profile {profile.name!r}", support, key,
                    "cost models", COST_MODEL_SUPPORT))
    for ex in EXCLUSIONS:
        use, other = FEATURES[ex.feature].on(scenario), FEATURES[ex.other].on(scenario)
        if use is not None and other is not None:
            field, value = use
            raise ScenarioError(field, value, f"is not modelled together with {FEATURES[ex.other].yaml}"
                                + (f" ({ex.why})" if ex.why else "") + (f"; {ex.hint}" if ex.hint else ""))


def _refusal(what: str, support: Any, key: str, kind: str, table: dict[str, dict[str, Any]]) -> str:
    no = support if isinstance(support, No) else No()
    allowed = [name for name, row in table.items() if row.get(key) is YES]
    return (f"not modelled with {what}" + (f" ({no.why})" if no.why else "")
            + f"; {kind} with {FEATURES[key].title}: {', '.join(allowed) or 'none'}"
            + (f"; {no.hint}" if no.hint else ""))


def _systems(scenario: Scenario) -> list[tuple[str, Any, Scenario]]:
    """``(field prefix, hardware, scenario)`` of each served system: the scenario itself, or with
    ``deployment.pools`` each pool's view (its model, hardware, quantization and KV-cache dtype)."""
    dep = scenario.deployment
    if not dep.pools:
        return [("", scenario.hardware, scenario)]
    out = []
    for pool in dep.pools:
        pool_dep = dep.model_copy(update={
            "quantization": pool.quantization if pool.quantization is not None else dep.quantization,
            "kv_cache_dtype": pool.kv_cache_dtype if pool.kv_cache_dtype is not None else dep.kv_cache_dtype})
        hardware = pool.hardware if pool.hardware is not None else scenario.hardware
        model = pool.model if pool.model is not None else scenario.model
        view = scenario.model_copy(update={"deployment": pool_dep, "model": model})
        out.append((f"deployment.pools.{pool.name}.", hardware, view))
    return out


# -- the docs ---------------------------------------------------------------------------------------
def markdown() -> str:
    """The table as Markdown (a section of ``docs/scenario-reference.md``)."""
    def cell(support: Any) -> str:
        if support is YES:
            return "yes"
        no = support if isinstance(support, No) else No()
        return "no" + (f" ({no.why})" if no.why else "") + (f"; {no.hint}" if no.hint else "")

    def named(key: str) -> str:
        return f"{FEATURES[key].title} (`{FEATURES[key].yaml}`)"

    def grid(axis: str, table: dict[str, dict[str, Any]], keys: tuple[str, ...]) -> list[str]:
        lines = [f"| {axis} | " + " | ".join(named(k) for k in keys) + " |", "|---" * (len(keys) + 1) + "|"]
        for name, row in table.items():
            lines.append(f"| `{name}` | " + " | ".join(cell(row.get(k, No())) for k in keys) + " |")
        return lines

    everywhere = [k for k in FEATURES if k not in POLICY_FEATURES and k not in COST_MODEL_FEATURES]
    lines = ["## What combines with what", "",
             "Generated from `simulator/capabilities.py`, the table every scenario is checked against when "
             "it is resolved (`llmplan simulate`, the planner and the dashboard alike). A refused "
             "combination is an error naming the field that turns one feature on, its value, the other "
             "feature (or the policy or cost model), why, and what to do instead.", "",
             "### By batching policy (`scheduler.policy`)", "",
             *grid("policy", POLICY_SUPPORT, POLICY_FEATURES), "",
             "Every policy models " + ", ".join(named(k) for k in everywhere)
             + ", subject to the pairs below.", "",
             "### By cost model (the hardware profile's `cost_model`)", "",
             *grid("cost model", COST_MODEL_SUPPORT, COST_MODEL_FEATURES), "",
             "### Features not modelled together", "",
             "| feature | not together with | why | instead |", "|---|---|---|---|"]
    for ex in EXCLUSIONS:
        lines.append(f"| {named(ex.feature)} | {named(ex.other)} | {ex.why} | {ex.hint} |")
    return "\n".join(lines) + "\n"
