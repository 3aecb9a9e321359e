"""``simulate(scenario)``: build a fresh serving system from a scenario, run it, return records.

Wiring: an arrival source (the pre-drawn open-loop arrivals, or a closed loop that sends as requests
end) hands each request to the run, which routes it to one replica's waiting queue; each replica
runs its own engine loop (:mod:`simulator.engine.replica`). The replicas and the router come from
the deployment's shape (:mod:`simulator.run.topology`); every optional part of the run (the
request path, client networks, regions, pools, the autoscaler, closed loops) is an extension the
run calls at fixed moments (:class:`simulator.cluster.extension.RunExtension`). Randomness comes from
one ``SeedSequence`` spawned into independent streams (arrivals, prompt lengths, output lengths,
routing), so the same seed gives the same numbers bit for bit, and changing one stream's
distribution leaves the others' draws unchanged.
"""
from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import simpy

import simulator.metrics as metrics  # a run's summary is computed by metrics.summarize
from simulator.arguments import check_callback, check_flag, check_seed
from simulator.cluster.extension import Records, RunExtension
from simulator.cluster.frontend import FrontEnd, with_frontend
from simulator.cluster.network import NetworkLatencies, network_from_config
from simulator.cluster.request_path import RequestPath, plan_request_path
from simulator.engine.deadlines import queue_is_full
from simulator.engine.prefix_cache import prefix_cache_counters
from simulator.engine.replica import OwnArrivals
from simulator.engine.request import RequestStatus, RequestTable
from simulator.engine.steplog import StepLog
from simulator.run.clients import make_clients
from simulator.run.records import FrozenStepLog, SimulationResult, request_columns
from simulator.run.resolve import ResolvedSystem, check_scenario, resolve, spawn_rngs
from simulator.run.topology import Wiring, build_topology
from simulator.scenario.config import Scenario
from simulator.workload.levers import apply_client_view
from simulator.workload.traffic import Workload, generate_workload

ProgressCallback = Callable[[int, int], None]


# -- the run ---------------------------------------------------------------------------------------
def simulate(scenario: Scenario, *, on_progress: ProgressCallback | None = None, seed: int | None = None,
             fast_forward: bool = True) -> SimulationResult:
    """Run one seeded replication of ``scenario``.

    Args:
        scenario: a validated scenario (see :func:`simulator.scenario.config.load_scenario`).
        on_progress: called as ``on_progress(done, total)`` as requests finish (about 200 times a run).
        seed: overrides ``scenario.seed``.
        fast_forward: advance runs of identical decode steps in one event (same results; off only
            to verify exactly that).

    Raises:
        ScenarioError: a reference that does not resolve, a model that does not fit, bad traces.
    """
    wall0 = time.perf_counter()
    check_scenario(scenario)
    seed = check_seed("seed", seed)
    check_callback("on_progress", on_progress, "on_progress(done, total)")
    check_flag("fast_forward", fast_forward)
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    system = resolve(scenario)
    rngs = spawn_rngs(scenario.seed)
    # the workload as the engine sees it: behind the front end, through the stages, response cache and coalescing
    workload = with_frontend(generate_workload(scenario, system.max_model_len, rngs), system.frontend_s)
    workload, path = plan_request_path(scenario, workload, rngs, system.frontend_s)
    env = simpy.Environment()
    steps = StepLog(scenario.scheduler.block_size)
    run = _Run(env, scenario, system, workload, _request_table(scenario, workload), steps, rngs, on_progress,
               fast_forward, path)   # registers the processes
    with _collector_paused():
        env.run(until=scenario.max_sim_time_s)
        records = run.records()
    top = run.topology
    return SimulationResult(
        scenario, records, FrozenStepLog(*steps.freeze()), system, float(env.now), time.perf_counter() - wall0,
        summarize=metrics.summarize, num_replicas=len(top.replicas), num_gpus=top.num_gpus,
        engine_stats=top.engine_stats(), prefix_cache=prefix_cache_counters(top.replicas),
        summary_blocks=tuple(block for ext in run.extensions for block in ext.summary_blocks()))


def _request_table(scenario: Scenario, workload: Workload) -> RequestTable:
    table = RequestTable(workload)
    if scenario.workload.tiers is not None:
        table.priority = np.array([t.priority for t in scenario.workload.tiers], dtype=np.int64)[table.tier]
    return table


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The run allocates many small objects (step-log tuples, SimPy events) but no lasting reference
    cycles, so the cyclic collector's repeated scans of the growing logs are pure overhead (12% of
    a 100k-request run). Pause it for the run and restore the caller's setting."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc_was_enabled:
            gc.enable()


def run_extensions(scenario: Scenario, system: ResolvedSystem, path: RequestPath | None,
                   rngs: dict[str, np.random.Generator]) -> list[RunExtension]:
    """The run's own extensions, before the topology's: the request path, the engine's front end
    (after the path: it moves the send the path measures from), then the client network."""
    out: list[RunExtension] = []
    if path is not None:
        out.append(path)
    if system.frontend_s > 0:
        out.append(FrontEnd(system.frontend_s))
    if scenario.network is not None:
        out.append(NetworkLatencies(network_from_config(scenario.network), rngs["network"]))
    return out


