"""The contract between a replica and its batching policy: what the replica calls, when, and what
comes back (as vLLM v1's ``SchedulerInterface``, ``vllm/v1/core/sched/interface.py``, and SimPy's
``BaseResource`` docstring state theirs).

A batching policy is the scheduler of one replica: it owns the waiting queue, the running batch and
the KV blocks (through a :class:`~simulator.engine.kv_cache.KVCacheManager`), and it decides what
each engine step computes. :class:`~simulator.engine.replica.Replica` drives it; the cost model
says how long each step takes. The contract has two parts:

* :class:`BatchingPolicy`, the part every policy implements: one step at a time. Between steps
  the replica delivers arrivals (``add_request``), lets deadlines finish requests
  (``finish_requests``), asks when an idle engine starts (``batch_start_time``), re-sorts the batch
  when the policy asks (``sort_pending`` / ``sort_rows``), then plans a step (``schedule``: the
  step's KV blocks are allocated, the plan comes back as a
  :class:`~simulator.engine.output.SchedulerOutput`), prices it (``CostModel.step_time_s`` of
  ``out.batch_shape()`` plus ``out.extra_s``), waits its duration in simulated time, and applies it
  (``update_from_output``: the ids of the requests that finished come back).
* :class:`FastPaths`, the part that lets the replica apply many steps in one SimPy event while
  nothing outside the replica can change them. Each method either does the work or says it cannot
  (None, or no step advanced), and the replica then takes the one-step path above; a policy that
  takes none of them gives the same run, only slower. Decode runs (``plan_decode_run`` after a
  pure-decode ``schedule``; ``plan_decode_continuation`` after a run the clock passed;
  ``plan_tracked_run`` with nobody waiting) are applied by ``advance_decode``
  (:mod:`simulator.engine.decode_run`). A policy may also have steps of its own to advance
  (``own_steps`` returns an :class:`OwnSteps`, asked once per replica; None for continuous
  batching): chunked prefill's mixed steps and speculative verification are planned and applied on
  its row lists (``advance_steps``), and the one that crosses the next event is applied by
  ``apply_planned_step`` when the clock reaches its end.
  Every fast path must give the run the one-step path gives: bit for bit against that path turned
  off (``tests/test_speed.py``), and against ``fast_forward=False`` up to the rounding of a run's
  end, the sum of its steps (``tests/test_benchmark_modes.py``).

:class:`~simulator.engine.scheduler.Scheduler` implements both (its fast paths: decode runs, and no
own steps); the policies (:mod:`~simulator.engine.policies`, :mod:`~simulator.engine.speculative`,
:mod:`~simulator.engine.disaggregated`) subclass it and override what they change. The replica holds
the concrete ``Scheduler`` type (the compiled engine calls its methods natively); these protocols
are the written contract, and mypy checks that the scheduler keeps it (:func:`_conforms`).
"""
from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from simulator.cost.base import CostModel
    from simulator.engine.decode_run import DecodePrices, DecodeRun
    from simulator.engine.kv_cache import KVCacheManager
    from simulator.engine.output import SchedulerOutput
    from simulator.engine.policies import ChunkedPrefillScheduler
    from simulator.engine.request import RequestStatus, RequestTable
    from simulator.engine.scheduler import Scheduler
    from simulator.engine.speculative import SpeculativeScheduler
    from simulator.engine.steplog import StepLogger


