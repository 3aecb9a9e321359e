"""Issue 19: every bad input a clean error, every output whole.

Regressions for the inputs that used to hang, exhaust memory, crash with "internal error" or give
silently wrong numbers: YAML alias bombs and deep nesting, non-finite and boolean numbers, sizes past
the limits, files that are not what they claim (encoding, compression, time zones, trace rows, per-op
tables). Each must end in one :class:`ScenarioError` naming the field (or file, row and column), fast.
Outputs (atomic folders, --force, CSV cells) and interrupts are checked further down.
"""
from __future__ import annotations

import copy
import gzip
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from simulator import ScenarioError, load_profile, load_scenario, scenario_from_dict, simulate
from simulator.planner import load_plan
from simulator.scenario.config import parse_overrides
from simulator.scenario.io import scenario_from_yaml_bytes
from simulator.scenario.limits import MAX_NUM_REQUESTS, MAX_REPLICAS, MAX_YAML_BYTES, MAX_YAML_DEPTH

REPO = Path(__file__).resolve().parents[1]
CONSTANT_HW = {"cost_model": "constant", "step_time_s": 0.01}
ROOFLINE_HW = {"cost_model": "roofline", "memory_bytes": 80e9, "memory_bandwidth_bytes_per_s": 3.35e12,
               "peak_flops": {"bf16": 9.89e14}}
BASE: dict[str, Any] = {
    "name": "h", "num_requests": 20, "model": "tiny-llama", "hardware": CONSTANT_HW,
    "workload": {"arrival": {"process": "poisson", "rate_per_s": 5.0},
                 "prompt_tokens": {"dist": "fixed", "value": 32},
                 "output_tokens": {"dist": "fixed", "value": 4}},
}


def base(**top: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(top)
    return data


def alias_bomb(levels: int = 9) -> str:
    """A ~1 KB YAML document whose aliases expand to 9**levels strings."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def raises(fn: Any, *needles: str, within_s: float = 5.0) -> ScenarioError:
    """``fn()`` raises one ScenarioError whose text holds every needle, within ``within_s`` seconds."""
    t0 = time.perf_counter()
    with pytest.raises(ScenarioError) as info:
        fn()
    assert time.perf_counter() - t0 < within_s
    text = str(info.value)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    return info.value


# -- YAML: aliases, nesting, size, encoding -----------------------------------------------------------
def test_alias_bomb_is_refused_by_every_yaml_reader(tmp_path: Path) -> None:
    """The same 1 KB alias bomb, alone or inside an otherwise valid scenario, plan or profile, is refused
    at once by the CLI's loaders and the upload path (it used to run for minutes and take gigabytes)."""
    bomb = alias_bomb()
    assert len(bomb) < 1024
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(BASE) + "extra:\n  " + bomb.replace("\n", "\n  "))
    raises(lambda: load_scenario(scenario), "scenario.yaml", "YAML aliases are not accepted")
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: p\n" + bomb)
    raises(lambda: load_plan(plan), "plan.yaml", "aliases")
    profile = tmp_path / "prof"
    profile.mkdir()
    (profile / "profile.yaml").write_text("cost_model: constant\nstep_time_s: 0.01\n" + bomb)
    raises(lambda: load_profile(str(profile)), "profile.yaml", "aliases")
    raises(lambda: scenario_from_yaml_bytes(bomb.encode()), "aliases")
    raises(lambda: parse_overrides(["name=[&a [1, 2], *a]"]), "--set name", "aliases")


def test_deep_nesting_and_large_files_are_refused(tmp_path: Path) -> None:
    """A 5,000-deep nested list (a RecursionError before) and a file over the size limit (a 2 MB
    scenario took 24 s to parse) are one-line errors naming the file."""
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    raises(lambda: load_scenario(deep), "deep.yaml", f"nested more than {MAX_YAML_DEPTH} levels")
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(BASE) + "pad: [" + ",".join(["1"] * 1_000_000) + "]\n")
    raises(lambda: load_scenario(big), "big.yaml", "file too large", f"{MAX_YAML_BYTES:,} bytes", within_s=1.0)


def test_files_that_are_not_utf8_name_the_line(tmp_path: Path) -> None:
    """Scenario, profile and upload bytes that are not UTF-8 are named with the line of the bad byte."""
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(yaml.safe_dump(BASE).encode() + "name: caf\xe9\n".encode("latin-1"))
    raises(lambda: load_scenario(bad), "latin1.yaml", "not UTF-8 text (line")
    prof = tmp_path / "prof"
    prof.mkdir()
    (prof / "profile.yaml").write_bytes(b"cost_model: constant\nstep_time_s: 0.01\ndevice: \xff\n")
    raises(lambda: load_profile(str(prof)), "profile.yaml", "not UTF-8 text (line 3)")
    raises(lambda: scenario_from_yaml_bytes(b"name: \xff\n", source="up.yaml"), "up.yaml", "not UTF-8")


# -- numbers: finite, not booleans, within the limits -----------------------------------------------------
NUMBER_CASES = [
    ({"workload.arrival.rate_per_s": float("inf")}, "workload.arrival.rate_per_s", "finite number"),
    ({"workload.arrival.rate_per_s": 1e-300}, "workload.arrival.rate_per_s", "longest simulated span"),
    ({"workload.arrival.rate_per_s": 1e-20}, "workload.arrival.rate_per_s", "longest simulated span"),
    ({"warmup_s": float("inf")}, "warmup_s", ""),
    ({"num_requests": True}, "num_requests", "not true/false"),
    ({"num_requests": 10**12}, "num_requests", f"at most {MAX_NUM_REQUESTS:,}"),
    ({"num_requests": None, "duration_s": 1e15}, "duration_s", "at most"),
    ({"num_requests": None, "duration_s": 1e7, "workload.arrival.rate_per_s": 1000.0}, "duration_s",
     "a run holds at most"),
    ({"deployment.replicas": 10_000_000}, "deployment.replicas", f"at most {MAX_REPLICAS:,}"),
    ({"hardware": {"cost_model": "constant", "step_time_s": float("inf")}}, "hardware.step_time_s", "finite"),
    ({"hardware": {**ROOFLINE_HW, "peak_flops": {"bf16": -1e15}}}, "hardware.peak_flops.bf16", "at least 1e+06"),
    ({"hardware": {**ROOFLINE_HW, "peak_flops": {"bf16": 0}}}, "hardware.peak_flops.bf16", "at least 1e+06"),
    ({"hardware": {**ROOFLINE_HW, "memory_bytes": float("inf")}}, "hardware.memory_bytes", "finite"),
    ({"hardware": {**ROOFLINE_HW, "peak_flops": {"bf16": True}}}, "hardware.peak_flops.bf16", "not true/false"),
    ({"workload.sessions": {"turns": 10**6, "turn_gap_s": 1}}, "workload.sessions.turns", "turns"),
    ({"scheduler.max_wait_ms": float("nan")}, "scheduler.max_wait_ms", "finite"),
    ({"slo.attainment": True}, "slo.attainment", "not true/false"),
    # found by tests/test_fuzz_inputs.py-style runs: overflows, arrays of absurd size, a clock that never moves
    ({"workload.arrival": {"process": "gamma", "rate_per_s": 5, "cv": 1e300}}, "workload.arrival.cv", "100"),
    ({"workload.arrival": {"process": "gamma", "rate_per_s": 5, "cv": 1e-300}}, "workload.arrival.cv", "0.01"),
    ({"workload.prompt_tokens": {"dist": "lognormal", "mean": 32, "sigma": 1e300}}, "workload.prompt_tokens.sigma",
     "10"),
    ({"workload.output_tokens": {"dist": "geometric", "mean": 1e300}}, "workload.output_tokens.mean", "at most"),
    ({"hardware": {**ROOFLINE_HW, "memory_bandwidth_bytes_per_s": 1e-300}},
     "hardware.memory_bandwidth_bytes_per_s", "at least 1e+06"),
    ({"hardware": {**ROOFLINE_HW, "efficiency": {"gemm_max": 1e-300}}}, "hardware.efficiency.gemm_max",
     "at least 0.001"),
    ({"deployment.autoscaler": {"max_replicas": 2, "target_outstanding_per_replica": 4, "interval_s": 1e-300}},
     "deployment.autoscaler.interval_s", "0.01"),
    ({"scheduler.block_size": 10**12}, "scheduler.block_size", "at most 4,096"),
    ({"scheduler.max_num_seqs": 10**12, "scheduler.max_num_batched_tokens": 10**12}, "scheduler.max_num_seqs",
     "at most 65,536"),
    ({"workload.prefix": {"prefix_tokens": 8, "num_prefixes": 10**12}}, "workload.prefix.num_prefixes",
     "at most 1,000,000"),
    ({"client.max_tokens": 2**63}, "client.max_tokens", "between 1 and 16,777,216"),
    ({"workload.tiers": [{"name": "a", "share": 1.0, "priority": 2**63}]}, "workload.tiers.0.priority", ""),
    ({"workload.arrival": {"process": "closed_loop", "concurrency": True}}, "workload.arrival.concurrency",
     "not true/false"),
    ({"workload.arrival": {"process": "closed_loop", "concurrency": 1, "think_time_s": 1e7}},
     "workload.arrival.think_time_s", "longest simulated span"),
]


@pytest.mark.parametrize("overrides, field, words", NUMBER_CASES, ids=[next(iter(c[0])) + f"-{i}"
                                                                      for i, c in enumerate(NUMBER_CASES)])
