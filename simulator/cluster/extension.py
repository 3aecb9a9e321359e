"""The seam every optional part of a run plugs into: :class:`RunExtension`.

A run is an arrival source, a topology (replicas behind a router, :mod:`simulator.run.topology`)
and the engines. Everything else a scenario can switch on (the request path's stages, response
cache and coalescing; client networks; regions; model pools; the autoscaler; closed loops and
sessions) is an *extension*: an object the run calls at a few fixed moments, as a SimPy resource's
queues are driven by a few fixed methods. The run knows no feature by name: it loops over its
extensions at each moment, and :func:`simulator.metrics.summarize` loops over the
:class:`SummaryBlock` objects they leave in the result.

The moments, in a run's order: a request is *sent* (:meth:`RunExtension.sent`), a decode run asks
how far it may go (:meth:`RunExtension.horizon`, for ``timed`` extensions), requests *finish*
(:meth:`RunExtension.finished`), the records are built (:meth:`RunExtension.engine_columns`, then
the client's view, then :meth:`RunExtension.add_columns`), and the result keeps what the summary
needs (:meth:`RunExtension.summary_blocks`).

The protocol lives in ``cluster`` because most features that implement it do (the request path,
the network, regions, pools, the autoscaler); the run (:mod:`simulator.run`) builds on it, and
this module imports nothing of the simulator at run time.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

Records = Any
"""Request records: a run's :class:`simulator.run.records.RequestColumns` or a request frame (both
read as ``records[name]``)."""


class Run(Protocol):
    """What a run shows its extensions: its request table and its ways to end requests."""

    table: Any
    """The run's :class:`simulator.engine.request.RequestTable` (not imported here: the engine's
    modules import the workload's, which import the cluster's)."""

    def finish(self, ids: Sequence[int] | np.ndarray, at: float) -> None:
        """Requests ``ids`` ended at instant ``at``: count them and call every extension's
        :meth:`RunExtension.finished`."""

    def answer(self, rid: int, at: float) -> None:
        """Request ``rid`` was answered at ``at`` without reaching an engine: completed, with all
        its tokens, on no replica (then :meth:`finish`)."""

    def abandon(self, rid: int, at: float) -> None:
        """Request ``rid``'s client gave up (``client.timeout_s``) before an answer reached it
        without an engine: timed out at ``at``, no tokens, on no replica (then :meth:`finish`)."""

    def completed(self, rid: int) -> bool:
        """Whether request ``rid`` ended with all its tokens."""


class RunExtension(Protocol):
    """An optional part of a run, called by the run at fixed moments.

    A feature implements the hooks it needs by subclassing this protocol explicitly (the others
    keep their do-nothing bodies below); the run builds it once the request table exists (the
    topology builders, :func:`simulator.run.simulate.run_extensions`) and calls, in this order:

    * :meth:`sent` when a request is sent, before it is routed (after the run has refused a request
      rejected at arrival), if the class sets ``sees_sends``. ``True`` takes the request off the
      engine's path: the extension ends it itself (``run.answer``, a cached answer) or later (a
      request merged into another, ended through ``run.finish``).
    * :meth:`horizon` whenever a replica plans a decode run, if the class sets ``timed``: the
      earliest instant at which the extension acts on the replicas' state (an autoscaler's tick), so
      no decode run crosses it. Extensions that only react to sends and ends are not timed.
    * :meth:`finished` when requests end (completed or dropped), once per engine step's ends. It
      returns how many requests will now never be sent (a session a dropped turn ended), which
      count as done for progress.
    * :meth:`engine_columns` on the finished run's records, before the client's view is applied
      (:func:`simulator.workload.levers.apply_client_view`): corrections to what the engine saw,
      such as measuring from the send instant instead of the engine's arrival.
    * :meth:`add_columns` after the client's view: columns it adds (a region, a pool, network
      latencies), or rows it drops (requests a closed loop never sent). Both column hooks take
      and return records (columns or a frame); one that needs a frame converts them with
      :func:`as_frame`.
    * :meth:`summary_blocks` once, after the columns: the blocks the run's summary adds. They are
      kept in the result and computed on first use of the summary (maybe never), so they must not
      hold the run (its environment or replicas): a block keeps only what it reads.

    Extensions are called in the order the run lists them: the request path, the client network,
    the topology's (regions or pools, routing counters, the autoscaler), then the closed loop. A
    feature's combinations with others are refused by :mod:`simulator.capabilities`, never here.
    """

    timed: ClassVar[bool] = False
    """Whether :meth:`horizon` bounds every decode run (the extension acts at instants of its own)."""
    sees_sends: ClassVar[bool] = False
    """Whether :meth:`sent` must see every request as it is sent. Without such an extension (and
    without a timed one) replicas may take their own pre-drawn arrivals, with no send at all."""

    def horizon(self) -> float:
        """The earliest instant at which this extension changes what a replica may do next."""
        return math.inf

    def sent(self, run: Run, rid: int, now: float) -> bool:
        """Request ``rid`` is sent at ``now``; True when the extension takes it off the engine's path."""
        return False

    def finished(self, run: Run, ids: Sequence[int] | np.ndarray, at: float) -> int:
        """Requests ``ids`` ended at ``at``; returns how many requests will now never be sent."""
        return 0

    def engine_columns(self, records: Records) -> Records:
        """The finished run's records, corrected before the client's view is applied."""
        return records

    def add_columns(self, records: Records) -> Records:
        """The records with this extension's columns added (or its rows dropped)."""
        return records

    def summary_blocks(self) -> Sequence[SummaryBlock]:
        """What this extension adds to the run's summary (computed on first use)."""
        return ()


@dataclass(frozen=True)
class MeasuredRun:
    """What a summary block reads: the request frame, which of its requests the measurement window
    holds (arrived in it: ``in_window``; arrived in it and completed: ``measured``), and the run's
    simulated time."""

    requests: pd.DataFrame
    measured: np.ndarray
    in_window: np.ndarray
    sim_time_s: float


@dataclass(frozen=True)
class SummaryBlock:
    """One top-level key of a run's summary that an extension adds.

    ``section`` places it: ``"requests"`` with the breakdowns of the measured requests (after tiers
    and tasks), ``"run"`` with what the run did as a whole (after ``sim_time_s``)."""

    key: str
    section: Literal["requests", "run"]
    compute: Callable[[MeasuredRun], Any]


@dataclass(frozen=True)
class Fixed:
    """A block's value known when the run ends (counters): the same whatever the window."""

    value: Any

    def __call__(self, run: MeasuredRun) -> Any:
        return self.value


def as_frame(records: Records) -> pd.DataFrame:
    """The records as the request frame (a run's request columns converted; a frame as it is)."""
    import pandas as pd

    return records if isinstance(records, pd.DataFrame) else records.to_frame()
