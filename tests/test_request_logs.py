"""The ``requests`` (generic request log, CSV or JSONL) and ``openai`` (completion responses) trace
formats: reading, sessions, shared prefixes and tiers from the log, and one-line errors naming the
file, the row or line and the column (tests/data/requests_log.csv, requests_log.jsonl,
openai_responses.jsonl; see tests/data/README.md)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator import scenario_from_dict, simulate
from simulator.errors import ScenarioError
from simulator.workload.traces import TRACE_FORMATS, load_trace

DATA = Path(__file__).resolve().parent / "data"
CSV_LOG, JSONL_LOG, OPENAI = DATA / "requests_log.csv", DATA / "requests_log.jsonl", DATA / "openai_responses.jsonl"
TIERS = [{"name": "interactive", "share": 0.5, "priority": 0}, {"name": "batch", "share": 0.5, "priority": 1}]


def replay(path: Path, fmt: str, **over: object) -> dict:
    sc = {"name": "replay", "model": "llama-3-8b", "hardware": "h100-sxm-datasheet",
          "workload": {"arrival": {"process": "trace", "path": str(path), "format": fmt}}}
    for key, value in over.items():
        node = sc
        *parents, leaf = key.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return sc


def test_the_formats_are_registered() -> None:
    assert {"azure", "mooncake", "requests", "openai", "observation"} <= set(TRACE_FORMATS)
    with pytest.raises(ScenarioError,
                       match="format = 'csv': unknown trace format; known: azure, mooncake, observation, openai"):
        scenario_from_dict(replay(CSV_LOG, "csv"))


def test_csv_log_reads_every_column() -> None:
    df = load_trace(CSV_LOG, "requests")
    assert len(df) == 48 and df["arrival_time"].iloc[0] == 0.0 and (np.diff(df["arrival_time"]) >= 0).all()
    assert df["arrival_time"].iloc[1] == pytest.approx(1.633)          # 09:00:01.939 - 09:00:00.306
    assert list(df[["num_prompt_tokens", "max_tokens"]].iloc[0]) == [2446, 36]
    assert df["session"].iloc[0] == "conv-001" and set(df["tier"]) == {"interactive", "batch"}
    assert set(df["prefix"].dropna()) == {"sys-support", "sys-code"}
    assert (df["prefix_tokens"] <= df["num_prompt_tokens"]).all()


def test_jsonl_log_with_unix_seconds() -> None:
    df = load_trace(JSONL_LOG, "requests")
    csv = load_trace(CSV_LOG, "requests").iloc[:30]
    np.testing.assert_allclose(df["arrival_time"], csv["arrival_time"], atol=1e-6)
    assert (df["num_prompt_tokens"].to_numpy() == csv["num_prompt_tokens"].to_numpy()).all()
    assert "tier" not in df.columns and "prefix" not in df.columns


def test_replay_shares_session_history_and_prefixes_in_the_prefix_cache(tmp_path: Path) -> None:
    over = {"scheduler": {"enable_prefix_caching": True}, "workload__tiers": TIERS}
    r = simulate(scenario_from_dict(replay(CSV_LOG, "requests", **over)))
    assert r.summary["requests"]["completed"] == 48
    # The same requests without their session and prefix columns: every prompt is fresh, nothing hits.
    bare = tmp_path / "bare.csv"
    bare.write_text("\n".join(",".join(line.split(",")[:3]) for line in CSV_LOG.read_text().splitlines()) + "\n")
    b = simulate(scenario_from_dict(replay(bare, "requests", scheduler={"enable_prefix_caching": True})))
    assert b.summary["prefix_cache"]["hit_rate"] == 0
    assert r.summary["prefix_cache"]["hit_rate"] > 0.4
    assert (r.requests["num_prompt_tokens"].sum() == b.requests["num_prompt_tokens"].sum())


def test_sessions_without_history_share_nothing(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    log.write_text("timestamp,prompt_tokens,output_tokens,session_id\n0,800,100,a\n5,1000,50,a\n10,400,20,a\n")
    from simulator.workload.prefix import trace_structure
    sc = scenario_from_dict(replay(log, "requests", scheduler={"enable_prefix_caching": True, "block_size": 16}))
    table = load_trace(log, "requests")
    prompt, output = table["num_prompt_tokens"].to_numpy(), table["max_tokens"].to_numpy()
    hashes, session = trace_structure(sc, table, prompt, output)
    assert list(session) == [0, 0, 0]
    _, second, third = (hashes.explicit[hashes.offsets[r]:hashes.offsets[r + 1]] for r in range(3))
    assert len(second) == 900 // 16      # turn 2 holds turn 1's prompt + answer: its full blocks shared
    assert len(third) == 0               # turn 3's prompt (400) is shorter than that history: none


def test_tiers_come_from_the_log() -> None:
    sc = scenario_from_dict(replay(CSV_LOG, "requests", workload__tiers=TIERS))
    from simulator.run.resolve import spawn_rngs
    from simulator.workload.traffic import generate_workload
    wl = generate_workload(sc, 8192, spawn_rngs(0))
    names = load_trace(CSV_LOG, "requests")["tier"].to_numpy()
    assert (np.array(["interactive", "batch"])[wl.tier] == names).all()
    with pytest.raises(ScenarioError, match=r"workload.tiers = None: the trace .* gives each request a tier"):
        generate_workload(scenario_from_dict(replay(CSV_LOG, "requests")), 8192, spawn_rngs(0))
    with pytest.raises(ScenarioError, match=r"lacks the trace's tier\(s\) interactive"):
        generate_workload(scenario_from_dict(replay(CSV_LOG, "requests", workload__tiers=[
            {"name": "batch", "share": 0.5}, {"name": "other", "share": 0.5}])), 8192, spawn_rngs(0))


def test_openai_responses_and_batch_lines() -> None:
    df = load_trace(OPENAI, "openai")
    assert len(df) == 36
    raw = [json.loads(line) for line in OPENAI.read_text().splitlines()]
    bodies = [r["response"]["body"] if "response" in r else r for r in raw]
    assert sorted(df["num_prompt_tokens"]) == sorted(b["usage"]["prompt_tokens"] for b in bodies)
    created = np.array([b["created"] for b in bodies], dtype=float)
    # Requests of one whole second are spread evenly over it, in file order; never across seconds.
    assert (np.floor(df["arrival_time"] + created.min()) == np.sort(created)).all()
    assert len(set(df["arrival_time"])) == 36
    assert simulate(scenario_from_dict(replay(OPENAI, "openai"))).summary["requests"]["completed"] == 36


@pytest.mark.parametrize(("text", "message"), [
    ("timestamp,prompt_tokens,output_tokens\n0,10,5\n1,ten,5\n", "log.csv row 3 column prompt_tokens = 'ten'"),
    ("timestamp,prompt_tokens,output_tokens\n0,10,5\n1,10,2.5\n", "row 3 column output_tokens = '2.5'"),
    ("timestamp,prompt_tokens,output_tokens\n0,10,5\n1,10,0\n",
     "row 3 column output_tokens = '0': not a token count: an integer from 1"),
    ("timestamp,prompt_tokens,output_tokens\n0,10,5\n,10,5\n", "row 3 column timestamp = '(empty)': empty"),
    ("timestamp,prompt_tokens,output_tokens\n0,10,5\nyesterday,10,5\n", "row 3 column timestamp = 'yesterday'"),
    ("timestamp,prompt_tokens,output_tokens\n2025-01-01T00:00:00Z,10,5\n2025-01-01T00:00:01,10,5\n",
     "row 3 column timestamp = '2025-01-01T00:00:01': lacks the time zone row 2 has"),
    ("timestamp,prompt_tokens\n0,10\n", "lacks column(s) output_tokens"),
    ("timestamp,prompt_tokens,output_tokens,prefix_hash,prefix_tokens\n0,10,5,a,20\n",
     "row 2 column prefix_tokens = '20': exceeds the row's prompt_tokens"),
    ("timestamp,prompt_tokens,output_tokens,prefix_hash\n0,10,5,a\n", "prefix_hash but no prefix_tokens"),
    ("timestamp,prompt_tokens,output_tokens,tier\n0,10,5,\n", "row 2 column tier = '(empty)': empty"),
])
def test_bad_csv_rows_name_the_file_row_and_column(tmp_path: Path, text: str, message: str) -> None:
    log = tmp_path / "log.csv"
    log.write_text(text)
    with pytest.raises(ScenarioError) as exc:
        load_trace(log, "requests")
    assert message in str(exc.value) and str(log) in str(exc.value), str(exc.value)


@pytest.mark.parametrize(("fmt", "lines", "message"), [
    ("requests", ['{"timestamp": 0, "prompt_tokens": 5, "output_tokens": 1}', "not json"],
     "log.jsonl line 2 = 'not json': not JSON"),
    ("requests", ['{"timestamp": 0, "prompt_tokens": 5, "output_tokens": 1}', "",
                  '{"timestamp": 1, "prompt_tokens": -3, "output_tokens": 1}'],
     "log.jsonl line 3 column prompt_tokens = -3"),
    ("requests", ['{"timestamp": 0, "prompt_tokens": 5, "output_tokens": 1}',
                  '{"timestamp": 1, "prompt_tokens": 5, "output_tokens": 0}'],
     "log.jsonl line 2 column output_tokens = 0: not a token count: an integer from 1"),
    ("openai", ['{"created": 5, "usage": {"prompt_tokens": 5, "completion_tokens": 1}}', '{"created": 6}'],
     "log.jsonl line 2 column usage = None: missing"),
    ("openai", ['{"created": "noon", "usage": {"prompt_tokens": 5, "completion_tokens": 1}}'],
     "log.jsonl line 1 column created = 'noon'"),
    ("openai", ['{"created": 5, "usage": {"prompt_tokens": 5.5, "completion_tokens": 1}}'],
     "line 1 column usage.prompt_tokens = 5.5"),
])
def test_bad_jsonl_lines_name_the_file_line_and_column(tmp_path: Path, fmt: str, lines: list[str],
                                                         message: str) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(ScenarioError) as exc:
        load_trace(log, fmt)
    assert message in str(exc.value), str(exc.value)


def test_workload_prefix_conflicts_with_the_logs_prefixes() -> None:
    sc = scenario_from_dict(replay(CSV_LOG, "requests", scheduler={"enable_prefix_caching": True},
                                   workload__tiers=TIERS, workload__prefix={"prefix_tokens": 64}))
    with pytest.raises(ScenarioError, match=r"workload.prefix = .*drop workload.prefix"):
        simulate(sc)
