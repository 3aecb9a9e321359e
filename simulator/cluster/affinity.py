"""Affinity routers: keep a session, or a prompt prefix, on the replica that holds its KV cache.

Prefix caching is per replica, so a round-robin fleet recomputes a shared system prompt or a
session's history on every replica it happens to land on. These routers send related requests to
one replica, the way production routers do:

* ``session_affinity``: every turn of a session (``workload.sessions``) goes where the session
  went last (a sticky table; the first turn goes to the least-outstanding replica). Requests
  outside sessions (no ``workload.sessions``) go to the least-outstanding replica.
* ``prefix_affinity`` (after SGLang's cache-aware router and vLLM production-stack's prefix-aware
  routing): the router remembers, for every full prompt block it has routed, the replica it sent
  it to last (block ids stand for whole prefixes, as in :mod:`simulator.engine.prefix_cache`, so what it
  remembers is a radix tree of routed prompts, flattened). An arriving request's longest run of
  leading blocks the router has seen is its match; when the match covers more than
  ``deployment.affinity.cache_threshold`` of its full prompt blocks it goes to the replica that
  saw the deepest matched block, else to the least-outstanding replica. Its blocks are then
  recorded for the chosen replica. Like SGLang's router tree, this is what the router *sent*, not
  what the replica still caches (evictions are not seen by the router).

Both have a load guard so that one hot session or prefix cannot melt one replica: the sticky
replica is passed over for the least-outstanding one when its outstanding requests exceed the
least loaded replica's by more than ``balance_abs_threshold`` and by a factor over
``balance_rel_threshold`` (SGLang's two imbalance thresholds, applied to the chosen replica). A
request moved by the guard re-pins its session / prefix to the new replica (which now holds the
newest copy). Routers count their decisions, reported in the summary under ``routing``: ``sticky``
(sent where the session / prefix was), ``guard_fallbacks`` (moved by the guard) and ``unmatched``
(no key, a session's first turn, or a prefix match not above ``cache_threshold``: least outstanding).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simulator.cluster.router import ReplicaView, register


def _least_outstanding(replicas: Sequence[ReplicaView]) -> tuple[int, int]:
    best, best_load = 0, None
    for i, r in enumerate(replicas):
        load = r.num_outstanding
        if best_load is None or load < best_load:
            best, best_load = i, load
    return best, int(best_load or 0)


class AffinityRouter:
    """Shared parts: the bound request table, the guard and the counters."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.table: Any = None
        self.cfg: Any = None
        self.counters = {"sticky": 0, "guard_fallbacks": 0, "unmatched": 0}

    def bind(self, table: Any, affinity: Any) -> None:
        """Called once by the simulation with the run's request table and ``deployment.affinity``."""
        self.table, self.cfg = table, affinity

    def _guarded(self, sticky: int, replicas: Sequence[ReplicaView]) -> int:
        lo, lo_load = _least_outstanding(replicas)
        load = replicas[sticky].num_outstanding
        if load - lo_load > self.cfg.balance_abs_threshold and load > self.cfg.balance_rel_threshold * lo_load:
            self.counters["guard_fallbacks"] += 1
            return lo
        self.counters["sticky"] += 1
        return sticky

    def stats(self) -> dict[str, int]:
        return dict(self.counters)


@register("session_affinity")
class SessionAffinity(AffinityRouter):
    """Every turn of a session to the replica its previous turn went to (load guard permitting)."""

    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__(rng)
        self._sticky: dict[int, int] = {}

    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int:
        session = None if self.table is None or self.table.session is None else int(self.table.session[rid])
        if session is None:
            self.counters["unmatched"] += 1
            return _least_outstanding(replicas)[0]
        sticky = self._sticky.get(session)
        if sticky is None or sticky >= len(replicas):   # first turn (or its replica left the pool)
            self.counters["unmatched"] += 1
            chosen = _least_outstanding(replicas)[0]
        else:
            chosen = self._guarded(sticky, replicas)
        self._sticky[session] = chosen
        return chosen


@register("prefix_affinity")
class PrefixAffinity(AffinityRouter):
    """To the replica that was sent the longest matching prompt prefix (load guard permitting)."""

    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__(rng)
        self._owner: np.ndarray | None = None

    def bind(self, table: Any, affinity: Any) -> None:
        super().bind(table, affinity)
        bh = table.block_hashes
        self._owner = None if bh is None else np.full(bh.num_ids, -1, dtype=np.int32)

    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int:
        owner = self._owner
        bh = None if self.table is None else self.table.block_hashes
        num_blocks = 0 if bh is None else int(self.table.num_prompt_tokens[rid]) // bh.block_size
        if owner is None or num_blocks == 0:
            self.counters["unmatched"] += 1
            return _least_outstanding(replicas)[0]
        assert bh is not None   # num_blocks > 0
        ids = bh.ids(rid, num_blocks)
        seen = owner[ids]
        present = seen >= 0              # prefix-closed: a block id stands for its whole prefix
        matched = num_blocks if present.all() else int(np.argmin(present))
        holder = int(seen[matched - 1]) if matched else -1
        if matched / num_blocks > self.cfg.cache_threshold and 0 <= holder < len(replicas):
            chosen = self._guarded(holder, replicas)
        else:
            self.counters["unmatched"] += 1
            chosen = _least_outstanding(replicas)[0]
        owner[ids] = chosen
        return chosen
