"""Where the searches run: a ``concurrent.futures.Executor`` seam.

* ``local`` (default): ``ProcessPoolExecutor`` on this machine (``workers=1`` runs in-process).
* ``dask``: an existing Dask distributed cluster, ``Client(address).get_executor()`` (the
  ``cluster`` extra: ``pip install 'llmplan[cluster]'``). An address that does not answer is an
  error after ``timeout_s``, never a hang; one that is not an address is an error at once
  (:func:`check_backend`, called before the plan is read).

Ctrl-C stops the plan at once: the in-process executor lets the interrupt through (it used to be
stored in the search's future, and every remaining search ran on), worker processes ignore SIGINT
(the terminal sends it to them too; each printed a traceback) and are terminated by the parent.

Each task is a pure function of its inputs (seeded), so results are identical whichever backend
and however many workers run them.
"""
from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from simulator.errors import ScenarioError

BACKENDS = ("local", "dask")


class InlineExecutor(Executor):
    """Runs each task at submit time in this process (one worker, no pickling)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # delivered through the future; Ctrl-C (KeyboardInterrupt) goes through
            fut.set_exception(exc)
        return fut


def check_backend(backend: str, *, workers: int | None = None, address: str | None = None,
                  timeout_s: float = 10.0) -> None:
    """Refuse bad ``--backend``, ``--workers``, ``--address`` and ``--timeout`` values before any work."""
    if backend not in BACKENDS:
        raise ScenarioError("--backend", backend, f"unknown backend; allowed: {', '.join(BACKENDS)}")
    check_workers(workers)
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ScenarioError("--timeout", timeout_s, "must be a positive number of seconds")
    if backend == "local" and address:
        raise ScenarioError("--address", address, "only the dask backend connects to a scheduler: add "
                            "--backend dask, or leave --address out to run on this machine")
    if backend == "dask":
        if not address:
            raise ScenarioError("--address", address, "the dask backend needs a scheduler address, e.g. tcp://host:8786")
        _check_address(address)


def check_workers(workers: int | None) -> None:
    """Refuse a number of local workers below 1 or above :func:`max_local_workers` (None: the CPU count)."""
    if workers is None:
        return
    if workers < 1:
        raise ScenarioError("--workers", workers, "must be >= 1")
    if workers > max_local_workers():
        raise ScenarioError("--workers", workers, f"at most {WORKERS_PER_CPU} per CPU: between 1 and "
                            f"{max_local_workers()} on this machine ({os.cpu_count() or 1} CPUs)")


def _check_address(address: str) -> None:
    try:
        from distributed.comm.addressing import parse_address, parse_host_port
    except ImportError:
        raise ScenarioError("--backend", "dask", "needs the cluster extra: pip install 'llmplan[cluster]' "
                            "(dask distributed)") from None
    try:
        if any(c.isspace() for c in address):
            raise ValueError("spaces")
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls"):
            parse_host_port(location)
    except ValueError:
        raise ScenarioError("--address", address, "not a Dask scheduler address; e.g. tcp://host:8786") from None


def _ignore_sigint() -> None:
    # A worker process: Ctrl-C in the terminal reaches the whole process group; the parent handles it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start_worker(planner_alive: Connection | None) -> None:
    """A local worker's initializer: leave Ctrl-C to the planner, and end with it. A worker whose planner
    is gone without ending it (killed with SIGKILL, or by the out-of-memory killer) would otherwise run
    its search to the end and then wait for tasks forever: ``planner_alive`` is the read end of a pipe
    whose write end only the planner holds, so reading it ends (EOF) the moment the planner is gone."""
    _ignore_sigint()
    if planner_alive is None:   # pragma: no cover - Windows
        return

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            planner_alive.recv()   # returns only at EOF: nothing is ever sent
        os._exit(1)

    threading.Thread(target=watch, name="llmplan-planner-watch", daemon=True).start()


WORKERS_PER_CPU = 4
"""The most local workers per CPU: the searches are CPU-bound, so more only add memory (each worker
holds its own engine and tables) and, past the machine's limits, exhaust it."""


