"""The base of every configuration model: frozen (hashable, safe to share) and strict (an unknown
field is an error naming it, never silently ignored)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
