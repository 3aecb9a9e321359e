"""Disaggregated prefill and decode pools (Splitwise, DistServe): ``scheduler.policy: disaggregated``.

Requests arrive at a pool of *prefill* replicas (``deployment.prefill_replicas``). A prefill
replica batches prompts under the token budget exactly as the continuous policy admits them; the
step computes each prompt and emits its first token (TTFT ends there). The request's KV is then
sent to a *decode* replica (``deployment.decode_replicas``, picked by the same router kind) over
the KV-transfer link: ``prompt tokens x KV bytes per token / bandwidth + latency`` (the profile's
interconnect unless ``deployment.kv_transfer_bandwidth_bytes_per_s`` says otherwise). The prefill
replica frees the blocks when its step ends (with prefix caching they stay cached there, so later
prompts sharing a prefix compute only the rest; the whole prompt's KV is sent); the decode replica
admits the request when the KV has arrived, like a swapped-in request: one decode token over the
received context, no prefill.
A decode replica that preempts a request later recomputes it locally (recompute preemption).

Exactness of the fast decode runs: a decode replica may only advance to the earliest instant at
which a request could reach it. Handoffs are registered when the prefill step that produces them
is *planned* (its end is known then), so that bound is the earliest of: the next arrival, the
earliest registered handoff, and for each prefill replica with work, the end of its last planned
step (its next step, and so its next handoffs, cannot come earlier). A handoff within
:data:`~simulator.engine.deadlines.DEADLINE_EPS_S` of a decode step boundary counts as arrived at
it (the run ends there and the handoff joins the next step): a fast run's step ends, summed in
closed form, and the step-by-step ones differ by ~1e-16 s, which must not decide which step it joins.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from simulator.engine.deadlines import DEADLINE_EPS_S
from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.request import RequestStatus, RequestTable
from simulator.engine.scheduler import Scheduler, SchedulerOutput
from simulator.scenario.config import SchedulerConfig

if TYPE_CHECKING:  # pragma: no cover
    from simulator.engine.replica import Replica

_WAITING = int(RequestStatus.WAITING)


class PrefillScheduler(Scheduler):
    """Continuous admission of prompts; every request leaves after its prefill step."""

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, table: RequestTable) -> None:
        super().__init__(config, kv, table)
        self.handoffs = 0

    def update_from_output(self, out: SchedulerOutput, now: float) -> list[int]:
        done = super().update_from_output(out, now)    # first tokens; 1-token requests finish here
        n = self.n
        if n:
            table = self.table
            self.kv.release_many(self.req_id, self.num_computed_tokens)
            ids = np.asarray(self.req_id, dtype=np.int64)
            table.num_output_tokens[ids] = table.max_tokens[ids] - np.asarray(self.num_remaining_tokens, dtype=np.int64)
            table.status[ids] = _WAITING                 # in transfer, then waiting on a decode replica
            self.context_total = 0
            self.handoffs += n
            for rows_field in self._rows:
                rows_field.clear()
            self.n = 0
        return done

    def stats(self) -> dict[str, int]:
        return {"kv_transfers": self.handoffs}


class DecodeScheduler(Scheduler):
    """Continuous batching whose new requests bring their KV (admitted without a prefill)."""

    def expect_kv(self, rid: int, tokens: int) -> None:
        """``rid``'s KV for ``tokens`` tokens has arrived: admit it with one decode token."""
        self._swapped[rid] = tokens
        self._restore_free.add(rid)


class DisaggregatedFleet:
    """Builds the two pools and moves requests from one to the other (see module docstring)."""

    def __init__(self, env: Any, scenario: Any, system: Any, table: Any, make_replica: Callable[..., Replica],
                 router_factory: Callable[[], Any], next_arrival: Callable[[], float]) -> None:
        dep = scenario.deployment
        self.env, self.table = env, table
        self.next_arrival = next_arrival
        ic = system.profile.interconnect
        bandwidth = dep.kv_transfer_bandwidth_bytes_per_s or (ic.bandwidth_bytes_per_s if ic else None)
        assert bandwidth is not None
        self.bandwidth = float(bandwidth)
        self.latency_s = dep.kv_transfer_latency_s if dep.kv_transfer_latency_s is not None else (
            ic.latency_s if ic else 0.0)
        # The whole replica's KV for one token (all TP shards send in parallel over their own links).
        self.kv_bytes_per_token_per_gpu = system.kv_plan.kv_bytes_per_block / scenario.scheduler.block_size
        self.prefill = [make_replica(i, PrefillScheduler, self.next_arrival) for i in range(dep.prefill_replicas)]
        first = dep.prefill_replicas
        self.decode = [make_replica(first + i, DecodeScheduler, self.decode_horizon)
                       for i in range(dep.decode_replicas)]
        for replica in self.prefill:
            replica.on_step_planned = self._prefill_planned
        self.prefill_router = router_factory()
        self.decode_router = router_factory()
        self._pending: list[tuple[float, int, int]] = []   # (arrival at the decode pool, request id, tokens)
        self.transfer_s_total = 0.0

    @property
    def replicas(self) -> list[Replica]:
        return self.prefill + self.decode

    def transfer_s(self, tokens: int) -> float:
        return self.latency_s + tokens * self.kv_bytes_per_token_per_gpu / self.bandwidth

    def _prefill_planned(self, out: SchedulerOutput, end: float) -> None:
        """Register the handoffs of a prefill step when it is planned (its end is known)."""
        table, env = self.table, self.env
        cached = out.prefill_context or [0] * len(out.admitted)   # prefix-cache hits: their KV goes too
        for rid, computed, hit in zip(out.admitted, out.admitted_tokens, cached, strict=True):
            if table.max_tokens[rid] <= 1:
                continue                                  # finished by its first token
            tokens = computed + hit
            at = end + self.transfer_s(tokens)
            self.transfer_s_total += at - end
            heapq.heappush(self._pending, (at, rid, tokens))
            env.timeout(at - env.now).callbacks.append(self._arrived)

    def _arrived(self, _event: Any) -> None:
        """A handoff's arrival instant: deliver it, unless a decode step boundary took it already."""
        self._deliver_until(self.env.now)

    def _deliver_until(self, now: float) -> None:
        """Deliver every pending handoff due at ``now`` or within DEADLINE_EPS_S after it, in time order."""
        pending = self._pending
        while pending and pending[0][0] <= now + DEADLINE_EPS_S:
            _, rid, tokens = heapq.heappop(pending)
            self._deliver(rid, tokens)

    def _deliver(self, rid: int, tokens: int) -> None:
        i = self.decode_router.route(rid, self.decode) if len(self.decode) > 1 else 0
        self.table.replica[rid] = self.decode[i].index
        cast(DecodeScheduler, self.decode[i].scheduler).expect_kv(rid, tokens)
        self.decode[i].add_request(rid)

    def decode_horizon(self) -> float:
        """Earliest instant a request could reach the decode pool (see module docstring); a decode
        replica asks at a step boundary, where a handoff due within DEADLINE_EPS_S is delivered first."""
        now = self.env.now
        self._deliver_until(now)
        horizon = self.next_arrival()
        if self._pending:
            horizon = min(horizon, self._pending[0][0] - DEADLINE_EPS_S)
        for replica in self.prefill:
            sched = replica.scheduler
            if sched.n or sched.waiting:
                horizon = min(horizon, max(now, replica.planned_until))
        return horizon

    def stats(self) -> dict[str, float]:
        return {"kv_transfer_s_total": self.transfer_s_total}

