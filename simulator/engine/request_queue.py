"""The waiting queue under ``scheduling_policy: priority`` (vLLM v1's ``PriorityRequestQueue``,
``vllm/v1/core/sched/request_queue.py``); FCFS scheduling uses a plain ``collections.deque``."""
from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from simulator.engine.request import RequestTable


class PriorityWaitingQueue:
    """The waiting queue under ``scheduling_policy: priority``: a heap on (priority, arrival time),
    as vLLM's; it offers the deque operations the schedulers use."""

    def __init__(self, table: RequestTable) -> None:
        self._table = table
        self._heap: list[tuple[int, float, int]] = []

    def _key(self, rid: int) -> tuple[int, float, int]:
        return int(self._table.priority[rid]), float(self._table.arrival_time[rid]), int(rid)

    def append(self, rid: int) -> None:
        heapq.heappush(self._heap, self._key(rid))

    def appendleft(self, rid: int) -> None:
        """A preempted request goes back by its key, ahead of later arrivals."""
        self.append(rid)

    def extendleft(self, rids: Iterable[int]) -> None:
        for rid in rids:
            self.append(rid)

    def popleft(self) -> int:
        return heapq.heappop(self._heap)[2]

    def remove(self, rid: int) -> None:
        self._heap.remove(self._key(rid))
        heapq.heapify(self._heap)

    def __getitem__(self, index: int) -> int:
        if index != 0:
            raise IndexError("only the head of a priority queue can be read")
        return self._heap[0][2]

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[int]:
        return (key[2] for key in sorted(self._heap))
