"""One registry helper: implementations of one kind, keyed by the strings the YAML and the UI use.

Arrival processes, length distributions, batching policies, routers and cost models each keep a
:class:`Registry`; a module adds to it with ``@REGISTRY.register("name")`` and the run looks the
name up with :meth:`Registry.lookup`, which names the scenario field and the allowed values when
the name is unknown. A registry is a ``dict``, so ``name in R``, ``R[name]`` and ``sorted(R)``
work as they read.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from simulator.errors import ScenarioError

T = TypeVar("T")


class Registry(dict[str, T]):
    """``kind`` says what is registered (for error messages); ``field`` is the scenario field
    whose value is looked up (e.g. ``scheduler.policy``)."""

    def __init__(self, kind: str, field: str) -> None:
        super().__init__()
        self.kind, self.field = kind, field

    def register(self, name: str) -> Callable[[T], T]:
        """Class (or function) decorator adding the decorated object under ``name``."""
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj
        return deco

    def add(self, name: str, obj: T) -> None:
        if name in self and self[name] is not obj:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self[name] = obj

    def lookup(self, name: str) -> T:
        """The implementation registered as ``name``.

        Raises:
            ScenarioError: ``name`` is not registered (naming the field and every allowed name).
        """
        try:
            return self[name]
        except KeyError:
            raise ScenarioError(self.field, name, f"unknown {self.kind}; known: {', '.join(sorted(self))}") from None
