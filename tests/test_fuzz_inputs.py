"""Issue 19, as a property: whatever a scenario or plan file holds, the CLI either answers or refuses cleanly.

Hypothesis takes the documents in ``examples/`` (scenarios, and a plan cut down from
``plan-fy27.yaml``), shrunk to a few dozen requests, and mutates one to three fields: a bad type, a
boolean, a non-finite or huge number, a control character, a missing field, an unknown field. The CLI
then runs in-process (``llmplan simulate --json --out`` or ``llmplan plan --out``), and must end in one of
two ways, within a time bound:

* exit 0 with a complete result: a JSON summary whose latency, request and throughput sections are all
  there, and every output file in ``--out``;
* exit 2 with exactly one ``error:`` line, no traceback, and nothing left behind: no ``--out`` folder,
  no staging folder beside it.

The same property holds for the files a scenario reads (a trace of every format, an observation,
empirical lengths), their cells, values, columns and lines mutated the same way. Exit 1 ("internal
error") is the failure this guards against. The examples are derandomized (the same
on every run, as CI needs) and the whole file takes well under a minute on two cores.
"""
from __future__ import annotations

import copy
import json
import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from simulator.cli import app

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SUMMARY_KEYS = ("ttft_s", "tpot_s", "e2e_s", "requests", "throughput", "batch", "kv_cache")
OUT_FILES = ["requests.csv", "requests.parquet", "scenario.yaml", "steps.csv", "steps.parquet", "summary.json"]
WORKSHEETS = ["worksheet-assumptions.yaml", "worksheet-candidates.csv", "worksheet-totals.csv", "worksheet.csv"]
CASE_LIMIT_S = 30   # a case that runs longer is a hang (each takes well under a second when healthy)


