"""Trace replay: real Azure (Splitwise) and Mooncake request traces drive the simulation.

The excerpts in ``tests/data`` (300 requests each; see the README there) check that every
request arrives at the trace's instant with the trace's token counts, that over-length requests
are rejected exactly, and that ``speedup`` compresses time. One slow test replays the full Azure
traces from ``shared/data/llm_traces`` when that folder exists.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from simulator import MODEL_PRESETS, scenario_from_dict, simulate

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
AZURE = DATA / "azure_conv_excerpt.csv"
MOONCAKE = DATA / "mooncake_conversation_excerpt.jsonl"
FULL_TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "llm_traces"
CONTEXT = MODEL_PRESETS["llama-3-8b"].max_model_len  # 8192


def replay(path: Path, fmt: str, **arrival: Any) -> dict[str, Any]:
    """A trace-replay scenario dict: llama-3-8b on one H100 SXM, over-length requests rejected."""
    return {"name": f"replay-{path.stem}", "model": "llama-3-8b", "hardware": "h100-sxm",
            "workload": {"arrival": {"process": "trace", "path": str(path), "format": fmt, **arrival},
                         "over_length": "reject"}}


def azure_expected(path: Path) -> pd.DataFrame:
    """Arrival instants (s after the first row) and lengths, read straight from the CSV with pandas."""
    raw = pd.read_csv(path)
    ts = pd.to_datetime(raw["TIMESTAMP"])
    return pd.DataFrame({"arrival_time": (ts - ts.iloc[0]).dt.total_seconds(),
                         "num_prompt_tokens": raw["ContextTokens"], "max_tokens": raw["GeneratedTokens"]})


def mooncake_expected(path: Path) -> pd.DataFrame:
    """Arrival instants (timestamp ms / 1000, from the first line) and lengths, one JSON object per line."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ts = np.array([r["timestamp"] for r in rows], dtype=float) / 1000.0
    return pd.DataFrame({"arrival_time": ts - ts[0],
                         "num_prompt_tokens": [r["input_length"] for r in rows],
                         "max_tokens": [r["output_length"] for r in rows]})


EXPECTED = {"azure": (AZURE, azure_expected), "mooncake": (MOONCAKE, mooncake_expected)}


@pytest.fixture(scope="module")
def replays() -> dict[str, Any]:
    """Each excerpt replayed once at its own pace (shared by the tests below)."""
    return {fmt: simulate(scenario_from_dict(replay(path, fmt))) for fmt, (path, _) in EXPECTED.items()}


def test_excerpts_are_sorted_and_sized() -> None:
    """The committed excerpts are what the README says: 300 requests each, in arrival order."""
    for fmt, (path, expected) in EXPECTED.items():
        table = expected(path)
        assert len(table) == 300, fmt
        assert table["arrival_time"].is_monotonic_increasing, fmt
        assert table["arrival_time"].iloc[0] == 0.0


