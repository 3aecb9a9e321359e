"""The engine's front end: the API server between a client's send and the engine loop.

A serving engine is more than its engine loop. vLLM's OpenAI server receives the HTTP request,
applies the chat template and tokenises the prompt before the engine sees it, and detokenises and
streams every token back; a client's TTFT and E2E include that time, its TPOT does not (one
constant per request, spread over no token). The simulator's engine starts at the request's
arrival in the waiting queue, so without a front end a low-load TTFT is the first step alone,
below what any benchmark client measures.

``overhead.frontend_s`` (the profile's, or ``engine.overhead``'s; else the engine preset's measured
figure, :attr:`simulator.scenario.engines.EnginePreset.frontend_s`) is that time per request, as a
client times it. It is modelled as a delay before the engine: an open-loop request reaches the
engine ``frontend_s`` after it is sent, a closed-loop client's request (and a closed session's next
turn) likewise, and the records measure TTFT and E2E from the send (:class:`FrontEnd`). Where the
time is really spent (before the engine or after it, in the answer's stream) does not change what a
client measures: a constant delay moves every arrival, so the engine's queue sees the same process.
A client's timeout (``client.timeout_s``) runs from its send, so it has ``frontend_s`` less of it
in the engine (:mod:`simulator.engine.deadlines`).

Not modelled: the API server as a queue of its own (one event loop, a tokeniser pool), which
saturates before the engine on very short requests at very high rates; a time per prompt token (the
measured figure is a mean over the prompts it was measured with).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from simulator.cluster.extension import Records, RunExtension


def with_frontend(workload: Any, frontend_s: float) -> Any:
    """``workload`` as the engine sees it behind a front end of ``frontend_s``: open-loop arrivals
    and closed sessions' first turns ``frontend_s`` later, a closed loop's send delays and a closed
    session's later turn gaps ``frontend_s`` longer (a closed loop's first requests are delayed by
    :class:`simulator.run.clients.ClosedLoopClients` itself). Unchanged when ``frontend_s`` is 0."""
    if frontend_s <= 0:
        return workload
    changes: dict[str, Any] = {"arrival_time": workload.arrival_time + frontend_s}
    if workload.send_delay is not None:
        changes["send_delay"] = workload.send_delay + frontend_s
    if workload.turn_gap is not None and workload.session is not None:
        later = workload.session != np.arange(len(workload.session))
        changes["turn_gap"] = np.where(later, workload.turn_gap + frontend_s, workload.turn_gap)
    return dataclasses.replace(workload, **changes)


class FrontEnd(RunExtension):
    """Measures from the send instant: every request was sent ``frontend_s`` before it reached the
    engine (its ``arrival_time`` in the records becomes the send), so its TTFT and E2E grow by
    ``frontend_s``; ``queue_delay_s`` stays the engine's own queue. A request answered without the
    engine (a response-cache hit) or refused at arrival passed the front end too."""

    def __init__(self, frontend_s: float) -> None:
        self.frontend_s = frontend_s

    def engine_columns(self, records: Records) -> Records:
        f = self.frontend_s
        records["arrival_time"] = np.asarray(records["arrival_time"], dtype=float) - f
        for col in ("ttft_s", "e2e_s"):
            records[col] = np.asarray(records[col], dtype=float) + f
        return records