def _absolute_paths(node: Any) -> Any:
    """The example with its data files (``path: data/...``) made absolute, so it runs from any folder."""
    if isinstance(node, dict):
        return {k: (str(EXAMPLES / v) if k == "path" and isinstance(v, str) else _absolute_paths(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_absolute_paths(v) for v in node]
    return node


def _scenarios() -> list[dict[str, Any]]:
    """Every example scenario, cut to 40 requests (the run-length fields go: a tiny run has no warm-up)."""
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if "workload" not in data:   # the plan
            continue
        data = _absolute_paths(data)
        data["num_requests"] = 40
        for key in ("warmup_s", "cooldown_s", "duration_s"):
            data.pop(key, None)
        out.append(data)
    return out


def _plan() -> dict[str, Any]:
    """``plan-fy27.yaml`` cut to one candidate, two regions and one quarter of light traffic, on a
    constant-time profile, with the smallest simulations the planner takes: a second or two to plan."""
    data = yaml.safe_load((EXAMPLES / "plan-fy27.yaml").read_text())
    scenario = yaml.safe_load((EXAMPLES / "chat-h100.yaml").read_text())
    scenario.update(model="tiny-llama", num_requests=100,
                    hardware={"cost_model": "constant", "step_time_s": 0.002, "price_per_gpu_hour": 2.0,
                              "memory_bytes": 80 * 2**30})
    scenario["workload"]["prompt_tokens"] = {"dist": "lognormal", "mean": 100, "sigma": 0.5, "max": 400}
    scenario["workload"]["output_tokens"] = {"dist": "geometric", "mean": 8, "max": 64}
    scenario.pop("warmup_s", None)
    regions = data["regions"][:2]
    names = [r["name"] for r in regions]
    for r in regions:
        r["rtt_ms"] = {k: v for k, v in r["rtt_ms"].items() if k in names}
    data.update(scenario=scenario, candidates=[{"name": "h100-tp1", "set": {"scheduler.max_num_seqs": 64}}],
                regions=regions, failover="none",
                forecast=[{"quarter": "FY27Q1", "region": n, "peak_rps": 3 + i} for i, n in enumerate(names)],
                simulation={"num_requests": 200, "max_replicas": 4, "replications": 1, "seed": 0})
    return data


SCENARIOS = _scenarios()
PLAN = _plan()

#: Values that have broken a run: booleans, non-finite, huge and tiny numbers, wrong types, text that
#: would break a CSV row; and plausible ones (other policies, small counts), so that many mutated
#: documents still run and their answers are checked too.
BAD_VALUES = st.one_of(
    st.sampled_from([True, False, None, math.inf, -math.inf, math.nan, 0, -1, -1e-9, 1e-300, 10**7, 10**12,
                     2**63, 10**30, 1e15, 1e300, -1e300, "", "x", "\r=3+4", "-1", [], {}, [1, 2], {"a": 1}]),
    st.sampled_from([0.5, 1, 2, 16, 0.999, "static", "dynamic", "chunked_prefill", "priority", "swap", "reject",
                     "clip", "fp8", "h100-sxm", "l40s", "llama-3.2-1b"]),
    st.text(max_size=6),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every mapping key and list index in the document, as a path from the root."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from _paths(value, (*prefix, key))


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw: st.DrawFn, bases: list[dict[str, Any]]) -> dict[str, Any]:
    """A base document with one to three fields replaced by a bad value, deleted, or joined by an
    unknown field (none of them, now and then: the base itself must run)."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(0, 3))):
        paths = list(_paths(doc))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "unknown"]))
        if action == "replace":
            parent[path[-1]] = copy.deepcopy(draw(BAD_VALUES))   # the [] and {} in the pool are shared
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent["bogus_" + draw(st.text("abc", min_size=1, max_size=3))] = copy.deepcopy(draw(BAD_VALUES))
    return doc


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fail the case (instead of hanging the suite) if it runs past ``seconds``."""
    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"the case ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_cli(args: list[str]) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    with time_limit(CASE_LIMIT_S):
        result = CliRunner().invoke(app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr, time.perf_counter() - t0


def check_outcome(code: int, stdout: str, stderr: str, out: Path) -> str:
    """The property: a whole answer (exit 0) or one clean error line (exit 2) with nothing written."""
    assert "Traceback" not in stdout + stderr, stderr
    if code == 2:
        lines = stderr.strip("\n").splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), stderr
        assert "internal error" not in lines[0]
        assert not out.exists(), sorted(p.name for p in out.iterdir())
        assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
        return "error"
    assert code == 0, (code, stderr[-2000:])
    return "ok"


SETTINGS = settings(max_examples=400, deadline=None, derandomize=True, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@SETTINGS
@given(doc=mutated(SCENARIOS))
def test_simulate_answers_or_refuses_cleanly(doc: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("case")
    scenario, out = folder / "scenario.yaml", folder / "out"
    scenario.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, stdout, stderr, _ = run_cli(["simulate", str(scenario), "--json", "--no-progress", "--out", str(out)])
    if check_outcome(code, stdout, stderr, out) == "ok":
        summary = json.loads(stdout.splitlines()[0])
        assert all(key in summary for key in SUMMARY_KEYS), sorted(summary)
        assert sorted(p.name for p in out.iterdir()) == OUT_FILES
        assert json.loads((out / "summary.json").read_text()) == summary


@settings(SETTINGS, max_examples=80)
@given(doc=mutated([PLAN]))
def test_plan_answers_or_refuses_cleanly(doc: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("plan")
    plan, out = folder / "plan.yaml", folder / "out"
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, stdout, stderr, _ = run_cli(["plan", str(plan), "--workers", "1", "--no-progress", "--out", str(out)])
    if check_outcome(code, stdout, stderr, out) == "ok":
        assert sorted(p.name for p in out.iterdir()) == WORKSHEETS


def test_the_bases_run(tmp_path: Path) -> None:
    """Every unmutated base answers, so the property cannot hold by refusing everything."""
    assert len(SCENARIOS) >= 6
    for i, doc in enumerate([*SCENARIOS, PLAN]):
        path, out = tmp_path / f"{i}.yaml", tmp_path / f"out{i}"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        command = "plan" if doc is PLAN else "simulate"
        extra = ["--workers", "1"] if doc is PLAN else ["--json"]
        code, _, stderr, elapsed = run_cli([command, str(path), *extra, "--no-progress", "--out", str(out)])
        assert code == 0, stderr
        assert elapsed < CASE_LIMIT_S


# -- the files a scenario reads ---------------------------------------------------------------------------
#: Cell texts that have broken a reader: empty, non-finite, huge, negative, fractional, dates where numbers
#: go, quotes and separators, a NUL, a byte-order mark.
BAD_CELLS = st.sampled_from(["", " ", "nan", "inf", "-inf", "-1", "0", "1e400", "1e18", "99999999999999999999", "abc",
                             "1.5", "2025-13-40T00:00:00Z", "2025-03-01T12:00:00Z", "\x00", "\ufeff", '"', ",", "true",
                             "null", "[]", "1,2", "0x10", "-0", "3e2", " 7 "])
#: JSON values that have broken a reader: wrong types, non-finite and huge numbers, text where numbers go.
BAD_JSON = st.sampled_from([None, True, False, "", "12", "abc", [], {}, [1], {"a": 1}, -1, 0, 1.5, math.inf, 2**70,
                            10**18, math.nan, "2025-03-01T12:00:00Z"])
TRACE_KINDS = ("azure", "mooncake", "requests_csv", "requests_jsonl", "openai", "observation", "empirical")


def _trace_rows(draw: st.DrawFn) -> list[tuple[float, int, int]]:
    t0 = draw(st.floats(0, 1e9))
    return [(t0 + i * draw(st.floats(0, 2)), draw(st.integers(1, 1500)), draw(st.integers(1, 300)))
            for i in range(draw(st.integers(1, 10)))]


def _csv_case(draw: st.DrawFn, kind: str, rows: list[tuple[float, int, int]]) -> str:
    if kind == "azure":
        head = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
        data = [[f"2024-05-10 00:00:{t % 60:09.6f}", str(p), str(o)] for t, p, o in rows]
    elif kind == "requests_csv":
        extra = draw(st.sampled_from([[], ["session_id"], ["prefix_hash", "prefix_tokens"], ["tier"]]))
        head = ["timestamp", "prompt_tokens", "output_tokens", *extra]
        data = [[repr(t), str(p), str(o), *(str(draw(st.integers(0, 3))) for _ in extra)] for t, p, o in rows]
    else:
        head = ["num_prefill_tokens", "num_decode_tokens"]
        data = [[str(p), str(o)] for _, p, o in rows]
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["cell", "cell", "cell", "column", "header", "extra", "short", "empty"]))
        row = data[draw(st.integers(0, len(data) - 1))] if data else []
        if action == "cell" and row:
            row[draw(st.integers(0, len(row) - 1))] = draw(BAD_CELLS)
        elif action == "column" and len(head) > 1:
            j = draw(st.integers(0, len(head) - 1))
            head.pop(j)
            for r in data:
                if len(r) > j:
                    r.pop(j)
        elif action == "header" and head:
            head[draw(st.integers(0, len(head) - 1))] = draw(BAD_CELLS)
        elif action == "extra" and row:
            row.append(draw(BAD_CELLS))
        elif action == "short" and row:
            del row[1:]
        elif action == "empty":
            data = []
    return "\n".join(",".join(r) for r in [head, *data]) + "\n"


def _json_case(draw: st.DrawFn, kind: str, rows: list[tuple[float, int, int]]) -> str:
    if kind == "mooncake":
        recs = [{"timestamp": int(t * 1000), "input_length": p, "output_length": o, "hash_ids": [1, 2]}
                for t, p, o in rows]
    elif kind == "requests_jsonl":
        recs = [{"timestamp": t, "prompt_tokens": p, "output_tokens": o} for t, p, o in rows]
    elif kind == "openai":
        recs = [{"created": int(t), "usage": {"prompt_tokens": p, "completion_tokens": o}} for t, p, o in rows]
    else:
        recs = []
        for i, (_, p, o) in enumerate(rows):
            chunks = [i * 0.1 + 0.05 + 0.01 * k for k in range(o % 20 + 1)]
            recs.append({"id": i, "send_s": i * 0.1, "prompt_tokens": p, "output_tokens": len(chunks),
                         "max_tokens": len(chunks), "first_token_s": chunks[0], "end_s": chunks[-1], "chunk_s": chunks,
                         "chunk_tokens": [1] * len(chunks), "usage": "server", "error": None})
    for _ in range(draw(st.integers(0, 3))):
        rec = recs[draw(st.integers(0, len(recs) - 1))]
        if kind == "openai" and draw(st.booleans()):
            rec = rec["usage"] if isinstance(rec.get("usage"), dict) else rec
        action = draw(st.sampled_from(["value", "value", "delete", "unknown"]))
        if action == "value" and rec:
            rec[draw(st.sampled_from(sorted(rec)))] = copy.deepcopy(draw(BAD_JSON))
        elif action == "delete" and rec:
            del rec[draw(st.sampled_from(sorted(rec)))]
        else:
            rec["bogus"] = copy.deepcopy(draw(BAD_JSON))
    if kind == "observation":
        doc: dict[str, Any] = {"format": "llmplan-observation", "version": 1, "header": {}, "requests": recs}
        if draw(st.integers(0, 5)) == 0:
            doc[draw(st.sampled_from(sorted(doc)))] = copy.deepcopy(draw(BAD_JSON))
        return json.dumps(doc)
    lines = [json.dumps(r) for r in recs]
    if draw(st.integers(0, 4)) == 0:
        lines[draw(st.integers(0, len(lines) - 1))] = draw(st.sampled_from(["{", "[]", "1", "null", '"x"', '{"a":']))
    return "\n".join(lines) + "\n"


@st.composite
def trace_file(draw: st.DrawFn) -> tuple[str, str]:
    """A trace (any format), an observation or an empirical length file, with up to three bad cells,
    values, columns or lines; returns (kind, text)."""
    kind = draw(st.sampled_from(TRACE_KINDS))
    rows = _trace_rows(draw)
    if kind in ("azure", "requests_csv", "empirical"):
        return kind, _csv_case(draw, kind, rows)
    return kind, _json_case(draw, kind, rows)


FILE_SCENARIO = {"name": "files", "seed": 1, "num_requests": 12, "model": "tiny-llama",
                 "hardware": {"cost_model": "constant", "step_time_s": 0.002, "memory_bytes": 80 * 2**30},
                 "scheduler": {"policy": "continuous", "max_num_seqs": 16},
                 "workload": {"arrival": {"process": "poisson", "rate_per_s": 5},
                              "prompt_tokens": {"dist": "lognormal", "mean": 100, "sigma": 0.5, "max": 400},
                              "output_tokens": {"dist": "geometric", "mean": 8, "max": 64}}}


@settings(SETTINGS, max_examples=300)
@given(case=trace_file(), loop=st.booleans())
def test_a_scenario_whose_data_file_is_bad_answers_or_refuses_cleanly(
        case: tuple[str, str], loop: bool, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The property above, for what a scenario reads from its files: a trace of every format, an
    observation replayed as one (or either sent by a closed loop), and empirical lengths."""
    kind, text = case
    folder = tmp_path_factory.mktemp("file")
    data = folder / ("data.csv" if kind in ("azure", "requests_csv", "empirical") else
                     "data.json" if kind == "observation" else "data.jsonl")
    data.write_text(text, encoding="utf-8")
    doc = copy.deepcopy(FILE_SCENARIO)
    if kind == "empirical":
        doc["workload"]["prompt_tokens"] = {"dist": "empirical", "path": str(data), "column": "num_prefill_tokens"}
    else:
        doc.pop("num_requests")
        trace = {"path": str(data), "format": kind.removesuffix("_csv").removesuffix("_jsonl")}
        doc["workload"]["arrival"] = {"process": "closed_loop", "concurrency": 3, "replay": trace} if loop \
            else {"process": "trace", **trace}
    scenario, out = folder / "scenario.yaml", folder / "out"
    scenario.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, stdout, stderr, _ = run_cli(["simulate", str(scenario), "--json", "--no-progress", "--out", str(out)])
    if check_outcome(code, stdout, stderr, out) == "ok":
        assert sorted(p.name for p in out.iterdir()) == OUT_FILES