class BatchingPolicy(Protocol):
    """One replica's scheduler, one step at a time (see the module docstring for the order of calls).

    Times are simulated seconds; ``now`` is the instant of the call (a step boundary). Request ids
    index the run's :class:`~simulator.engine.request.RequestTable`, which the policy writes
    (status, first scheduled and first token instants, finish instant, output tokens).
    """

    @property
    def kv(self) -> KVCacheManager:
        """The replica's block accounting (read by the step log: blocks used after each step)."""
        ...

    @property
    def table(self) -> RequestTable: ...

    @property
    def n(self) -> int:
        """Requests in the running batch."""
        ...

    @property
    def waiting(self) -> Sized:
        """The waiting queue (the replica reads its length and, for outstanding tokens, its ids)."""
        ...

    @property
    def sort_pending(self) -> bool:
        """The batch must be re-sorted (``sort_rows``) before the next step (priority scheduling)."""
        ...

    def add_request(self, rid: int) -> None:
        """A request arrives at this replica: it joins the waiting queue."""
        ...

    def batch_start_time(self, now: float) -> float:
        """When an idle engine (empty batch) with waiting requests starts its next step: ``now``
        for continuous batching, later for a policy that waits to fill a batch. The replica sleeps
        until then, or until an arrival or a deadline wakes it."""
        ...

    def schedule(self, now: float) -> SchedulerOutput:
        """Plan the step starting at ``now``, allocating its KV blocks (preempting when they are not
        free, admitting waiting requests within the budget). The plan is valid until it is applied."""
        ...

    def update_from_output(self, out: SchedulerOutput, now: float) -> list[int]:
        """Apply the step ``out`` that ended at ``now``: tokens emitted, first tokens recorded,
        finished requests leave the batch and free their blocks; returns their ids."""
        ...

    def sort_rows(self) -> None:
        """Restore the running batch's preemption order (called between steps while ``sort_pending``)."""
        ...

    def finish_requests(self, ids: list[int], status: RequestStatus, now: float) -> None:
        """End unfinished requests at a step boundary (client timeouts, shedding), waiting or running."""
        ...

    def remaining_tokens(self) -> list[int]:
        """Output tokens each running request has still to emit (routers' outstanding work)."""
        ...

    def stats(self) -> dict[str, int]:
        """Policy counters, summed over replicas into ``SimulationResult.engine_stats``."""
        ...


class FastPaths(Protocol):
    """The steps a policy can advance without one SimPy event each (module docstring). Each method
    is called only between events, with ``next_event_time`` (or ``horizon``) the instant of the
    replica's next external event; none may change anything a router can see before that instant."""

    def plan_decode_run(self, out: SchedulerOutput, now: float, next_event_time: float,
                        prices: DecodePrices) -> DecodeRun | None:
        """After ``schedule`` planned a pure-decode step ``out``: the run of identical decode steps
        from it up to the first finish, KV shortage or ``next_event_time``; None when the policy's
        decode steps are not alike (the replica runs ``out`` alone)."""
        ...

    def plan_decode_continuation(self, prev: DecodeRun, now: float, next_event_time: float,
                                 prices: DecodePrices) -> DecodeRun | None:
        """The run after ``prev`` when nothing changed the batch since (its first step's blocks
        allocated), or None, changing nothing (the replica calls ``schedule``)."""
        ...

    def plan_tracked_run(self, now: float, next_event_time: float, prices: DecodePrices) -> DecodeRun | None:
        """With nobody waiting, the run ``schedule`` + ``plan_decode_run`` would plan, without
        building the step; None, changing nothing, when the policy cannot tell it so."""
        ...

    def advance_decode(self, run: DecodeRun, now: float) -> list[int]:
        """Apply the planned ``run``, which ended at ``now``; returns the ids of finished requests."""
        ...

    def own_steps(self) -> OwnSteps | None:
        """The policy's own fast path, or None (asked once, when the replica is built)."""
        ...


class OwnSteps(Protocol):
    """The steps a policy plans and applies on its own between events (chunked prefill's mixed steps,
    speculative verification): the optional part of :class:`FastPaths`, held by the replica."""

    def advance_steps(self, t: float, horizon: float, cost: CostModel,
                      log: StepLogger) -> tuple[float, list[int], float | None]:
        """Plan, log and apply the policy's steps from ``t`` that end before ``horizon``, while
        nothing else can happen; returns the last one's end (``t``: none), the ids they finished,
        and the end of the step crossing ``horizon`` when that one was planned too (else None)."""
        ...

    def apply_planned_step(self, now: float) -> list[int]:
        """Apply the step ``advance_steps`` planned across its horizon, at its end ``now``."""
        ...


def _conforms(scheduler: Scheduler, chunked: ChunkedPrefillScheduler,
              speculative: SpeculativeScheduler) -> tuple[BatchingPolicy, FastPaths, OwnSteps, OwnSteps]:
    """For mypy: the scheduler (and so every policy, its subclasses) keeps both parts of the
    contract, and the policies with steps of their own keep :class:`OwnSteps`."""
    return scheduler, scheduler, chunked, speculative
