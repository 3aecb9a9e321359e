"""A replica's attention data-parallel ranks (``deployment.data_parallel_size`` DP > 1), stepped in lockstep.

Each rank is an engine core of its own: a :class:`~simulator.engine.replica.Replica` with its own
scheduler, waiting queue, batch and KV cache (the request and step tables name the rank). What the
ranks share is the routed experts: every MoE layer's collectives carry every rank's tokens, so no
rank can start layer ``l + 1`` before every rank has finished layer ``l``. The engines
therefore step the ranks together:

* vLLM's data-parallel engine cores (``DPEngineCoreProc`` in ``vllm/v1/engine/core.py``) each run a
  step while any rank has requests, a rank with none running a dummy batch
  (``execute_dummy_batch``) so that its share of the collectives happens;
* SGLang's DP attention gathers the ranks' batches every step (an idle rank runs an ``IDLE`` batch);
* TensorRT-LLM's attention DP does the same inside one executor.

So one step of the group takes as long as its slowest rank's own work (attention, dense layers,
router, shared experts, CPU time) plus the routed experts over every rank's tokens and their
collectives (the all-to-all at the busiest rank's tokens with expert parallelism, the all-gather and
reduce-scatter of the group's without: :meth:`~simulator.cost.base.CostModel.group_step_time_s`). A
long prefill chunk on one rank stalls the decodes of every other rank for that step, which is what
makes a DEP deployment's inter-token tails longer than its ranks' own steps would. The group's
loop is one SimPy process (run by the first rank's engine loop) that plans one step for every rank
with work, waits the group's step and applies each rank's step; it takes one event per step (no
decode runs: a run would need every rank's batch unchanged, which an arrival at any rank breaks).

An idle rank's dummy batch is priced as one decode token over a context of one (vLLM's
``_dummy_run(1)``) and logged nowhere: the step table has the steps of ranks that scheduled work.

Which rank a request joins is the engine's choice (:data:`RANK_CHOICES`, keyed by
``engine.data_parallel_routing``; the engine preset's when left out, ``least_outstanding`` without
an engine):

* ``least_outstanding``: the rank with the fewest requests waiting or running, ties to the lowest;
* ``vllm``: vLLM's front end (``DPLBAsyncMPClient.get_core_engine_for_request`` in
  ``vllm/v1/engine/core_client.py``): the lowest ``4 x waiting + running``, ties to the lowest. vLLM
  reads the ranks' counts from its coordinator every 100 ms and adds each request it sends to the
  chosen rank's waiting count meanwhile; here the counts are the ranks' own at the arrival;
* ``round_robin``: SGLang's default ``--load-balance-method``: ranks in turn, whatever their load.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import simpy

from simulator.cost.base import BatchShape, CostModel
from simulator.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from simulator.engine.replica import Replica


class RankLoad(Protocol):
    """What a rank choice reads of a rank (a :class:`~simulator.engine.replica.Replica` has both)."""

    @property
    def num_outstanding(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...


class RankChoice:
    """How a replica's front end picks the data-parallel rank of each request (module docstring)."""

    def choose(self, ranks: Sequence[RankLoad]) -> int:
        """Index of the rank the next request goes to."""
        raise NotImplementedError


class LeastOutstanding(RankChoice):
    def choose(self, ranks: Sequence[RankLoad]) -> int:
        best, best_load = 0, ranks[0].num_outstanding
        for i in range(1, len(ranks)):
            load = ranks[i].num_outstanding
            if load < best_load:
                best, best_load = i, load
        return best


class VllmScore(RankChoice):
    """vLLM's ``4 x waiting + running`` (held requests count as waiting: vLLM's front end has sent them)."""

    def choose(self, ranks: Sequence[RankLoad]) -> int:
        best, best_score = 0, -1
        for i in range(len(ranks)):
            waiting = ranks[i].num_waiting
            score = 4 * waiting + (ranks[i].num_outstanding - waiting)
            if best_score < 0 or score < best_score:
                best, best_score = i, score
        return best


class RoundRobin(RankChoice):
    def __init__(self) -> None:
        self.next = 0

    def choose(self, ranks: Sequence[RankLoad]) -> int:
        i = self.next % len(ranks)
        self.next = i + 1
        return i


