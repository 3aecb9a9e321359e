"""Making a run's routers: every router registered (the simple ones and the affinity ones), one lookup."""
from __future__ import annotations

from typing import Any

import numpy as np

from simulator.cluster import affinity as _affinity  # noqa: F401  (registers session_affinity, prefix_affinity)
from simulator.cluster.router import ROUTERS, Router


def make_router(name: str, rng: np.random.Generator, table: Any = None, affinity: Any = None) -> Router:
    """``ROUTERS[name](rng)``, bound to the run's request table when the router routes by request
    keys (sessions, prompt prefixes: ``simulator.cluster.affinity``). Other routers see only ``rid``."""
    router = ROUTERS.lookup(name)(rng)
    bind = getattr(router, "bind", None)
    if bind is not None:
        bind(table, affinity)
    return router
