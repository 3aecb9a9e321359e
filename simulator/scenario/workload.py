"""The scenario's ``workload`` section: when requests arrive, how long their prompts and answers are,
shared prefixes, multi-turn sessions, tiers and repeated prompts.

Only the description lives here; :mod:`simulator.workload` draws the requests from it.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from simulator.errors import FieldError, check_unique_names
from simulator.scenario.frozen import Frozen
from simulator.scenario.limits import MAX_MODEL_LEN, MAX_NUM_REQUESTS, MAX_TIME_S, FiniteFloat, Integer, Name
from simulator.scenario.slo import SLOConfig

#: The ``workload.arrival.format`` values a trace may have: the readers registered in
#: :data:`simulator.workload.traces.TRACE_FORMATS`, named here so that a scenario is checked without
#: importing the workload package, which sits above this one (tests/test_scenario_layers.py checks that
#: the two agree).
TRACE_FORMAT_NAMES: tuple[str, ...] = ("azure", "mooncake", "requests", "openai", "observation")


def _trace_format(name: str) -> str:
    if name not in TRACE_FORMAT_NAMES:
        raise ValueError(f"unknown trace format; known: {', '.join(sorted(TRACE_FORMAT_NAMES))}")
    return name


class PoissonArrival(Frozen):
    """Poisson arrivals: exponential gaps with mean ``1 / rate_per_s``."""

    process: Literal["poisson"] = "poisson"
    rate_per_s: FiniteFloat = Field(gt=0)


class GammaArrival(Frozen):
    """Renewal arrivals with gamma gaps: ``cv`` > 1 is burstier than Poisson, < 1 smoother."""

    process: Literal["gamma"] = "gamma"
    rate_per_s: FiniteFloat = Field(gt=0)
    cv: FiniteFloat = Field(ge=0.01, le=100)
    """Coefficient of variation of the inter-arrival gaps (1 = Poisson)."""


class TraceArrival(Frozen):
    """Replay a request trace: arrival instants (and, unless overridden, lengths) from a file."""

    process: Literal["trace"] = "trace"
    path: str
    """The trace file; relative paths resolve against the scenario file."""
    format: str
    """``azure`` (CSV), ``mooncake`` (JSONL), ``requests`` (a request log, CSV or JSONL: timestamp,
    prompt_tokens, output_tokens, optional session_id, prefix_hash + prefix_tokens, tier) or ``openai``
    (JSONL completion responses: created, usage) or ``observation`` (an ``llmplan observe`` file or a ``vllm
    bench serve --save-detailed`` result, docs/calibration.md); see ``simulator.workload.traces.TRACE_FORMATS``."""
    speedup: FiniteFloat = Field(default=1.0, gt=0)
    """Divide every gap by this factor (2 = twice the trace's request rate)."""
    use_trace_lengths: bool = True
    """Take prompt/output lengths from the trace (else from ``prompt_tokens``/``output_tokens``)."""

    _known_format = field_validator("format")(_trace_format)


class Burst(Frozen):
    """A window in which the arrival rate is multiplied (a launch, a retry storm)."""

    start_s: FiniteFloat = Field(ge=0)
    duration_s: FiniteFloat = Field(gt=0)
    multiplier: FiniteFloat = Field(gt=0)


class DiurnalArrival(Frozen):
    """Non-homogeneous Poisson arrivals following a daily profile, drawn by thinning.

    Either ``peak_to_mean`` (a raised cosine peaking at ``peak_time_s``; at most 2, when the
    trough reaches zero) or ``hourly`` (24 relative rates, one per hour of the period, scaled so
    that their mean is ``mean_rate_per_s``). ``period_s`` compresses the day for quick runs.
    """

    process: Literal["diurnal"] = "diurnal"
    mean_rate_per_s: FiniteFloat = Field(gt=0)
    peak_to_mean: FiniteFloat | None = Field(default=None, ge=1, le=2)
    hourly: list[Annotated[FiniteFloat, Field(ge=0)]] | None = Field(default=None, min_length=24, max_length=24)
    period_s: FiniteFloat = Field(default=86400.0, gt=0)
    peak_time_s: FiniteFloat = Field(default=0.0, ge=0)
    """Instant of the cosine's peak within the period (``peak_to_mean`` profile only)."""
    bursts: list[Burst] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_profile(self) -> DiurnalArrival:
        if (self.peak_to_mean is None) == (self.hourly is None):
            raise ValueError("give exactly one of peak_to_mean or hourly")
        if self.hourly is not None and not any(self.hourly):
            raise ValueError("hourly needs at least one positive hour")
        return self


class LoopReplay(Frozen):
    """A trace whose requests a closed loop sends: their prompt and output lengths, in the order the
    trace sent them (its instants are not used: the loop sends each request as a client frees)."""

    path: str
    """The trace file; relative paths resolve against the scenario file."""
    format: str
    """As ``workload.arrival.format`` of a ``trace`` arrival (e.g. ``observation``: an ``llmplan
    observe`` closed loop or a ``vllm bench serve --max-concurrency`` result)."""

    _known_format = field_validator("format")(_trace_format)


class ClosedLoopArrival(Frozen):
    """A benchmark's closed loop (``max-concurrency`` in vLLM's ``benchmark_serving``): ``concurrency``
    clients start at t=0 and each sends its next request when its last one ended, completed or
    dropped (shed, rejected, timed out), after a think time. Requests are sent in request-id order;
    needs ``num_requests`` (``duration_s`` may end the sending earlier), unless ``replay`` gives the
    requests."""

    process: Literal["closed_loop"] = "closed_loop"
    concurrency: Integer = Field(ge=1, le=MAX_NUM_REQUESTS)
    """Clients, each with at most one request outstanding."""
    think_time_s: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TIME_S)
    """Mean pause between an answer's end and the same client's next request (0: at once)."""
    think_time_dist: Literal["fixed", "exponential"] = "fixed"
    """``fixed``: every pause is ``think_time_s``; ``exponential``: pauses drawn with that mean."""
    replay: LoopReplay | None = None
    """Send a trace's requests (their lengths, in the order it sent them; ``num_requests``: its first
    ones, default all) instead of drawing lengths from ``prompt_tokens``/``output_tokens``: how an observed closed
    loop replays as a loop, so a simulated engine faster or slower than the real one keeps
    ``concurrency`` requests outstanding as the clients did."""


