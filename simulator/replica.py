"""One engine replica: a SimPy process that plans a step, waits its duration, applies it.

The loop mirrors a serving engine's busy loop: ``schedule()`` picks the batch, the cost model
says how long the forward pass takes, the process sleeps that long in simulated time, then
``update_from_output()`` records emitted tokens and finished requests. While nothing can change
the batch (no arrival, completion or KV shortage before the next step boundary), many decode
steps are advanced in one event; ``fast_forward=False`` turns that off for verification.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import simpy

from .cost_model import CostModel
from .scheduler import Scheduler

if TYPE_CHECKING:  # pragma: no cover
    from .simulation import StepLog


class Replica:
    """Owns a scheduler (waiting/running queues + KV blocks) and runs ``engine_loop``."""

    def __init__(self, env: simpy.Environment, index: int, scheduler: Scheduler, cost: CostModel,
                 steps: "StepLog", next_event_time: Callable[[], float],
                 on_finish: Callable[[int], None], fast_forward: bool = True) -> None:
        self.env = env
        self.index = index
        self.scheduler = scheduler
        self.cost = cost
        self.steps = steps
        self.next_event_time = next_event_time
        self.on_finish = on_finish
        self.fast_forward = fast_forward
        self._idle: simpy.Event | None = None
        self.process = env.process(self.engine_loop())

    @property
    def num_outstanding(self) -> int:
        return self.scheduler.n + len(self.scheduler.waiting)

    def add_request(self, rid: int) -> None:
        self.scheduler.add_request(rid)
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def engine_loop(self):  # noqa: ANN201 - a SimPy process generator
        env, sched, cost, steps = self.env, self.scheduler, self.cost, self.steps
        while True:
            if sched.n == 0 and not sched.waiting:
                self._idle = env.event()
                yield self._idle
                self._idle = None
                continue
            now = env.now
            out = sched.schedule(now)
            if out.is_pure_decode and self.fast_forward:
                run = sched.plan_decode_run(out, now, self.next_event_time(), cost.decode_run_times)
                yield env.timeout(run.total_s)
                steps.add_run(self.index, now, run, out.num_decode, len(sched.waiting))
                done = sched.advance_decode(run.num_steps, env.now)
            else:
                if out.num_decode == 0 and not out.admitted:
                    raise RuntimeError("scheduler planned an empty step (a waiting request can never fit)")
                duration = cost.step_time_s(out.admitted_tokens, [0] * len(out.admitted), out.num_decode,
                                            out.decode_context_sum, out.num_decode + len(out.admitted))
                steps.add_step(self.index, now, duration, out, sched.kv.num_used_blocks, len(sched.waiting))
                yield env.timeout(duration)
                done = sched.update_from_output(out, env.now)
            if len(done):
                self.on_finish(len(done))