RANK_CHOICES: Registry[type[RankChoice]] = Registry("data-parallel rank choice", "engine.data_parallel_routing")
"""``engine.data_parallel_routing`` -> how a request picks its rank (module docstring)."""
RANK_CHOICES.add("least_outstanding", LeastOutstanding)
RANK_CHOICES.add("vllm", VllmScore)
RANK_CHOICES.add("round_robin", RoundRobin)


class DataParallelGroup:
    """The attention data-parallel ranks of one replica: their loads summed for the router, the
    rank a request goes to, and the lockstep engine loop (module docstring).

    Inside the replica a request goes to the rank ``choice`` picks (:data:`RANK_CHOICES`)."""

    def __init__(self, env: simpy.Environment, ranks: Sequence[Replica], cost: CostModel,
                 choice: RankChoice | None = None) -> None:
        self.env = env
        self.ranks = list(ranks)
        self.cost = cost
        self.choice: RankChoice = choice if choice is not None else LeastOutstanding()
        self.dummy = BatchShape((), (), 1, 1, 0)
        """An idle rank's batch while the others step: one token, no sampled row."""
        self.stepping = [False] * len(self.ranks)
        """Whether each rank schedules work in the step being planned (:meth:`_ready`)."""
        for rank in self.ranks:
            rank.group = self

    @property
    def num_outstanding(self) -> int:
        return sum(r.num_outstanding for r in self.ranks)

    @property
    def num_waiting(self) -> int:
        return sum(r.num_waiting for r in self.ranks)

    @property
    def outstanding_tokens(self) -> int:
        return sum(r.outstanding_tokens for r in self.ranks)

    def choose_rank(self) -> int:
        """Index of the rank the next request goes to."""
        return self.choice.choose(self.ranks)

    def _ready(self, now: float) -> float:
        """Expire the ranks' deadlines, schedule held requests at an idle rank, and mark the ranks
        that step at ``now`` (:attr:`stepping`): those with running requests, and those whose
        waiting ones the policy starts now (a batching policy may wait to fill its batch). Returns
        ``now`` when one does, else the instant to wake at (a batch start or a waiting request's
        deadline; ``inf``: only an arrival can wake the group)."""
        wake = math.inf
        for i, rank in enumerate(self.ranks):
            sched = rank.scheduler
            if rank.deadlines is not None:
                rank.deadlines.expire(now)
            if rank.held and sched.n == 0 and not sched.waiting:
                rank.release_held()          # no step to plan first: the engine schedules them now
            steps = sched.n > 0
            if not steps:
                until = rank.idle_until(now)  # None: the policy starts its waiting requests now
                if until is None:
                    steps = True
                else:
                    wake = min(wake, until)
            self.stepping[i] = steps
            if steps:
                wake = now
        return wake

    def engine_loop(self):  # a SimPy process generator
        """Plan a step for every rank with work (the others run the dummy batch), wait the group's
        step, apply every rank's; sleep while no rank has work."""
        env, ranks, cost = self.env, self.ranks, self.cost
        while True:
            t = env.now
            wake = self._ready(t)
            if wake > t:                      # no rank steps now: sleep until an arrival or ``wake``
                idle = env.event()
                for rank in ranks:
                    rank.idle_event = idle
                yield idle if wake == math.inf else env.any_of([idle, env.timeout(wake - t)])
                for rank in ranks:
                    rank.idle_event = None
                continue
            planned = []                      # (rank, its step's plan)
            shapes = []                       # every rank's batch, the idle ones' dummy
            extra = 0.0
            for i, rank in enumerate(ranks):
                sched = rank.scheduler
                if not self.stepping[i]:
                    shapes.append(self.dummy)
                    continue
                if sched.sort_pending:
                    sched.sort_rows()
                out = sched.schedule(t)
                if out.num_decode == 0 and not out.admitted:
                    raise RuntimeError("scheduler planned an empty step (a waiting request can never fit)")
                planned.append((rank, out))
                shapes.append(out.batch_shape())
                extra = max(extra, out.extra_s)
            duration = cost.group_step_time_s(shapes) + extra
            end = t + duration
            for rank, out in planned:
                sched = rank.scheduler
                rank.steps.add_step(rank.index, t, duration, out, sched.kv.num_used_blocks, len(sched.waiting))
            for rank in ranks:
                rank.planned_until = end
                if rank.held:                 # they could not join this step; they join the next
                    rank.release_held()
            yield env.timeout(duration)
            for rank, out in planned:
                done = rank.scheduler.update_from_output(out, end)
                if len(done):
                    rank.on_finish(done, end)

