"""Traffic: when requests arrive and how many tokens they carry.

Arrival processes (``poisson``, ``gamma``, ``diurnal``, ``trace``, and the benchmark modes
``offline`` and ``closed_loop``) and length distributions (``lognormal``,
``geometric``, ``fixed``, ``uniform``, ``empirical``) are registered under the same strings the
YAML uses. Each takes an explicit ``numpy.random.Generator``; the simulation spawns one per stream
(arrivals, prompt lengths, output lengths, routing) from the scenario's seed, so changing one
stream leaves the others' draws unchanged (common random numbers across what-if comparisons).
Every distribution exposes its analytical ``mean`` where a closed form exists.

The whole arrival sequence is drawn up front as numpy arrays (:class:`Workload`); the SimPy
arrival process then walks it. A closed loop is the exception: its lengths (and think times) are
drawn up front too, but each arrival instant is set when the run sends the request.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.errors import ScenarioError
from simulator.registry import Registry
from simulator.scenario.config import (
    ClosedLoopArrival,
    DiurnalArrival,
    GammaArrival,
    OfflineArrival,
    PoissonArrival,
    Scenario,
    TraceArrival,
)
from simulator.scenario.limits import MAX_NUM_REQUESTS, MAX_TIME_S
from simulator.workload.lengths import Empirical, Fixed, make_length
from simulator.workload.levers import cap_lengths
from simulator.workload.send_delay import SEND_DELAY_S
from simulator.workload.traces import load_trace  # used here; notebooks and tests import it from here too


@dataclass(frozen=True)
class Workload:
    """The requests of one run, as arrays indexed by request id (sorted by arrival)."""

    arrival_time: np.ndarray      # float64 seconds
    num_prompt_tokens: np.ndarray  # int64
    max_tokens: np.ndarray        # int64 output tokens the request will generate
    rejected: np.ndarray          # bool: refused at arrival (over_length: reject)
    tier: np.ndarray | None = None  # int16 index into workload.tiers (None: no tiers)
    block_hashes: Any = None      # block_hashes.BlockHashes when prefix caching (or prefix routing) is on
    session: np.ndarray | None = None  # int64 session of each request (its first turn's index); None: no sessions
    prompt_id: np.ndarray | None = None  # int64 distinct prompt each request asks (workload.prompt_popularity)
    think_time: np.ndarray | None = None  # float64 s a closed-loop client pauses after each request ends (else None)
    send_delay: np.ndarray | None = None  # float64 s from that client's next send to its arrival (closed loop)
    turn_gap: np.ndarray | None = None  # float64 s from the previous turn's end to this turn's send (closed
    # sessions; 0 for first turns, whose arrival_time is drawn; later turns' arrival_time is NaN until sent)

    def __len__(self) -> int:
        return len(self.arrival_time)


# -- arrival processes ------------------------------------------------------------------------------
ARRIVALS: Registry[Callable[..., Any]] = Registry("arrival process", "workload.arrival.process")
register_arrival = ARRIVALS.register


class _RenewalArrivals:
    """Arrivals whose gaps are i.i.d.; subclasses define ``_gaps(n, rng)``."""

    rate: float

    def _gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None) -> np.ndarray:
        """Arrival instants (s) starting from 0: ``num_requests`` of them, or all before ``duration_s``."""
        if num_requests is not None:
            times = np.cumsum(self._gaps(num_requests, rng))
            return times if duration_s is None else times[times < duration_s]
        assert duration_s is not None
        chunks, t = [], 0.0
        chunk = max(16, int(self.rate * duration_s * 1.1) + 16)
        while t < duration_s:
            part = t + np.cumsum(self._gaps(chunk, rng))
            chunks.append(part)
            t = float(part[-1])
        times = np.concatenate(chunks)
        return times[times < duration_s]


@register_arrival("poisson")
class PoissonArrivals(_RenewalArrivals):
    """Poisson process: exponential gaps with mean ``1 / rate_per_s`` (never clipped)."""

    def __init__(self, cfg: PoissonArrival, scenario: Scenario) -> None:
        self.rate = cfg.rate_per_s

    def _gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.exponential(1.0 / self.rate, n)


@register_arrival("gamma")
class GammaArrivals(_RenewalArrivals):
    """Gamma renewal process: gap shape ``1 / cv^2``, mean ``1 / rate_per_s``."""

    def __init__(self, cfg: GammaArrival, scenario: Scenario) -> None:
        self.rate, self.cv = cfg.rate_per_s, cfg.cv
        self.shape = 1.0 / cfg.cv**2

    def _gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.gamma(self.shape, 1.0 / (self.rate * self.shape), n)


@register_arrival("diurnal")
class DiurnalArrivals:
    """Non-homogeneous Poisson process with rate ``rate_at(t)`` (daily profile x bursts).

    Drawn by thinning (Lewis & Shedler 1979): candidates from a homogeneous Poisson process at
    the profile's maximum rate, each kept with probability ``rate_at(t) / max``.
    """

    def __init__(self, cfg: DiurnalArrival, scenario: Scenario) -> None:
        self.cfg = cfg
        self.rate = cfg.mean_rate_per_s
        if cfg.hourly is not None:
            h = np.asarray(cfg.hourly, dtype=float)
            self._hourly = h / h.mean()
            profile_max = float(self._hourly.max())
        else:
            self._hourly = None
            assert cfg.peak_to_mean is not None   # the config gives exactly one of the two
            profile_max = float(cfg.peak_to_mean)
        burst_max = max([b.multiplier for b in cfg.bursts if b.multiplier > 1] + [1.0])
        self.max_rate = cfg.mean_rate_per_s * profile_max * burst_max

    def profile(self, t: np.ndarray) -> np.ndarray:
        """Relative rate (mean 1 over a period) at instants ``t``, without bursts."""
        cfg = self.cfg
        if self._hourly is not None:
            hour = (np.mod(t, cfg.period_s) / cfg.period_s * 24).astype(np.int64).clip(0, 23)
            return self._hourly[hour]
        assert cfg.peak_to_mean is not None
        return 1.0 + (cfg.peak_to_mean - 1.0) * np.cos(2 * np.pi * (t - cfg.peak_time_s) / cfg.period_s)

    def rate_at(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        rate = self.cfg.mean_rate_per_s * self.profile(t)
        for b in self.cfg.bursts:
            rate = np.where((t >= b.start_s) & (t < b.start_s + b.duration_s), rate * b.multiplier, rate)
        return rate

    def expected_count(self, duration_s: float, grid: int = 200_000) -> float:
        """Expected arrivals in ``[0, duration_s)`` (numerical integral of the rate)."""
        t = (np.arange(grid) + 0.5) * (duration_s / grid)
        return float(self.rate_at(t).sum() * duration_s / grid)

    def sample(self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None) -> np.ndarray:
        chunks, t, kept = [], 0.0, 0
        chunk = min(max(64, int(self.max_rate * min(duration_s or 3600.0, 3600.0)) + 64), 1 << 20)
        while True:
            cand = t + np.cumsum(rng.exponential(1.0 / self.max_rate, chunk))
            keep = cand[rng.random(chunk) * self.max_rate < self.rate_at(cand)]
            chunks.append(keep)
            kept += len(keep)
            t = float(cand[-1])
            if (duration_s is not None and t >= duration_s) or (duration_s is None and kept >= (num_requests or 0)):
                break
        times = np.concatenate(chunks)
        if duration_s is not None:
            times = times[times < duration_s]
        return times[:num_requests] if num_requests is not None else times


@register_arrival("trace")
class TraceArrivals:
    """Replay a trace file's arrival instants (shifted to start at 0, divided by ``speedup``)."""

    def __init__(self, cfg: TraceArrival, scenario: Scenario) -> None:
        self.cfg = cfg
        self.table = load_trace(scenario.resolve_path(cfg.path), cfg.format, field="workload.arrival.path")
        span = float(self.table["arrival_time"].iloc[-1]) if len(self.table) else 0.0
        if span / cfg.speedup > MAX_TIME_S:
            raise ScenarioError("workload.arrival.speedup", cfg.speedup, f"the trace's {span:.3g} s replay over "
                                f"{span / cfg.speedup:.3g} s; the longest simulated span is {MAX_TIME_S:.0e} s")
        self.rate = len(self.table) / span * cfg.speedup if span > 0 else math.inf

    def sample(self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None) -> np.ndarray:
        times = self.table["arrival_time"].to_numpy(dtype=float) / self.cfg.speedup
        if duration_s is not None:
            times = times[times < duration_s]
        return times[:num_requests] if num_requests is not None else times