def test_bad_numbers_are_one_error_naming_the_field(overrides: dict[str, Any], field: str, words: str) -> None:
    """Non-finite numbers, booleans and sizes past the limits are refused before anything runs (they used
    to crash with MemoryError or an assertion, loop, or report plausible latencies)."""
    def run() -> None:
        data = base()
        for key, value in overrides.items():
            node = data
            *parents, last = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            if value is None:
                node.pop(last, None)
            else:
                node[last] = value
        simulate(scenario_from_dict(data))

    err = raises(run, words)
    assert err.field == field


def test_speedup_and_plan_numbers_must_be_finite(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,4\n")
    data = base(workload={"arrival": {"process": "trace", "path": str(trace), "format": "azure",
                                      "speedup": float("inf")}})
    assert raises(lambda: scenario_from_dict(data), "finite").field == "workload.arrival.speedup"
    plan = {"scenario": base(), "candidates": [{"name": "c", "price_per_gpu_hour": float("inf")}],
            "slo": {"ttft_p99_ms": 100}, "regions": [{"name": "r", "rtt_ms": {"r": 1}}],
            "forecast": [{"quarter": "Q1", "region": "r", "peak_rps": 1}]}
    assert raises(lambda: load_plan(plan), "finite").field == "candidates[0].price_per_gpu_hour"
    plan["candidates"] = [{"name": "c", "price_per_gpu_hour": 1.0}]
    plan["forecast"] = [{"quarter": "Q1", "region": "r", "peak_rps": float("nan")}]
    assert raises(lambda: load_plan(plan), "finite").field == "forecast[0].peak_rps"
    plan["forecast"] = [{"quarter": "Q1", "region": "r", "peak_rps": 1e15}]   # tokens a day overflowed an int64
    assert raises(lambda: load_plan(plan), "at most 1e+06").field == "forecast[0].peak_rps"


@pytest.mark.parametrize("rows, where", [("Q1,a,1,2\nQ1,b,1\n", "row 2 = 'Q1,a,1,2'"),
                                         ("Q1,a,1\nQ1,b,1,2\n", "row 3 = 'Q1,b,1,2'"),
                                         ('Q1,a,1\nQ1,b,"1,5",2\n', """row 3 = 'Q1,b,"1,5",2'""")])
def test_a_forecast_row_with_more_values_than_columns_is_named(tmp_path: Path, rows: str, where: str) -> None:
    """A forecast row with a value too many: on row 2, pandas took the row's first value as an index and the
    error blamed row 3's peak_rps as missing; on a later row it was 'not a readable CSV (ParserError)'. A
    file and an upload both name the row now."""
    from simulator.scenario.io import forecast_rows_from_csv_bytes

    text = "quarter,region,peak_rps\n" + rows
    (tmp_path / "f.csv").write_text(text)
    plan = {"scenario": base(), "candidates": [{"name": "c", "price_per_gpu_hour": 1.0}], "slo": {"ttft_p99_ms": 100},
            "regions": [{"name": "a", "rtt_ms": {"a": 1}}, {"name": "b", "rtt_ms": {"b": 1}}], "forecast": "f.csv"}
    raises(lambda: load_plan(plan, base_dir=tmp_path), f"f.csv {where}",
           "3 columns (quarter, region, peak_rps); give one value per column")
    raises(lambda: forecast_rows_from_csv_bytes(text.encode(), source="up.csv"), f"up.csv {where}", "3 columns")


def test_a_forecast_missing_a_quarter_region_row_is_an_error() -> None:
    """Already an error before issue 19; verified here: every region needs a row in every quarter."""
    plan = {"scenario": base(), "candidates": [{"name": "c", "price_per_gpu_hour": 1.0}],
            "slo": {"ttft_p99_ms": 100},
            "regions": [{"name": "a", "rtt_ms": {"a": 1}}, {"name": "b", "rtt_ms": {"b": 1}}],
            "forecast": [{"quarter": q, "region": r, "peak_rps": 1}
                         for q, r in (("Q1", "a"), ("Q1", "b"), ("Q2", "a"))]}
    assert raises(lambda: load_plan(plan), "missing row").field == "forecast (quarter Q2, region b)"


# -- files that are not what they claim ------------------------------------------------------------------
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def trace_run(tmp_path: Path, name: str, content: str | bytes, fmt: str) -> Any:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    data = base(workload={"arrival": {"process": "trace", "path": name, "format": fmt}})
    del data["num_requests"]
    return lambda: simulate(scenario_from_dict(data, base_dir=tmp_path))


def test_azure_timestamps_with_and_without_fractional_seconds_are_read(tmp_path: Path) -> None:
    """A timestamp without fractional seconds among others with them is valid (it used to be refused),
    and so are timestamps that all carry an offset (converted to UTC)."""
    rows = "2023-11-16 18:15:46.6805900,10,4\n2023-11-16 18:15:50,10,4\n2023-11-16 18:15:51.5,10,4\n"
    result = trace_run(tmp_path, "plain.csv", AZURE_HEADER + rows, "azure")()
    assert result.requests["arrival_time"].tolist() == pytest.approx([0.0, 50 - 46.68059, 51.5 - 46.68059])
    zoned = "2023-11-16 18:15:46+01:00,10,4\n2023-11-16 17:15:50Z,10,4\n"
    result = trace_run(tmp_path, "zoned.csv", AZURE_HEADER + zoned, "azure")()
    assert result.requests["arrival_time"].tolist() == pytest.approx([0.0, 4.0])


@pytest.mark.parametrize("name, content, fmt, words", [
    ("mixed_tz.csv", AZURE_HEADER + "2023-11-16 18:15:46+00:00,10,4\n2023-11-16 18:15:50,10,4\n", "azure",
     ("mixed_tz.csv row 3 column TIMESTAMP", "time zone")),
    ("latin1.csv", AZURE_HEADER.encode() + b"2023-11-16 18:15:46,1\xe90,4\n", "azure",
     ("latin1.csv", "not UTF-8", "line 2")),
    ("huge_tokens.csv", AZURE_HEADER + "2023-11-16 18:15:46,1e30,4\n", "azure",
     ("huge_tokens.csv row 2 column ContextTokens",)),
    ("nan.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 4}\n'
                  '{"timestamp": NaN, "input_length": 10, "output_length": 4}\n', "mooncake",
     ("nan.jsonl line 2", "finite")),
    ("inf.jsonl", '{"timestamp": Infinity, "input_length": 10, "output_length": 4}\n', "mooncake",
     ("inf.jsonl line 1", "finite")),
    ("far.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 4}\n'
                  '{"timestamp": 1e300, "input_length": 10, "output_length": 4}\n', "mooncake",
     ("far.jsonl line 2 column timestamp", "span at most")),
    ("hash.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 4, "hash_ids": "abc"}\n', "mooncake",
     ("hash.jsonl line 1", "hash_ids must be a list of integers")),
    ("hash2.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 4, "hash_ids": [1.5, true]}\n',
     "mooncake", ("hash2.jsonl line 1", "hash_ids")),
    ("latin1.jsonl", b'{"timestamp": 0, "input_length": 10, "output_length": 4, "x": "\xe9"}\n', "mooncake",
     ("latin1.jsonl line 1", "UnicodeDecodeError")),
    # a row with more values than the header: the first such row used to shift every column by one
    ("wide2.csv", AZURE_HEADER + "2023-11-16 18:15:46,10,4,7\n2023-11-16 18:15:50,10,4\n", "azure",
     ("wide2.csv row 2 = '2023-11-16 18:15:46,10,4,7'", "4 values but the header has 3 columns")),
    ("wide3.csv.gz", gzip.compress((AZURE_HEADER + "2023-11-16 18:15:46,10,4\n2023-11-16 18:15:50,1,000,4\n").encode()),
     "azure", ("wide3.csv.gz row 3 = '2023-11-16 18:15:50,1,000,4'", "4 values", "(TIMESTAMP, ContextTokens")),
])
def test_bad_trace_files_name_file_row_and_column(tmp_path: Path, name: str, content: str | bytes, fmt: str,
                                                   words: tuple[str, ...]) -> None:
    """Mixed time zones, encodings, non-finite or far-off timestamps (1e300 ms used to loop forever),
    hash_ids that are not integers: one error naming the file and the row or line."""
    raises(trace_run(tmp_path, name, content, fmt), *words)


@pytest.mark.parametrize("name, content, words", [
    ("big.csv", "n\n100\n1e30\n", ("big.csv row 3 column n", "integers from 1")),
    ("inf.csv", "n\n100\ninf\n", ("inf.csv row 3 column n",)),
    ("frac.csv", "n\n100\n100.5\n", ("frac.csv row 3 column n",)),
    ("fake.csv.gz", "n\n100\n", ("fake.csv.gz", "not gzip-compressed")),
    ("cut.csv.gz", gzip.compress(b"n\n" + b"100\n" * 1000)[:40], ("cut.csv.gz", "damaged compressed file")),
    ("quote.csv", 'n\n100\n"200\n300\n', ("quote.csv row 3 = '\"200'", "a double quote opens a value that never")),
    ("blank.csv", "", ("blank.csv", "not a readable CSV (EmptyDataError: No columns to parse from file)")),
])
def test_bad_empirical_length_files(tmp_path: Path, name: str, content: str | bytes, words: tuple[str, ...]) -> None:
    """Empirical lengths of 1e30 or inf (an internal assertion before), fractional lengths (silently
    truncated before) and a .csv.gz that is not gzip are errors naming the file, row and column."""
    (tmp_path / name).write_bytes(content.encode() if isinstance(content, str) else content)
    data = base()
    data["workload"]["prompt_tokens"] = {"dist": "empirical", "path": name, "column": "n"}
    raises(lambda: simulate(scenario_from_dict(data, base_dir=tmp_path)), *words)


def _observation(tmp_path: Path, **changes: Any) -> Path:
    """An `llmplan observe` file of two requests, the first with ``changes``."""
    import json
    reqs = [{"id": i, "send_s": float(i), "prompt_tokens": 16, "max_tokens": 3, "output_tokens": 3,
             "first_token_s": i + 0.05, "end_s": i + 0.07, "chunk_s": [i + 0.05, i + 0.06, i + 0.07],
             "chunk_tokens": [1, 1, 1], "usage": "server", "error": None} for i in range(2)]
    reqs[0].update(changes)
    path = tmp_path / "obs.json"
    path.write_text(json.dumps({"format": "llmplan-observation", "version": 1, "header": {}, "requests": reqs}))
    return path


@pytest.mark.parametrize("changes, words", [
    ({"chunk_s": True}, ("requests[0].chunk_s = 'True'", "list of instants")),
    ({"chunk_s": {"a": 1}}, ("requests[0].chunk_s", "list of instants")),
    ({"chunk_s": [0.05, "0.06", 0.07]}, ("requests[0].chunk_s", "list of instants")),
    ({"chunk_s": [0.05, float("nan"), 0.07]}, ("requests[0].chunk_s", "list of instants")),
    ({"chunk_s": [0.05, 0.07, 0.06]}, ("requests[0].chunk_s[2] = 0.06", "must not decrease")),
    ({"chunk_s": [0.05, 0.06, 9.0]}, ("requests[0].chunk_s[2] = 9.0", "between the first token")),
    ({"chunk_tokens": [1, "a", 1]}, ("requests[0].chunk_tokens", "token counts")),
    ({"chunk_tokens": [1, True, 1]}, ("requests[0].chunk_tokens", "token counts")),
    ({"chunk_tokens": [1, 1]}, ("requests[0].chunk_tokens = '2 counts for 3 chunks'", "one token count per")),
    # 10^12 tokens in one chunk used to build a list of 10^12 gaps
    ({"chunk_tokens": [1, 10**12, 1]}, ("requests[0].chunk_tokens", "more than the request's output_tokens (3)")),
])
def test_bad_observation_chunks_are_refused_naming_the_request(tmp_path: Path, changes: dict[str, Any],
                                                               words: tuple[str, ...]) -> None:
    """An observation's streamed chunks (``chunk_s``, ``chunk_tokens``): a wrong type, an instant out of
    order or outside the request, a count that is not an integer or exceeds the request's output, as an
    error naming the request and the field, replayed as a trace or read to fit (an internal error or a
    hang before)."""
    from simulator.workload.observation import read_observation
    path = _observation(tmp_path, **changes)
    raises(lambda: read_observation(path), *words)
    data = base()
    data["workload"]["arrival"] = {"process": "trace", "format": "observation", "path": str(path)}
    data.pop("num_requests", None)
    raises(lambda: simulate(scenario_from_dict(data, base_dir=tmp_path)), *words)


@pytest.mark.parametrize("load, words", [
    ("closed", ("header.load = 'str'", "must be a mapping")),
    ({"arrival": "closed"}, ("header.load.concurrency = None", "number of clients is missing")),
    ({"arrival": "closed", "concurrency": 0}, ("header.load.concurrency = 0", "integer from 1")),
    ({"arrival": "closed", "concurrency": "8"}, ("header.load.concurrency = '8'", "integer from 1")),
    ({"arrival": "poisson", "prefix_tokens": "inf"}, ("header.load.prefix_tokens = 'inf'", "integer from 0")),
    ({"arrival": "poisson", "prefix_tokens": 4, "prefix_groups": 0}, ("header.load.prefix_groups = 0",)),
    ({"arrival": "poisson", "prefix_tokens": 2.5}, ("header.load.prefix_tokens = 2.5", "integer from 0")),
    ({"arrival": "poisson", "prefix_tokens": 16}, ("header.load.prefix_tokens = 16", "below the shortest prompt (16")),
])
def test_a_bad_observed_load_is_refused_naming_the_header_field(tmp_path: Path, load: Any,
                                                                 words: tuple[str, ...]) -> None:
    """The header's load, which a replay reads (a closed loop's clients, shared prefixes): a wrong
    type or value is an error naming ``header.load.<field>`` when the file is read (a ValueError in
    the fit's replay, or a closed loop silently replayed as an open trace, before)."""
    import json

    from calibrate.fit import replay_scenario
    from simulator.workload.observation import read_observation
    path = _observation(tmp_path)
    doc = json.loads(path.read_text())
    doc["header"]["load"] = load
    path.write_text(json.dumps(doc))
    raises(lambda: read_observation(path), *words)
    doc["header"]["load"] = {"arrival": "poisson", "prefix_tokens": 8, "prefix_groups": 2}
    path.write_text(json.dumps(doc))
    from simulator.scenario.models import MODEL_PRESETS
    sc = replay_scenario(read_observation(path), MODEL_PRESETS["tiny-llama"], "cpu-amd-epyc-tiny-llama")
    assert (sc.workload.prefix.prefix_tokens, sc.workload.prefix.num_prefixes) == (8, 2)
    bench = {"input_lens": [16, 16], "output_lens": [3, 3], "ttfts": [0.05, 0.05], "itls": [[0.01, 0.01]] * 2,
             "start_times": [100.0, 101.0], "request_rate": "inf", "max_concurrency": -2}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    raises(lambda: read_observation(tmp_path / "bench.json"), "bench.json: max_concurrency = -2", "integer from 1")


@pytest.mark.parametrize("profile, drop, words", [
    ("mi300x-datasheet", "memory_bandwidth_bytes_per_s",
     ("memory_bandwidth_bytes_per_s = None: cost_model 'roofline' needs memory_bandwidth_bytes_per_s",)),
    ("mi300x-datasheet", "peak_flops", ("peak_flops = {}: cost_model 'roofline' needs peak_flops",)),
    ("h100-sxm", "memory_bytes", ("memory_bytes = None: cost_model 'kernel_table' needs memory_bytes",)),
])
def test_a_profile_missing_what_its_cost_model_needs_names_the_field(tmp_path: Path, profile: str, drop: str,
                                                                     words: tuple[str, ...]) -> None:
    """A profile file without a field its cost model needs: the error names the field, not the whole
    profile's contents (which it printed before)."""
    src = Path(__file__).parent.parent / "hwprofiles" / profile / "profile.yaml"
    doc = yaml.safe_load(src.read_text())
    del doc[drop]
    if "table" in doc:
        doc["table"] = str(src.parent / doc["table"])
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    data = base()
    data["hardware"] = str(tmp_path / "p.yaml")
    data["model"] = "llama-3-8b"
    err = raises(lambda: simulate(scenario_from_dict(data)), *words)
    assert "'name'" not in str(err)


def test_a_vllm_bench_result_with_a_bad_output_length_is_refused(tmp_path: Path) -> None:
    """``output_lens`` of a request that completed, as text: an error naming it (a TypeError before)."""
    import json

    from simulator.workload.observation import read_observation
    doc = {"input_lens": [16, 16], "output_lens": ["3", 3], "ttfts": [0.05, 0.05], "itls": [[0.01, 0.01]] * 2,
           "start_times": [100.0, 101.0], "errors": ["", ""]}
    (tmp_path / "bench.json").write_text(json.dumps(doc))
    raises(lambda: read_observation(tmp_path / "bench.json"), "request 0.output_lens = '3'", "non-negative number")


def bad_table_profile(tmp_path: Path, column: str, value: float) -> tuple[Path, int]:
    """A copy of the measured CPU profile with one ops.csv cell replaced (and the checksum updated);
    returns the folder and the spreadsheet row of the cell."""
    import shutil

    from simulator.cost.op_table import file_sha256

    folder = tmp_path / "prof"
    shutil.copytree(REPO / "hwprofiles" / "cpu-amd-epyc-tiny-llama", folder)
    df = pd.read_csv(folder / "ops.csv")
    op = "qkv_proj" if column == "n" else "rmsnorm"
    i = int(df.index[df["op"] == op][0])
    if value % 1:
        df[column] = df[column].astype(float)
    df.loc[i, column] = value
    df.to_csv(folder / "ops.csv", index=False)
    prof = yaml.safe_load((folder / "profile.yaml").read_text())
    prof["table_sha256"] = file_sha256(folder / "ops.csv")
    (folder / "profile.yaml").write_text(yaml.safe_dump(prof))
    return folder, i + 2


@pytest.mark.parametrize("column, value, words", [("tokens", 0, "column tokens = 0: must be an integer >= 1"),
                                                   ("width", -5, "column width = -5"),
                                                   ("n", 1.5, "column n = 1.5"),
                                                   ("tokens", float("inf"), "column tokens = inf")])
def test_bad_per_op_table_rows_name_the_row_and_column(tmp_path: Path, column: str, value: float,
                                                        words: str) -> None:
    """An ops.csv row with 0 or infinitely many tokens, a negative width or a fractional GEMM width is
    refused, naming the file, row and column (they used to reach the interpolants), and nothing else is
    printed (an infinite count printed numpy's RuntimeWarning above the error)."""
    import warnings
    folder, row = bad_table_profile(tmp_path, column, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raises(lambda: simulate(scenario_from_dict(base(hardware=str(folder)))), f"ops.csv row {row}", words)


def test_profiles_show_of_a_bad_table_is_one_line(tmp_path: Path) -> None:
    """`profiles show` checks the table before printing anything (it printed the provenance, then failed)."""
    from test_errors import assert_one_error_line, run_cli

    folder, row = bad_table_profile(tmp_path, "tokens", 0)
    assert_one_error_line(run_cli("profiles", "show", str(folder)), f"ops.csv row {row} column tokens")


# -- outputs: whole folders, --force, spreadsheet-safe cells ----------------------------------------------
def test_output_folder_is_all_or_nothing(tmp_path: Path) -> None:
    """An error or Ctrl-C while writing leaves the previous results (or nothing, not even the parent
    folders made for it); a finished write replaces the folder whole, only with force."""
    from simulator.output import output_folder

    out = tmp_path / "a" / "b" / "run"
    for exc in (OSError(28, "No space left on device"), KeyboardInterrupt()):
        with pytest.raises((ScenarioError, KeyboardInterrupt)) as info, output_folder(out) as stage:
            (stage / "requests.csv").write_text("half a file")
            raise exc
        assert sorted(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))
        if isinstance(exc, OSError):
            assert "No space left on device" in str(info.value)
    with output_folder(out) as stage:
        (stage / "summary.json").write_text("{}")
        (stage / "steps.csv").write_text("old steps")
    with pytest.raises(ScenarioError, match=r"already holds results .*pass --force"), output_folder(out):
        pass
    with pytest.raises(RuntimeError), output_folder(out, force=True) as stage:
        (stage / "summary.json").write_text("new")
        raise RuntimeError("simulated crash")
    assert (out / "summary.json").read_text() == "{}" and (out / "steps.csv").exists()
    with output_folder(out, force=True) as stage:
        (stage / "summary.json").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]   # no stale steps.csv beside it
    assert sorted(p.name for p in out.parent.iterdir()) == ["run"]      # no staging or old folder left


