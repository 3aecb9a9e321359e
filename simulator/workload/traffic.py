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

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.cluster.network import SEND_DELAY_S
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
from simulator.scenario.files import read_csv, require_file, trace_timestamps
from simulator.scenario.limits import MAX_MODEL_LEN, MAX_NUM_REQUESTS, MAX_TIME_S
from simulator.workload.lengths import Empirical, Fixed, make_length
from simulator.workload.levers import cap_lengths

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass(frozen=True)
class Workload:
    """The requests of one run, as arrays indexed by request id (sorted by arrival)."""

    arrival_time: np.ndarray      # float64 seconds
    num_prompt_tokens: np.ndarray  # int64
    max_tokens: np.ndarray        # int64 output tokens the request will generate
    rejected: np.ndarray          # bool: refused at arrival (over_length: reject)
    tier: np.ndarray | None = None  # int16 index into workload.tiers (None: no tiers)
    block_hashes: Any = None      # prefix_cache.BlockHashes when prefix caching (or prefix routing) is on
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
        _need_num_requests(cfg, scenario, "the lengths of every request are drawn up front")
        self.cfg = cfg

    def sample(self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None) -> np.ndarray:
        assert num_requests is not None   # checked in __init__
        return np.full(num_requests, np.nan)

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


def load_trace(path: Path, fmt: str, field: str = "path") -> pd.DataFrame:
    """Read a trace into columns ``arrival_time`` (s from the first request), ``num_prompt_tokens``,
    ``max_tokens`` (and ``hash_ids`` for Mooncake), sorted by arrival.

    Formats (:data:`TRACE_READERS`): ``azure`` — CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``
    (Splitwise, ISCA'24); ``mooncake`` — JSONL ``{timestamp (ms), input_length, output_length,
    hash_ids}`` (FAST'25); ``observation`` — an ``llmplan observe`` file or a ``vllm bench serve
    --save-detailed`` result, its completed requests (:mod:`simulator.workload.observation`).

    Raises:
        ScenarioError: missing file, empty file, missing columns or unparsable rows (named).
    """
    require_file(path, field, str(path), "trace file")
    if path.stat().st_size == 0:
        raise ScenarioError(field, str(path), "trace file is empty")
    if fmt not in TRACE_READERS:
        raise ScenarioError("workload.arrival.format", fmt,
                            f"unknown trace format; allowed: {', '.join(TRACE_READERS)}")
    df = TRACE_READERS[fmt](path, field)
    if df.empty:
        raise ScenarioError(field, str(path), "trace has no requests")
    unit = {"azure": "row", "mooncake": "line"}.get(fmt, "request")
    for col, src in (("num_prompt_tokens", _SOURCE[fmt][0]), ("max_tokens", _SOURCE[fmt][1])):
        bad = np.flatnonzero(df[col].to_numpy() < 1)
        if len(bad):
            first = df.iloc[bad][["source_row"]].min().iloc[0]   # earliest in the file, not in time
            row = df[df["source_row"] == first].iloc[0]
            raise ScenarioError(f"{path} {unit} {int(first)} column {src}", int(row[col]), "must be >= 1")
    last = df.iloc[-1]
    if last["arrival_time"] > MAX_TIME_S:
        raise ScenarioError(f"{path} {unit} {int(last['source_row'])} column {_SOURCE[fmt][2]}",
                            f"{last['arrival_time']:.3g} s after the first request",
                            f"the trace may span at most {MAX_TIME_S:.0e} s (about 3 years)")
    return df.drop(columns="source_row")


#: Trace column names for (prompt, output) per format, for error messages.
_SOURCE = {"azure": ("ContextTokens", "GeneratedTokens", "TIMESTAMP"),
           "mooncake": ("input_length", "output_length", "timestamp"),
           "observation": ("prompt_tokens", "output_tokens", "send_s")}


def _read_azure(path: Path, field: str) -> pd.DataFrame:
    import pandas as pd
    raw = read_csv(path, field)
    need = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    missing = [c for c in need if c not in raw.columns]
    if missing:
        raise ScenarioError(field, str(path), f"azure trace lacks column(s) {', '.join(missing)}; "
                            f"expected {','.join(need)}, found {','.join(map(str, raw.columns))}")
    ts = trace_timestamps(raw["TIMESTAMP"], path)
    _first_bad(ts.isna().to_numpy(), path, "TIMESTAMP", raw["TIMESTAMP"])
    lengths = {}
    for src, dst in (("ContextTokens", "num_prompt_tokens"), ("GeneratedTokens", "max_tokens")):
        col = pd.to_numeric(raw[src], errors="coerce")
        _first_bad((col.isna() | (col % 1 != 0) | (col.abs() > MAX_MODEL_LEN)).to_numpy(), path, src, raw[src])
        lengths[dst] = col.astype(np.int64)
    seconds = (ts - ts.min()).dt.total_seconds().to_numpy()
    # source_row: the file row, counting the header as row 1 (as a spreadsheet shows it).
    df = pd.DataFrame({"arrival_time": seconds, **lengths, "source_row": np.arange(len(raw)) + 2})
    return df.sort_values("arrival_time", kind="stable").reset_index(drop=True)