@register_arrival("offline")
class OfflineArrivals:
    """Offline batch inference: every request arrives at t=0 (``num_requests`` of them)."""

    rate = math.inf

    def __init__(self, cfg: OfflineArrival, scenario: Scenario) -> None:
        _need_num_requests(cfg, scenario, "every request arrives at t=0")

    def sample(self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None) -> np.ndarray:
        assert num_requests is not None   # checked in __init__
        return np.zeros(num_requests)


@register_arrival("closed_loop")
class ClosedLoopArrivals:
    """A closed loop of ``concurrency`` clients (:class:`simulator.run.clients.ClosedLoopClients`).

    Arrival instants depend on when earlier requests end, so they are not drawn here: the
    requests' lengths are drawn up front as for any process and each arrival instant is NaN until
    the run sends that request.
    """

    rate = math.nan

    def __init__(self, cfg: ClosedLoopArrival, scenario: Scenario) -> None:
        self.cfg = cfg
        self.table = None
        """``replay``'s requests (None: lengths are drawn)."""
        if cfg.replay is None:
            _need_num_requests(cfg, scenario, "the lengths of every request are drawn up front")
            return
        field = "workload.arrival.replay.path"
        self.table = load_trace(scenario.resolve_path(cfg.replay.path), cfg.replay.format, field=field)
        extra = sorted(set(self.table.columns) & {"session", "prefix", "tier", "hash_ids"})
        if extra:
            raise ScenarioError(field, cfg.replay.path, f"gives each request more than its lengths "
                                f"({', '.join(extra)}), which a closed loop does not replay: use "
                                "workload.arrival.process: trace for it")
        n = scenario.num_requests
        if n is not None and n > len(self.table):
            raise ScenarioError("num_requests", n, f"the trace {cfg.replay.path} holds {len(self.table):,} requests; "
                                "a closed loop replaying it sends at most those (leave num_requests out for all)")
        if len(self.table) > MAX_NUM_REQUESTS and n is None:
            raise ScenarioError(field, cfg.replay.path, f"the trace holds {len(self.table):,} requests; a run holds at "
                                f"most {MAX_NUM_REQUESTS:,}: set num_requests (its first ones)")

    def sample(self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None) -> np.ndarray:
        if num_requests is None:
            assert self.table is not None   # checked in __init__
            num_requests = len(self.table)
        return np.full(num_requests, np.nan)

    def trace_lengths(self, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The first ``n`` requests' prompt and output tokens from ``replay`` (None: drawn)."""
        if self.table is None:
            return None
        return (self.table["num_prompt_tokens"].to_numpy(np.int64)[:n].copy(),
                self.table["max_tokens"].to_numpy(np.int64)[:n].copy())

    def think_times(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """For each request, the pause (s) after it ends before its client sends the next one, and
        the delay (s) until that next request reaches the engine (:data:`SEND_DELAY_S`)."""
        z = self.cfg.think_time_s
        think = rng.exponential(z, n) if self.cfg.think_time_dist == "exponential" and z > 0 else np.full(n, z)
        return think, rng.uniform(*SEND_DELAY_S, n)


def _need_num_requests(cfg: OfflineArrival | ClosedLoopArrival, scenario: Scenario, why: str) -> None:
    if scenario.num_requests is None:
        raise ScenarioError("num_requests", None, f"workload.arrival.process {cfg.process!r} needs num_requests "
                            f"({why}; duration_s alone does not say how many)")


# -- length distributions -----------------------------------------------------------------------------


def generate_workload(scenario: Scenario, max_model_len: int, rngs: dict[str, np.random.Generator]) -> Workload:
    """Draw every request of a run: arrival instants and token counts, checked against
    ``max_model_len`` according to ``workload.over_length``."""
    wl = scenario.workload
    prompt_id = None
    arrivals = ARRIVALS.lookup(wl.arrival.process)(wl.arrival, scenario)
    times = arrivals.sample(rngs["arrivals"], scenario.num_requests, scenario.duration_s)
    n = len(times)
    if n == 0:
        raise ScenarioError("duration_s", scenario.duration_s, "no request arrives within the duration")
    if n > MAX_NUM_REQUESTS and isinstance(wl.arrival, TraceArrival):
        raise ScenarioError("workload.arrival.path", wl.arrival.path, f"the trace replays {n:,} requests; a run "
                            f"holds at most {MAX_NUM_REQUESTS:,}: set num_requests (its first rows) or a shorter "
                            "duration_s")
    if n > MAX_NUM_REQUESTS:   # a duration that drew more than the expected count
        raise ScenarioError("num_requests", scenario.num_requests, f"{n:,} requests arrive; a run holds at most "
                            f"{MAX_NUM_REQUESTS:,}: set num_requests or a shorter duration_s")
    from_trace = arrivals.trace_lengths(n) if isinstance(arrivals, ClosedLoopArrivals) else None
    if isinstance(wl.arrival, TraceArrival) and wl.arrival.use_trace_lengths:
        prompt = arrivals.table["num_prompt_tokens"].to_numpy(np.int64)[:n].copy()
        output = arrivals.table["max_tokens"].to_numpy(np.int64)[:n].copy()
    elif from_trace is not None:
        prompt, output = from_trace
    else:
        prompt_dist = make_length(wl.prompt_tokens, scenario, "workload.prompt_tokens")
        output_dist = make_length(wl.output_tokens, scenario, "workload.output_tokens")
        prompt = prompt_dist.sample(n, rngs["prompt"])
        if isinstance(prompt_dist, Empirical) and isinstance(output_dist, Empirical) \
                and prompt_dist.path == output_dist.path:
            # Same file: draw whole rows so prompt and output lengths stay correlated.
            rows = rngs["prompt"].integers(0, len(prompt_dist.values), n)
            prompt, output = prompt_dist.values[rows], output_dist.values[rows]
        else:
            output = output_dist.sample(n, rngs["output"])
        if wl.prompt_popularity is not None:     # identical prompts: one length per distinct prompt
            prompt_id = zipf_prompts(wl.prompt_popularity, n, rngs["popularity"])
            prompt = prompt_dist.sample(wl.prompt_popularity.distinct_prompts, rngs["popularity"])[prompt_id]
        if scenario.client.max_prompt_tokens is None and scenario.client.max_tokens is None:
            _check_static_max(wl, prompt_dist, output_dist, max_model_len)   # caps may make it fit
    prompt, output = cap_lengths(scenario, prompt, output)   # client.max_prompt_tokens / max_tokens
    block_hashes = session = turn_gap = None
    if wl.sessions is not None or wl.prefix is not None or scenario.scheduler.enable_prefix_caching \
            or scenario.deployment.router == "prefix_affinity" or _trace_column(wl, arrivals, "session"):
        from simulator.workload.prefix import shape_prefixes  # prefixes, sessions, block identities
        times, prompt, output, block_hashes, session, turn_gap = shape_prefixes(scenario, arrivals, times, prompt,
                                                                                output, rngs)
        n = len(times)
    rejected = np.zeros(n, dtype=bool)
    over = prompt + output > max_model_len
    if over.any():
        i = int(np.flatnonzero(over)[0])
        if wl.over_length == "error":
            raise ScenarioError(
                "workload", f"request {i}: prompt {int(prompt[i])} + output {int(output[i])} tokens",
                f"exceeds max_model_len={max_model_len} ({int(over.sum())} of {n} requests do); set "
                "workload.over_length to reject or clip, or raise scheduler.max_model_len")
        if wl.over_length == "clip":
            output = np.where(over, np.maximum(max_model_len - prompt, 0), output)
        rejected = over if wl.over_length == "reject" else (output < 1)
        output = np.maximum(output, 1)
    tier = None
    if _trace_column(wl, arrivals, "tier"):
        tier = trace_tiers(wl, arrivals.cfg.path, arrivals.table["tier"].iloc[:n])
    elif wl.tiers is not None:
        shares = np.array([t.share for t in wl.tiers])
        tier = rngs["tier"].choice(len(shares), size=n, p=shares / shares.sum()).astype(np.int16)
    think = delay = None
    if isinstance(arrivals, ClosedLoopArrivals):
        think, delay = arrivals.think_times(n, rngs["think"])
    return Workload(np.asarray(times, dtype=float), prompt.astype(np.int64), output.astype(np.int64), rejected,
                    tier=tier, block_hashes=block_hashes, session=session, think_time=think, send_delay=delay,
                    prompt_id=prompt_id, turn_gap=turn_gap)


def _trace_column(wl: Any, arrivals: Any, column: str) -> bool:
    """The replayed trace gives ``column`` per request (the ``requests`` format's session_id, tier)."""
    return isinstance(wl.arrival, TraceArrival) and column in arrivals.table.columns


def trace_tiers(wl: Any, path: str, names: Any) -> np.ndarray:
    """Each request's index into ``workload.tiers`` from the trace's tier names.

    Raises:
        ScenarioError: the scenario declares no tiers, or a name is not one of them.
    """
    found = sorted(set(names))
    if wl.tiers is None:
        raise ScenarioError("workload.tiers", None, f"the trace {path} gives each request a tier ({', '.join(found)}); "
                            "declare them in workload.tiers (name, share, priority, slo)")
    index = {t.name: i for i, t in enumerate(wl.tiers)}
    unknown = [name for name in found if name not in index]
    if unknown:
        raise ScenarioError("workload.tiers", [t.name for t in wl.tiers], f"lacks the trace's tier(s) "
                            f"{', '.join(unknown)} ({path}); declare every tier the trace names")
    return np.array([index[name] for name in names], dtype=np.int16)


def _check_static_max(wl: Any, prompt_dist: Any, output_dist: Any, max_model_len: int) -> None:
    """A distribution whose declared max alone exceeds the context is a config error."""
    if wl.over_length != "error":
        return
    for field, dist in (("workload.prompt_tokens", prompt_dist), ("workload.output_tokens", output_dist)):
        cap = getattr(dist, "max", None)
        if cap is not None and not isinstance(dist, Empirical) and cap >= max_model_len:
            raise ScenarioError(f"{field}.max" if not isinstance(dist, Fixed) else f"{field}.value", cap,
                                f"must be below max_model_len={max_model_len} (prompt + output must fit)")


def zipf_prompts(cfg: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    """Which of ``cfg.distinct_prompts`` prompts each of ``n`` requests asks (Zipf popularity)."""
    k = np.arange(1, cfg.distinct_prompts + 1, dtype=float)
    weights = k ** -cfg.zipf_s
    cdf = np.cumsum(weights / weights.sum())
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), cfg.distinct_prompts - 1)
