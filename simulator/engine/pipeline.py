"""Pipeline parallelism with several batches in flight: the micro-batches of one pipelined replica.

A replica of ``pipeline_parallel_size`` = PP stages runs each batch through stage 1, then stage 2,
..., each stage working on one batch at a time, and keeps up to PP batches in flight, as vLLM does
(V1: ``EngineCore.step_with_batch_queue`` with a batch queue of ``max_concurrent_batches`` = PP,
``vllm/v1/engine/core.py``; the scheduler skips a running request while a batch it is in has not
returned, ``scheduled_req_ids`` in ``vllm/v1/core/sched/scheduler.py`` of v0.8; V0 ran PP virtual
engines, each with its own scheduler; vllm-project/vllm, Apache-2.0). So its throughput is set by
its slowest stage, while a request alone still waits for the whole traversal for each token.

:class:`MicroBatches` is that engine's scheduler: PP slot schedulers of the scenario's policy, one
per batch that can be in flight, sharing one waiting queue, one KV cache and ``max_num_seqs``. A
request admitted by a slot stays in it (in vLLM it is out of every batch scheduled while its own is
in flight, and back in the first one scheduled after it returns, the one that takes its slot), so a
slot's batch never holds a request that is still in flight. The engine loop
(:meth:`simulator.engine.replica.Replica.engine_loop`, its pipelined path) plans a slot's next batch
whenever stage 1 is free and a slot's batch has returned; each stage's time comes from the cost
model (:meth:`~simulator.cost.base.CostModel.stage_times_s`), and a batch waits at a stage until
that stage has finished the batch before it.
"""
from __future__ import annotations

from collections.abc import Iterable

from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.output import SchedulerOutput
from simulator.engine.request import RequestStatus, RequestTable
from simulator.engine.scheduler import Scheduler
from simulator.scenario.config import SchedulerConfig


class MicroBatches(Scheduler):
    """The scheduler of a pipelined replica: its slots' running batches, one shared waiting queue and
    KV cache (module docstring). Routers and the summary see it as one scheduler (``n``, ``waiting``,
    ``remaining_tokens``, ``stats``); the engine loop schedules and applies the slots."""

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, table: RequestTable,
                 slots: list[Scheduler]) -> None:
        super().__init__(config, kv, table)
        self.slots = slots
        """One scheduler per batch that can be in flight (``pipeline_parallel_size`` of them), built on
        ``kv``; they take their requests from this scheduler's waiting queue."""
        for slot in slots:
            slot.waiting = self.waiting

    def plan(self, slot: Scheduler, now: float) -> SchedulerOutput:
        """``slot``'s next batch, admitting within what the other slots leave of ``max_num_seqs``."""
        slot.max_num_seqs = self.config.max_num_seqs - (self.n - slot.n)
        if slot.sort_pending:
            slot.sort_rows()
        out = slot.schedule(now)
        self.count()
        return out

    def count(self) -> None:
        """``n``: the requests running in every slot (after a slot's batch is planned or applied)."""
        n = 0
        for slot in self.slots:
            n += slot.n
        self.n = n

    def schedule(self, now: float) -> SchedulerOutput:
        raise RuntimeError("a pipelined replica plans each slot's batch (MicroBatches.plan)")

    def update_from_output(self, out: SchedulerOutput, now: float) -> list[int]:
        raise RuntimeError("a pipelined replica applies each slot's batch to that slot")

    def remaining_tokens(self, rows: Iterable[int] | None = None) -> list[int]:
        """Output tokens every running request of every slot has still to emit (``rows``: all)."""
        out: list[int] = []
        for slot in self.slots:
            out += slot.remaining_tokens()
        return out

    def finish_requests(self, ids: list[int], status: RequestStatus, now: float) -> None:
        raise RuntimeError("client timeouts and shedding are not modelled with pipeline parallelism")

    def stats(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for slot in self.slots:
            for name, value in slot.stats().items():
                out[name] = out.get(name, 0) + value
        return out
