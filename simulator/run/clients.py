"""Closed loops: a benchmark's ``concurrency`` clients, each with at most one request outstanding
(:class:`ClosedLoopClients`), and sessions whose next turn waits for the previous answer
(:class:`ClosedSessions`).

This is how serving benchmarks load an engine (vLLM's ``benchmark_serving --max-concurrency``,
a pool of locust users): a client sends a request, waits until its answer ends, pauses for a
think time and sends the next. An answer *ends* when the engine finishes the request, whether it
completed or was dropped (shed or rejected by admission control, or aborted after the client's
timeout, at the step boundary where the engine records the abort). All clients start at t=0.

Clients are interchangeable, so no client identities are kept: every request that ends frees one
client, which sends the next request id ``think_time[rid]`` seconds after request ``rid`` ended;
that request reaches the engine ``send_delay`` later (0.5 to 1 us of network jitter, see
:data:`simulator.workload.traffic.SEND_DELAY_S`), its recorded arrival time; the clients freed by
one engine step share one delay (that of the step's lowest request id), so with a fixed think time
their requests arrive together, as they would at an idle engine. The first ``concurrency`` requests
all arrive at t=0. Both arrays are drawn up front from the ``think`` random stream and belong to
the requests that ended, so the instants do not depend on the order in which replicas report their
completions. Requests arrive in request-id order.

**Exactness with fast-forward.** A replica applies decode steps ahead of the clock while nothing
outside it can act before they end (:mod:`simulator.engine.replica`). Here the only outside
events are clients waking up, and a client wakes only after some request ended. So the horizon a
replica may run to (:meth:`ClosedLoopClients.replica_horizon`) is the earliest of the pending wake-ups and,
for every *other* replica holding requests, the end of the step it is in (none of its requests can
end sooner) plus the shortest possible think time and delay; the replica re-reads it after each of
its own completions. With one replica decode runs are as long as in an open loop; with several and no
think time they shorten towards one step per event, which keeps step-by-step results.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import simpy

from simulator.cluster.extension import Records, Run, RunExtension, as_frame
from simulator.engine.deadlines import undelivered
from simulator.engine.request import RequestStatus
from simulator.scenario.config import ClosedLoopArrival
from simulator.workload.traffic import SEND_DELAY_S, Workload

COMPLETED = int(RequestStatus.FINISHED_LENGTH_CAPPED)

if TYPE_CHECKING:  # pragma: no cover
    from simulator.engine.replica import Replica
    from simulator.engine.request import RequestTable
    from simulator.scenario.config import Scenario


def make_clients(env: simpy.Environment, scenario: Scenario, workload: Workload, table: RequestTable,
                 send: Callable[[int], None], stop_time: float,
                 frontend_s: float = 0.0) -> ClosedLoopClients | ClosedSessions | None:
    """The run's closed loop, which sends requests as earlier ones end (None: arrivals are open).

    ``send(rid)`` delivers request ``rid`` to the run at the clock's instant; ``frontend_s``: the
    engine's front end, between a send and the engine (already in ``workload``'s send delays and
    turn gaps; a closed loop's first requests wait for it here)."""
    arrival, sessions = scenario.workload.arrival, scenario.workload.sessions
    if isinstance(arrival, ClosedLoopArrival):   # requests are sent as earlier ones end
        assert workload.think_time is not None and workload.send_delay is not None   # drawn for a closed loop
        return ClosedLoopClients(env, arrival, table, workload.think_time, workload.send_delay, send,
                                 send_until_s=scenario.duration_s, stop_time=stop_time, first_delay_s=frontend_s)
    if workload.turn_gap is not None and sessions is not None:   # later turns are sent as answers end
        min_gap = (sessions.turn_gap_s if sessions.turn_gap_dist == "fixed" else 0.0) + SEND_DELAY_S[0]
        return ClosedSessions(env, table, workload.arrival_time.copy(), workload.turn_gap, min_gap, send,
                              stop_time=stop_time, timeout_s=scenario.client.timeout_s, frontend_s=frontend_s)
    return None


def _drive(loop: ClosedLoopClients | ClosedSessions, replicas: Sequence[Replica]) -> None:
    loop.replicas = replicas
    for r in replicas:
        r.next_event_time = partial(loop.replica_horizon, r)


