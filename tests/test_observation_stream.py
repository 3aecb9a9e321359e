"""An observation whose tokens were read back to back says so (``Observation.stream_warning``).

A client that falls behind the engine (a busy machine, a starved process) reads several streamed
tokens at once: their gaps collapse to microseconds, and the run's TTFT, TPOT and inter-token times
then describe the client, not the engine. The real-vLLM runs of docs/fidelity.md had 0-14% of their
gaps under 0.1 ms on a quiet machine and 43-89% with the client starved; the flag is raised above
25%, by ``llmplan calibrate --from-observation`` (and ``llmplan observe``) as a warning naming the run.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.workload.observation import BUNCHED_GAP_S, BUNCHED_SHARE_LIMIT, read_observation

REPO = Path(__file__).resolve().parents[1]


def _write(path: Path, gaps_s: list[list[float]], *, failed: int | None = None) -> Path:
    """An observation of requests sent 1 s apart, each streaming one token per chunk with ``gaps_s``."""
    reqs = []
    for i, gaps in enumerate(gaps_s):
        send = float(i)
        chunks = list(send + 0.05 + np.concatenate([[0.0], np.cumsum(gaps)]))
        reqs.append({"id": i, "send_s": send, "prompt_tokens": 16, "max_tokens": len(chunks),
                     "output_tokens": len(chunks), "first_token_s": chunks[0], "end_s": chunks[-1],
                     "chunk_s": chunks, "chunk_tokens": [1] * len(chunks), "usage": "server",
                     "error": "timed out" if i == failed else None})
    path.write_text(json.dumps({"format": "llmplan-observation", "version": 1,
                                "header": {"load": {"arrival": "poisson"}}, "requests": reqs}))
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


def test_calibrate_from_observation_warns_of_a_late_run(tmp_path: Path) -> None:
    late = _write(tmp_path / "late.json", [[0.03 if j % 3 == 0 else 2e-6 for j in range(30)]] * 4)
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
