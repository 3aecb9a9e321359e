"""An observation whose tokens were read back to back says so (``Observation.stream_warning``).

A client that falls behind the engine (a busy machine, a starved process) reads several streamed
tokens at once: their gaps collapse to microseconds, and the run's TTFT, TPOT and inter-token times
then describe the client, not the engine. The real-vLLM runs of docs/fidelity.md had 0-14% of their
gaps under 0.1 ms on a quiet machine and 43-89% with the client starved; the flag is raised above
25%, by ``llmplan calibrate --from-observation`` (and ``llmplan observe``) as a warning naming the run.

A machine that stops (a virtual machine whose host deschedules it) holds every request in flight
whatever the server does: ``llmplan observe`` runs a heartbeat process beside the run
(``calibrate.observe.HostWatch``) and records its missed ticks, and the observation says so
(``Observation.pause_warning``). On this project's 2-core VM the token streams' 0.3-0.9 s stalls
were each such a pause, seen at the same instant by an independent heartbeat.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calibrate.observe import HostWatch
from simulator.errors import ScenarioError
from simulator.workload.observation import BUNCHED_GAP_S, BUNCHED_SHARE_LIMIT, read_observation

REPO = Path(__file__).resolve().parents[1]


def _write(path: Path, gaps_s: list[list[float]], *, failed: int | None = None, first_send_s: float = 0.0,
           host_pauses: Any = "absent") -> Path:
    """An observation of requests sent 1 s apart, each streaming one token per chunk with ``gaps_s``."""
    reqs = []
    for i, gaps in enumerate(gaps_s):
        send = first_send_s + float(i)
        chunks = list(send + 0.05 + np.concatenate([[0.0], np.cumsum(gaps)]))
        reqs.append({"id": i, "send_s": send, "prompt_tokens": 16, "max_tokens": len(chunks),
                     "output_tokens": len(chunks), "first_token_s": chunks[0], "end_s": chunks[-1],
                     "chunk_s": chunks, "chunk_tokens": [1] * len(chunks), "usage": "server",
                     "error": "timed out" if i == failed else None})
    header: dict[str, Any] = {"load": {"arrival": "poisson"}}
    if host_pauses != "absent":
        header["client"] = {"tool": "llmplan observe", "host_pauses": host_pauses}
    path.write_text(json.dumps({"format": "llmplan-observation", "version": 1, "header": header,
                                "requests": reqs}))
    return path


def test_a_stream_read_in_step_is_not_flagged(tmp_path: Path) -> None:
    obs = read_observation(_write(tmp_path / "ok.json", [[0.01] * 20] * 5))
    assert obs.bunched_share() == 0.0 and obs.stream_warning() is None


def test_tokens_read_back_to_back_are_flagged_with_their_share(tmp_path: Path) -> None:
    # every third gap a 30 ms stall, then two tokens at once: 2/3 of the gaps under 0.1 ms
    gaps = [[0.03 if j % 3 == 0 else 2e-6 for j in range(30)]] * 4
    obs = read_observation(_write(tmp_path / "late.json", gaps))
    assert obs.bunched_share() == pytest.approx(2 / 3)
    warning = obs.stream_warning()
    assert warning is not None and warning.startswith("late.json: 67% of its inter-token gaps are under 0.1 ms")
    assert "fell behind the engine" in warning


def test_the_share_counts_completed_requests_only_and_the_limit_is_strict(tmp_path: Path) -> None:
    n = 100
    bunched = int(BUNCHED_SHARE_LIMIT * n)                 # exactly at the limit: not flagged
    at_limit = [[BUNCHED_GAP_S / 10] * bunched + [0.01] * (n - bunched)]
    failed = [[1e-6] * n]                                  # a failed request's gaps are not counted
    obs = read_observation(_write(tmp_path / "edge.json", at_limit + failed, failed=1))
    assert obs.bunched_share() == pytest.approx(BUNCHED_SHARE_LIMIT) and obs.stream_warning() is None
    one_token = read_observation(_write(tmp_path / "one.json", [[]]))
    assert math.isnan(one_token.bunched_share()) and one_token.stream_warning() is None


def test_a_vllm_bench_result_is_checked_the_same_way(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"input_lens": [16, 16], "output_lens": [4, 4], "ttfts": [0.05, 0.05],
                                 "itls": [[1e-6, 1e-6, 0.02], [1e-6, 1e-6, 0.02]], "start_times": [0.0, 1.0]}))
    warning = read_observation(bench).stream_warning()
    assert warning is not None and warning.startswith("bench.json: 67%")


def test_calibrate_from_observation_warns_of_a_late_or_paused_run(tmp_path: Path) -> None:
    late = _write(tmp_path / "late.json", [[0.03 if j % 3 == 0 else 2e-6 for j in range(30)]] * 4,
                  host_pauses={"heartbeat_s": 0.01, "threshold_s": 0.1, "pauses": [[1.5, 0.25]]})
    ok = _write(tmp_path / "ok.json", [[0.01] * 20] * 4)
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "calibrate", "--from-observation", str(ok),
                           "--holdout", str(late), "--model", "tiny-llama", "--hardware", "cpu-amd-epyc-tiny-llama",
                           "--fit", "step_s", "--max-evals", "3", "--out", str(tmp_path / "fit")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "warning: late.json: 67% of its inter-token gaps" in " ".join(proc.stderr.split())
    assert "ok.json:" not in proc.stderr.replace("fitting on ok.json", "")
    runs = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert runs["runs"][0]["bunched_share"] == 0.0
    assert runs["holdout_runs"][0]["bunched_share"] == pytest.approx(2 / 3)
    assert "warning: late.json: the client's machine stopped 1 time(s) during the run, 0.25 s in all" in " ".join(
        proc.stderr.split())
    assert runs["runs"][0]["host_pauses"] is None and runs["holdout_runs"][0]["host_pauses"] == [[1.5, 0.25]]


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="stops the heartbeat with SIGSTOP (POSIX)")
def test_the_host_watch_records_a_stop_of_the_machine() -> None:
    """The heartbeat stopped for 0.4 s (as a paused machine stops it) reports one pause of about that
    length, at the instant it began on the run's clock; a heartbeat that is not stopped reports
    none of that length (a busy machine may delay a tick by some milliseconds, not 0.4 s)."""
    watch = HostWatch()
    assert watch.proc is not None
    watch.start()
    time.sleep(0.1)
    os.kill(watch.proc.pid, signal.SIGSTOP)
    time.sleep(0.4)
    os.kill(watch.proc.pid, signal.SIGCONT)
    time.sleep(0.1)
    host = watch.stop()
    assert host is not None and host["threshold_s"] == 0.1
    long = [(a, b) for a, b in host["pauses"] if b > 0.3]
    assert len(long) == 1 and 0.0 < long[0][0] < 0.2 + 0.3 and long[0][1] < 2.0
    assert watch.proc.poll() is not None                          # the heartbeat is gone


def test_an_observation_says_when_the_machine_stopped_and_which_requests_waited(tmp_path: Path) -> None:
    # requests sent at 0.5, 1.5, 2.5 s on the run's clock, each answered 0.05 + 0.19 s later
    gaps = [[0.01] * 20] * 3
    obs = read_observation(_write(tmp_path / "p.json", gaps, first_send_s=0.5, host_pauses={
        "heartbeat_s": 0.01, "threshold_s": 0.1, "pauses": [[1.6, 0.3], [2.9, 0.2]]}))
    assert obs.host_pauses() == [(pytest.approx(1.1), 0.3), (pytest.approx(2.4), 0.2)]   # from the first send
    assert obs.pause_totals() == (2, pytest.approx(0.5), 0.3)
    assert obs.paused_requests() == 1                              # the one sent at 1.5 s; 2.9 s is past 2.74
    warning = obs.pause_warning()
    assert warning is not None and warning.startswith("p.json: the client's machine stopped 2 time(s) during the "
                                                      "run, 0.50 s in all, the longest 0.30 s")
    assert "the 1 requests in flight" in warning and obs.warnings() == [warning]
    quiet = read_observation(_write(tmp_path / "q.json", gaps, host_pauses={"pauses": []}))
    unwatched = read_observation(_write(tmp_path / "u.json", gaps, host_pauses=None))
    older = read_observation(_write(tmp_path / "o.json", gaps))
    for o in (quiet, unwatched, older):
        assert o.pause_warning() is None and o.warnings() == [] and o.paused_requests() == 0
    assert quiet.host_pauses() == [] and unwatched.host_pauses() is None and older.host_pauses() is None
    assert quiet.pause_totals() == (0, 0.0, 0.0) and unwatched.pause_totals() is None is older.pause_totals()


@pytest.mark.parametrize("host, where", [
    ("often", "header.client.host_pauses"),
    ({"pauses": "often"}, "header.client.host_pauses"),
    ({"pauses": [[1.0]]}, "header.client.host_pauses.pauses[0]"),
    ({"pauses": [[0.0, 0.2], [1.0, -0.1]]}, "header.client.host_pauses.pauses[1]"),
    ({"pauses": [["1", 0.2]]}, "header.client.host_pauses.pauses[0]"),
    ({"pauses": [[1.0, True]]}, "header.client.host_pauses.pauses[0]"),
])
def test_a_bad_host_pause_record_is_named(tmp_path: Path, host: Any, where: str) -> None:
    path = _write(tmp_path / "bad.json", [[0.01] * 5], host_pauses=host)
    with pytest.raises(ScenarioError) as exc:
        read_observation(path)
    assert where in str(exc.value)


def test_a_non_finite_host_pause_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "nan.json", [[0.01] * 5], host_pauses={"pauses": [[0.5, 0.2]]})
    path.write_text(path.read_text().replace("[[0.5, 0.2]]", "[[Infinity, 0.2]]"))
    with pytest.raises(ScenarioError, match=r"header\.client\.host_pauses\.pauses\[0\] = \[inf, 0\.2\]"):
        read_observation(path)