class ClosedLoopClients(RunExtension):
    """The clients of a closed loop: when each sends, and how far replicas may run ahead.

    State: ``num_sent`` (requests arrived so far: ids ``0 .. num_sent - 1``) and a heap of the instants at
    which the requests freed clients have sent will arrive. One is pushed when a request ends
    (:meth:`ended`), none for a send at or after ``send_until_s`` (``duration_s``); when it fires
    the next request id arrives, unless all have. Ends may be reported out of time order (a replica
    applies steps ahead of the clock), so which requests exist is decided at arrival, in time order.
    """

    def __init__(self, env: simpy.Environment, cfg: ClosedLoopArrival, table: RequestTable,
                 think_time_s: np.ndarray, send_delay_s: np.ndarray, send: Callable[[int], None], *,
                 send_until_s: float | None, stop_time: float, first_delay_s: float = 0.0) -> None:
        self.env = env
        self.table = table
        self.think_time_s, self.send_delay_s = think_time_s, send_delay_s
        self.min_pause_s = (cfg.think_time_s if cfg.think_time_dist == "fixed" else 0.0) + SEND_DELAY_S[0]
        """The shortest time from a request's end to the next arrival (what a horizon adds to a step's end)."""
        self.send = send
        self.send_until_s = math.inf if send_until_s is None else send_until_s
        self.stop_time = stop_time
        self.total = len(table)
        self.num_sent = 0
        self.replicas: Sequence[Replica] = ()
        """Every replica of the run (set by :meth:`drive`), for :meth:`replica_horizon`."""
        self._arrivals: list[float] = []
        for _ in range(min(cfg.concurrency, self.total)):
            self._send_at(0.0, first_delay_s)

    def _send_at(self, t: float, delay: float) -> None:
        """A client sends at ``t``: its request (the next id) arrives at ``t + delay``."""
        if t >= self.send_until_s:
            return
        heapq.heappush(self._arrivals, t + delay)
        self.env.timeout(t + delay - self.env.now).callbacks.append(self._arrive)

    def _arrive(self, _event: simpy.Event) -> None:
        # Events fire in time order, so the earliest pending arrival is this one (its exact value,
        # not the clock's now + delay, becomes the arrival time).
        t = heapq.heappop(self._arrivals)
        if self.num_sent == self.total:
            return
        rid = self.num_sent
        self.num_sent += 1
        self.table.arrival_time[rid] = t
        self.send(rid)

    def ended(self, ids: Sequence[int] | np.ndarray, at: float) -> int:
        """Requests ``ids`` ended at instant ``at`` (>= now; one engine step's ends, or one drop):
        their clients send again after thinking. Returns 0 (no request is given up)."""
        think = self.think_time_s
        delay = float(self.send_delay_s[min(ids)])   # one network delay for one step's clients
        for rid in ids:
            self._send_at(at + float(think[rid]), delay)
        return 0

    # -- the run's hooks (a closed loop is the run's arrival source and an extension) -------------
    def drive(self, replicas: Sequence[Replica]) -> None:
        """Take over ``replicas``' horizon: a decode run ends where a client may next send."""
        _drive(self, replicas)

    def finished(self, run: Run, ids: Sequence[int] | np.ndarray, at: float) -> int:
        return self.ended(ids, at)

    def add_columns(self, records: Records) -> Records:
        """Requests never sent are not part of the run."""
        return records if self.num_sent == self.total else as_frame(records).iloc[:self.num_sent].copy()

    def replica_horizon(self, replica: Replica) -> float:
        """The earliest instant at which a request can reach any replica, as ``replica`` sees it now
        (the closed loop's ``next_event_time``; see the module docstring)."""
        if self.num_sent == self.total:
            return self.stop_time
        t = self._arrivals[0] if self._arrivals else math.inf
        return min(t, _next_send_elsewhere(self.replicas, replica, self.env.now, self.min_pause_s), self.stop_time)


