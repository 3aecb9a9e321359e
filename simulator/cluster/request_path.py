"""The request path around the engine: processing stages, the response cache, coalescing, TTUA.

A request is *sent* (its ``arrival_time`` in the records), passes the ``pipeline.pre`` stages,
then the response-cache lookup (``response_cache.lookup_ms``); a hit is answered there, a miss
goes to the engine (or, with coalescing, waits for an identical prompt already in flight), and
its answer passes the ``pipeline.post`` stages before the client can use it.

Each stage is a FCFS queue with ``workers`` servers (M/G/c when arrivals are Poisson): a job
takes the earliest free server. Pre stages do not depend on the engine, so every request's
instant at the engine is computed before the run with that recurrence; post stages likewise after
the run, on the engine's completion instants. The engine sees a request at
``engine_arrival_time``; the records measure TTFT, E2E and TTUA from the send instant, so the
stages' time (queueing included) is part of every latency the SLO judges, and ``queue_delay_s``
stays the engine's own queue.

TTUA (``ttua_s``): send to the moment the client holds a usable answer: the whole answer after
the post stages by default (always without streaming), or with ``client.usable_answer_tokens: N``
the N-th streamed token (placed at ``first_token + (N - 1) x TPOT``, the request's own mean
token pace) after the post stages.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from simulator.cluster.extension import MeasuredRun, Records, Run, RunExtension, SummaryBlock, as_frame

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

STAGE_STREAM = "pipeline"


def fcfs_departures(arrival: np.ndarray, service: np.ndarray, servers: int | None) -> np.ndarray:
    """Departure instants of jobs arriving at ``arrival`` (any order; ties keep index order) with
    ``service`` times at a FCFS queue with ``servers`` servers (None: unlimited, a pure delay)."""
    if servers is None:
        return arrival + service
    departure = np.empty(len(arrival))
    free = [0.0] * servers
    for i in np.argsort(arrival, kind="stable").tolist():
        start = max(float(arrival[i]), heapq.heappop(free))
        end = start + float(service[i])
        departure[i] = end
        heapq.heappush(free, end)
    return departure


def stage_times(cfg: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` service times (s) of a stage's ``latency_ms`` (fixed, exponential or lognormal)."""
    mean = cfg.mean_ms / 1000.0
    if cfg.dist == "fixed" or mean == 0:
        return np.full(n, mean)
    if cfg.dist == "exponential":
        return rng.exponential(mean, n)
    sigma2 = np.log1p(cfg.cv**2)
    return rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), n)