class _Run:
    """The live objects of one simulation: arrival source, topology, extensions and progress."""

    def __init__(self, env: simpy.Environment, scenario: Scenario, system: ResolvedSystem, workload: Workload,
                 table: RequestTable, steps: StepLog, rngs: dict[str, np.random.Generator],
                 on_progress: ProgressCallback | None, fast_forward: bool, path: RequestPath | None = None) -> None:
        self.env, self.scenario, self.table = env, scenario, table
        self.times, self.order = _engine_order(workload.arrival_time, path)
        self.total, self.next_index, self.done = len(workload), 0, 0
        self.on_progress = on_progress
        self.progress_every = max(1, self.total // 200)
        self._next_report = self.progress_every
        self.stop_time = scenario.max_sim_time_s if scenario.max_sim_time_s is not None else math.inf
        self.shed_when_full = scenario.admission.max_queue_len is not None
        self.any_rejected = bool(table.rejected_at_arrival.any())
        self.topology = build_topology(Wiring(env, scenario, system, table, steps, rngs, fast_forward, self.finish,
                                              self.next_event_time, self.is_done,
                                              path.send_time if path is not None else None))
        self.replicas, self.entry, self.route = self.topology.replicas, self.topology.entry, self.topology.route
        clients = make_clients(env, scenario, workload, table, self._send, self.stop_time, system.frontend_s)
        self.extensions: list[RunExtension] = [*run_extensions(scenario, system, path, rngs),
                                               *self.topology.extensions,
                                               *([clients] if clients is not None else [])]
        """Every extension, in call order."""
        timed = [ext for ext in self.extensions if ext.timed]
        if timed:   # their instants (an autoscaler's ticks) read the replicas' state: events too
            for r in self.replicas:
                r.next_event_time = self._timed_horizon(timed)
        self._senders = [ext for ext in self.extensions if ext.sees_sends]
        self._watched = bool(timed or self._senders)
        self._own_arrivals: list[OwnArrivals] | None = None
        if clients is not None:
            clients.drive(self.replicas)
        elif fast_forward and self._replicas_take_arrivals(scenario.deployment.router):
            self._plan_own_arrivals(workload.rejected, deliver=True)
        else:
            env.process(self.arrivals())
            if fast_forward and self._routes_ahead(scenario.deployment.router):
                self._plan_own_arrivals(workload.rejected)

    def _routes_ahead(self, router: str) -> bool:
        """Whether every replica's arrivals are known before the run: round-robin routing of
        pre-drawn open-loop arrivals over a fixed set of replicas (:attr:`Topology.fixed`: no
        regions, pools, autoscaler or prefill/decode split), with no extension that acts on a send
        (the request path) or at instants of its own."""
        return router == "round_robin" and len(self.replicas) > 1 and self.topology.fixed and not self._watched

    def _replicas_take_arrivals(self, router: str) -> bool:
        """Whether each replica can take its own arrivals itself, with no arrival process: one replica
        of a fixed topology, or round-robin routing (:meth:`_routes_ahead`), of open-loop arrivals
        that nothing watches, refuses, sheds or cuts short (no extension acting on sends, no rejected
        request, no ``admission.max_queue_len``, no ``max_sim_time_s``)."""
        return ((len(self.replicas) == 1 or self._routes_ahead(router)) and self.topology.fixed
                and not self._watched and not self.any_rejected and not self.shed_when_full
                and self.stop_time == math.inf)

    def _plan_own_arrivals(self, rejected: np.ndarray, deliver: bool = False) -> None:
        """Give each replica the instants of its own arrivals as its decode runs' horizon.

        With round-robin routing the k-th request routed (rejected ones are not) goes to replica
        k mod N whatever the replicas' state, and no router reads that state, so an arrival sent
        to another replica cannot change what this one does: its decode runs need not end there.
        The step-by-step engine (``fast_forward=False``) and the runs it cuts at every arrival give
        the same requests and steps; the instants differ only in the last bits of their sums (a
        run's steps are summed from its start, not from the cuts).

        ``deliver``: the replicas also queue their arrivals themselves (``OwnArrivals.deliver``), each
        when it next wakes (the end of the step the arrival came during, or the arrival itself when
        idle), instead of an arrival process sending each at its instant. Nothing reads a waiting
        queue between an arrival and the end of the step it came during (the engine admits at step
        boundaries, and a timeout or queue delay counts from the request's arrival time), so the
        run is the same; it saves an event per request. One replica that does so is the only process
        in the environment: it keeps the clock itself (``Replica.solo``), the same instants without an
        event per arrival."""
        n = len(self.replicas)
        routed = [t for t, rej in zip(self.times, rejected.tolist(), strict=True) if not rej]
        self._own_arrivals = [OwnArrivals(routed[i::n], i, n, self.table, self.stop_time) for i in range(n)]
        for r, own in zip(self.replicas, self._own_arrivals, strict=True):
            r.next_event_time = own.next_time
            if deliver:
                r.arrivals = own
                r.solo = n == 1

    def next_event_time(self) -> float:
        """Instant of the next arrival not yet delivered (or the stop time), for decode runs."""
        if self.next_index < self.total:
            return min(float(self.times[self.next_index]), self.stop_time)
        return self.stop_time

    def _timed_horizon(self, timed: list[RunExtension]) -> Callable[[], float]:
        """The next arrival or the earliest instant a timed extension acts at, whichever is first."""
        def horizon() -> float:
            t = self.next_event_time()
            for ext in timed:
                t = min(t, ext.horizon())
            return t
        return horizon

    def is_done(self) -> bool:
        """Whether every request has been sent and has ended."""
        return self.next_index >= self.total and self.done >= self.total

    def arrivals(self):  # SimPy process
        """Walk the pre-drawn arrival instants (every process but the closed loop)."""
        env, times, order = self.env, self.times, self.order
        for i in range(self.total):
            delay = times[i] - env.now
            if delay > 0:
                yield env.timeout(delay)
            self.next_index = i + 1
            self._send(i if order is None else order[i])

    def _send(self, rid: int) -> None:
        """Request ``rid`` arrives now: refuse it, hand it to an extension, route it, shed it, or
        queue it at a replica."""
        env, table = self.env, self.table
        if self.any_rejected and table.rejected_at_arrival[rid]:
            table.status[rid] = RequestStatus.FINISHED_REJECTED
            self.finish((rid,), env.now)
            return
        for ext in self._senders:
            if ext.sent(self, rid, env.now):
                return
        i = self.route(rid)
        table.replica[rid] = i
        if self._own_arrivals is not None:
            self._own_arrivals[i].next += 1
        replica = self.entry[i]
        if self.shed_when_full and queue_is_full(self.scenario, replica.scheduler):
            table.status[rid] = RequestStatus.FINISHED_SHED     # fast rejection, counted
            table.finish_time[rid] = env.now
            self.finish((rid,), env.now)
            return
        replica.add_request(rid)

    def finish(self, ids: Sequence[int] | np.ndarray, at: float) -> None:
        """Requests ``ids`` ended at instant ``at`` (>= now): progress, and the extensions' hooks."""
        self.done += len(ids)
        for ext in self.extensions:
            never_sent = ext.finished(self, ids, at)   # it may end more requests first (coalesced ones)
            self.done += never_sent                    # e.g. turns a failed session will never send
        if self.on_progress is not None and (self.done >= self._next_report or self.done == self.total):
            self._next_report = self.done + self.progress_every
            self.on_progress(self.done, self.total)

    def answer(self, rid: int, at: float) -> None:
        """Request ``rid`` was answered at ``at`` without reaching an engine (a response cache):
        completed, with all its tokens, on no replica."""
        table = self.table
        table.status[rid] = RequestStatus.FINISHED_LENGTH_CAPPED
        table.first_scheduled_time[rid] = table.first_token_time[rid] = table.finish_time[rid] = at
        table.num_output_tokens[rid] = table.max_tokens[rid]
        table.replica[rid] = -1
        self.finish((rid,), at)

    def abandon(self, rid: int, at: float) -> None:
        """Request ``rid``'s client gave up before the answer it would have had without an engine (a
        response-cache hit after the request path's stages) reached it: timed out at ``at``."""
        table = self.table
        table.status[rid] = RequestStatus.FINISHED_ABORTED
        table.finish_time[rid] = at
        table.num_output_tokens[rid] = 0
        table.replica[rid] = -1
        self.finish((rid,), at)

    def completed(self, rid: int) -> bool:
        """Whether request ``rid`` ended with all its tokens."""
        return bool(self.table.status[rid] == RequestStatus.FINISHED_LENGTH_CAPPED)

    def records(self) -> Records:
        """The finished run's request records: the engine's, corrected by the extensions, as the
        client sees them, with the extensions' columns."""
        records: Records = request_columns(self.table, self.scenario)
        for ext in self.extensions:
            records = ext.engine_columns(records)
        records = apply_client_view(records, self.scenario)
        for ext in self.extensions:
            records = ext.add_columns(records)
        return records


def _engine_order(arrival_time: np.ndarray, path: RequestPath | None) -> tuple[list[float], list[int] | None]:
    """The instants requests reach the engine, in time order, and the request ids in that order
    (None: in id order), when processing stages reorder them. Python floats, not numpy scalars:
    every SimPy and engine time sum derives from these."""
    times, order = arrival_time, None
    if path is not None and len(times) > 1 and bool((np.diff(times) < 0).any()):
        ids = np.argsort(times, kind="stable")
        order, times = ids.tolist(), times[ids]
    return times.tolist(), order
