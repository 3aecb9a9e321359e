"""What a run records: the step log, the per-request records and :class:`SimulationResult`.

The records stay numpy arrays until a caller asks for a DataFrame (``result.requests``,
``result.steps``): a run whose caller reads only the summary (``llmplan simulate --json``, the
planner's judge) never imports pandas.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.cluster.extension import Records, SummaryBlock
from simulator.engine.request import RequestStatus, RequestTable
from simulator.engine.steplog import ENTRY_FIELDS
from simulator.run.resolve import ResolvedSystem
from simulator.scenario.config import Scenario

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

# -- records ---------------------------------------------------------------------------------------
STEP_COLUMNS = ("start_time", "duration_s", "replica", "num_seqs", "num_prefill_tokens",
                "num_decode_tokens", "num_waiting", "kv_blocks_used", "num_preempted")


class FrozenStepLog:
    """A finished run's step log: per-entry arrays, expanded to one row per step on demand.

    The entries become arrays when first needed (a caller that never reads the steps, such as the
    planner's judge, never pays for it). Expansion is vectorised over all entries; ``columns()``
    gives numpy arrays (what the summary reads) and ``to_frame()`` the DataFrame (built only when a
    caller asks for ``result.steps``).
    """

    def __init__(self, entries: np.ndarray, residues: np.ndarray, tabulated: list[float],
                 interleave: bool, block_size: int) -> None:
        self.num_entries = len(entries) // ENTRY_FIELDS
        self._interleave = interleave
        self._lists: tuple[np.ndarray, np.ndarray, list[float], int] | None = (entries, residues, tabulated,
                                                                               block_size)
        self._columns: dict[str, np.ndarray] | None = None

    def _load(self) -> None:
        """The log's arrays as columns (once)."""
        if self._lists is None:
            return
        flat, residues, tabulated, block_size = self._lists
        self._tabulated = np.array(tabulated, dtype=np.float64)
        # Residue histograms of the multi-step runs, in entry order, one row each.
        self._residues = residues.reshape(-1, block_size)
        cols = [np.ascontiguousarray(c) for c in flat.reshape(-1, ENTRY_FIELDS).T]
        (self._start, k, self._replica, self._seqs, self._prefill, self._decode, self._waiting,
         self._kv_first, self._preempted, self._ctx, self._a, self._b) = cols
        self._k = k.astype(np.int64)
        self._lists = None

    @property
    def num_steps(self) -> int:
        self._load()
        return int(self._k.sum())

    def columns(self) -> dict[str, np.ndarray]:
        """One array per column of :data:`STEP_COLUMNS`, one element per engine step, in time order."""
        if self._columns is not None:
            return self._columns
        self._load()
        k = self._k
        if len(k) == 0:
            self._columns = {c: np.zeros(0) for c in STEP_COLUMNS}
            return self._columns
        total = int(k.sum())
        first_row = np.cumsum(k) - k
        j = np.arange(total) - np.repeat(first_row, k)               # step index within its entry
        seqs_per_step = np.repeat(self._seqs.astype(np.int32), k)
        a, b = self._a, self._b
        durs = np.repeat(a, k) + np.repeat(b, k) * (np.repeat(self._ctx.astype(np.float64), k) + seqs_per_step * j)
        tabulated = np.isnan(a)
        if tabulated.any():
            durs[np.repeat(tabulated, k)] = self._tabulated
        before = np.cumsum(durs) - durs                              # time of all earlier steps
        offsets = before - np.repeat(before[first_row], k)
        # Blocks allocated by each step of a run: the residue histogram read in step order.
        residues = self._residues
        bs = residues.shape[1]
        multi = np.flatnonzero(k > 1)
        new_blocks = np.zeros(total, dtype=np.int64)
        if len(multi):
            rows = np.concatenate([np.arange(f + 1, f + n) for f, n in zip(first_row[multi], k[multi], strict=True)]) \
                if len(multi) < 64 else np.flatnonzero(j)
            position = np.zeros(len(k), dtype=np.int64)    # entry -> its row in ``residues``
            position[multi] = np.arange(len(multi))
            entry_of_row = np.repeat(np.arange(len(k)), k)[rows]
            new_blocks[rows] = residues.ravel()[position[entry_of_row] * bs + (-j[rows]) % bs]
        cum_blocks = np.cumsum(new_blocks)
        kv = np.repeat(self._kv_first - cum_blocks[first_row], k) + cum_blocks
        cols = {
            "start_time": np.repeat(self._start, k) + offsets, "duration_s": durs,
            "replica": np.repeat(self._replica.astype(np.int16), k), "num_seqs": seqs_per_step,
            "num_prefill_tokens": np.repeat(self._prefill.astype(np.int32), k),
            "num_decode_tokens": np.repeat(self._decode.astype(np.int32), k),
            "num_waiting": np.repeat(self._waiting.astype(np.int32), k),
            "kv_blocks_used": kv.astype(np.int32),
            "num_preempted": np.repeat(self._preempted.astype(np.int32), k)}
        if self._interleave:   # interleave the replicas' logs by time; steps starting together (to 1 ns:
            # a fast run's closed-form step ends and step-by-step sums differ by ~1e-16 s) by replica
            order = np.lexsort((cols["replica"], np.round(cols["start_time"], 9)))
            cols = {name: col[order] for name, col in cols.items()}
        self._columns = cols
        return cols

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd
        return pd.DataFrame(self.columns())


class RequestColumns(Mapping[str, np.ndarray]):
    """A run's per-request records as numpy columns, in the request frame's column order.

    Reads like the frame for the summary and the judge (``cols["ttft_s"]``, ``"session" in cols``);
    a categorical column (``status``, ``tier``) reads as an array of its labels. Columns are set
    with ``cols[name] = array`` (a new column goes last, as in a DataFrame); :meth:`to_frame` gives
    the request frame (categoricals as pandas categoricals).
    """

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self._categories: dict[str, list[str]] = {}    # categorical column -> its labels (codes in _arrays)
        self._labels: dict[str, np.ndarray] = {}

    def set_categorical(self, name: str, codes: np.ndarray, categories: list[str]) -> None:
        self._arrays[name] = codes
        self._categories[name] = categories
        self._labels.pop(name, None)

    def __setitem__(self, name: str, values: np.ndarray) -> None:
        self._arrays[name] = values
        self._categories.pop(name, None)
        self._labels.pop(name, None)

    def __getitem__(self, name: str) -> np.ndarray:
        categories = self._categories.get(name)
        if categories is None:
            return self._arrays[name]
        labels = self._labels.get(name)
        if labels is None:
            labels = self._labels[name] = np.array(categories)[self._arrays[name]]
        return labels

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def with_columns(self, columns: Mapping[str, np.ndarray]) -> RequestColumns:
        """A new record set: these columns (shared, not copied) with ``columns`` set on top."""
        out = RequestColumns()
        out._arrays, out._categories, out._labels = dict(self._arrays), dict(self._categories), dict(self._labels)
        for name, values in columns.items():
            out[name] = values
        return out

    def rows(self, mask: np.ndarray) -> RequestColumns:
        """The records of the rows where ``mask`` (a boolean array) is true, in row order."""
        out = RequestColumns()
        out._arrays = {name: values[mask] for name, values in self._arrays.items()}
        out._categories = dict(self._categories)
        return out

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd
        return pd.DataFrame({name: (pd.Categorical.from_codes(values, self._categories[name])
                                    if name in self._categories else values)
                             for name, values in self._arrays.items()})


@dataclass
class SimulationResult:
    """What a run produced: one row per request, one row per engine step, and the summary.

    Complete when built: ``requests`` and ``steps`` are DataFrames built on first access, from the
    request columns and the compact step log (a 100k-request run has millions of steps; the
    summary and the planner never need the step frame), and so is ``summary``, from the fields
    below.
    """

    scenario: Scenario
    records: RequestColumns | pd.DataFrame
    """The request records: their columns until :attr:`requests` is first read, the frame after."""
    step_log: FrozenStepLog
    system: ResolvedSystem
    sim_time_s: float
    wall_s: float
    summarize: Callable[[SimulationResult], dict[str, Any]] = field(repr=False)
    """How :attr:`summary` is computed (:func:`simulator.metrics.summarize`, which reads these records:
    given by the run, so that this module does not import it)."""
    num_replicas: int
    """Replicas provisioned: every region's, pool's, prefill and decode replica; the autoscaler's ceiling."""
    num_gpus: int
    """GPUs those replicas hold."""
    engine_stats: dict[str, float] = field(default_factory=dict)
    """Policy counters summed over replicas (speculative decoding's proposals and acceptances)."""
    prefix_cache: dict[str, int] | None = None
    """Prefix-cache counters summed over replicas (None when prefix caching is off)."""
    summary_blocks: tuple[SummaryBlock, ...] = ()
    """The summary blocks the run's extensions add (:class:`simulator.cluster.extension.RunExtension`)."""

    @property
    def requests(self) -> pd.DataFrame:
        """One row per request (see the README's record columns), built on first use."""
        if isinstance(self.records, RequestColumns):
            self.records = self.records.to_frame()
        return self.records

    @requests.setter
    def requests(self, frame: pd.DataFrame) -> None:
        self.records = frame

    @property
    def summary(self) -> dict[str, Any]:
        """The run's JSON summary (:attr:`summarize`), computed on first use: a caller that reads
        only the request frame (the planner's judge) never pays for it."""
        summary = self.__dict__.get("_summary")
        if summary is None:
            summary = self.__dict__["_summary"] = self.summarize(self)
        return summary

    @property
    def steps(self) -> pd.DataFrame:
        frame = self.__dict__.get("_steps_frame")
        if frame is None:
            frame = self.step_log.to_frame()
            self.__dict__["_steps_frame"] = frame
        return frame


def select_rows(records: Records, mask: np.ndarray) -> Records:
    """The rows of request records (columns or a frame) where ``mask`` is true."""
    return records.rows(mask) if isinstance(records, RequestColumns) else records[mask]


def request_columns(table: RequestTable, scenario: Scenario) -> RequestColumns:
    """The request records of a finished run's table (the columns of ``result.requests``)."""
    cols = RequestColumns()
    for name, values in (
            ("request_id", np.arange(len(table), dtype=np.int64)),
            ("arrival_time", table.arrival_time),
            ("num_prompt_tokens", table.num_prompt_tokens),
            ("max_tokens", table.max_tokens),
            ("num_output_tokens", table.num_output_tokens),
            ("first_scheduled_time", table.first_scheduled_time),
            ("first_token_time", table.first_token_time),
            ("finish_time", table.finish_time),
            ("replica", table.replica),
            ("num_preemptions", table.num_preemptions),
            ("num_cached_tokens", table.num_cached_tokens)):
        cols[name] = values
    cols.set_categorical("status", table.status.astype(np.int64), [s.name.lower() for s in RequestStatus])
    if table.session is not None:   # the task (session) of each call, its turn (from 0) and the turns it has
        import pandas as pd
        by_session = pd.Series(table.session).groupby(table.session)
        cols["session"] = table.session
        cols["turn"] = by_session.cumcount().to_numpy(np.int64)
        cols["session_turns"] = by_session.transform("size").to_numpy(np.int64)
    tiers = scenario.workload.tiers
    if tiers is not None:
        cols.set_categorical("tier", table.tier.astype(np.int64), [t.name for t in tiers])
        cols["priority"] = table.priority
    arrival, first_token = np.asarray(table.arrival_time, dtype=np.float64), table.first_token_time
    cols["queue_delay_s"] = table.first_scheduled_time - arrival
    cols["ttft_s"] = first_token - arrival
    cols["e2e_s"] = table.finish_time - arrival
    out = np.asarray(table.num_output_tokens)
    decode_tokens = np.where(out > 1, out - 1, np.nan)     # no TPOT without a second token
    cols["tpot_s"] = (table.finish_time - first_token) / decode_tokens
    return cols