def _read_mooncake(path: Path, field: str) -> pd.DataFrame:
    import pandas as pd
    rows = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.decode("utf-8", errors="replace")   # for the message; json.loads checks the bytes
            if not line.strip():
                continue
            try:
                rec = json.loads(raw)
                lengths = [rec["input_length"], rec["output_length"]]
                if any(isinstance(v, bool) or not float(v).is_integer() or abs(v) > MAX_MODEL_LEN for v in lengths):
                    raise ValueError(f"token counts must be integers up to {MAX_MODEL_LEN:,}, got {lengths}")
                stamp = rec["timestamp"]
                if isinstance(stamp, bool) or not math.isfinite(float(stamp)):
                    raise ValueError(f"timestamp must be a finite number of milliseconds, got {stamp}")
                hash_ids = rec.get("hash_ids", [])
                if not isinstance(hash_ids, list) or not all(
                        isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 2**63 for h in hash_ids):
                    raise ValueError(f"hash_ids must be a list of integers in [0, 2^63), got {str(hash_ids)[:40]}")
                rows.append((float(stamp) / 1000.0, int(lengths[0]), int(lengths[1]), hash_ids, lineno))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ScenarioError(f"{path} line {lineno}", line.strip()[:60],
                                    f"not a mooncake record ({type(exc).__name__}: {exc}); expected JSON with "
                                    "timestamp, input_length, output_length") from None
    df = pd.DataFrame(rows, columns=["arrival_time", "num_prompt_tokens", "max_tokens", "hash_ids", "source_row"])
    if not df.empty:
        df["arrival_time"] -= df["arrival_time"].min()
    return df.sort_values("arrival_time", kind="stable").reset_index(drop=True)


def _read_observation(path: Path, field: str) -> pd.DataFrame:
    from simulator.workload.observation import trace_frame

    return trace_frame(path, field)


#: Trace format (``workload.arrival.format``) -> its reader: a frame of ``arrival_time`` (s, sorted),
#: ``num_prompt_tokens``, ``max_tokens`` and ``source_row`` (for messages), optionally ``hash_ids``.
TRACE_READERS: dict[str, Callable[[Path, str], pd.DataFrame]] = {
    "azure": _read_azure, "mooncake": _read_mooncake, "observation": _read_observation}


def _first_bad(mask: np.ndarray, path: Path, column: str, raw: pd.Series) -> None:
    import pandas as pd
    bad = np.flatnonzero(mask)
    if len(bad):
        i = int(bad[0])
        value = raw.iloc[i]
        shown = "(empty)" if pd.isna(value) else value
        raise ScenarioError(f"{path} row {i + 2} column {column}", shown,
                            f"not a valid value (integer token count up to {MAX_MODEL_LEN:,}, or timestamp)")


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
    if n > MAX_NUM_REQUESTS:   # a long trace, or a duration that drew more than the expected count
        raise ScenarioError("num_requests", scenario.num_requests, f"{n:,} requests arrive; a run holds at most "
                            f"{MAX_NUM_REQUESTS:,}: set num_requests or a shorter duration_s")
    if isinstance(wl.arrival, TraceArrival) and wl.arrival.use_trace_lengths:
        prompt = arrivals.table["num_prompt_tokens"].to_numpy(np.int64)[:n].copy()
        output = arrivals.table["max_tokens"].to_numpy(np.int64)[:n].copy()
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
            from simulator.cluster.request_path import zipf_prompts
            prompt_id = zipf_prompts(wl.prompt_popularity, n, rngs["popularity"])
            prompt = prompt_dist.sample(wl.prompt_popularity.distinct_prompts, rngs["popularity"])[prompt_id]
        if scenario.client.max_prompt_tokens is None and scenario.client.max_tokens is None:
            _check_static_max(wl, prompt_dist, output_dist, max_model_len)   # caps may make it fit
    prompt, output = cap_lengths(scenario, prompt, output)   # client.max_prompt_tokens / max_tokens
    block_hashes = session = turn_gap = None
    if wl.sessions is not None or wl.prefix is not None or scenario.scheduler.enable_prefix_caching \
            or scenario.deployment.router == "prefix_affinity":
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
    if wl.tiers is not None:
        shares = np.array([t.share for t in wl.tiers])
        tier = rngs["tier"].choice(len(shares), size=n, p=shares / shares.sum()).astype(np.int16)
    think = delay = None
    if isinstance(arrivals, ClosedLoopArrivals):
        think, delay = arrivals.think_times(n, rngs["think"])
    return Workload(np.asarray(times, dtype=float), prompt.astype(np.int64), output.astype(np.int64), rejected,
                    tier=tier, block_hashes=block_hashes, session=session, think_time=think, send_delay=delay,
                    prompt_id=prompt_id, turn_gap=turn_gap)


def _check_static_max(wl: Any, prompt_dist: Any, output_dist: Any, max_model_len: int) -> None:
    """A distribution whose declared max alone exceeds the context is a config error."""
    if wl.over_length != "error":
        return
    for field, dist in (("workload.prompt_tokens", prompt_dist), ("workload.output_tokens", output_dist)):
        cap = getattr(dist, "max", None)
        if cap is not None and not isinstance(dist, Empirical) and cap >= max_model_len:
            raise ScenarioError(f"{field}.max" if not isinstance(dist, Fixed) else f"{field}.value", cap,
                                f"must be below max_model_len={max_model_len} (prompt + output must fit)")
