"""One engine replica: a SimPy process that plans a step, waits its duration, applies it.

The loop mirrors a serving engine's busy loop: ``schedule()`` picks the batch, the cost model
says how long the forward pass takes, the process sleeps that long in simulated time, then
``update_from_output()`` records emitted tokens and finished requests. While nothing can change
the batch (no arrival, completion or KV shortage before the next step boundary), many decode
steps are advanced in one event; ``fast_forward=False`` turns that off for verification.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import simpy

from simulator.cost.base import CostModel
from simulator.engine.deadlines import DEADLINE_EPS_S, Deadlines
from simulator.engine.decode_run import DecodePrices, DecodeRun
from simulator.engine.output import SchedulerOutput
from simulator.engine.pipeline import MicroBatches
from simulator.engine.scheduler import Scheduler

if TYPE_CHECKING:  # pragma: no cover
    from simulator.engine.data_parallel import DataParallelGroup
    from simulator.engine.interface import OwnSteps
    from simulator.engine.request import RequestTable
    from simulator.engine.steplog import StepLog


class OwnArrivals:
    """A replica's arrivals when they are known before the run (one replica, or round-robin
    routing of pre-drawn open-loop arrivals): the k-th one is request ``first + k * stride``.

    ``next_time`` is the replica's next external event (its decode runs' horizon); a replica that
    queues its own arrivals calls ``deliver`` whenever it wakes (:attr:`Replica.arrivals`)."""

    def __init__(self, times: list[float], first: int, stride: int, table: RequestTable, stop_time: float) -> None:
        self.times = [*times, math.inf]
        self.next = 0
        """Index of the first arrival not yet delivered (or sent)."""
        self.first, self.stride = first, stride
        self.table = table
        self.stop_time = stop_time

    def next_time(self) -> float:
        """Instant of the next arrival not yet delivered (or the stop time)."""
        return min(self.times[self.next], self.stop_time)

    def deliver(self, replica: Replica, now: float) -> None:
        """Queue at ``replica`` its arrivals up to ``now``, in arrival order."""
        times, k, table, index = self.times, self.next, self.table, replica.index
        while times[k] <= now:
            rid = self.first + k * self.stride
            table.replica[rid] = index
            replica.add_request(rid, times[k])
            k += 1
        self.next = k


class Replica:
    """Owns a scheduler (waiting/running queues + KV blocks) and runs ``engine_loop``."""

    def __init__(self, env: simpy.Environment, index: int, scheduler: Scheduler, cost: CostModel,
                 steps: StepLog, next_event_time: Callable[[], float],
                 on_finish: Callable[[Sequence[int], float], None], fast_forward: bool = True) -> None:
        self.env = env
        self.index = index
        self.scheduler = scheduler
        self.cost = cost
        self.steps = steps
        self.next_event_time = next_event_time
        self.on_finish = on_finish
        """Called as ``on_finish(ids, at)`` with the requests that ended at step end ``at``."""
        self.fast_forward = fast_forward
        """Whether steps that end before the next event are applied without waiting for it (decode
        runs, the policy's own steps); False: one event per step (verification)."""
        self.prices = DecodePrices(cost)
        """The cost model's decode-run prices, derived once (:mod:`simulator.engine.decode_run`)."""
        self._own_steps: OwnSteps | None = scheduler.own_steps() if fast_forward else None
        """The policy's own fast path (chunked prefill's mixed steps, speculative verification), if any."""
        self.deadlines: Deadlines | None = None
        """Timeouts and queue-delay shedding (``simulator.engine.deadlines``); None when both are off."""
        self.idle_event: simpy.Event | None = None
        """The event the engine loop sleeps on while nothing is scheduled, triggered by an arrival."""
        self.planned_until = 0.0
        """End of the last step (or run) this replica has planned (pipelined: of the first batch in
        flight, the first instant one of its requests can end)."""
        self.on_step_planned: Callable[[SchedulerOutput, float], None] | None = None
        """Called with each single step's plan and end instant (disaggregated prefill pools)."""
        self._continue_from: DecodeRun | None = None
        """A decode run applied when the clock passed the next event, which the next one may follow on from."""
        self._run_in_flight: tuple[float, DecodeRun] | None = None
        """The decode run (and its start) that the engine waits on, applied only when it ends."""
        self._log_step = steps.step_logger(index)
        self.arrivals: OwnArrivals | None = None
        """This replica's own arrivals, when it queues them itself (delivered whenever it wakes;
        ``next_event_time`` is then their next instant); None: an arrival process sends them
        (``add_request``)."""
        self.pipeline: MicroBatches | None = None
        """A pipelined replica's micro-batches (its scheduler too), whose batches the loop keeps in
        flight over the pipeline's stages (:mod:`simulator.engine.pipeline`); None: one stage."""
        self.solo = False
        """Whether nothing else runs in the environment (one replica that takes its own arrivals): the
        loop then keeps the clock itself, as the timeouts it would wait on would advance it, and waits
        once, at the end, for the environment's clock to reach its own."""
        self.lagged_admission = False
        """Whether the engine forms each step's batch while the previous step runs (async scheduling:
        vLLM's batch queue of two, SGLang's and TensorRT-LLM's overlap schedulers), so that a request
        arriving while a step runs is first scheduled in the step after the next one. Such a request
        is held (:attr:`held`) until the next step has been planned; one that finds the engine idle
        is scheduled at once. Not with a pipeline (its micro-batches have their own rule)."""
        self.held: list[int] = []
        """Requests that arrived while a step ran, not yet visible to the scheduler (with
        :attr:`lagged_admission`), in arrival order."""
        self.group: DataParallelGroup | None = None
        """The attention data-parallel ranks this one steps with, in lockstep (its engine loop is the
        group's, :mod:`simulator.engine.data_parallel`); None: it steps on its own."""
        self.process = env.process(self.engine_loop())

    @property
    def num_outstanding(self) -> int:
        return self.scheduler.n + len(self.scheduler.waiting) + len(self.held)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting) + len(self.held)

    @property
    def outstanding_tokens(self) -> int:
        """Tokens still to process: whole prompt + remaining output of each waiting request (a
        preempted one recomputes its prompt), remaining output of each running one, as of the clock.

        A decode run is applied when its last step ends (the one that crosses the event the clock
        is at), but one event per step would have applied its steps that ended before now: their
        tokens are not outstanding (see :meth:`decode_steps_done`). The request counts
        (``num_outstanding``, ``num_waiting``) need no such care: a run admits nobody and finishes
        requests only in its last step."""
        sched, table = self.scheduler, self.scheduler.table
        running = sum(sched.remaining_tokens()) - sched.n * self.decode_steps_done()
        if not sched.waiting and not self.held:
            return running
        w = np.fromiter([*sched.waiting, *self.held], dtype=np.int64, count=len(sched.waiting) + len(self.held))
        return running + int((table.num_prompt_tokens[w] + table.max_tokens[w] - table.num_output_tokens[w]).sum())

    def decode_steps_done(self) -> int:
        """Steps of the decode run in flight that ended before now (0 with none in flight): those
        whose end, ``start + cumulative duration``, is before the clock, never the last one (the
        run's last step is the first to reach the event that the clock is at; it is applied when
        it ends)."""
        if self._run_in_flight is None:
            return 0
        start, run = self._run_in_flight
        if run.num_steps == 1 or self.env.now <= start:
            return 0
        ends = start + np.cumsum(run.durations_s()[:-1])
        return int(np.searchsorted(ends, self.env.now, side="left"))

    def add_request(self, rid: int, at: float = -1.0) -> None:
        """Queue request ``rid``, which arrived at ``at`` (-1: now); with :attr:`lagged_admission`, one
        that arrived while a step ran is held until the next step is planned."""
        if self.lagged_admission and (self.env.now if at < 0 else at) < self.planned_until:
            self.held.append(rid)
            return
        self._admit(rid)

    def release_held(self) -> None:
        """Make the held requests visible to the scheduler (the step they could not join is planned)."""
        held, self.held = self.held, []
        for rid in held:
            self._admit(rid)

    def _admit(self, rid: int) -> None:
        self.scheduler.add_request(rid)
        if self.deadlines is not None:
            self.deadlines.add(rid)
        if self.idle_event is not None and not self.idle_event.triggered:
            self.idle_event.succeed()

    def engine_loop(self):  # a SimPy process generator
        """Plan, cost and apply steps; sleep in simulated time until the last one ends.

        Steps that end before the next external event (an arrival, or the stop time) cannot be
        affected by anything outside this replica, so they are applied back to back and covered
        by one SimPy timeout. The step that crosses the next event is applied only after the
        clock has passed that event, so a router looking at this replica at an arrival instant
        sees exactly the state a step-by-step simulation would show (a decode run is applied when
        its last step, the one crossing the event, ends: :attr:`outstanding_tokens` counts off the
        run's steps that ended before the clock). In a closed loop a request
        that ends lets its client send the next one, possibly before the horizon: the horizon is
        re-read after every step that finished a request (:mod:`simulator.run.clients`).
        """
        if self.group is not None:       # the group's first rank runs every rank's steps
            if self.group.ranks[0] is self:
                yield from self.group.engine_loop()
            return
        if self.pipeline is not None:
            yield from self._pipeline_loop(self.pipeline)
            return
        env, sched, fast, own, arrivals = self.env, self.scheduler, self.fast_forward, self._own_steps, self.arrivals
        clock = env.now          # the environment's clock, or (solo) the one it would show
        while True:
            if self.deadlines is not None:   # aborts and shedding take effect at step boundaries
                self.deadlines.expire(clock)
            if self.held and sched.n == 0 and not sched.waiting:
                self.release_held()          # no step to plan first: the engine schedules them now
            if sched.n == 0:
                wake = self.idle_until(clock)
                if wake is not None:     # idle, or a batching policy waits to fill its batch
                    if arrivals is None:          # an arrival process wakes it (or the batch start)
                        idle = self.idle_event = env.event()
                        yield idle if wake == math.inf else env.any_of([idle, env.timeout(wake - clock)])
                        self.idle_event = None
                        clock = env.now
                    elif wake == math.inf:        # no own arrival left: the run is over
                        if clock > env.now:       # solo: it ends at this replica's clock
                            yield env.timeout(clock - env.now)
                        return
                    else:                         # sleep until the next own arrival (or the start)
                        clock = yield from self._sleep(clock, wake)
                    continue
            t = clock
            horizon = self.next_event_time()
            if self.deadlines is not None:   # a deadline ends a decode run like an arrival does
                horizon = min(horizon, self.deadlines.next_deadline() - DEADLINE_EPS_S)
            if self.held:        # one step, planned without them; they join the one after
                horizon = min(horizon, t)
            while True:
                if own is not None and sched.n:     # the policy's own steps first
                    end, done, crossing_end = self._fast_steps(own, t, horizon)
                    if crossing_end is not None:  # it also planned the step crossing the horizon
                        if self.held:
                            self.release_held()
                        clock = yield from self._sleep(clock, crossing_end)
                        done = own.apply_planned_step(crossing_end)
                        if done:
                            self.on_finish(done, crossing_end)
                        break
                    if end != t:                  # steps were applied, exactly as the branch below would
                        if done:
                            self.on_finish(done, end)
                            horizon = min(horizon, self.next_event_time())
                        t = end
                        if self._drained(t):
                            break
                        continue
                end, apply = self._plan_step(t, horizon)
                if end < horizon and fast:
                    if self._apply(apply, end):   # a closed-loop client may now send before the horizon
                        horizon = min(horizon, self.next_event_time())
                    t = end
                    if self._drained(t):
                        break
                    continue
                # The step (or run) crosses the horizon: applied once the clock has passed it.
                if isinstance(apply, DecodeRun):
                    self._run_in_flight = (t, apply)
                if self.held:
                    self.release_held()
                clock = yield from self._sleep(clock, end)
                self._run_in_flight = None
                self._apply(apply, end)
                if isinstance(apply, DecodeRun):   # the clock passed an event that left the batch as it was
                    self._continue_from = apply
                break
            if clock < t:   # the replica emptied mid-horizon: catch the clock up
                clock = yield from self._sleep(clock, t)

    def _pipeline_loop(self, mb: MicroBatches):  # a SimPy process generator
        """The engine loop of a pipelined replica (:mod:`simulator.engine.pipeline`): one event per
        batch. Whenever stage 1 is free and fewer batches than slots are in flight, a slot whose batch
        has returned plans its next one (a slot with running requests first, else one that admits
        from the queue); the batch occupies each stage in turn, starting at a stage when both its
        previous stage is done and the stage has finished the batch before it; the slot's requests
        take their tokens when the last stage ends. The step log has one entry per batch, from its
        planning to its return (batches overlap in time)."""
        env, arrivals, slots = self.env, self.arrivals, mb.slots
        num = len(slots)
        stage_free = [0.0] * num                 # when each stage has finished its last batch
        in_flight = [False] * num                # whether each slot's batch is in the pipeline
        flights: deque[tuple[float, int, SchedulerOutput]] = deque()   # (return, slot, batch), in order
        clock = env.now
        while True:
            if arrivals is not None:
                arrivals.deliver(self, clock)
            while flights and flights[0][0] <= clock:      # batches whose outputs have returned
                end, v, out = flights.popleft()
                in_flight[v] = False
                done = slots[v].update_from_output(out, end)
                mb.count()
                if done:
                    self.on_finish(done, end)
            opening = len(flights) < num and stage_free[0] <= clock
            if opening and self._issue(mb, clock, in_flight, stage_free, flights):
                opening = False
            elif opening and not flights and len(mb.waiting):
                raise RuntimeError("scheduler planned an empty step (a waiting request can never fit)")
            wake = flights[0][0] if flights else math.inf
            self.planned_until = wake if flights else clock   # the first instant a request here can end
            if len(flights) < num and stage_free[0] > clock:
                wake = min(wake, stage_free[0])
            if arrivals is not None:
                wake = min(wake, arrivals.next_time())
                if wake == math.inf:             # no own arrival left and nothing in flight: the run is over
                    return
                yield env.timeout(wake - clock)
            elif opening:                       # an arrival may start a batch now
                idle = self.idle_event = env.event()
                yield idle if wake == math.inf else env.any_of([idle, env.timeout(wake - clock)])
                self.idle_event = None
            else:
                yield env.timeout(wake - clock)
            clock = env.now

    def _issue(self, mb: MicroBatches, clock: float, in_flight: list[bool], stage_free: list[float],
               flights: deque[tuple[float, int, SchedulerOutput]]) -> bool:
        """Plan a batch at ``clock`` in a slot not in flight and send it down the pipeline; whether
        one was planned (none: no slot has work, or what waits does not fit the free KV blocks)."""
        slots = mb.slots
        tried = [False] * len(slots)
        admits = True                            # whether an empty slot may still admit from the queue
        while True:
            v = -1
            for u in range(len(slots)):          # a slot with running requests first
                if not in_flight[u] and not tried[u] and slots[u].n:
                    v = u
                    break
            if v < 0 and admits and len(mb.waiting):   # else an empty one (all alike) admits
                for u in range(len(slots)):
                    if not in_flight[u] and not tried[u] and not slots[u].n:
                        v = u
                        break
            if v < 0:
                return False
            tried[v] = True
            empty = not slots[v].n
            out = mb.plan(slots[v], clock)
            if out.num_decode == 0 and not out.admitted:   # nothing fits, or its rows were all preempted
                if empty:
                    admits = False
                continue
            stages = self.cost.stage_times_s(out.batch_shape())
            t = clock + (stages[0] + out.extra_s)
            stage_free[0] = t
            for s in range(1, len(stages)):
                t = max(t, stage_free[s]) + stages[s]
                stage_free[s] = t
            flights.append((t, v, out))
            in_flight[v] = True
            self.steps.add_step(self.index, clock, t - clock, out, mb.kv.num_used_blocks, len(mb.waiting))
            return True

    def idle_until(self, clock: float) -> float | None:
        """With the batch empty at ``clock``: None when the next step starts now, else the instant
        to wake at (the policy's batch start, a waiting request's deadline, the next own arrival;
        ``inf``: only an arrival process can wake it)."""
        sched = self.scheduler
        start = sched.batch_start_time(clock) if sched.waiting else math.inf
        if start <= clock:
            return None
        if self.deadlines is not None and sched.waiting:   # a waiting request may give up first
            start = min(start, self.deadlines.next_deadline())
        if self.arrivals is not None:
            start = min(start, self.arrivals.next_time())
        return start

    def _sleep(self, clock: float, until: float):  # a SimPy sub-process generator
        """Sleep from ``clock`` until ``until`` and return the new clock: a SimPy timeout, or (solo)
        the clock moved as the timeout would move it; own arrivals up to then are queued."""
        if self.solo:
            clock = clock + (until - clock)   # what env.timeout(until - clock) makes of it
        else:
            yield self.env.timeout(until - clock)
            clock = self.env.now
        if self.arrivals is not None:
            self.arrivals.deliver(self, clock)
        return clock

    def _drained(self, t: float) -> bool:
        """Whether the batch emptied at ``t`` with no step to start then (nobody waits, or the policy
        waits to fill a batch): the loop goes back to the idle check."""
        sched = self.scheduler
        return sched.n == 0 and (not sched.waiting or sched.batch_start_time(t) > t)

    def _fast_steps(self, own: OwnSteps, t: float, horizon: float) -> tuple[float, list[int], float | None]:
        """Apply the steps from ``t`` that the scheduler can plan and apply on its own (they end
        before ``horizon`` and change nothing outside the batch: ``advance_steps``, speculative
        decoding's verification steps and chunked prefill's mixed steps); returns the last one's end
        (``t`` when there was none), the requests it finished, and the end of the step after them
        when the scheduler planned that one too (it crosses ``horizon``: applied once the clock
        reaches its end, with ``apply_planned_step``), else None."""
        sched = self.scheduler
        if sched.sort_pending or self.on_step_planned is not None:
            return t, [], None
        end, done, crossing_end = own.advance_steps(t, horizon, self.cost, self._log_step)
        if crossing_end is not None:
            self.planned_until = crossing_end
        elif end != t:
            self.planned_until = end
        return end, done, crossing_end

    def _plan_step(self, t: float, horizon: float) -> tuple[float, DecodeRun | SchedulerOutput]:
        """Schedule the step (or decode run) starting at ``t``; returns its end instant and what
        :meth:`_apply` applies at that end."""
        sched, prices = self.scheduler, self.prices
        prev, self._continue_from = self._continue_from, None
        if not sched.waiting and not sched.sort_pending and self.fast_forward:
            run = None
            if prev is not None and not prev.finishes and sched.n == prev.num_seqs - prev.num_padded:
                # The event that ended ``prev`` (an arrival sent elsewhere, most often) left this batch
                # as it was: the next run follows on from ``prev`` without re-reading the batch.
                run = sched.plan_decode_continuation(prev, t, horizon, prices)
            elif sched.n:
                # Nobody waits: the next step is the batch's decodes, a run read off the tracked batch
                # (after a step that admitted, finishes, aborts) without building the step's plan.
                run = sched.plan_tracked_run(t, horizon, prices)
            if run is not None:
                self.steps.add_run(self.index, t, run, 0)
                self.planned_until = t + run.total_s
                return t + run.total_s, run
        if sched.sort_pending:
            sched.sort_rows()
        out = sched.schedule(t)
        if out.is_pure_decode and self.fast_forward:
            planned = sched.plan_decode_run(out, t, horizon, prices)
            if planned is not None:
                self.steps.add_run(self.index, t, planned, len(sched.waiting))
                self.planned_until = t + planned.total_s
                return t + planned.total_s, planned
        if out.num_decode == 0 and not out.admitted:
            raise RuntimeError("scheduler planned an empty step (a waiting request can never fit)")
        duration = self.cost.step_time_s(out.batch_shape()) + out.extra_s
        self.steps.add_step(self.index, t, duration, out, sched.kv.num_used_blocks, len(sched.waiting))
        self.planned_until = t + duration
        if self.on_step_planned is not None:
            self.on_step_planned(out, t + duration)
        return t + duration, out

    def _apply(self, plan: DecodeRun | SchedulerOutput, end: float) -> int:
        """Apply a planned step or run ending at ``end``; returns how many requests it finished."""
        sched = self.scheduler
        done = sched.advance_decode(plan, end) if isinstance(plan, DecodeRun) else sched.update_from_output(plan, end)
        if len(done):
            self.on_finish(done, end)
        return len(done)