class OfflineArrival(Frozen):
    """Offline batch inference (vLLM's ``benchmark_throughput``): all ``num_requests`` requests
    arrive at t=0; throughput is measured over the makespan."""

    process: Literal["offline"] = "offline"


def lengths_from_trace(arrival: Any) -> bool:
    """Whether ``arrival`` takes every request's lengths from a trace (a ``trace`` arrival with
    ``use_trace_lengths``, or a ``closed_loop`` replaying one)."""
    return (isinstance(arrival, TraceArrival) and arrival.use_trace_lengths) or \
        (isinstance(arrival, ClosedLoopArrival) and arrival.replay is not None)


ArrivalConfig = Annotated[PoissonArrival | GammaArrival | TraceArrival | DiurnalArrival | ClosedLoopArrival
                          | OfflineArrival, Field(discriminator="process")]


class LognormalLength(Frozen):
    """Lognormal token counts with the given mean, truncated to [min, max] by resampling."""

    dist: Literal["lognormal"] = "lognormal"
    mean: FiniteFloat = Field(gt=0, le=MAX_MODEL_LEN)
    sigma: FiniteFloat = Field(gt=0, le=10)
    """Standard deviation of the underlying normal (0.8 is a typical chat prompt spread)."""
    min: Integer = Field(default=1, ge=1, le=MAX_MODEL_LEN)
    max: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)


class GeometricLength(Frozen):
    """Geometric token counts on 1, 2, ... with the given mean (memoryless output lengths)."""

    dist: Literal["geometric"] = "geometric"
    mean: FiniteFloat = Field(ge=1, le=MAX_MODEL_LEN)
    max: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)


class FixedLength(Frozen):
    dist: Literal["fixed"] = "fixed"
    value: Integer = Field(ge=1, le=MAX_MODEL_LEN)