def through_stages(stages: list[Any], arrival: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Instants at which jobs arriving at ``arrival`` leave the last of ``stages`` (in order)."""
    t = arrival
    for stage in stages:
        t = fcfs_departures(t, stage_times(stage.latency_ms, len(t), rng), stage.workers)
    return t


STAGE_MAX_UTILIZATION = 0.8
"""Stage sizing: the busiest a stage's workers may be."""
STAGE_MAX_WAIT_SHARE = 0.1
"""Stage sizing: the mean queueing wait allowed, as a share of the stage's mean service time."""


def erlang_c_wait_s(servers: int, rate_per_s: float, mean_service_s: float) -> float:
    """Mean wait in an M/M/c queue (Erlang C); inf at or above saturation."""
    a = rate_per_s * mean_service_s
    if a >= servers:
        return float("inf")
    term, total = 1.0, 1.0                   # a^k / k!, summed for k < c (iteratively: no overflow)
    for k in range(1, servers):
        term *= a / k
        total += term
    top = term * a / servers / (1 - a / servers)
    return top / (total + top) * mean_service_s / (servers - a)


def stage_workers_needed(rate_per_s: float, mean_service_s: float) -> int:
    """Fewest workers that keep a stage at most :data:`STAGE_MAX_UTILIZATION` busy with a mean wait
    of at most :data:`STAGE_MAX_WAIT_SHARE` of its service time, as an M/M/c queue (Poisson
    arrivals, exponential service: a conservative reading of a less variable stage)."""
    if rate_per_s <= 0 or mean_service_s <= 0:
        return 1
    c = max(1, int(np.ceil(rate_per_s * mean_service_s / STAGE_MAX_UTILIZATION)))
    while erlang_c_wait_s(c, rate_per_s, mean_service_s) > STAGE_MAX_WAIT_SHARE * mean_service_s:
        c += 1
    return c


def stage_workers_text(scenario: Any, rate_per_s: float) -> str | None:
    """``name=workers;...`` each pipeline stage needs at ``rate_per_s`` (None without stages). Every
    stage is sized for the whole rate (post stages too: conservative when a cache answers some)."""
    if scenario.pipeline is None:
        return None
    stages = [*scenario.pipeline.pre, *scenario.pipeline.post]
    return ";".join(f"{st.name}={stage_workers_needed(rate_per_s, st.latency_ms.mean_ms / 1000.0)}" for st in stages)


class RequestPath(RunExtension):
    """Per-run state: engine arrival instants, the cache and the in-flight prompts.

    As the run's extension it answers cache hits and holds back coalesced requests when they are
    sent, hands a leader's answer to its followers when it ends, measures the records from the
    send instant, and reports the summary's ``request_path`` block."""

    sees_sends: ClassVar[bool] = True
    """The cache and coalescing decide at each send whether the request reaches an engine."""

    def __init__(self, scenario: Any, sent: np.ndarray, engine_arrival: np.ndarray, prompt_id: np.ndarray | None,
                 semantic_hit: np.ndarray | None, rng: np.random.Generator, frontend_s: float = 0.0) -> None:
        self.scenario = scenario
        self.send_time = sent
        self.frontend_s = frontend_s
        """The front end's time, before ``sent`` (a client's timeout runs from its own send)."""
        self.engine_arrival = engine_arrival
        self.prompt_id = prompt_id
        self.semantic_hit = semantic_hit
        self.rng = rng
        cache = scenario.response_cache
        self.cache_kind = cache.kind if cache is not None else None
        self.ttl_s = cache.ttl_s if cache is not None else None
        self.capacity = cache.capacity_entries if cache is not None else None
        self._answers: OrderedDict[int, float] = OrderedDict()   # prompt id -> instant stored (LRU order)
        self._used: dict[int, float] = {}                        # prompt id -> instant last stored or hit
        self.hit = np.zeros(len(sent), dtype=bool)
        self.lookups = 0
        window = scenario.coalescing.window_ms / 1000.0 if scenario.coalescing is not None else None
        self.coalesce_window_s = window
        self._inflight: dict[int, tuple[int, float]] = {}         # prompt id -> (leader request, sent to engine)
        self.followers: dict[int, list[int]] = {}
        self.coalesced_into = np.full(len(sent), -1, dtype=np.int64)

    # -- at the engine's door (SimPy time) ------------------------------------------------------------
    def cached(self, rid: int, now: float) -> bool:
        """Whether request ``rid``, looked up at ``now``, is answered from the response cache."""
        if self.cache_kind is None:
            return False
        self.lookups += 1
        if self.cache_kind == "semantic":
            hit = bool(self.semantic_hit is not None and self.semantic_hit[rid])
        else:
            assert self.prompt_id is not None
            pid = int(self.prompt_id[rid])
            stored = self._answers.get(pid)
            hit = stored is not None and (self.ttl_s is None or now - stored < self.ttl_s)
            if stored is not None and not hit:
                del self._answers[pid]                     # expired
                del self._used[pid]
            elif hit:
                self._answers.move_to_end(pid)
                self._used[pid] = now
        self.hit[rid] = hit
        return hit

    def leader_of(self, rid: int, now: float) -> int | None:
        """The in-flight request ``rid`` can share (coalescing), registering ``rid`` as its follower;
        None when it must go to the engine itself (it then leads its prompt)."""
        if self.coalesce_window_s is None or self.prompt_id is None:
            return None
        pid = int(self.prompt_id[rid])
        lead = self._inflight.get(pid)
        if lead is not None and now - lead[1] <= self.coalesce_window_s:
            self.followers.setdefault(lead[0], []).append(rid)
            self.coalesced_into[rid] = lead[0]
            return lead[0]
        self._inflight[pid] = (rid, now)
        return None

    def ended(self, rid: int, completed: bool, at: float) -> list[int]:
        """Engine request ``rid`` ended at ``at``: store its answer (if it completed) and return the
        requests that were waiting on it (coalesced followers)."""
        if self.prompt_id is None:
            return []
        pid = int(self.prompt_id[rid])
        lead = self._inflight.get(pid)
        if lead is not None and lead[0] == rid:
            del self._inflight[pid]
        if completed and self.cache_kind == "exact":
            self._store(pid, at)
        return self.followers.pop(rid, [])

    def _store(self, pid: int, at: float) -> None:
        """Store prompt ``pid``'s answer completed at ``at``. Replicas report the ends of the steps they
        run ahead of the clock out of time order (never past the next lookup), so an entry keeps its
        latest instant and the LRU order follows the instants, as if every end came in time order."""
        self._answers[pid] = max(at, self._answers.get(pid, -math.inf))
        used = self._used[pid] = max(at, self._used.get(pid, -math.inf))
        self._answers.move_to_end(pid)
        # Entries are kept in order of their last use: those used after ``used`` go back behind it
        # (a walk from the end, which stops at once when ends come in time order).
        later = []
        for k in reversed(self._answers):
            if k != pid:
                if self._used[k] <= used:
                    break
                later.append(k)
        for k in reversed(later):
            self._answers.move_to_end(k)
        if self.capacity is not None and len(self._answers) > self.capacity:
            evicted, _ = self._answers.popitem(last=False)
            del self._used[evicted]

    # -- the run's hooks ----------------------------------------------------------------------------
    def sent(self, run: Run, rid: int, now: float) -> bool:
        """A cache hit is answered now; a request sharing an identical prompt in flight waits for it."""
        if self.cached(rid, now):
            if self.gave_up(rid, now):   # the stages took longer than the client waits
                run.abandon(rid, now)
            else:
                run.answer(rid, now)
            return True
        return self.leader_of(rid, now) is not None

    def gave_up(self, rid: int, now: float) -> bool:
        """Whether request ``rid``'s client gave up (``client.timeout_s`` after its send) before ``now``."""
        from simulator.engine.deadlines import DEADLINE_EPS_S, client_deadline
        give_up = client_deadline(float(self.send_time[rid]), self.scenario.client.timeout_s, self.frontend_s)
        return give_up is not None and now > give_up + DEADLINE_EPS_S

    def finished(self, run: Run, ids: Sequence[int] | np.ndarray, at: float) -> int:
        """Coalesced requests get their leader's answer (or its fate) when it ends; a completed
        answer is stored in an exact response cache."""
        if self.prompt_id is None:
            return 0
        table = run.table
        for rid in list(ids):
            rid = int(rid)
            followers = self.ended(rid, bool(run.completed(rid) and table.replica[rid] >= 0), at)
            if not followers:
                continue
            f = np.asarray(followers, dtype=np.int64)
            table.status[f] = table.status[rid]
            table.replica[f] = table.replica[rid]
            table.num_output_tokens[f] = table.num_output_tokens[rid]
            table.first_scheduled_time[f] = table.arrival_time[f]
            table.first_token_time[f] = np.maximum(table.first_token_time[rid], table.arrival_time[f])
            table.finish_time[f] = table.finish_time[rid]
            run.finish(f, at)
        return 0

    def engine_columns(self, records: Records) -> pd.DataFrame:
        requests = as_frame(records)
        self.measure_from_send(requests)
        return requests

    def summary_blocks(self) -> Sequence[SummaryBlock]:
        return (SummaryBlock("request_path", "requests", self.block),)

    def block(self, run: MeasuredRun) -> dict[str, Any]:
        """The summary's ``request_path`` block, over the requests sent in the measurement window."""
        return self.summary(run.requests, run.in_window)

    # -- after the run ------------------------------------------------------------------------------
    def measure_from_send(self, req: pd.DataFrame) -> None:
        """Measure from the send instant, add the post stages, TTUA and the path's columns."""
        sc = self.scenario
        completed = (req["status"] == "finished_length_capped").to_numpy()
        finish = req["finish_time"].to_numpy(dtype=float).copy()
        post = np.zeros(len(req))
        stages = sc.pipeline.post if sc.pipeline is not None else []
        served = completed & ~self.hit
        if stages and served.any():
            idx = np.flatnonzero(served)
            post[idx] = through_stages(stages, finish[idx], self.rng) - finish[idx]
        req["engine_arrival_time"] = self.engine_arrival
        req["pre_s"] = self.engine_arrival - self.send_time
        req["post_s"] = post
        req["response_cache_hit"] = self.hit
        if self.coalesce_window_s is not None:
            req["coalesced_into"] = self.coalesced_into
        req["arrival_time"] = self.send_time
        req["queue_delay_s"] = req["first_scheduled_time"] - self.engine_arrival
        req["ttft_s"] = req["first_token_time"] - self.send_time
        req["e2e_s"] = np.where(completed, finish + post, finish) - self.send_time
        req.loc[self.hit, "tpot_s"] = np.nan                       # a cached answer has no token pace
        req.loc[self.hit, "queue_delay_s"] = 0.0

    def summary(self, req: pd.DataFrame, measured: np.ndarray) -> dict[str, Any]:
        """The ``request_path`` block of the summary (over the measurement window's requests)."""
        out: dict[str, Any] = {}
        sc = self.scenario
        if sc.response_cache is not None:
            hits = int(self.hit[measured].sum())
            n = int(measured.sum())
            engine = req.loc[measured & ~self.hit & (self.coalesced_into < 0)]
            out["response_cache"] = {
                "kind": sc.response_cache.kind, "lookups": n, "hits": hits, "hit_rate": hits / n if n else None,
                "engine_requests": len(engine),
                "output_tokens_saved": int(req.loc[measured & self.hit, "max_tokens"].sum()),
                "prompt_tokens_saved": int(req.loc[measured & self.hit, "num_prompt_tokens"].sum())}
        if sc.coalescing is not None:
            out["coalescing"] = {"merged": int((self.coalesced_into[measured] >= 0).sum())}
        if sc.pipeline is not None:
            out["stages"] = {"pre_s": _mean(req.loc[measured, "pre_s"]), "post_s": _mean(req.loc[measured, "post_s"])}
        return out


def _mean(x: pd.Series) -> float | None:
    return float(x.mean()) if len(x) else None


def plan_request_path(scenario: Any, workload: Any, rngs: dict[str, np.random.Generator],
                      frontend_s: float = 0.0) -> tuple[Any, RequestPath | None]:
    """The workload ``workload`` as the engine sees it (each request's arrival instant at the
    engine) and the run's :class:`RequestPath` (None when the scenario has no stages, response cache
    or coalescing: nothing changes then)."""
    sc = scenario
    arrival = workload.arrival_time
    if sc.pipeline is None and sc.response_cache is None and sc.coalescing is None:
        return workload, None
    rng = rngs[STAGE_STREAM]
    engine = through_stages(sc.pipeline.pre, arrival, rng) if sc.pipeline is not None else arrival.copy()
    semantic = None
    if sc.response_cache is not None:
        engine = engine + sc.response_cache.lookup_ms / 1000.0
        if sc.response_cache.kind == "semantic":
            semantic = rng.random(len(arrival)) < sc.response_cache.hit_rate
    return (dataclasses.replace(workload, arrival_time=engine),
            RequestPath(sc, arrival, engine, workload.prompt_id, semantic, rng, frontend_s))
