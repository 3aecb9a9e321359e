"""Routers: which replica an arriving request goes to.

Registered under the names the YAML uses (``deployment.router``). A router sees the replicas'
queues at the arrival instant; randomised routers draw from their own generator stream.
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np


class ReplicaView(Protocol):
    @property
    def num_outstanding(self) -> int: ...


class Router(Protocol):
    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int: ...


ROUTERS: dict[str, Callable[[np.random.Generator], Router]] = {}


def register(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        ROUTERS[name] = cls
        return cls
    return deco


@register("round_robin")
class RoundRobin:
    def __init__(self, rng: np.random.Generator) -> None:
        self._next = 0

    def route(self, rid: int, replicas: Sequence[ReplicaView]) -> int:
        i = self._next
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