class UniformLength(Frozen):
    """Integer uniform on [min, max] inclusive."""

    dist: Literal["uniform"] = "uniform"
    min: Integer = Field(ge=1, le=MAX_MODEL_LEN)
    max: Integer = Field(ge=1, le=MAX_MODEL_LEN)

    @model_validator(mode="after")
    def _order(self) -> UniformLength:
        if self.max < self.min:
            raise FieldError("max", self.max, f"is below min ({self.min})")
        return self


class EmpiricalLength(Frozen):
    """Resample a column of a CSV (for example the ShareGPT length statistics).

    When prompt and output lengths are both empirical from the same file, whole rows are drawn,
    which keeps the correlation between prompt and output lengths.
    """

    dist: Literal["empirical"] = "empirical"
    path: str
    column: str


LengthConfig = Annotated[
    LognormalLength | GeometricLength | FixedLength | UniformLength | EmpiricalLength,
    Field(discriminator="dist"),
]


class PrefixConfig(Frozen):
    """Shared system prompts: a fraction ``share`` of requests (of sessions' first turns) start
    with one of ``num_prefixes`` system prompts of ``prefix_tokens`` tokens (equally likely). The
    prefix is part of the drawn prompt length, not added to it."""

    num_prefixes: Integer = Field(default=1, ge=1, le=MAX_NUM_REQUESTS)
    prefix_tokens: Integer = Field(ge=1, le=MAX_MODEL_LEN)
    share: FiniteFloat = Field(default=1.0, ge=0, le=1)
    short_prompt: Literal["error", "clip"] = "error"
    """A prefixed request whose prompt is not longer than ``prefix_tokens``: stop with an error
    naming it, or clip its prefix to its first ``prompt - 1`` tokens."""


class SessionsConfig(Frozen):
    """Multi-turn conversations and agent tasks: the arrival process gives each session's first turn;
    turn k+1 comes ``turn_gap_s`` after turn k *arrived* (``loop: open``, a chat whose user types on)
    or after turn k's answer *ended* (``loop: closed``: an agent or a user who waits for the answer,
    then thinks or runs tools). Turn k+1's prompt is turn k's prompt + turn k's answer +
    ``followup_tokens`` new tokens (the user's message, or the tools' results)."""

    turns: LengthConfig
    """Turns per session: the calls of an agent task (``{dist: fixed, value: 4}``, geometric, ...;
    an integer means fixed)."""
    turn_gap_s: FiniteFloat = Field(ge=0, le=MAX_TIME_S)
    """Mean gap before each later turn: from the previous turn's arrival (open loop) or from the end
    of its answer (closed loop: the think or tool time). 0 only with ``loop: closed``."""
    turn_gap_dist: Literal["exponential", "fixed"] = "exponential"
    """``exponential``: gaps drawn with mean ``turn_gap_s``; ``fixed``: every gap is ``turn_gap_s``."""
    followup_tokens: LengthConfig | None = None
    """New tokens of each later turn (default: ``workload.prompt_tokens``)."""
    loop: Literal["open", "closed"] = "open"
    """``open``: later turns arrive on a schedule drawn before the run, answered or not; ``closed``:
    each later turn is sent once the previous answer ended, and a turn that is dropped (shed,
    rejected, timed out) ends its session: the task fails and its remaining turns are never sent."""
    parallel_tool_calls: Integer = Field(default=1, ge=1, le=64)
    """Tools run in parallel between two turns: the gap is the slowest of this many draws and the next
    turn carries all their results (this many ``followup_tokens`` draws, summed)."""

    @model_validator(mode="after")
    def _gap_for_open_loop(self) -> SessionsConfig:
        if self.loop == "open" and self.turn_gap_s == 0:
            raise FieldError("turn_gap_s", 0, "must be greater than 0 in an open loop, which spaces the turns' "
                             "arrivals by it (with loop: closed, 0 sends the next turn as the answer ends)")
        return self

    @model_validator(mode="before")
    @classmethod
    def _int_turns(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("turns"), int) and not isinstance(data["turns"], bool):
            data = {**data, "turns": {"dist": "fixed", "value": data["turns"]}}
        return data