class ClosedSessions(RunExtension):
    """Sessions whose next turn waits for the previous answer (``workload.sessions.loop: closed``):
    agent tasks, or chat users who read the answer before they type.

    First turns arrive at the instants the arrival process drew. When a turn *ends* (see the module
    docstring: completed, or dropped at the step boundary that records the drop) at instant ``at``,
    the session's next turn (request id + 1, turns being stored session by session) arrives at
    ``at + turn_gap[next]`` (the drawn gap plus :data:`SEND_DELAY_S`'s network jitter, which keeps
    arrivals off the lattice of step boundaries), if the turn completed; a dropped turn ends its session (the task
    failed) and the remaining turns are never sent. So later turns arrive out of request-id order,
    and ``arrived`` says which requests exist when the run ends.

    Fast-forward is exact as with closed-loop clients: the horizon a replica may run to is the
    earliest pending arrival and, for every other replica holding requests, the end of the step it
    is in plus the shortest gap (``turn_gap_s`` when gaps are fixed, else 0, plus the least jitter).
    """

    def __init__(self, env: simpy.Environment, table: RequestTable, first_arrival: np.ndarray,
                 turn_gap_s: np.ndarray, min_gap_s: float, send: Callable[[int], None], *, stop_time: float,
                 timeout_s: float | None = None, frontend_s: float = 0.0) -> None:
        self.env = env
        self.timeout_s = timeout_s
        """``client.timeout_s``: an answer that ends after it was never delivered, and ends the session."""
        self.frontend_s = frontend_s
        """The front end: each turn reached the engine this long after it was sent."""
        self.table = table
        self.turn_gap_s = turn_gap_s
        self.min_gap_s = min_gap_s
        self.send = send
        self.stop_time = stop_time
        n = len(table)
        assert table.session is not None   # closed sessions always have one
        self.session: np.ndarray = table.session
        last = np.ones(n, dtype=bool)
        last[:-1] = self.session[1:] != self.session[:-1]
        self.last_turn = last
        """Whether each request is its session's last turn."""
        self.arrived = np.zeros(n, dtype=bool)
        self.pending = 0
        """Turns scheduled to arrive (first turns not yet arrived, follow-ups sent and in the network)."""
        self.replicas: Sequence[Replica] = ()
        self._arrivals: list[tuple[float, int]] = []
        firsts = np.flatnonzero(~np.isnan(first_arrival))
        for rid, t in zip(firsts.tolist(), first_arrival[firsts].tolist(), strict=True):
            self._arrive_at(t, rid)

    def _arrive_at(self, t: float, rid: int) -> None:
        heapq.heappush(self._arrivals, (t, rid))
        self.pending += 1
        self.env.timeout(t - self.env.now).callbacks.append(self._arrive)

    def _arrive(self, _event: simpy.Event) -> None:
        t, rid = heapq.heappop(self._arrivals)   # events fire in time order: the earliest is this one
        self.pending -= 1
        self.arrived[rid] = True
        self.table.arrival_time[rid] = t
        self.send(rid)

    def ended(self, ids: Sequence[int] | np.ndarray, at: float) -> int:
        """Requests ``ids`` ended at instant ``at``: the next turn of each completed one is sent.
        Returns how many turns will never be sent (those of the sessions a dropped turn ended)."""
        status, last, session = self.table.status, self.last_turn, self.session
        abandoned = 0
        for rid in ids:
            rid = int(rid)
            if last[rid]:
                continue
            if status[rid] == COMPLETED and not undelivered(self.table, rid, self.timeout_s, self.frontend_s):
                nxt = rid + 1
                self._arrive_at(at + float(self.turn_gap_s[nxt]), nxt)
            else:
                end = rid + 1
                while end < len(session) and session[end] == session[rid]:
                    end += 1
                abandoned += end - rid - 1
        return abandoned

    # -- the run's hooks (the closed sessions are the run's arrival source and an extension) -------
    def drive(self, replicas: Sequence[Replica]) -> None:
        """Take over ``replicas``' horizon: a decode run ends where a session may next send."""
        _drive(self, replicas)

    def finished(self, run: Run, ids: Sequence[int] | np.ndarray, at: float) -> int:
        return self.ended(ids, at)

    def add_columns(self, records: Records) -> Records:
        """Turns never sent (their session failed, or the run ended first) are not part of the run."""
        return records if self.arrived.all() else as_frame(records)[self.arrived].copy()

    def replica_horizon(self, replica: Replica) -> float:
        """The earliest instant at which a request can reach any replica, as ``replica`` sees it now."""
        t = self._arrivals[0][0] if self._arrivals else math.inf
        return min(t, _next_send_elsewhere(self.replicas, replica, self.env.now, self.min_gap_s), self.stop_time)


def _next_send_elsewhere(replicas: Sequence[Replica], replica: Replica, now: float, min_pause_s: float) -> float:
    """The earliest instant at which an end on a replica other than ``replica`` can send a request: the
    end of the step each one holding requests is in (none of its requests ends sooner) plus the
    shortest pause before a send (inf when no other replica holds requests)."""
    t = math.inf
    for r in replicas:
        if r is not replica and r.num_outstanding:
            t = min(t, max(r.planned_until, now) + min_pause_s)
    return t
