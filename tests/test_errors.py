"""Bad input ends in one actionable line, never a traceback.

Every case below is checked twice: through the Python API (``scenario_from_dict`` + ``simulate``
raise a :class:`ScenarioError` whose text names the field and the value) and through the CLI
(``llmplan simulate`` prints exactly one line starting with ``error:`` on stderr and exits 2).
Every scenario is tiny (at most 200 requests), so the file runs in seconds.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from simulator import ScenarioError, load_profile, load_scenario, scenario_from_dict, simulate
from simulator.scenario.models import MODEL_PRESETS

REPO = Path(__file__).resolve().parents[1]
GIB = 2**30

MINIMAL: dict[str, Any] = {
    "num_requests": 100,
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "workload": {
        "arrival": {"process": "poisson", "rate_per_s": 5},
        "prompt_tokens": {"dist": "fixed", "value": 100},
        "output_tokens": {"dist": "fixed", "value": 10},
    },
}


def minimal(**top: Any) -> dict[str, Any]:
    """A fresh copy of the minimal valid scenario, with top-level fields replaced."""
    data = copy.deepcopy(MINIMAL)
    data.update(top)
    return data


def with_workload(**fields: Any) -> dict[str, Any]:
    data = minimal()
    data["workload"].update(fields)
    return data


def with_arrival(**fields: Any) -> dict[str, Any]:
    data = minimal()
    data["workload"]["arrival"].update(fields)
    return data


def trace_scenario(path: str, fmt: str) -> dict[str, Any]:
    data = minimal()
    del data["num_requests"]
    data["workload"] = {"arrival": {"process": "trace", "path": path, "format": fmt}}
    return data


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for CLI subprocesses: no debug tracebacks, no terminal width override."""
    env = {k: v for k, v in os.environ.items() if k not in ("LLMPLAN_DEBUG", "COLUMNS", "LINES")}
    env.update(extra)
    return env


def run_cli(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simulator.cli", *args], cwd=cwd, env=cli_env(**env),
                          capture_output=True, text=True, timeout=120)


def assert_one_error_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, nothing on stdout, no traceback, exactly one stderr line ``error: ...`` naming each needle."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


