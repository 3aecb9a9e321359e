"""Requests, stored column-wise.

vLLM keeps one ``Request`` object per request; a simulator that must run 100k requests per
second cannot, so :class:`RequestTable` keeps the same fields as numpy columns indexed by request
id: ``num_prompt_tokens``, ``max_tokens``, ``num_output_tokens``, ``status`` and the instants
``arrival_time``, ``first_scheduled_time``, ``first_token_time``, ``finish_time`` (Ciw's rule:
``*_time`` is an instant in simulated seconds, ``*_s`` a duration). A request's
``num_computed_tokens`` lives in the scheduler's running batch while it runs and is 0 otherwise
(recompute preemption drops its KV). :meth:`RequestTable.request` gives a readable snapshot.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from simulator.workload.traffic import Workload


class RequestStatus(enum.IntEnum):
    """Lifecycle, in vLLM's order: every status after ``PREEMPTED`` is finished."""

    PENDING = 0          # not arrived yet
    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3        # back in the waiting queue after losing its KV blocks
    FINISHED_LENGTH_CAPPED = 4  # generated max_tokens tokens
    FINISHED_REJECTED = 5       # refused at arrival (see workload.over_length)
    FINISHED_ABORTED = 6        # the client gave up (client.timeout_s); its seat and KV were freed
    FINISHED_SHED = 7           # rejected by admission control (admission.max_queue_len / max_queue_delay_s)

    @property
    def is_finished(self) -> bool:
        return self > RequestStatus.PREEMPTED


@dataclass(frozen=True, slots=True)
class Request:
    """A read-only snapshot of one request (tests, debugging)."""

    request_id: int
    arrival_time: float
    num_prompt_tokens: int
    max_tokens: int
    num_output_tokens: int
    status: RequestStatus
    first_scheduled_time: float
    first_token_time: float
    finish_time: float
    num_preemptions: int
    replica: int


class RequestTable:
    """Columns for every request of a run; the simulation writes, metrics read."""

    def __init__(self, workload: Workload) -> None:
        n = len(workload)
        self.arrival_time = workload.arrival_time
        self.num_prompt_tokens = workload.num_prompt_tokens
        self.max_tokens = workload.max_tokens
        self.rejected_at_arrival = workload.rejected
        self.tier = workload.tier if workload.tier is not None else np.zeros(n, dtype=np.int16)
        self.priority = np.zeros(n, dtype=np.int64)
        """vLLM's request priority (lower first); set from the tiers by the simulation."""
        self.status = np.zeros(n, dtype=np.int8)
        self.num_output_tokens = np.zeros(n, dtype=np.int64)
        """Tokens generated so far; authoritative while a request is not running."""
        self.num_preemptions = np.zeros(n, dtype=np.int32)
        self.replica = np.full(n, -1, dtype=np.int16)
        self.first_scheduled_time = np.full(n, np.nan)
        self.first_token_time = np.full(n, np.nan)
        self.finish_time = np.full(n, np.nan)
        self.num_cached_tokens = np.zeros(n, dtype=np.int64)
        """Prompt tokens found in the prefix cache at first admission (vLLM's name; 0 when off)."""
        self.block_hashes = workload.block_hashes
        """Block identities for prefix caching (None when it is off)."""
        self.session = workload.session
        """Each request's session (its first turn's index), for session affinity; None without sessions."""

    def __len__(self) -> int:
        return len(self.arrival_time)

    def request(self, rid: int) -> Request:
        return Request(rid, float(self.arrival_time[rid]), int(self.num_prompt_tokens[rid]),
                       int(self.max_tokens[rid]), int(self.num_output_tokens[rid]),
                       RequestStatus(int(self.status[rid])), float(self.first_scheduled_time[rid]),
                       float(self.first_token_time[rid]), float(self.finish_time[rid]),
                       int(self.num_preemptions[rid]), int(self.replica[rid]))