def test_the_working_folder_is_not_an_output_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--out .` (or a folder holding the working folder) cannot be replaced whole: refused before the run."""
    from simulator.output import check_output_folder
    from simulator.planner.worksheet import check_out

    monkeypatch.chdir(tmp_path)
    for out in (Path("."), tmp_path, tmp_path.parent):
        raises(lambda out=out: check_output_folder(out, force=True), "is the working folder or holds it")
    check_out(Path("w.csv"))   # a plan's .csv name writes beside other files in the working folder: fine


def test_simulate_out_refuses_existing_results_and_writes_whole_with_force(tmp_path: Path) -> None:
    from test_errors import assert_one_error_line, run_cli

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(base()))
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.csv").write_text("stale steps of an earlier run\n")
    proc = run_cli("simulate", str(scenario), "--json", "--out", str(out))
    assert_one_error_line(proc, "--out", "already holds results (steps.csv)", "--force")
    proc = run_cli("simulate", str(scenario), "--json", "--out", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["requests.csv", "requests.parquet", "scenario.yaml", "steps.csv", "steps.parquet",
                     "summary.json"]
    assert "stale" not in (out / "steps.csv").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_failed_write_leaves_no_partial_simulate_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write error after the first file (a full disk) is one error naming --out, and the folder is not
    created at all: no truncated requests.csv beside a missing summary.json."""
    from simulator.cli import runs

    result = simulate(scenario_from_dict(base()))
    calls = []

    def failing(df: pd.DataFrame, path: Path, **kw: Any) -> None:
        calls.append(path)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runs, "write_csv", failing)
    with pytest.raises(ScenarioError, match=r"cannot write the results \(No space left"):
        runs.write_outputs(result, {}, tmp_path / "run")
    assert calls and list(tmp_path.iterdir()) == []


def test_csv_cells_are_neutralised_everywhere() -> None:
    """Formula starts get an apostrophe; a bare carriage return (it split the row) and every other control
    character become visible escapes; numbers and plain text are untouched."""
    from simulator.output import csv_text, safe_cell

    assert safe_cell("\r=3+4") == "'\\r=3+4"
    assert safe_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)" and safe_cell("-2") == "'-2"
    assert safe_cell("a\nb\x1bc\x00\u2028") == "a\\nb\\x1bc\\x00\\u2028"
    assert safe_cell("plain name") == "plain name" and safe_cell(3.5) == 3.5 and safe_cell(None) is None
    frame = pd.DataFrame({"tier": pd.Categorical(["\r=3+4", "ok"]), "n": [1, 2], "\r=h": ["x", "@y"]})
    text = csv_text(frame)
    assert "\r" not in text and text.splitlines() == ["tier,n,'\\r=h", "'\\r=3+4,1,x", "ok,2,'@y"]


def test_tier_names_in_requests_csv_are_neutralised(tmp_path: Path) -> None:
    """A name starting a formula is written as text; a name with a control character (a carriage return
    split the CSV's rows) is refused where it is read."""
    from simulator.cli import runs

    data = base()
    data["workload"]["tiers"] = [{"name": "\r=3+4", "share": 0.5}, {"name": "@batch", "share": 0.5}]
    raises(lambda: scenario_from_dict(data), "workload.tiers.0.name = '\\r=3+4'", "control characters")
    data["workload"]["tiers"][0]["name"] = "=3+4"
    result = simulate(scenario_from_dict(data))
    runs.write_outputs(result, {}, tmp_path / "run")
    back = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert len(back) == 20
    assert set(back["tier"]) == {"'=3+4", "'@batch"}
    assert set(pd.read_parquet(tmp_path / "run" / "requests.parquet")["tier"]) == {"=3+4", "@batch"}  # raw


def test_plan_out_refuses_existing_worksheets_without_force(tmp_path: Path) -> None:
    from simulator.planner.worksheet import check_out

    folder = tmp_path / "plan-out"
    folder.mkdir()
    (folder / "worksheet.csv").write_text("q\n")
    raises(lambda: check_out(folder), "already holds results (worksheet.csv)", "--force")
    check_out(folder, force=True)
    (tmp_path / "w-totals.csv").write_text("q\n")
    raises(lambda: check_out(tmp_path / "w.csv"), "already exists (w-totals.csv)", "--force")
    check_out(tmp_path / "w.csv", force=True)


# -- interrupts and arguments ------------------------------------------------------------------------------
def test_ctrl_c_in_a_one_worker_plan_stops_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one worker the searches run in-process: a Ctrl-C in the first one ends the plan (it used to be
    stored in that search's future while every remaining search ran on)."""
    from simulator.planner import run as plan_run
    from simulator.planner.backends import InlineExecutor

    calls = []

    def interrupted(task: Any) -> Any:
        calls.append(task)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        InlineExecutor().submit(interrupted, None)
    calls.clear()
    monkeypatch.setattr(plan_run, "search_replicas", interrupted)
    plan = {"scenario": base(), "candidates": [{"name": "a", "price_per_gpu_hour": 1.0},
                                               {"name": "b", "price_per_gpu_hour": 2.0}],
            "slo": {"ttft_p99_ms": 100}, "regions": [{"name": "r", "rtt_ms": {"r": 1}}],
            "forecast": [{"quarter": q, "region": "r", "peak_rps": 1} for q in ("Q1", "Q2", "Q3")]}
    with pytest.raises(KeyboardInterrupt):
        plan_run.plan(plan, workers=1)
    assert len(calls) == 1


@pytest.mark.parametrize("args, words", [
    (("--backend", "dask", "--address", "not a url"), ("--address = 'not a url'", "not a Dask scheduler address")),
    (("--workers", "0"), ("--workers = 0", "must be >= 1")),
    (("--workers", "100000"), ("--workers = 100000", "at most 4 per CPU")),
    (("--address", "tcp://127.0.0.1:1"), ("--address = 'tcp://127.0.0.1:1'", "only the dask backend")),
    (("--timeout", "nan"), ("--timeout = nan",)),
    (("--backend", "spark"), ("--backend = 'spark'", "allowed: local, dask")),
])
def test_plan_arguments_are_checked_first(tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]) -> None:
    """Bad --backend/--address/--workers/--timeout are one line before the plan is read (the bad dask
    address used to print a Client.__del__ traceback 20 s after the error); nothing is written."""
    from test_errors import assert_one_error_line, run_cli

    plan = tmp_path / "missing-plan.yaml"   # never read: the arguments fail first
    t0 = time.perf_counter()
    proc = run_cli("plan", str(plan), "--out", str(tmp_path / "out"), *args)
    assert time.perf_counter() - t0 < 15
    assert_one_error_line(proc, *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change, words", [
    ({"num_requests": 0}, "--num-requests = 0"), ({"max_num_seqs": 0}, "--max-num-seqs = 0"),
    ({"prompt_mean": -5.0}, "--prompt-mean = -5.0"), ({"device": "tpu"}, "--device = 'tpu'"),
    ({"prompt_max": 5000}, "--prompt-max = 5000"), ({"profile": "no-such-profile"}, "--profile"),
    ({"output_mean": float("inf")}, "--output-mean = inf"),
])
def test_validate_settings_are_checked_before_any_work(change: dict[str, Any], words: str) -> None:
    """`llmplan validate` checked these only after minutes of calibration, and a pydantic error leaked as a
    multi-line internal error; now each names its flag at once."""
    pytest.importorskip("torch")
    from dataclasses import replace

    from calibrate.validate import ValidateSettings, check_settings

    raises(lambda: check_settings(replace(ValidateSettings(), **change)), words, within_s=10)


def test_validate_and_calibrate_arguments_fail_fast_and_create_nothing(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from test_errors import assert_one_error_line, run_cli

    out = tmp_path / "v"
    assert_one_error_line(run_cli("validate", "--out", str(out), "--max-num-seqs", "0"), "--max-num-seqs = 0")
    assert_one_error_line(run_cli("calibrate", "--out", str(out), "--max-tokens", "0", "--quick"),
                          "--max-tokens = 0", "must be >= 1")
    for flag, value in (("--max-drift", "-1"), ("--max-spread", "nan"), ("--max-load", "-3")):   # nan: no check
        assert_one_error_line(run_cli("calibrate", "--out", str(out), flag, value, "--quick"),
                              f"{flag} = ", "must be a positive number")
    assert not out.exists()
    out.mkdir()
    (out / "profile.yaml").write_text("name: x\n")
    assert_one_error_line(run_cli("calibrate", "--out", str(out), "--quick", "--device", "cpu"),
                          "already holds a finished profile", "--force")


#: The most a signal test waits for its child to reach the point it interrupts, and for the child to end:
#: generous, so that a busy machine only makes the test slower, never makes it fail.
PATIENCE_S = 300.0


def _interrupt(args: list[str], sig: str = "SIGINT", group: bool = True, *, when_mapped: str | None = None,
               when_workers: int | None = None) -> tuple[int, str, float, list[int]]:
    """Run ``python -m simulator.cli ARGS`` in its own process group, wait until it reaches the point to
    interrupt, send ``sig`` to the whole group (as a terminal's Ctrl-C does; ``group=False``: to the CLI
    alone, as ``kill`` does); return the exit status, stderr, the seconds it took to exit and its
    descendants when interrupted. The point, polled for (never a fixed delay, which a busy machine
    stretches): ``when_mapped``, the CLI has mapped a library whose path contains this text (it is
    importing); ``when_workers``, that many planner worker processes have started and ignore SIGINT (the
    plan is running)."""
    import os
    import signal
    import subprocess
    import sys

    from test_errors import cli_env

    proc = subprocess.Popen([sys.executable, "-m", "simulator.cli", *args], cwd=REPO, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.perf_counter() + PATIENCE_S
    maps = Path(f"/proc/{proc.pid}/maps")
    while True:
        if proc.poll() is not None or time.perf_counter() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            pytest.fail(f"the CLI did not reach the point to interrupt (exit status {proc.returncode}): {err}")
        if (when_mapped is None or when_mapped in maps.read_text()) \
                and (when_workers is None or len(_ready_workers(proc.pid)) >= when_workers):
            break
        time.sleep(0.001 if when_mapped else 0.05)
    children = _descendants(proc.pid)
    if group:
        os.killpg(proc.pid, getattr(signal, sig))
    else:
        os.kill(proc.pid, getattr(signal, sig))
    t0 = time.perf_counter()
    stdout, stderr = proc.communicate(timeout=PATIENCE_S)
    assert "Traceback" not in stdout + stderr, stderr
    return proc.returncode, stderr, time.perf_counter() - t0, children


def _ready_workers(pid: int) -> list[int]:
    """The planner's worker processes under ``pid`` that have run their initializer: started by
    multiprocessing's spawn, with SIGINT ignored (``SigIgn`` in /proc/PID/status, bit 1 for signal 2)."""
    ready = []
    for child in _descendants(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            status = Path(f"/proc/{child}/status").read_text()
        except OSError:
            continue
        ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
        if b"spawn_main" in cmdline and ignored & (1 << 1):
            ready.append(child)
    return ready


def _all_end(pids: list[int]) -> bool:
    """Whether every process of ``pids`` ends (or is a zombie) within :data:`PATIENCE_S`."""
    deadline = time.perf_counter() + PATIENCE_S
    while [pid for pid in pids if _alive(pid)] and time.perf_counter() < deadline:
        time.sleep(0.1)
    return not [pid for pid in pids if _alive(pid)]


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _descendants(pid: int) -> list[int]:
    """Children, grandchildren, ... of ``pid`` (the worker processes, and any process they start)."""
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_an_interrupt_raised_where_python_cannot_raise_it_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C landing in a weakref callback of the import system's module locks was printed as
    "Exception ignored in ... KeyboardInterrupt" with a traceback, and lost (a CI run of the start-up test
    below met it). The CLI's unraisable hook sends such an interrupt (or SIGTERM's) again; anything else
    goes to the previous hook."""
    import signal
    import sys

    from simulator.cli.startup import Terminated, redeliver_interrupts

    class Raises:
        def __init__(self, exc: BaseException) -> None:
            self.exc = exc

        def __del__(self) -> None:          # Python cannot raise from here: the exception is "unraisable"
            raise self.exc

    got: list[int] = []
    other: list[type] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: other.append(type(u.exc_value)))
    redeliver_interrupts()                  # wraps the hook above (monkeypatch restores the original)
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.signal(sig, lambda signum, frame: got.append(signum))
        try:
            Raises(Terminated() if sig == signal.SIGTERM else KeyboardInterrupt())   # dropped at once
            Raises(ValueError("not an interrupt"))
        finally:
            signal.signal(sig, previous)
    assert got == [signal.SIGINT, signal.SIGTERM]
    assert other == [ValueError, ValueError]


def test_ctrl_c_during_start_up_is_one_line(tmp_path: Path) -> None:
    """A Ctrl-C while the CLI imports pandas and scipy printed the traceback of that import."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(base(num_requests=200_000)))
    # The Ctrl-C goes in once numpy's extension is loaded: inside the imports, after the interpreter's own
    # start-up (a SIGINT during the interpreter's start-up ends Python before any code of ours runs). The
    # run is long (seconds even on the compiled engine), so that on a busy machine, where this test may
    # be scheduled late, the CLI is still importing or simulating, never done, when the signal lands.
    returncode, stderr, _, _ = _interrupt(["simulate", str(scenario), "--no-progress"],
                                          when_mapped="_multiarray_umath")
    assert returncode == 130, (returncode, stderr)
    assert stderr.strip().splitlines() == ["error: interrupted"]


def test_ctrl_c_in_a_two_worker_plan_is_one_line_and_ends_the_workers(tmp_path: Path) -> None:
    """With two worker processes a Ctrl-C printed dozens of worker tracebacks and waited for the running
    searches; now the workers ignore it, the parent ends them, and one line is printed."""
    plan = {"scenario": base(num_requests=100),
            "candidates": [{"name": f"c{i}", "price_per_gpu_hour": 1.0, "set": {"scheduler.max_num_seqs": 2 + i}}
                           for i in range(6)],
            "slo": {"ttft_p99_ms": 100}, "regions": [{"name": "r", "rtt_ms": {"r": 1}}],
            "forecast": [{"quarter": q, "region": "r", "peak_rps": 50} for q in ("Q1", "Q2", "Q3", "Q4", "Q5", "Q6")],
            "simulation": {"num_requests": 50000, "max_replicas": 64}}   # minutes of work: still running at the Ctrl-C
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    out = tmp_path / "out"
    returncode, stderr, delay, children = _interrupt(["plan", str(path), "--workers", "2", "--no-progress",
                                                      "--out", str(out)], when_workers=2)
    assert returncode == 130, (returncode, stderr)
    assert stderr.strip().splitlines() == ["error: interrupted"], stderr
    assert not out.exists()
    assert delay < PATIENCE_S / 2   # not the minutes of searching left (a busy machine slows the stop too)
    assert len(children) >= 2   # the worker processes were running ...
    assert _all_end(children)   # ... and are gone


def _long_plan(tmp_path: Path) -> Path:
    plan = {"scenario": base(num_requests=100),
            "candidates": [{"name": f"c{i}", "price_per_gpu_hour": 1.0, "set": {"scheduler.max_num_seqs": 2 + i}}
                           for i in range(6)],
            "slo": {"ttft_p99_ms": 100}, "regions": [{"name": "r", "rtt_ms": {"r": 1}}],
            "forecast": [{"quarter": q, "region": "r", "peak_rps": 50} for q in ("Q1", "Q2", "Q3", "Q4", "Q5", "Q6")],
            "simulation": {"num_requests": 50000, "max_replicas": 64}}   # minutes of work
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def test_sigterm_stops_a_two_worker_plan_like_ctrl_c(tmp_path: Path) -> None:
    """``kill`` (SIGTERM, as ``timeout`` and cancelled CI jobs send) ended the planner at once but left its
    workers running their searches and then waiting for tasks forever; now it stops the plan as a Ctrl-C
    does: one line, status 143, the workers ended, nothing written."""
    out = tmp_path / "out"
    returncode, stderr, delay, procs = _interrupt(["plan", str(_long_plan(tmp_path)), "--workers", "2",
                                                   "--no-progress", "--out", str(out)], "SIGTERM", group=False,
                                                  when_workers=2)
    assert returncode == 143, (returncode, stderr)
    assert stderr.strip().splitlines() == ["error: terminated"], stderr
    assert delay < PATIENCE_S / 2 and not out.exists()
    assert len(procs) >= 2
    assert _all_end(procs)


def test_the_workers_of_a_killed_plan_end(tmp_path: Path) -> None:
    """A planner killed outright (SIGKILL, the out-of-memory killer) cannot end its workers: each checks
    every second that its planner is still there, and ends when it is not."""
    returncode, _, _, procs = _interrupt(["plan", str(_long_plan(tmp_path)), "--workers", "2", "--no-progress",
                                          "--out", str(tmp_path / "out")], "SIGKILL", group=False, when_workers=2)
    assert returncode == -9
    assert len(procs) >= 2
    assert _all_end(procs)


def test_stopping_a_worker_pool_waits_for_its_manager_thread() -> None:
    """An interrupted two-worker plan sometimes printed ``OSError: Bad file descriptor`` from Python's exit
    hook for process pools, which wrote to a wake-up pipe the pool's manager thread was closing at that
    moment; stopping a pool now waits for that thread, so the hook finds the pipe already closed."""
    import multiprocessing

    from simulator.planner.backends import _ignore_sigint, _stop, _WorkerPool

    pool = _WorkerPool(max_workers=2, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_sigint)
    futures = [pool.submit(time.sleep, 30) for _ in range(3)]
    deadline = time.perf_counter() + 30
    while not any(f.running() for f in futures) and time.perf_counter() < deadline:
        time.sleep(0.05)
    manager = pool._executor_manager_thread
    assert manager is not None and manager.is_alive()
    _stop(pool)
    assert not manager.is_alive()


@pytest.mark.parametrize("text, key, lines", [
    ("seed: 1\nnum_requests: 10\nseed: 9\n", "seed", "lines 1 and 3"),
    ("scheduler:\n  block_size: 16\n  max_num_seqs: 8\n  block_size: 32\n", "block_size", "lines 2 and 4"),
    ("deployment: {replicas: 1, replicas: 2}\n", "replicas", "lines 1 and 1"),
    ("a: 1\n'a': 2\n", "a", "lines 1 and 2"),
])
def test_a_key_given_twice_is_refused(tmp_path: Path, text: str, key: str, lines: str) -> None:
    """YAML loaders keep the last of two equal keys silently (a scenario ran with seed 9 while its first
    line said 1); now it is one line naming the key and both lines."""
    from test_errors import assert_one_error_line, run_cli

    path = tmp_path / "dup.yaml"
    path.write_text(text)
    assert_one_error_line(run_cli("simulate", str(path)), repr(key), "key given twice", lines)


def test_equal_keys_in_different_mappings_are_fine() -> None:
    from simulator.scenario.files import parse_yaml

    assert parse_yaml("a: 1\nb: {a: 2, c: [{a: 3}, {a: 4}]}\nc: a\n", "x") == {
        "a": 1, "b": {"a": 2, "c": [{"a": 3}, {"a": 4}]}, "c": "a"}


@pytest.mark.parametrize("override", ["workload.arrival.rate_per_s=200", "max_sim_time_s=1.0e-6"])
def test_the_text_summary_of_a_run_where_nothing_completes_in_the_window(override: str) -> None:
    """An overloaded run with no request completing inside its window (offered/served undefined) crashed
    the text summary with an internal error; now it warns that the run is unstable and exits 0."""
    from test_errors import run_cli

    proc = run_cli("simulate", str(REPO / "examples" / "chat-h100.yaml"), "--set", "num_requests=200", "--set",
                   "warmup_s=0", "--set", override, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "no request completed in the window" in proc.stdout


@pytest.mark.parametrize("override, words", [
    ("scheduler.swap_space_gib=1.0e+300", ("scheduler.swap_space_gib = 1e+300", "at most 65536")),
    ("scheduler.max_wait_ms=1.0e+300", ("scheduler.max_wait_ms = 1e+300", "at most")),
    ("name=" + "x" * 300, ("name = ", "at most 256 characters")),
])
def test_limits_of_swap_space_waits_and_names(override: str, words: tuple[str, ...]) -> None:
    from test_errors import assert_one_error_line, run_cli

    assert_one_error_line(run_cli("simulate", str(REPO / "examples" / "chat-h100.yaml"), "--set", override), *words)


# -- findings of a CLI fuzz (profiles show, duplicate names, peak_flops keys, messages naming the field) --
def header_only_table_profile(tmp_path: Path) -> Path:
    """A copy of the l40s profile whose ops.csv holds its header alone (the checksum updated to match): an
    empty table is legitimate (the datasheet comparison builds its table model from one on purpose)."""
    from simulator.cost.op_table import file_sha256

    src = REPO / "hwprofiles" / "l40s"
    folder = tmp_path / "empty-table"
    folder.mkdir()
    import gzip

    (folder / "ops.csv").write_text(gzip.decompress((src / "ops.csv.gz").read_bytes()).decode().splitlines()[0] + "\n")
    profile = yaml.safe_load((src / "profile.yaml").read_text())
    profile["table"], profile["table_sha256"] = "ops.csv", file_sha256(folder / "ops.csv")
    (folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    return folder


def test_profiles_show_of_a_header_only_table_says_it_has_no_rows(tmp_path: Path) -> None:
    """`profiles show` crashed with KeyError 'family' on a table with no rows; now it shows the profile and
    says the table has no rows (no fit error to report)."""
    from test_errors import run_cli

    from simulator.report.profile_report import family_report, op_report

    folder = header_only_table_profile(tmp_path)
    assert op_report(load_profile(str(folder))).empty and family_report(load_profile(str(folder))).empty
    proc = run_cli("profiles", "show", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and proc.stderr == ""
    assert "has no rows" in proc.stdout and "fit error: n/a" in proc.stdout


FLEET_AB = {"regions": [{"name": "a", "replicas": 1}, {"name": "b", "replicas": 1}],
            "clients": [{"name": "c", "rtt_ms": {"a": 10, "b": 20}}]}


@pytest.mark.parametrize("top, field, name", [
    ({"fleet": {**FLEET_AB, "regions": [{"name": "a", "replicas": 1}, {"name": "a", "replicas": 2}],
                "clients": [{"name": "c", "rtt_ms": {"a": 10}}]}}, "fleet.regions[1].name", "a"),
    ({"fleet": {**FLEET_AB, "clients": [{"name": "c", "rtt_ms": {"a": 10, "b": 20}},
                                        {"name": "c", "rtt_ms": {"a": 30, "b": 5}}]}}, "fleet.clients[1].name", "c"),
    ({"pipeline": {"pre": [{"name": "tok", "latency_ms": 1}, {"name": "rag", "latency_ms": 5},
                           {"name": "tok", "latency_ms": 2}]}}, "pipeline.pre[2].name", "tok"),
    ({"pipeline": {"post": [{"name": "filter", "latency_ms": 1}, {"name": "filter", "latency_ms": 1}]}},
     "pipeline.post[1].name", "filter"),
])
def test_a_name_given_twice_in_a_list_is_refused(top: dict[str, Any], field: str, name: str) -> None:
    """Two regions, clients or pipeline stages of one name were taken silently (a region's replicas or a
    client's RTTs hidden behind the other's); like tiers and pools, now one error names the list and the name."""
    err = raises(lambda: scenario_from_dict(base(**top)), "has this name too", repr(name))
    assert (err.field, err.value) == (field, name)


def test_names_given_twice_share_one_check_and_message() -> None:
    """Tiers, pools and the plan's regions and candidates say it the same way, naming the field, not the
    whole document."""
    from test_planner import base_plan

    data = base()
    data["workload"]["tiers"] = [{"name": "x", "share": 0.5}, {"name": "x", "share": 0.5}]
    err = raises(lambda: scenario_from_dict(data), "tiers[0] has this name too", "every tier needs its own")
    assert err.field == "workload.tiers[1].name"
    plan = base_plan()
    plan["regions"] = [plan["regions"][0], plan["regions"][0]]
    err = raises(lambda: load_plan(plan), "regions[0] has this name too", "every region needs its own")
    assert (err.field, err.value) == ("regions[1].name", plan["regions"][0]["name"])


def test_peak_flops_keys_are_compute_dtypes_and_the_value_a_mapping() -> None:
    """`peak_flops: {bf17: ...}` was taken and the model run at another dtype's peak (or stopped later with
    "no entry usable"); a scalar said only "Input should be a valid dictionary"."""
    from simulator.scenario.profiles import PEAK_FLOPS_DTYPES

    typo = {**ROOFLINE_HW, "peak_flops": {"bf16": 9.89e14, "bf17": 2e15}}
    err = raises(lambda: load_profile(typo), "unknown compute dtype", "did you mean 'bf16'",
                 "allowed: " + ", ".join(PEAK_FLOPS_DTYPES))
    assert (err.field, err.value) == ("hardware.peak_flops.bf17", 2e15)
    err = raises(lambda: load_profile({**ROOFLINE_HW, "peak_flops": 5}), "must be a mapping of compute dtype",
                 "{bf16: ")
    assert (err.field, err.value) == ("hardware.peak_flops", 5)
    for name in ("h100-sxm", "gb200-datasheet", "cpu-amd-epyc-tiny-llama"):   # tf32, fp4, fp32 keys
        assert load_profile(name).peak_flops


POPULAR = {"distinct_prompts": 50, "zipf_s": 1.0}


@pytest.mark.parametrize("cache, field, value, words", [
    ({"kind": "semantic", "hit_rate": 0.3, "ttl_s": 5}, "response_cache.ttl_s", 5, "applies to kind: exact only"),
    ({"kind": "semantic", "hit_rate": 0.3, "capacity_entries": 10}, "response_cache.capacity_entries", 10,
     "applies to kind: exact only"),
    ({"kind": "exact", "hit_rate": 0.3}, "response_cache.hit_rate", 0.3, "applies to kind: semantic only"),
    ({"kind": "semantic"}, "response_cache.hit_rate", None, "required with kind: semantic"),
])
def test_response_cache_fields_of_the_other_kind_are_refused(cache: dict[str, Any], field: str, value: Any,
                                                             words: str) -> None:
    """A semantic cache took the exact cache's ttl_s and capacity_entries and ignored them; the exact cache's
    errors named the whole response_cache mapping. Each names the field, its value and the kind."""
    data = base(response_cache=cache)
    data["workload"]["prompt_popularity"] = POPULAR
    err = raises(lambda: scenario_from_dict(data), words, cache["kind"])
    assert (err.field, err.value) == (field, value)


def with_changes(data: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each dotted key of ``change`` set (its missing parents created)."""
    for key, val in change.items():
        *parents, last = key.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = val
    return data


@pytest.mark.parametrize("change, field, value, words", [
    ({"num_requests": None}, "num_requests", None, ("give num_requests", "or duration_s", "neither is set")),
    ({"workload.tiers": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.2}]}, "workload.tiers",
     {"a": 0.5, "b": 0.2}, ("tier shares must sum to 1, got 0.7",)),
    ({"slo.task_ttua_p90_ms": 100}, "slo.task_ttua_p90_ms", 100, ("give workload.sessions", "slo.ttua_p90_ms")),
    ({"workload.tiers": [{"name": "a", "share": 1, "slo": {"task_ttua_p50_ms": 100}}]},
     "workload.tiers.0.slo.task_ttua_p50_ms", 100, ("give workload.sessions",)),
    ({"response_cache": {"kind": "exact"}}, "response_cache.kind", "exact", ("give workload.prompt_popularity",)),
    ({"coalescing": {"window_ms": 10}}, "coalescing", {"window_ms": 10}, ("give workload.prompt_popularity",)),
    ({"workload.output_tokens": None}, "workload.output_tokens", None, ("required unless a trace",)),
])
def test_checks_across_fields_name_the_field_not_the_whole_document(change: dict[str, Any], field: str, value: Any,
                                                                    words: tuple[str, ...]) -> None:
    """These errors printed the whole scenario (or workload) mapping as the value; now the field and its value."""
    data = with_changes(base(), change)
    err = raises(lambda: scenario_from_dict(data), *words)
    assert (err.field, err.value) == (field, value)
    assert "{'name'" not in str(err) and "'workload'" not in str(err)


def test_an_empty_set_value_of_num_requests_names_it() -> None:
    from test_errors import assert_one_error_line, run_cli

    assert_one_error_line(run_cli("simulate", str(REPO / "examples" / "chat-h100.yaml"), "--set", "num_requests="),
                          "error: num_requests = None: ", "give num_requests", "duration_s")


@pytest.mark.parametrize("change, field, words", [
    ({"seed": 10**20}, "seed", "must be between 0 and 2^62"),
    ({"num_requests": 10**20}, "num_requests", "must be between 1 and 1,000,000"),
    ({"client.max_tokens": -(10**20)}, "client.max_tokens", "must be between 1 and 16,777,216"),
    ({"workload.prompt_tokens": {"dist": "lognormal", "mean": 32, "sigma": 1, "max": 10**20}},
     "workload.prompt_tokens.max", "must be between 1 and 16,777,216"),
    ({"engine": {"preset": "vllm-v1", "cuda_graph": {"capture_sizes": [1, 10**20]}}},
     "engine.cuda_graph.capture_sizes.1", "must be between 1 and 16,777,216"),
    ({"hardware": {**CONSTANT_HW, "interconnect": {"bandwidth_bytes_per_s": 1e11, "domain_gpus": 10**20}}},
     "hardware.interconnect.domain_gpus", "must be between 1 and 2^62"),
])
def test_an_integer_past_2_62_is_told_the_fields_own_bounds(change: dict[str, Any], field: str, words: str) -> None:
    """An integer past +-2^62 was told "must be between -2^62 and 2^62" even where the field allows far less
    (an optional field checks its own bounds after that one) or nothing negative."""
    data = with_changes(base(), change)
    err = raises(lambda: simulate(scenario_from_dict(data)), words)
    assert err.field == field and "-2^62" not in str(err)


@pytest.mark.parametrize("args, words", [
    (("aiconfigurator", "--framework", "ollama"), ("--framework = 'ollama'", "allowed: vllm, sglang, trtllm")),
    (("default", "--framework", "sglang"), ("--framework = 'sglang'", "applies to import-profile aiconfigurator only")),
    (("vidur", "--system", "l40s"), ("--system = 'l40s'", "aiconfigurator and default only, not vidur")),
    (("default", "--gpu", "a100"), ("--gpu = 'a100'", "applies to import-profile vidur only")),
])
def test_import_profile_options_are_checked_and_none_is_ignored(tmp_path: Path, args: tuple[str, ...],
                                                                words: tuple[str, ...]) -> None:
    """`--framework ollama` was not checked (the error named a `--source` option that does not exist), and an
    option of another source (`default --framework sglang`) was ignored silently."""
    from test_errors import assert_one_error_line, run_cli

    assert_one_error_line(run_cli("import-profile", *args, "--out", str(tmp_path / "out")), *words)
    assert not (tmp_path / "out").exists()


def test_the_aiconfigurator_database_errors_name_the_wheel_option(tmp_path: Path) -> None:
    from calibrate.importers import AicDatabase

    (tmp_path / "notes.txt").write_text("x")
    assert raises(lambda: AicDatabase(tmp_path / "notes.txt"), "not an aiconfigurator-core wheel").field == "--wheel"
    assert raises(lambda: AicDatabase(tmp_path), "has no systems/data folder").field == "--wheel"


def test_memory_the_engine_cannot_use_is_named_as_its_own_field() -> None:
    """A huge hardware.non_torch_memory_bytes was reported as "activations" of the model; now the field is
    named, and a model that does not fit shows the three parts apart."""
    hw = {"cost_model": "constant", "step_time_s": 0.01, "memory_bytes": 80 * 2**30, "non_torch_memory_bytes": 1e30}
    err = raises(lambda: simulate(scenario_from_dict(base(hardware=hw))), "leaves nothing of the", "usable")
    assert (err.field, err.value) == ("hardware.non_torch_memory_bytes", 1e30)
    hw = {**hw, "memory_bytes": 4 * 2**30, "non_torch_memory_bytes": 2 * 2**30}
    err = raises(lambda: simulate(scenario_from_dict(base(model="llama-3-8b", hardware=hw))), "does not fit",
                 "+ non-torch memory 2.0 GiB (hardware.non_torch_memory_bytes)")
    assert err.field == "model"


@pytest.mark.parametrize("item, words", [
    (".=5", "the key path '.' has an empty name"),
    ("a..b=5", "the key path 'a..b' has an empty name"),
    ("seed.=5", "the key path 'seed.' has an empty name"),
    ("=5", "the key path '' is empty"),
])
def test_an_override_key_with_an_empty_name_is_refused(item: str, words: str) -> None:
    """`--set .=5` set a field named '' and the error printed the resulting mapping ("scenario = {'': 5}:
    unknown field"); now the key path itself is refused, from the CLI and from a mapping of overrides."""
    from test_errors import assert_one_error_line, run_cli

    err = raises(lambda: parse_overrides([item]), words, "field names joined by dots")
    assert (err.field, err.value) == ("--set", item)
    key = item.partition("=")[0]
    raises(lambda: scenario_from_dict(base()).with_overrides({key: 5}), words)
    if item == ".=5":
        assert_one_error_line(run_cli("simulate", str(REPO / "examples" / "chat-h100.yaml"), "--set", item),
                              "error: --set = '.=5': the key path '.' has an empty name")


def test_a_directory_or_a_device_given_as_a_file_is_called_what_it_is(tmp_path: Path) -> None:
    """A directory or /dev/null given as the scenario, plan, trace or profile said "file not found" (or "no such
    hardware profile"); now the error says it is a directory, or not a regular file."""
    from test_errors import assert_one_error_line, run_cli

    assert_one_error_line(run_cli("simulate", str(tmp_path)), "scenario = ", "a directory, not a scenario file")
    assert_one_error_line(run_cli("simulate", "/dev/null"), "scenario = '/dev/null'", "not a regular file")
    assert_one_error_line(run_cli("profiles", "show", str(tmp_path)), "a directory without a profile.yaml")
    assert_one_error_line(run_cli("profiles", "show", "/dev/null"), "profile = '/dev/null'", "not a regular file")
    raises(lambda: load_plan(tmp_path), "plan = ", "a directory, not a plan file")
    raises(lambda: load_profile("/dev/null"), "not a regular file", "hardware profile")
    data = base(num_requests=None, workload={"arrival": {"process": "trace", "path": str(tmp_path),
                                                         "format": "azure"}})
    raises(lambda: simulate(scenario_from_dict(data)), "a directory, not a trace file")
    raises(lambda: load_scenario(tmp_path / "missing.yaml"), "file not found")


def test_an_error_raised_in_a_planner_worker_reaches_the_plan_whole() -> None:
    """A ScenarioError raised in a worker process (a cell whose simulation refuses its workload) is pickled
    back to the planner; it used to lose its parts on the way and break the worker pool ("internal error:
    BrokenProcessPool") instead of printing its one line."""
    import pickle

    err = pickle.loads(pickle.dumps(ScenarioError("workload.prompt_tokens", {"min": 1, "max": 2}, "too narrow")))
    assert (type(err), err.field, err.value, err.message) == (ScenarioError, "workload.prompt_tokens",
                                                              {"min": 1, "max": 2}, "too narrow")
    assert str(err) == "workload.prompt_tokens = {'min': 1, 'max': 2}: too narrow"


NARROW = {"dist": "lognormal", "mean": 32, "sigma": 0.1, "min": 1000, "max": 1001}


def test_a_length_range_no_draw_falls_into_names_the_distribution() -> None:
    """Lengths outside min/max are drawn again; when almost none fall inside, the error named ``workload =
    (1000, 1001)``; it names the distribution's field and its settings now."""
    data = base(workload={**BASE["workload"], "prompt_tokens": NARROW})
    err = raises(lambda: simulate(scenario_from_dict(data)), "almost every draw falls outside [1000, 1001]",
                 "'mean': 32")
    assert err.field == "workload.prompt_tokens"


def test_a_cell_whose_simulation_is_refused_is_named() -> None:
    """A refusal that only the simulation of a cell finds names the forecast row and the candidate."""
    from simulator.planner import plan

    scenario = base(workload={**BASE["workload"], "prompt_tokens": NARROW})
    data = {"scenario": scenario, "candidates": [{"name": "c", "price_per_gpu_hour": 1.0}],
            "slo": {"ttft_p99_ms": 100}, "regions": [{"name": "r", "rtt_ms": {"r": 1}}],
            "forecast": [{"quarter": "Q1", "region": "r", "peak_rps": 1}]}
    err = raises(lambda: plan(load_plan(data), workers=1), "almost every draw", within_s=30)
    assert err.field == "forecast (quarter Q1, region r), candidate c: workload.prompt_tokens"


def small_plan(**top: Any) -> dict[str, Any]:
    """A valid one-region, one-candidate plan on the constant-time scenario of :func:`base`."""
    data = {"scenario": base(), "candidates": [{"name": "c", "price_per_gpu_hour": 1.0}],
            "slo": {"ttft_p99_ms": 100}, "regions": [{"name": "r", "rtt_ms": {"r": 1}}],
            "forecast": [{"quarter": "Q1", "region": "r", "peak_rps": 1}]}
    data.update(top)
    return copy.deepcopy(data)


def test_a_name_given_twice_in_a_plan_names_the_entry() -> None:
    """Two candidates (or regions) of one name printed the whole plan as the value; now the entry and
    the name."""
    cands = [{"name": "a", "price_per_gpu_hour": 1.0}, {"name": "b", "price_per_gpu_hour": 1.0},
             {"name": "a", "price_per_gpu_hour": 2.0}]
    err = raises(lambda: load_plan(small_plan(candidates=cands)), "candidates[2].name = 'a'",
                 "candidates[0] has this name too")
    assert (err.field, err.value) == ("candidates[2].name", "a")
    regions = [{"name": "r", "rtt_ms": {"r": 1}}, {"name": "r", "rtt_ms": {"r": 2}}]
    err = raises(lambda: load_plan(small_plan(regions=regions)), "regions[0] has this name too")
    assert (err.field, err.value) == ("regions[1].name", "r")


@pytest.mark.parametrize("peak", [1e-9, 1.5e-6])
def test_a_forecast_peak_too_low_to_simulate_names_peak_rps(peak: float) -> None:
    """A peak so low that the cell's requests would arrive over more than the longest simulated span blamed
    warmup_s (derived from it) or workload.arrival.rate_per_s; it names the forecast row's peak_rps."""
    from simulator.planner import build_tasks

    data = small_plan(forecast=[{"quarter": "Q1", "region": "r", "peak_rps": peak}])
    err = raises(lambda: build_tasks(load_plan(data)), "the longest simulated span is 1e+08 s",
                 "raise peak_rps or lower simulation.num_requests")
    assert (err.field, err.value) == ("forecast (quarter Q1, region r).peak_rps", peak)


LOGNORMAL = {"dist": "lognormal", "mean": 100, "sigma": 0.5, "min": 20, "max": 400}


@pytest.mark.parametrize("lengths, given, field, words", [
    ({"prompt_tokens": LOGNORMAL}, {"avg_prompt_tokens": 5000}, ".avg_prompt_tokens",
     ("= 5000.0", "must be below the base scenario's workload.prompt_tokens.max=400")),
    ({"output_tokens": {"dist": "geometric", "mean": 8, "max": 64}}, {"avg_output_tokens": 64}, ".avg_output_tokens",
     ("must be below the base scenario's workload.output_tokens.max=64",)),
    ({"prompt_tokens": LOGNORMAL}, {"avg_prompt_tokens": 10}, ".avg_prompt_tokens",
     ("must be above the base scenario's workload.prompt_tokens.min=20",)),
    ({"prompt_tokens": {"dist": "uniform", "min": 1, "max": 30}}, {"avg_prompt_tokens": 10}, ".avg_prompt_tokens",
     ("cannot rescale the base scenario's uniform distribution (workload.prompt_tokens)",)),
    ({}, {"avg_prompt_tokens": 1500, "avg_output_tokens": 1000}, "",
     ("1,500 prompt + 1,000 output = 2,500 tokens", "candidate c's max_model_len=2,048")),
    ({}, {"avg_output_tokens": 2040}, "",
     ("32 prompt (the base scenario's) + 2,040 output = 2,072 tokens", "max_model_len=2,048")),
])
def test_a_forecast_mean_length_the_cell_cannot_simulate_is_refused(lengths: dict[str, Any], given: dict[str, Any],
                                                                    field: str, words: tuple[str, ...]) -> None:
    """A forecast mean above the base distribution's max was costed as given but simulated below it (the draws
    stay under max); one longer than the model's context was accepted. Both name the row and column now,
    as does a distribution that cannot be rescaled (that one was found only when the cells were built)."""
    data = small_plan(forecast=[{"quarter": "Q1", "region": "r", "peak_rps": 1, **given}])
    data["scenario"]["workload"].update(lengths)
    err = raises(lambda: load_plan(data), *words)
    assert err.field == "forecast (quarter Q1, region r)" + field


@pytest.mark.parametrize("scenario, candidate, field, words", [
    ({"network": {"clients": [{"rtt_ms": 50}]}}, {}, "scenario.network",
     ("the plan gives the client network (regions[].rtt_ms", "remove network from the base scenario")),
    ({"max_sim_time_s": 5}, {}, "scenario.max_sim_time_s",
     ("runs every simulation until its last request ends", "remove max_sim_time_s")),
    ({}, {"deployment.replicas": 4}, "candidates[0] (c).set.deployment.replicas",
     ("the planner searches every candidate's replica count", "simulation.max_replicas")),
    ({}, {"deployment": {"replicas": 4}}, "candidates[0] (c).set.deployment.replicas", ("replica count",)),
    ({}, {"deployment.pools": [{"name": "a"}, {"name": "b", "replicas": 3}],
          "deployment.pool_routing": {"by": "prompt_tokens", "thresholds": [{"max_prompt_tokens": 16, "pool": "a"}],
                                      "default": "b"}},
     "candidates[0] (c).set.deployment.pools.1.replicas", ("each pool's",)),
])
def test_what_a_plan_replaces_is_refused_not_dropped(scenario: dict[str, Any], candidate: dict[str, Any], field: str,
                                                     words: tuple[str, ...]) -> None:
    """A base scenario's network or max_sim_time_s, and a candidate's replica count, were dropped from every
    cell without a word (the plan's regions give the RTTs, the planner runs to the end and searches the
    count); each is an error naming it now."""
    data = small_plan(scenario=base(**scenario))
    data["candidates"][0]["set"] = candidate
    err = raises(lambda: load_plan(data), *words)
    assert err.field == field


@pytest.mark.parametrize("top, field, words", [
    ({"warmup_s": 100}, "warmup_s", ("warmup_s = 100.0: leaves no request to measure",
                                     "[warmup_s, last arrival - cooldown_s] = [100, ")),
    ({"cooldown_s": 100}, "cooldown_s", ("cooldown_s = 100.0: leaves no request",)),
    ({"warmup_s": 3, "cooldown_s": 3}, "warmup_s + cooldown_s", ("warmup_s + cooldown_s = 6.0: leave no request",)),
    ({"warmup_s": 1e6, "workload": {**BASE["workload"], "arrival": {"process": "closed_loop", "concurrency": 4}}},
     "warmup_s", ("(the steady part of the closed loop", "= [1e+06, ")),
])
def test_a_warmup_or_cooldown_covering_the_run_is_an_error(top: dict[str, Any], field: str,
                                                          words: tuple[str, ...]) -> None:
    """warmup_s and cooldown_s that leave no arrival in the measurement window were replaced by the whole
    run (start-up included) without a word; the run is now refused, naming them and the empty window."""
    err = raises(lambda: simulate(scenario_from_dict(base(**top))).summary, *words,
                 "lower warmup_s or cooldown_s, or give more requests")
    assert err.field == field


def test_a_warmup_covering_the_duration_is_refused_before_the_run() -> None:
    """Every request arrives before duration_s: warmup_s + cooldown_s at or beyond it is refused with the
    scenario."""
    err = raises(lambda: scenario_from_dict(base(num_requests=None, duration_s=10, warmup_s=4, cooldown_s=6)),
                 "warmup_s + cooldown_s = 10 s cover the whole duration_s (10 s")
    assert (err.field, err.value) == ("warmup_s", 4)
    err = raises(lambda: scenario_from_dict(base(num_requests=None, duration_s=10, cooldown_s=12)), "cooldown_s = 12")
    assert err.field == "cooldown_s"
    scenario_from_dict(base(num_requests=None, duration_s=10, warmup_s=4, cooldown_s=5.9))


def test_plan_warmup_and_cooldown_fractions_must_leave_a_window() -> None:
    """A plan's warmup_fraction + cooldown_fraction of 1 or more was accepted (every run then measured as a
    whole); a sum below 1 whose window a run's arrivals leave empty names the cell and the fractions."""
    from simulator.planner import plan

    data = small_plan(simulation={"warmup_fraction": 0.6, "cooldown_fraction": 0.45})
    err = raises(lambda: load_plan(data), "cooldown_fraction = 0.45: + warmup_fraction (0.6) = 1.05",
                 "their sum must be below 1")
    assert (err.field, err.value) == ("simulation.cooldown_fraction", 0.45)
    data = small_plan(simulation={"num_requests": 200, "warmup_fraction": 0.89, "cooldown_fraction": 0.1, "seed": 2,
                                  "replications": 1, "max_replicas": 4})
    err = raises(lambda: plan(load_plan(data), workers=1), "leave no request to measure",
                 "the planner sets warmup_s and cooldown_s to simulation.warmup_fraction and cooldown_fraction",
                 within_s=30)
    assert err.field == "forecast (quarter Q1, region r), candidate c: warmup_s + cooldown_s"


def test_the_base_mean_a_forecast_row_is_checked_with_names_the_base_scenario() -> None:
    """A row giving one mean length is checked with the base scenario's other mean; a length file that
    cannot be read for it is named as the base scenario's field (it was named without ``scenario.``)."""
    data = small_plan(forecast=[{"quarter": "Q1", "region": "r", "peak_rps": 1, "avg_prompt_tokens": 10}])
    data["scenario"]["workload"]["output_tokens"] = {"dist": "empirical", "path": "nope.csv", "column": "n"}
    assert raises(lambda: load_plan(data), "file not found").field == "scenario.workload.output_tokens.path"