def max_local_workers() -> int:
    return WORKERS_PER_CPU * (os.cpu_count() or 1)


class _WorkerPool(ProcessPoolExecutor):
    """Worker processes that leave Ctrl-C to the parent, from their first instruction: a worker is
    started (on demand, within ``submit``) while the parent ignores SIGINT, and an ignored signal stays
    ignored across ``exec``, so a Ctrl-C during a worker's imports prints no traceback either."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        if threading.current_thread() is not threading.main_thread():   # e.g. the dashboard's script thread
            return super().submit(fn, *args, **kwargs)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return super().submit(fn, *args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Drop the queued tasks and end the worker processes now (an interrupt or an error in the parent)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())   # shutdown() forgets them
    manager = getattr(pool, "_executor_manager_thread", None)             # and this thread
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        with contextlib.suppress(Exception):
            proc.terminate()
    # Let the pool's manager thread finish closing its wake-up pipe before the interpreter exits: on
    # Python 3.11, the exit hook of concurrent.futures writes to that pipe and, when the thread closes
    # it at the same moment, prints an "OSError: Bad file descriptor" traceback.
    if manager is not None and manager is not threading.current_thread():
        manager.join(timeout=5.0)


def start_workers(ex: Executor, task: Callable[[], Any]) -> None:
    """Start ``ex``'s local worker processes now, each running ``task`` (a module-level function:
    unpickling it imports its module, the workers' slow start), so that they start while the parent
    goes on (building the searches); nothing for an in-process executor or a cluster."""
    if isinstance(ex, ProcessPoolExecutor):
        for _ in range(int(ex._max_workers)):   # type: ignore[attr-defined]
            ex.submit(task)


def executor_slots(ex: Executor) -> int | None:
    """How many tasks ``ex`` runs at once: its local workers (1 in-process), None when a cluster
    decides (every task is then submitted at once)."""
    if isinstance(ex, InlineExecutor):
        return 1
    if isinstance(ex, ProcessPoolExecutor):
        return int(ex._max_workers)   # type: ignore[attr-defined]
    return None


@contextlib.contextmanager
def open_executor(backend: str = "local", *, workers: int | None = None, address: str | None = None,
                  timeout_s: float = 10.0, max_tasks: int | None = None) -> Iterator[Executor]:
    """The executor of ``backend``. Local: ``workers`` processes (default the CPU count), no more than
    ``max_tasks`` (the tasks that could run at once; one runs in this process)."""
    if backend == "local":
        check_workers(workers)
        n = workers if workers is not None else (os.cpu_count() or 1)
        if max_tasks is not None:
            n = max(1, min(n, max_tasks))
        if n == 1:
            yield InlineExecutor()
            return
        # Fresh interpreters (spawn), never a fork of this process: its threads (the dashboard's) would be
        # copied mid-state.
        alive_r, alive_w = multiprocessing.Pipe(duplex=False) if os.name == "posix" else (None, None)
        pool = _WorkerPool(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                           initializer=_start_worker, initargs=(alive_r,))
        try:
            try:
                yield pool
            except BaseException:
                _stop(pool)
                raise
            pool.shutdown(wait=True)
        finally:
            for end in (alive_r, alive_w):
                if end is not None:
                    end.close()
        return
    if backend == "dask":
        check_backend(backend, workers=workers, address=address, timeout_s=timeout_s)
        try:
            from distributed import Client
        except ImportError:
            raise ScenarioError("--backend", "dask", "needs the cluster extra: pip install 'llmplan[cluster]' "
                                "(dask distributed)") from None
        try:
            client = Client(address, timeout=f"{timeout_s}s", set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ScenarioError("--address", address, f"no Dask scheduler answered within {timeout_s:g} s "
                                f"({type(exc).__name__})") from None
        try:
            yield client.get_executor()
        finally:
            client.close()
        return
    raise ScenarioError("--backend", backend, f"unknown backend; allowed: {', '.join(BACKENDS)}")
