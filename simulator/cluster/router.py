"""Routers: which replica an arriving request goes to.

Registered under the names the YAML uses (``deployment.router``). A router sees the replicas'
queues at the arrival instant; randomised routers draw from their own generator stream.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from simulator.registry import Registry


class ReplicaView(Protocol):
    @property
    def num_outstanding(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def outstanding_tokens(self) -> int: ...


class Router(Protocol):
    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int: ...


ROUTERS: Registry[Callable[[np.random.Generator], Router]] = Registry("router", "deployment.router")
register = ROUTERS.register


@register("round_robin")
class RoundRobin:
    def __init__(self, rng: np.random.Generator) -> None:
        self._next = 0

    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int:
        i = self._next % len(replicas)   # the pool may have shrunk (autoscaler)
        self._next = (i + 1) % len(replicas)
        return i


@register("random")
class Random:
    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int:
        return int(self._rng.integers(len(replicas)))


@register("least_outstanding")
class LeastOutstanding:
    """Fewest requests waiting or running; ties go to the lowest index."""

    def __init__(self, rng: np.random.Generator) -> None:
        pass

    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int:
        best, best_load = 0, None
        for i, r in enumerate(replicas):
            load = r.num_outstanding
            if best_load is None or load < best_load:
                best, best_load = i, load
        return best


def _argmin(loads: Sequence[Any]) -> int:
    best, best_load = 0, None
    for i, load in enumerate(loads):
        if best_load is None or load < best_load:
            best, best_load = i, load
    return best


@register("join_shortest_queue")
class JoinShortestQueue:
    """Fewest requests waiting for admission (not yet in a batch); ties go to the fewest
    outstanding, then the lowest index. Blind to how full each running batch is."""

    def __init__(self, rng: np.random.Generator) -> None:
        pass

    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int:
        return _argmin([(r.num_waiting, r.num_outstanding) for r in replicas])


@register("least_outstanding_tokens")
class LeastOutstandingTokens:
    """Fewest tokens still to process (waiting prompts and outputs, running outputs); weighs a
    long request more than a short one, unlike ``least_outstanding``."""

    def __init__(self, rng: np.random.Generator) -> None:
        pass

    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int:
        return _argmin([r.outstanding_tokens for r in replicas])


@register("power_of_two")
class PowerOfTwoChoices:
    """Sample two distinct replicas at random (seeded) and take the one with fewer outstanding
    requests (Mitzenmacher's power of two choices); ties go to the first sampled."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int:
        n = len(replicas)
        if n == 1:                       # a fleet's region of one replica: no pair to draw
            return 0
        a = int(self._rng.integers(n))
        b = int(self._rng.integers(n - 1))
        b += b >= a                      # a uniformly random replica other than a
        return b if replicas[b].num_outstanding < replicas[a].num_outstanding else a
