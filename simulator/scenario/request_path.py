"""The scenario's request-path sections: what a request meets outside the engine. The caller's levers
(``client``), load shedding (``admission``), pre- and post-processing stages (``pipeline``), a cache of
whole answers (``response_cache``), merging identical prompts in flight (``coalescing``) and the
client-side network (``network``).

Only the description lives here; :mod:`simulator.cluster.request_path`, :mod:`simulator.cluster.network`
and :mod:`simulator.workload.levers` act on it.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from simulator.errors import FieldError, check_unique_names
from simulator.scenario.frozen import Frozen
from simulator.scenario.limits import MAX_MODEL_LEN, FiniteFloat, Integer, Name


class RequestClientConfig(Frozen):
    """What the callers ask for and how long they wait (request-level levers, ``simulator.workload.levers``)."""

    stream: bool = True
    """Streamed responses: the client sees the first token when the engine emits it. False: the
    whole response arrives at once, so the client's TTFT is the end-to-end latency."""
    timeout_s: FiniteFloat | None = Field(default=None, gt=0)
    """The client abandons a request this long after it sent it (waiting or running; the front end's
    ``overhead.frontend_s`` and the ``pipeline.pre`` stages' time count); the engine frees its seat and
    KV blocks at the next step boundary. Counted in ``requests.timed_out``."""
    max_tokens: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """Cap on output tokens per request (vLLM ``SamplingParams.max_tokens``)."""
    max_prompt_tokens: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """Trim longer prompts to their last this-many tokens (vLLM ``truncate_prompt_tokens``)."""
    usable_answer_tokens: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """When the client can use the answer (TTUA, ``ttua_s``): after this many streamed tokens
    (and the post-processing stages); None: the whole answer (and always without streaming)."""


class StageLatencyConfig(Frozen):
    """A stage's service time per request."""

    dist: Literal["fixed", "exponential", "lognormal"] = "fixed"
    mean_ms: FiniteFloat = Field(ge=0, le=3_600_000)
    cv: FiniteFloat = Field(default=1.0, gt=0, le=20)
    """lognormal: coefficient of variation of the service time."""

    @model_validator(mode="before")
    @classmethod
    def _number(cls, data: Any) -> Any:
        return {"mean_ms": data} if isinstance(data, (int, float)) and not isinstance(data, bool) else data


class StageConfig(Frozen):
    """One processing stage outside the engine (tokenization, retrieval, rerank, safety filter,
    detokenization, output filter): a FCFS queue with ``workers`` servers."""

    name: Name = Field(min_length=1, max_length=64)
    latency_ms: StageLatencyConfig
    """Service time per request: a number (fixed, ms) or ``{dist, mean_ms, cv}``."""
    workers: Integer | None = Field(default=None, ge=1, le=1_000_000)
    """Servers of the stage (it queues when they are all busy); None: unlimited (a pure delay)."""


class PipelineConfig(Frozen):
    """Stages before the engine (``pre``: their time is in TTFT) and after it (``post``: in E2E and
    TTUA), each a queue of its own (see ``simulator.cluster.request_path``)."""

    pre: list[StageConfig] = Field(default_factory=list, max_length=16)
    post: list[StageConfig] = Field(default_factory=list, max_length=16)

    @model_validator(mode="after")
    def _names(self) -> PipelineConfig:
        check_unique_names(self.pre, "pre", "stage")
        check_unique_names(self.post, "post", "stage")
        return self


#: The response-cache fields of one kind only: field -> (its kind, why the other kind has no use for it).
_CACHE_KIND_FIELDS = {
    "hit_rate": ("semantic", "finds its hits from repeated prompts (workload.prompt_popularity)"),
    "ttl_s": ("exact", "hits with probability hit_rate and stores no entries to expire"),
    "capacity_entries": ("exact", "hits with probability hit_rate and stores no entries to count"),
}


class ResponseCacheConfig(Frozen):
    """A cache of whole answers in front of the engine: a hit is answered after the lookup without
    reaching the engine; a miss pays the lookup and goes on."""

    kind: Literal["exact", "semantic"]
    """exact: identical prompts (``workload.prompt_popularity``) hit an answer cached by an earlier
    request that completed, within ``ttl_s`` and ``capacity_entries`` (LRU); the hit rate is an
    outcome. semantic: each request hits with probability ``hit_rate`` (an input)."""
    hit_rate: FiniteFloat | None = Field(default=None, ge=0, le=1)
    """semantic: share of requests answered from the cache."""
    lookup_ms: FiniteFloat = Field(default=1.0, ge=0, le=60_000)
    """Time of a lookup, paid by hits and misses."""
    ttl_s: FiniteFloat | None = Field(default=None, gt=0)
    """exact: an entry expires this long after it was stored (None: never)."""
    capacity_entries: Integer | None = Field(default=None, ge=1)
    """exact: most answers held; the least recently used goes first (None: unbounded)."""

    @model_validator(mode="after")
    def _kind_fields(self) -> ResponseCacheConfig:
        if self.kind == "semantic" and self.hit_rate is None:
            raise FieldError("hit_rate", None, "required with kind: semantic (the share of requests answered from "
                             "the cache)")
        for name, (kind, why) in _CACHE_KIND_FIELDS.items():
            value = getattr(self, name)
            if value is not None and self.kind != kind:
                raise FieldError(name, value, f"applies to kind: {kind} only; kind {self.kind} {why}: drop {name}, "
                                 f"or use kind: {kind}")
        return self


class CoalescingConfig(Frozen):
    """Identical prompts (``workload.prompt_popularity``) in flight share one engine request: a
    request whose prompt was sent to the engine at most ``window_ms`` earlier and has not finished
    waits for that answer instead."""

    window_ms: FiniteFloat = Field(gt=0, le=3_600_000)


class AdmissionConfig(Frozen):
    """Load shedding in front of each replica: fast, counted rejection instead of unbounded queues."""

    max_queue_len: Integer | None = Field(default=None, ge=0)
    """Reject an arrival when its replica already has this many requests waiting."""
    max_queue_delay_s: FiniteFloat | None = Field(default=None, gt=0)
    """Reject a request still waiting for its first admission this long after arriving (checked at
    every step boundary, like Triton's queue-policy timeout with REJECT)."""



class ClientConfig(Frozen):
    """A client population: its share of the requests and its round-trip time to the servers."""

    name: Name = "clients"
    share: FiniteFloat = Field(default=1.0, gt=0)
    rtt_ms: FiniteFloat = Field(ge=0)


class NetworkConfig(Frozen):
    """Client-side network (see ``simulator.cluster.network``): adds ``client_ttft_s``/``client_e2e_s``,
    which the SLO then judges instead of the server-side TTFT and E2E."""

    clients: list[ClientConfig] = Field(min_length=1)
    setup_round_trips: Integer = Field(default=2, ge=0)
    """Round trips a new connection pays first (TCP 1 + TLS 1.3 1; TLS 1.2 adds one more)."""
    keepalive_reuse: FiniteFloat = Field(default=1.0, ge=0, le=1)
    """Fraction of requests sent on an already open connection (no set-up)."""