@pytest.mark.parametrize("fmt", ["azure", "mooncake"])
def test_replay_uses_trace_instants_and_lengths(fmt: str, replays: dict[str, Any]) -> None:
    """Request i arrives at the trace's i-th timestamp minus the first (Azure: parsed wall-clock
    TIMESTAMP; Mooncake: timestamp / 1000) and carries the trace's prompt and output token counts."""
    path, expected = EXPECTED[fmt]
    want = expected(path)
    got = replays[fmt].requests
    assert len(got) == len(want) == 300
    np.testing.assert_allclose(got["arrival_time"].to_numpy(), want["arrival_time"].to_numpy(), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(got["num_prompt_tokens"].to_numpy(), want["num_prompt_tokens"].to_numpy())
    np.testing.assert_array_equal(got["max_tokens"].to_numpy(), want["max_tokens"].to_numpy())


@pytest.mark.parametrize("fmt", ["azure", "mooncake"])
def test_replay_rejects_exactly_the_requests_over_the_context(fmt: str, replays: dict[str, Any]) -> None:
    """With ``over_length: reject`` the requests whose prompt + output exceed llama-3-8b's 8192-token
    context (counted here from the file itself) are rejected, all others complete with their full
    output, and every arrival is accounted for."""
    path, expected = EXPECTED[fmt]
    want = expected(path)
    over = (want["num_prompt_tokens"] + want["max_tokens"] > CONTEXT).to_numpy()
    if fmt == "mooncake":
        assert over.sum() == 162  # long-context conversations: most exceed 8k
    else:
        assert over.sum() == 0
    result = replays[fmt]
    summary = result.summary["requests"]
    assert summary["arrived"] == 300
    assert summary["rejected"] == int(over.sum())
    assert summary["completed"] == int((~over).sum())
    assert summary["completed"] + summary["rejected"] + summary["in_flight"] == summary["arrived"]
    req = result.requests
    status = req["status"].astype(str).to_numpy()
    np.testing.assert_array_equal(status == "finished_rejected", over)
    done = ~over
    np.testing.assert_array_equal(req["num_output_tokens"].to_numpy()[done], want["max_tokens"].to_numpy()[done])
    assert (req["first_token_time"].to_numpy()[done] > req["arrival_time"].to_numpy()[done]).all()
    assert np.isnan(req["first_token_time"].to_numpy()[over]).all()


@pytest.mark.parametrize("fmt", ["azure", "mooncake"])
def test_speedup_divides_arrival_instants(fmt: str, replays: dict[str, Any]) -> None:
    """``speedup: 2`` replays the same requests twice as fast: every arrival instant is halved and
    the token counts are unchanged."""
    path, _ = EXPECTED[fmt]
    fast = simulate(scenario_from_dict(replay(path, fmt, speedup=2)))
    base = replays[fmt].requests
    np.testing.assert_allclose(fast.requests["arrival_time"].to_numpy(), base["arrival_time"].to_numpy() / 2,
                               rtol=1e-12, atol=0)
    assert fast.requests["arrival_time"].iloc[-1] > 0
    np.testing.assert_array_equal(fast.requests["num_prompt_tokens"], base["num_prompt_tokens"])
    np.testing.assert_array_equal(fast.requests["max_tokens"], base["max_tokens"])


def test_num_requests_takes_the_first_rows_of_the_trace() -> None:
    """``num_requests`` with a trace replays only its first N requests."""
    data = replay(AZURE, "azure")
    data["num_requests"] = 40
    result = simulate(scenario_from_dict(data))
    want = azure_expected(AZURE).iloc[:40]
    assert result.summary["requests"]["arrived"] == 40
    np.testing.assert_allclose(result.requests["arrival_time"], want["arrival_time"], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(result.requests["num_prompt_tokens"], want["num_prompt_tokens"])


def test_trace_instants_with_lengths_from_distributions() -> None:
    """``use_trace_lengths: false`` keeps the trace's arrival instants but draws token counts from
    the scenario's length distributions."""
    data = replay(MOONCAKE, "mooncake", use_trace_lengths=False)
    data["workload"]["prompt_tokens"] = {"dist": "fixed", "value": 300}
    data["workload"]["output_tokens"] = {"dist": "fixed", "value": 20}
    result = simulate(scenario_from_dict(data))
    want = mooncake_expected(MOONCAKE)
    np.testing.assert_allclose(result.requests["arrival_time"], want["arrival_time"], rtol=0, atol=1e-9)
    assert (result.requests["num_prompt_tokens"] == 300).all()
    assert (result.requests["max_tokens"] == 20).all()
    assert result.summary["requests"]["rejected"] == 0
    assert result.summary["requests"]["completed"] == 300


def test_relative_trace_path_resolves_against_base_dir() -> None:
    """A relative trace path is looked up in the scenario's folder (``base_dir``), whatever the cwd."""
    data = replay(Path("azure_conv_excerpt.csv"), "azure")
    data["num_requests"] = 10
    result = simulate(scenario_from_dict(data, base_dir=DATA))
    np.testing.assert_array_equal(result.requests["num_prompt_tokens"],
                                  azure_expected(AZURE)["num_prompt_tokens"].iloc[:10])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["conv", "code"])
def test_full_azure_trace_replay_conserves_requests(name: str) -> None:
    """The whole Azure 2023 trace (19,366 conversation or 8,819 code requests over an hour) replays on
    one H100 SXM: every request arrives, completed + rejected + in flight equals arrived, the only
    rejections are the requests over the 8192-token context, and requests complete."""
    path = FULL_TRACES / f"AzureLLMInferenceTrace_{name}.csv"
    if not path.is_file():
        pytest.skip(f"full traces not present: {path} (the shared data folder is outside the repository)")
    want = azure_expected(path)
    result = simulate(scenario_from_dict(replay(path, "azure")))
    req = result.summary["requests"]
    assert req["arrived"] == len(want)
    assert req["completed"] + req["rejected"] + req["in_flight"] == req["arrived"]
    assert req["completed"] > 0
    assert req["rejected"] == int((want["num_prompt_tokens"] + want["max_tokens"] > CONTEXT).sum())
    np.testing.assert_allclose(result.requests["arrival_time"].iloc[-1], want["arrival_time"].iloc[-1],
                               rtol=0, atol=1e-6)
    assert result.summary["ttft_s"]["n"] == req["completed"]