class TierConfig(Frozen):
    """A class of requests (e.g. interactive vs batch) with its share of traffic, its priority and SLO."""

    name: Name = Field(min_length=1)
    share: FiniteFloat = Field(gt=0, le=1)
    """Fraction of requests in this tier (shares sum to 1)."""
    priority: Integer = Field(default=0, ge=-(2**31), le=2**31 - 1)
    """vLLM's request priority: lower is served first under ``scheduling_policy: priority``."""
    slo: SLOConfig | None = None
    """This tier's objectives (default: the scenario's ``slo``)."""


class PromptPopularityConfig(Frozen):
    """Prompts drawn from a fixed set of distinct prompts with Zipf popularity: prompt ``i`` (0 the
    most popular) is asked with probability proportional to ``1 / (i + 1) ** zipf_s``. Requests
    that ask the same prompt have the same prompt length (drawn once per distinct prompt)."""

    distinct_prompts: Integer = Field(ge=1, le=10 * MAX_NUM_REQUESTS)
    """How many different prompts there are."""
    zipf_s: FiniteFloat = Field(default=1.0, ge=0, le=10)
    """Zipf exponent: 0 = all equally popular; about 1 for web-like popularity."""


class WorkloadConfig(Frozen):
    arrival: ArrivalConfig
    prompt_tokens: LengthConfig | None = None
    output_tokens: LengthConfig | None = None
    over_length: Literal["error", "reject", "clip"] = "error"
    """What to do with a request whose prompt + output exceeds ``max_model_len``: stop with an
    error naming it, reject it (counted in ``requests.rejected``), or clip its output length."""
    prefix: PrefixConfig | None = None
    """Shared system prompts (see :class:`PrefixConfig`); only prefix caching makes them matter."""
    sessions: SessionsConfig | None = None
    """Multi-turn sessions (see :class:`SessionsConfig`); not with trace arrivals."""
    tiers: list[TierConfig] | None = None
    """Request tiers, drawn independently per request with the given shares (None: one tier)."""
    prompt_popularity: PromptPopularityConfig | None = None
    """Repeated prompts (see :class:`PromptPopularityConfig`): what an exact response cache and
    request coalescing find identical. None: every prompt is distinct."""

    @model_validator(mode="after")
    def _tiers(self) -> WorkloadConfig:
        if self.tiers is not None:
            check_unique_names(self.tiers, "tiers", "tier")
            total = sum(t.share for t in self.tiers)
            if abs(total - 1.0) > 1e-6:
                raise FieldError("tiers", {t.name: t.share for t in self.tiers},
                                 f"tier shares must sum to 1, got {total:g}")
        return self

    @model_validator(mode="after")
    def _lengths_given(self) -> WorkloadConfig:
        from_trace = lengths_from_trace(self.arrival)
        for name in ("prompt_tokens", "output_tokens"):
            if not from_trace and getattr(self, name) is None:
                raise FieldError(name, None, "required unless a trace supplies the lengths: give a length "
                                 "distribution, e.g. {dist: lognormal, mean: 512, sigma: 0.8}")
        return self

    @model_validator(mode="after")
    def _prefix_not_on_hash_ids(self) -> WorkloadConfig:
        a = self.arrival
        if self.prefix is not None and isinstance(a, TraceArrival) and a.format == "mooncake" and a.use_trace_lengths:
            raise FieldError("prefix", self.prefix.model_dump(), "a mooncake trace's hash_ids already say which "
                             "prompt blocks are shared; drop workload.prefix or set "
                             "workload.arrival.use_trace_lengths: false")
        return self

    @model_validator(mode="after")
    def _sessions_need_synthetic_arrivals(self) -> WorkloadConfig:
        if self.sessions is not None and isinstance(self.arrival, TraceArrival):
            raise FieldError("sessions", self.sessions.model_dump(), "multi-turn sessions need a poisson or gamma "
                             "arrival process (a trace already fixes every request's arrival)")
        return self
