"""Deadlines inside the engine: client timeouts and load shedding.

* ``client.timeout_s``: a client gives up this long after it sent its request: the deadline is the
  client's, measured from the send as the records' E2E is, so the front end's ``overhead.frontend_s``
  (:mod:`simulator.cluster.frontend`) and the request path's stages
  (:mod:`simulator.cluster.request_path`) count against it. The engine learns
  of the abort between steps (vLLM aborts requests at step boundaries), so at the first step
  boundary at or after the deadline the request leaves the waiting queue, or the running batch
  with its KV blocks freed; its status is ``finished_aborted`` and it counts in
  ``requests.timed_out``. A request whose last token comes in the step during which its client
  gave up is also counted as timed out (the response found no one to deliver it to).
* ``admission.max_queue_len``: an arrival that finds its replica's waiting queue this long is
  rejected at once (``finished_shed``, counted in ``requests.shed`` and ``requests.rejected``).
* ``admission.max_queue_delay_s``: a request still waiting for its first admission this long after
  arriving is rejected at the next step boundary; admitted requests therefore never queued longer.

Deadlines are events: each replica keeps a heap of them and ends a decode run at the step during
which the earliest passes, exactly as it does for an arrival, so fast-forwarded runs and
step-by-step runs agree to the step.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from simulator.engine.request import RequestStatus

#: A deadline counts as reached at a step boundary within this many seconds of it. Step ends are
#: sums of step times, accumulated step by step or in closed form over a decode run; the two
#: differ by ~1e-14 s, which must not decide whether a request is aborted at this boundary or the next.
DEADLINE_EPS_S = 1e-9

if TYPE_CHECKING:  # pragma: no cover
    from simulator.engine.request import RequestTable
    from simulator.engine.scheduler import Scheduler
    from simulator.scenario.config import Scenario

_TIMEOUT, _SHED = 0, 1
_WAITING, _DONE = int(RequestStatus.WAITING), int(RequestStatus.FINISHED_LENGTH_CAPPED)
_UNFINISHED = (int(RequestStatus.WAITING), int(RequestStatus.RUNNING), int(RequestStatus.PREEMPTED))


class Deadlines:
    """Timeouts and queue-delay shedding for one replica's scheduler (see module docstring).

    ``add`` registers a request's deadlines when it reaches the replica; ``next_deadline`` is the
    earliest one still pending (the engine loop treats it like the next arrival); ``expire(now)``
    finishes every request whose deadline has passed, at a step boundary.
    """

    __slots__ = ("sched", "table", "timeout_s", "max_queue_delay_s", "frontend_s", "sent", "on_finish", "_heap")

    def __init__(self, sched: Scheduler, table: RequestTable, timeout_s: float | None,
                 max_queue_delay_s: float | None, on_finish: Callable[[Sequence[int], float], None],
                 frontend_s: float = 0.0, sent: np.ndarray | None = None) -> None:
        self.sched, self.table = sched, table
        self.timeout_s, self.max_queue_delay_s = timeout_s, max_queue_delay_s
        self.frontend_s = frontend_s
        """The front end's time between a client's send and the engine."""
        self.sent = sent
        """Per request, the instant it reached the request path's stages (its send plus the front end),
        when stages delay it on its way to the engine; None without stages (that instant is then its
        engine arrival)."""
        self.on_finish = on_finish
        self._heap: list[tuple[float, int, int]] = []

    @classmethod
    def for_scenario(cls, scenario: Scenario, sched: Scheduler, table: RequestTable,
                     on_finish: Callable[[Sequence[int], float], None], frontend_s: float = 0.0,
                     sent: np.ndarray | None = None) -> Deadlines | None:
        """None when neither ``client.timeout_s`` nor ``admission.max_queue_delay_s`` is set;
        ``frontend_s``: the front end's time (``ResolvedSystem.frontend_s``); ``sent``: each request's
        instant before the request path's stages (:class:`~simulator.cluster.request_path.RequestPath`'s
        ``send_time``), None without stages."""
        timeout, delay = scenario.client.timeout_s, scenario.admission.max_queue_delay_s
        if timeout is None and delay is None:
            return None
        return cls(sched, table, timeout, delay, on_finish, frontend_s, sent)

    def add(self, rid: int) -> None:
        arrival = float(self.table.arrival_time[rid])     # at the engine: the send, the front end, the stages
        give_up = client_deadline(arrival if self.sent is None else float(self.sent[rid]), self.timeout_s,
                                  self.frontend_s)
        if give_up is not None:
            heapq.heappush(self._heap, (give_up, rid, _TIMEOUT))
        if self.max_queue_delay_s is not None:             # the engine's own queue: from its arrival
            shed_at = arrival + self.max_queue_delay_s
            if give_up is None or shed_at < give_up:
                heapq.heappush(self._heap, (shed_at, rid, _SHED))

    def _pending(self, rid: int, kind: int) -> bool:
        status = int(self.table.status[rid])
        return status == _WAITING if kind == _SHED else status in _UNFINISHED

    def next_deadline(self) -> float:
        """The earliest deadline of a request it still applies to (inf when none)."""
        heap = self._heap
        while heap and not self._pending(heap[0][1], heap[0][2]):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def expire(self, now: float) -> None:
        """Finish every request whose deadline is at or before ``now`` (a step boundary)."""
        heap = self._heap
        reached = now + DEADLINE_EPS_S
        if not heap or heap[0][0] > reached:
            return
        timed_out: list[int] = []
        shed: list[int] = []
        seen: set[int] = set()
        table = self.table
        while heap and heap[0][0] <= reached:
            _, rid, kind = heapq.heappop(heap)
            if rid not in seen and self._pending(rid, kind):
                seen.add(rid)
                (shed if kind == _SHED else timed_out).append(rid)
            elif kind == _TIMEOUT and table.status[rid] == _DONE and undelivered(table, rid, self.timeout_s,
                                                                                 self.frontend_s, self.sent):
                # Its last token came in the step during which the client gave up: never delivered.
                table.status[rid] = RequestStatus.FINISHED_ABORTED
        if timed_out:
            self.sched.finish_requests(timed_out, RequestStatus.FINISHED_ABORTED, now)
        if shed:
            self.sched.finish_requests(shed, RequestStatus.FINISHED_SHED, now)
        if timed_out or shed:
            self.on_finish(timed_out + shed, now)


def client_deadline(reached: float, timeout_s: float | None, frontend_s: float) -> float | None:
    """The instant at which the client of a request gives up: ``timeout_s`` after it sent it, which
    is ``frontend_s`` before the request ``reached`` the engine (or the request path's stages)
    (None without a timeout)."""
    return None if timeout_s is None else (reached - frontend_s) + timeout_s


def undelivered(table: RequestTable, rid: int, timeout_s: float | None, frontend_s: float = 0.0,
                sent: np.ndarray | None = None) -> bool:
    """Whether completed request ``rid``'s last token came after its client gave up (``client.timeout_s``
    after it sent the request: ``frontend_s`` before its engine arrival, or before ``sent[rid]`` when
    the request path's stages delayed it): the answer found no one to deliver it to, and the request
    counts as timed out (:meth:`Deadlines.expire` relabels it when the clock reaches the deadline; a
    closed session, which learns of the end sooner, asks here)."""
    reached = float(table.arrival_time[rid]) if sent is None else float(sent[rid])
    give_up = client_deadline(reached, timeout_s, frontend_s)
    return give_up is not None and bool(table.finish_time[rid] > give_up + DEADLINE_EPS_S)


def queue_is_full(scenario: Scenario, sched: Scheduler) -> bool:
    """``admission.max_queue_len``: whether an arrival at this replica is rejected now."""
    limit = scenario.admission.max_queue_len
    return limit is not None and len(sched.waiting) >= limit
