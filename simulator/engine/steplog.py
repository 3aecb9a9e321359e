"""The step log the engine writes while it runs: every step and decode run of every replica, as
flat numbers (:class:`StepLog`); :class:`~simulator.run.records.FrozenStepLog` turns a finished
run's log into one row per step."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from simulator.engine.decode_run import DecodeRun
    from simulator.engine.output import SchedulerOutput

ENTRY_FIELDS = 12
"""Numbers per entry: start, steps, replica, seqs, prefill tokens, decodes, waiting, KV blocks used
first, preempted, context sum (runs), then a step's duration and 0.0, or a run's affine (a, b) (nan,
nan: its durations are tabulated)."""
FLUSH_NUMBERS = 1 << 15
"""Numbers the entry list collects before they are moved into a float64 array (while the list is
still in the processor's cache: the run's log never holds millions of Python numbers)."""


class StepLog:
    """Every engine step of a run, appended in time order per replica.

    A single step and a decode run are both one entry; runs are expanded into one row per step
    only when the frame is built, for all runs at once (vectorised). The entries are kept flat, as
    plain numbers in a list that is moved into float64 arrays every :data:`FLUSH_NUMBERS` numbers
    (and the residue histograms likewise into int64 arrays): no object per entry, and the finished
    log is a few arrays.
    """

    def __init__(self, block_size: int) -> None:
        self.entries: list[float] = []          # ENTRY_FIELDS numbers per entry, since the last flush
        self.residues: list[int] = []           # a histogram per decode run of more than one step, likewise
        self.tabulated: list[float] = []        # a tabulated run's step durations
        self.entry_chunks: list[np.ndarray] = []
        self.residue_chunks: list[np.ndarray] = []
        self.block_size = block_size
        self.replicas: set[int] = set()

    def add_step(self, replica: int, start: float, duration: float, out: SchedulerOutput,
                 kv_used: int, num_waiting: int) -> None:
        # Requests in the batch: a policy's cost shape counts its padded slots (static batching) and
        # charges verifying requests as (k+1)-token entries (speculative decoding), one each.
        seqs = out.num_decode + len(out.admitted) if out.cost_shape is None else out.cost_shape.num_seqs
        self.entries.extend((start, 1, replica, seqs, out.num_prefill_tokens,
                             out.num_decode, num_waiting, kv_used, len(out.preempted), 0, duration, 0.0))
        self.replicas.add(replica)
        if len(self.entries) >= FLUSH_NUMBERS:
            self.flush()

    def step_logger(self, replica: int) -> StepLogger:
        """The logger a policy's fast path records replica ``replica``'s steps with."""
        return StepLogger(self, replica)

    def add_run(self, replica: int, start: float, run: DecodeRun, num_waiting: int) -> None:
        affine = run.affine
        a, b = affine if affine is not None else (math.nan, math.nan)
        self.entries.extend((start, run.num_steps, replica, run.num_seqs, 0, run.num_seqs - run.num_padded,
                             num_waiting, run.kv_used_first, 0, run.context_sum, a, b))
        if run.num_steps > 1:
            self.residues.extend(run.residues)
        durations = run.durations
        if durations is not None:
            self.tabulated.extend(durations if isinstance(durations, list) else durations.tolist())
        self.replicas.add(replica)
        if len(self.entries) >= FLUSH_NUMBERS:
            self.flush()

    def flush(self) -> None:
        """Move the numbers collected so far into arrays."""
        if self.entries:
            self.entry_chunks.append(np.fromiter(self.entries, np.float64, len(self.entries)))
            self.entries.clear()
        if self.residues:
            self.residue_chunks.append(np.fromiter(self.residues, np.int64, len(self.residues)))
            self.residues.clear()

    def freeze(self) -> tuple[np.ndarray, np.ndarray, list[float], bool, int]:
        """The log as ``(entries, residues, tabulated, interleave, block_size)``: the entries as one
        float64 array, the residue histograms as one int64 array, and whether several replicas
        logged (their entries interleave by time); the log starts again empty."""
        self.flush()
        entries = np.concatenate(self.entry_chunks) if self.entry_chunks else np.zeros(0)
        residues = (np.concatenate(self.residue_chunks) if self.residue_chunks
                    else np.zeros(0, dtype=np.int64))
        frozen = (entries, residues, self.tabulated, len(self.replicas) > 1, self.block_size)
        self.entry_chunks, self.residue_chunks, self.tabulated = [], [], []
        return frozen


class StepLogger:
    """One replica's log of the steps a policy's fast path plans without a
    :class:`~simulator.engine.scheduler.SchedulerOutput` (steps that preempt nothing), each logged
    exactly as :meth:`StepLog.add_step` logs it."""

    def __init__(self, log: StepLog, replica: int) -> None:
        self.log = log
        self.entries = log.entries
        self.replica = replica
        self._logged = False

    def step(self, start: float, duration: float, num_seqs: int, num_prefill_tokens: int, num_decode: int,
             num_waiting: int, kv_used: int) -> None:
        entries = self.entries
        entries.extend((start, 1, self.replica, num_seqs, num_prefill_tokens, num_decode, num_waiting,
                        kv_used, 0, 0, duration, 0.0))
        if not self._logged:
            self.log.replicas.add(self.replica)
            self._logged = True
        if len(entries) >= FLUSH_NUMBERS:
            self.log.flush()