# -- the cases ---------------------------------------------------------------------------------------
def _write(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return name


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_ROWS = ("2023-11-16 18:15:46.6805900,374,44\n"
              "2023-11-16 18:15:50.9951690,396,109\n")
MOONCAKE_OK = '{"timestamp": 0, "input_length": 100, "output_length": 10}\n'


@dataclass
class Case:
    """A bad scenario: ``build(tmp_path)`` writes any files it needs and returns the scenario dict."""

    id: str
    build: Callable[[Path], dict[str, Any]]
    field: str
    """A substring of ``ScenarioError.field``."""
    needles: tuple[str, ...] = field(default_factory=tuple)
    """Substrings of the message (the value, what is allowed, hints)."""
    value: Callable[[Path], Any] | None = None
    """The expected ``ScenarioError.value`` (for values too long to check in the message)."""


def _known_profiles() -> tuple[str, ...]:
    from simulator import available_profiles

    return tuple(sorted(available_profiles()))


def _fit_sizes() -> tuple[str, str]:
    """Llama-3-70B's bf16 weights and the usable memory of one H100 SXM at 0.9, in GiB (one decimal)."""
    weights = MODEL_PRESETS["llama-3-70b"].num_params * 2 / GIB
    usable = load_profile("h100-sxm").memory_bytes * 0.9 / GIB
    return f"{weights:.1f} GiB", f"{usable:.1f} GiB"


CASES = [
    Case("unknown-top-level-field", lambda t: minimal(replicas=2), "replicas",
         ("replicas = 2", "unknown field", "allowed:", "deployment", "num_requests")),
    Case("unknown-nested-field", lambda t: minimal(scheduler={"max_num_seq": 64}), "scheduler.max_num_seq",
         ("scheduler.max_num_seq = 64", "unknown field", "did you mean 'max_num_seqs'")),
    Case("negative-rate", lambda t: with_arrival(rate_per_s=-3), "workload.arrival.rate_per_s",
         ("workload.arrival.rate_per_s = -3", "greater than 0")),
    Case("zero-rate", lambda t: with_arrival(rate_per_s=0), "workload.arrival.rate_per_s",
         ("workload.arrival.rate_per_s = 0", "greater than 0")),
    Case("zero-prompt-length", lambda t: with_workload(prompt_tokens={"dist": "fixed", "value": 0}),
         "workload.prompt_tokens.value", ("workload.prompt_tokens.value = 0", "greater than or equal to 1")),
    Case("negative-output-length", lambda t: with_workload(output_tokens={"dist": "fixed", "value": -5}),
         "workload.output_tokens.value", ("workload.output_tokens.value = -5", "greater than or equal to 1")),
    Case("unknown-arrival-process", lambda t: with_arrival(process="bursty"), "workload.arrival",
         ("'bursty'", "unknown kind", "'poisson'", "'gamma'", "'trace'")),
    Case("unknown-length-dist", lambda t: with_workload(prompt_tokens={"dist": "zipf", "mean": 3}),
         "workload.prompt_tokens", ("'zipf'", "unknown kind", "'lognormal'", "'uniform'")),
    Case("unknown-model", lambda t: minimal(model="gpt-5"), "model",
         ("model = 'gpt-5'", "unknown model preset", *sorted(MODEL_PRESETS))),
    Case("unknown-hardware", lambda t: minimal(hardware="tpu-v9"), "hardware",
         ("hardware = 'tpu-v9'", "no such hardware profile", "known:", *_known_profiles())),
    Case("model-does-not-fit", lambda t: minimal(model="llama-3-70b"), "model",
         ("llama-3-70b", "does not fit", "h100-sxm", *_fit_sizes())),
    Case("batched-tokens-below-num-seqs",
         lambda t: minimal(scheduler={"max_num_seqs": 512, "max_num_batched_tokens": 256}), "scheduler",
         ("max_num_batched_tokens = 256", "below max_num_seqs (512)")),
    Case("uniform-min-above-max",
         lambda t: with_workload(prompt_tokens={"dist": "uniform", "min": 500, "max": 100}),
         "workload.prompt_tokens", ("max = 100: is below min (500)",)),
    Case("prompt-over-context", lambda t: with_workload(prompt_tokens={"dist": "fixed", "value": 9000}),
         "workload.prompt_tokens.value", ("workload.prompt_tokens.value = 9000", "max_model_len=8192")),
    Case("sampled-lengths-over-context",
         lambda t: {**with_workload(prompt_tokens={"dist": "uniform", "min": 7300, "max": 8190},
                                    output_tokens={"dist": "fixed", "value": 1000}), "num_requests": 50},
         "workload", ("exceeds max_model_len=8192", "50 of 50 requests", "over_length")),
    Case("unknown-over-length-mode", lambda t: with_workload(over_length="drop"), "workload.over_length",
         ("'drop'", "'reject'", "'clip'")),
    Case("unknown-trace-format", lambda t: trace_scenario("t.csv", "sharegpt"), "workload.arrival.format",
         ("'sharegpt'", "unknown trace format", "azure, mooncake, observation, openai, requests")),
    Case("missing-trace-file", lambda t: trace_scenario("no_such_trace.csv", "azure"), "workload.arrival.path",
         ("trace file not found",), lambda t: str(t / "no_such_trace.csv")),
    Case("empty-trace-file", lambda t: trace_scenario(_write(t, "empty.csv", ""), "azure"),
         "workload.arrival.path", ("trace file is empty",), lambda t: str(t / "empty.csv")),
    Case("header-only-azure-trace", lambda t: trace_scenario(_write(t, "header.csv", AZURE_HEADER), "azure"),
         "workload.arrival.path", ("trace has no requests",), lambda t: str(t / "header.csv")),
    Case("azure-garbage-timestamp",
         lambda t: trace_scenario(_write(t, "bad_ts.csv", AZURE_HEADER + AZURE_ROWS + "yesterday,100,10\n"), "azure"),
         "bad_ts.csv row 4 column TIMESTAMP", ("'yesterday'", "not a valid value")),
    Case("azure-garbage-token-count",
         lambda t: trace_scenario(_write(t, "bad_tok.csv", AZURE_HEADER + "2023-11-16 18:15:46.68,lots,44\n"
                                         + AZURE_ROWS), "azure"),
         "bad_tok.csv row 2 column ContextTokens", ("'lots'", "not a valid value")),
    Case("azure-missing-column",
         lambda t: trace_scenario(_write(t, "two_cols.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n"),
                                  "azure"),
         "workload.arrival.path", ("lacks column(s) GeneratedTokens", "found TIMESTAMP,ContextTokens"),
         lambda t: str(t / "two_cols.csv")),
    Case("mooncake-bad-json-line",
         lambda t: trace_scenario(_write(t, "bad.jsonl", MOONCAKE_OK * 2 + '{"timestamp": 5, "input_le\n'
                                         + MOONCAKE_OK), "mooncake"),
         "bad.jsonl line 3", ("not a mooncake record", "JSONDecodeError")),
    Case("mooncake-missing-key",
         lambda t: trace_scenario(_write(t, "nokey.jsonl", MOONCAKE_OK + '{"timestamp": 5, "input_length": 10}\n'),
                                  "mooncake"),
         "nokey.jsonl line 2", ("output_length", "not a mooncake record")),
    Case("mooncake-zero-output-length",
         lambda t: trace_scenario(_write(t, "zero.jsonl", MOONCAKE_OK
                                         + '{"timestamp": 5, "input_length": 10, "output_length": 0}\n'), "mooncake"),
         "zero.jsonl", ("line 2 column output_length", "must be >= 1")),
    # -- levers (issue 3): model-level and request-level
    Case("negative-timeout", lambda t: minimal(client={"timeout_s": -1}), "client.timeout_s",
         ("client.timeout_s = -1", "greater than 0")),
    Case("zero-max-tokens", lambda t: minimal(client={"max_tokens": 0}), "client.max_tokens",
         ("client.max_tokens = 0", "greater than or equal to 1")),
    Case("negative-queue-delay", lambda t: minimal(admission={"max_queue_delay_s": -0.5}),
         "admission.max_queue_delay_s", ("admission.max_queue_delay_s = -0.5", "greater than 0")),
    Case("tp-not-dividing-attention-heads", lambda t: minimal(deployment={"tensor_parallel_size": 3}),
         "deployment.tensor_parallel_size", ("deployment.tensor_parallel_size = 3", "num_attention_heads=32")),
    Case("tp-not-dividing-kv-heads",
         lambda t: minimal(model={"name": "gqa-6", "num_layers": 4, "hidden_size": 768, "num_attention_heads": 12,
                                  "num_key_value_heads": 6, "intermediate_size": 2048, "vocab_size": 32000},
                           deployment={"tensor_parallel_size": 4}),
         "deployment.tensor_parallel_size", ("deployment.tensor_parallel_size = 4", "num_key_value_heads=6")),
    Case("unknown-quantization", lambda t: minimal(deployment={"quantization": "awq"}), "deployment.quantization",
         ("'awq'", "unknown quantization", "fp8", "int8", "int4")),
    Case("unknown-kv-cache-dtype", lambda t: minimal(deployment={"kv_cache_dtype": "int2"}),
         "deployment.kv_cache_dtype", ("'int2'", "auto", "fp8")),
    Case("model-does-not-fit-after-quantization",
         lambda t: minimal(model="llama-3-70b", hardware="l40s", deployment={"quantization": "int8"}), "model",
         ("llama-3-70b", "does not fit", "67.7 GiB", "l40s", "tensor_parallel_size")),
    Case("timeout-with-disaggregated-pools",
         lambda t: minimal(scheduler={"policy": "disaggregated"}, client={"timeout_s": 5},
                           deployment={"prefill_replicas": 1, "decode_replicas": 1}),
         "client.timeout_s", ("client.timeout_s = 5", "disaggregated", "max_queue_len")),
    Case("max-tokens-with-sessions",
         lambda t: minimal(client={"max_tokens": 64},
                           workload={**MINIMAL["workload"], "sessions": {"turns": 2, "turn_gap_s": 10}}),
         "client.max_tokens", ("client.max_tokens = 64", "workload.sessions")),
    Case("quantization-with-a-measured-table-profile",
         lambda t: minimal(hardware="h100-sxm-vidur", deployment={"quantization": "int4"}), "deployment.quantization",
         ("'int4'", "cost model 'table'", "h100-sxm-vidur", "roofline")),
    Case("kv-too-small-after-quantization",
         lambda t: minimal(model="llama-3-70b", deployment={"quantization": "fp8"}), "scheduler.max_model_len",
         ("8192", "KV cache holds only 4976 tokens", "kv_cache_dtype")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_api_raises_scenario_error_naming_field_and_value(case: Case, tmp_path: Path) -> None:
    """Validation or simulation of each bad scenario raises ScenarioError (not a pydantic or numpy
    error) whose field and message name what is wrong, the value and what is allowed."""
    data = case.build(tmp_path)
    with pytest.raises(ScenarioError) as info:
        simulate(scenario_from_dict(data, base_dir=tmp_path))
    exc = info.value
    assert case.field in exc.field, (exc.field, str(exc))
    if case.value is not None:
        assert exc.value == case.value(tmp_path)
    text = str(exc)
    assert text.startswith(exc.field + " = ")
    for needle in case.needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    assert "\n" not in text


@pytest.fixture(scope="module")
def cli_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """Run ``llmplan simulate --json`` on every case's scenario file, a few processes at a time
    (each start-up imports pandas and scipy; running them side by side keeps the file fast)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(case: Case) -> tuple[Path, subprocess.CompletedProcess[str]]:
        folder = tmp_path_factory.mktemp(case.id)
        scenario = folder / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(case.build(folder), sort_keys=False))
        return folder, run_cli("simulate", str(scenario), "--json")

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(zip((c.id for c in CASES), pool.map(one, CASES), strict=True))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli_prints_one_error_line_and_exits_2(case: Case, cli_outcomes: dict) -> None:
    """``llmplan simulate`` on each bad scenario file prints one ``error:`` line naming the field and
    the value, exits 2 and shows no traceback; relative trace paths resolve against the file's folder."""
    folder, proc = cli_outcomes[case.id]
    line = assert_one_error_line(proc, case.field, *case.needles)
    if case.value is not None:  # a path value: the folder shows, however long the rest
        assert f"= '{folder}" in line


# -- over-length handling --------------------------------------------------------------------------
def test_over_length_reject_counts_requests_as_rejected() -> None:
    """With ``over_length: reject`` a 9000-token prompt (over llama-3-8b's 8192) is not an error:
    every request is counted as rejected, none completes, and conservation holds."""
    sc = scenario_from_dict(with_workload(prompt_tokens={"dist": "fixed", "value": 9000}, over_length="reject"))
    result = simulate(sc)
    req = result.summary["requests"]
    assert req["arrived"] == 100
    assert req["rejected"] == 100
    assert req["completed"] == 0
    assert req["in_flight"] == 0
    assert (result.requests["status"].astype(str) == "finished_rejected").all()
    assert result.requests["first_token_time"].isna().all()


def test_over_length_reject_rejects_exactly_the_requests_over_the_context() -> None:
    """With sampled lengths straddling the context, exactly the requests whose prompt + output
    exceed max_model_len are rejected; the rest complete normally."""
    data = with_workload(prompt_tokens={"dist": "uniform", "min": 7500, "max": 8190},
                         output_tokens={"dist": "fixed", "value": 500}, over_length="reject")
    data["num_requests"] = 60
    result = simulate(scenario_from_dict(data))
    req = result.requests
    over = (req["num_prompt_tokens"] + req["max_tokens"] > 8192).to_numpy()
    assert 0 < over.sum() < len(req)
    status = req["status"].astype(str).to_numpy()
    np.testing.assert_array_equal(status == "finished_rejected", over)
    assert (status[~over] == "finished_length_capped").all()
    assert result.summary["requests"]["rejected"] == int(over.sum())
    assert result.summary["requests"]["completed"] == int((~over).sum())


def test_over_length_clip_completes_with_shortened_output() -> None:
    """With ``over_length: clip`` a request whose prompt fits but prompt + output does not is served
    with its output clipped to the room left (8192 - 8100 = 92 tokens) and completes."""
    data = with_workload(prompt_tokens={"dist": "fixed", "value": 8100},
                         output_tokens={"dist": "fixed", "value": 200}, over_length="clip")
    data["num_requests"] = 20
    with pytest.raises(ScenarioError, match="max_model_len=8192"):
        simulate(scenario_from_dict({**data, "workload": {**data["workload"], "over_length": "error"}}))
    result = simulate(scenario_from_dict(data))
    req = result.summary["requests"]
    assert req["completed"] == 20 and req["rejected"] == 0
    assert (result.requests["max_tokens"] == 92).all()
    assert (result.requests["num_output_tokens"] == 92).all()


def test_over_length_clip_rejects_prompts_longer_than_the_context() -> None:
    """Clipping shortens outputs only: a 9000-token prompt cannot fit in 8192 whatever the output,
    so under ``clip`` it is rejected rather than served or crashing."""
    sc = scenario_from_dict(with_workload(prompt_tokens={"dist": "fixed", "value": 9000}, over_length="clip"))
    req = simulate(sc).summary["requests"]
    assert req["rejected"] == 100 and req["completed"] == 0 and req["in_flight"] == 0


def test_cli_over_length_reject_reports_rejections_in_json(tmp_path: Path) -> None:
    """The CLI with ``--set workload.over_length=reject`` turns the over-context error into a run whose
    JSON summary counts the requests as rejected."""
    scenario = tmp_path / "long.yaml"
    scenario.write_text(yaml.safe_dump(with_workload(prompt_tokens={"dist": "fixed", "value": 9000})))
    assert_one_error_line(run_cli("simulate", str(scenario), "--json"), "max_model_len=8192", "9000")
    proc = run_cli("simulate", str(scenario), "--json", "--set", "workload.over_length=reject")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["requests"]["rejected"] == 100
    assert summary["requests"]["completed"] == 0


# -- file-level and command-line errors --------------------------------------------------------------
def test_scenario_file_not_found(tmp_path: Path) -> None:
    """A scenario path that does not exist is named in one error line (API and CLI)."""
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ScenarioError, match="file not found"):
        load_scenario(missing)
    assert_one_error_line(run_cli("simulate", str(missing)), "nope.yaml", "file not found")


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    """Unparsable YAML is reported with the file and the line of the problem, not a yaml traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_requests: 10\nmodel: llama-3-8b\nworkload: {arrival: [unclosed\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(bad)
    assert "bad.yaml" in str(info.value) and "not valid YAML" in str(info.value)
    assert_one_error_line(run_cli("simulate", str(bad)), "bad.yaml", "not valid YAML at line")


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    """A YAML file holding a list instead of a mapping is a one-line error."""
    bad = tmp_path / "list.yaml"
    bad.write_text("- model: llama-3-8b\n- hardware: h100-sxm\n")
    assert_one_error_line(run_cli("simulate", str(bad)), "list.yaml", "must be a YAML mapping")


def test_set_without_equals_sign() -> None:
    """``--set`` without ``=`` is named with an example of the right syntax."""
    with pytest.raises(ScenarioError, match=r"key\.path=value"):
        load_scenario(REPO / "examples" / "chat-h100.yaml", ["num_requests"])
    assert_one_error_line(run_cli("simulate", "examples/chat-h100.yaml", "--set", "num_requests"),
                          "--set = 'num_requests'", "expected key.path=value")


def test_set_with_bad_value_is_validated() -> None:
    """A ``--set`` override goes through the same validation as the file: a string rate is named."""
    assert_one_error_line(
        run_cli("simulate", "examples/chat-h100.yaml", "--set", "workload.arrival.rate_per_s=fast"),
        "workload.arrival.rate_per_s = 'fast'", "valid number")


def test_set_into_a_preset_name() -> None:
    """Setting a field inside ``model`` while it is a preset name explains that an inline mapping is needed."""
    assert_one_error_line(run_cli("simulate", "examples/chat-h100.yaml", "--set", "model.num_layers=2"),
                          "model.num_layers", "preset name 'llama-3-8b'")


# -- regressions of defects found and fixed -------------------------------------------------------
def test_cli_error_keeps_bracketed_text(tmp_path: Path) -> None:
    """A value containing ``[old]`` (here a model name) must be printed as given, not eaten as Rich markup."""
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(minimal(model="[old]llama")))
    assert_one_error_line(run_cli("simulate", str(scenario)), "model = '[old]llama'", "unknown model preset")


def test_cli_error_with_closing_tag_text_does_not_crash() -> None:
    """An unknown field named ``[/x]`` is still a one-line error with exit 2."""
    assert_one_error_line(run_cli("simulate", "examples/chat-h100.yaml", "--set", "[/x]=1"),
                          "[/x] = 1", "unknown field")


def test_error_for_a_long_path_keeps_the_file_name(tmp_path: Path) -> None:
    """A missing trace under a deep folder is still named by its file name in the message."""
    deep = tmp_path / ("a_rather_long_folder_name_" * 3) / "nested"
    deep.mkdir(parents=True)
    with pytest.raises(ScenarioError) as info:
        simulate(scenario_from_dict(trace_scenario("requests_2024.csv", "azure"), base_dir=deep))
    assert info.value.value == str(deep / "requests_2024.csv")
    assert "requests_2024.csv" in str(info.value)


def test_trace_row_numbers_agree_between_parse_and_length_errors(tmp_path: Path) -> None:
    """A garbage TIMESTAMP and a zero token count on the same file row must be reported with the same row."""
    bad_ts = tmp_path / "bad_ts.csv"
    bad_ts.write_text(AZURE_HEADER + AZURE_ROWS + "yesterday,100,10\n")
    zero = tmp_path / "zero.csv"
    zero.write_text(AZURE_HEADER + AZURE_ROWS + "2023-11-16 18:15:51.0,0,10\n")
    with pytest.raises(ScenarioError) as ts_info:
        simulate(scenario_from_dict(trace_scenario(bad_ts.name, "azure"), base_dir=tmp_path))
    with pytest.raises(ScenarioError) as zero_info:
        simulate(scenario_from_dict(trace_scenario(zero.name, "azure"), base_dir=tmp_path))
    assert "row 4" in ts_info.value.field
    assert "row 4" in zero_info.value.field


@pytest.mark.parametrize("key, value, field, allowed", [
    ("workload.sessions", {"turns": 2, "turn_gap_s": 1, "bogus": 3}, "workload.sessions.bogus",
     "loop, parallel_tool_calls"),
    ("engine", {"preset": "vllm-v1", "cuda_graph": {"max_size": 3}}, "engine.cuda_graph.max_size",
     "max_capture_size"),
    # a branch of a discriminated union: its own fields (they were not listed)
    ("workload.arrival", {"process": "poisson", "rate_per_s": 1, "rate": 2}, "workload.arrival.rate",
     "allowed: process, rate_per_s"),
    ("workload.prompt_tokens", {"dist": "uniform", "min": 1, "max": 5, "mx": 3}, "workload.prompt_tokens.mx",
     "allowed: dist, max, min"),
    # an item of a list: its model's fields (they were not listed)
    ("workload.tiers", [{"name": "a", "share": 1.0, "prio": 1}], "workload.tiers.0.prio",
     "did you mean 'priority'?); allowed: name, priority, share, slo"),
    ("workload.arrival", {"process": "diurnal", "mean_rate_per_s": 1, "peak_to_mean": 1.5,
                          "bursts": [{"start_s": 0, "duration_s": 1, "multiplier": 2, "x": 1}]},
     "workload.arrival.bursts.0.x", "allowed: duration_s, multiplier, start_s"),
    # a field spelt like a union's tag (trace) is that field, not the tag: it was reported as workload.arrival
    ("workload.arrival", {"process": "closed_loop", "concurrency": 2, "trace": {"path": "x"}},
     "workload.arrival.trace", "replay, think_time_dist"),
])
def test_an_unknown_field_lists_the_allowed_ones(key, value, field, allowed):
    """Sections typed ``X | None``, discriminated unions' branches and list items lost the "allowed: ..."
    list of their unknown-field errors."""
    from conftest import make_scenario

    with pytest.raises(ScenarioError) as info:
        make_scenario(**{key: value})
    assert info.value.field == field
    assert "unknown field" in str(info.value) and "allowed:" in str(info.value) and allowed in str(info.value)


def test_an_error_stays_on_one_line_whatever_its_parts_hold() -> None:
    """A column or file name with a line break (a CSV header cell quoted across lines) is escaped, so the
    CLI's one `error:` line stays one line."""
    from simulator.errors import ScenarioError
    err = ScenarioError("trace.csv\nrow 2", "a\nb", "found ,prompt_tokens\n, and \x00 in 'é 中'")
    assert str(err) == "trace.csv\\nrow 2 = 'a\\nb': found ,prompt_tokens\\n, and \\x00 in 'é 中'"
    assert err.field == "trace.csv\nrow 2" and err.message.endswith("'é 中'")


def test_an_error_whose_field_is_not_text_still_reads() -> None:
    from pathlib import Path

    from simulator.errors import ScenarioError
    assert str(ScenarioError(Path("a/b.csv"), 1, "bad")) == "a/b.csv = 1: bad"   # type: ignore[arg-type]
