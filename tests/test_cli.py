"""The user-facing commands: ``llmplan simulate`` (table, ``--json``, ``--out``, ``--set``, ``--seed``),
``llmplan models``, ``llmplan profiles`` (100 columns), ``llmplan --version``, progress lines when stderr
is not a terminal, and ``llmplan plan --out`` (a folder by default), run as a user runs them (a
subprocess in the repo root)."""
from __future__ import annotations

import io
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from simulator import MODEL_PRESETS, available_profiles, load_scenario, simulate
from simulator.cli.commands import package_version
from simulator.cli.support import PlainProgress, jsonable

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/chat-h100.yaml"
EXAMPLE_DATA = yaml.safe_load((REPO / EXAMPLE).read_text())
SMALL = ("--set", "num_requests=300")
LATENCY_KEYS = ("ttft_s", "tpot_s", "e2e_s", "queue_delay_s")
STATS = ("mean", "p50", "p90", "p95", "p99")


def run_cli(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m simulator.cli ARGS``; no debug tracebacks, no terminal-width override."""
    clean = {k: v for k, v in os.environ.items() if k not in ("LLMPLAN_DEBUG", "COLUMNS", "LINES")}
    # The code under test is this checkout's, even when cwd is elsewhere (a shared venv may point
    # its installed copy at another checkout).
    clean["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), clean.get("PYTHONPATH", "")) if p)
    clean.update(env)
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", *args], cwd=cwd, env=clean,
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _no_nan(token: str) -> Any:
    raise AssertionError(f"non-standard JSON constant {token} in the output")


def parse_json_stdout(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """Exactly one line on stdout, holding one strict-JSON object (no NaN/Infinity)."""
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout[:500]
    obj = json.loads(lines[0], parse_constant=_no_nan)
    assert isinstance(obj, dict)
    return obj


def without_wall(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "wall_s"}


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    """The example scenario cut to 300 requests, as JSON."""
    return parse_json_stdout(run_cli("simulate", EXAMPLE, "--json", *SMALL))


@pytest.fixture(scope="module")
def out_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The same run with ``--out DIR``: the folder and the JSON printed on stdout."""
    out = tmp_path_factory.mktemp("run") / "out"
    return out, parse_json_stdout(run_cli("simulate", EXAMPLE, "--json", *SMALL, "--out", str(out)))


# -- simulate --json --------------------------------------------------------------------------------
def test_json_summary_has_the_documented_keys(baseline: dict[str, Any]) -> None:
    """``--json`` prints one object with latency stats, throughput, request counts, SLO attainment,
    seed and wall time, all finite numbers where the run has data."""
    for metric in LATENCY_KEYS:
        stats = baseline[metric]
        for stat in STATS:
            assert isinstance(stats[stat], float) and math.isfinite(stats[stat]), (metric, stat)
        assert stats["p50"] <= stats["p90"] <= stats["p95"] <= stats["p99"]
    assert baseline["ttft_s"]["p50"] > 0 and baseline["e2e_s"]["p50"] > baseline["ttft_s"]["p50"]
    tp = baseline["throughput"]
    assert tp["requests_per_s"] > 0 and tp["output_tokens_per_s"] > tp["requests_per_s"]
    req = baseline["requests"]
    assert set(req) >= {"arrived", "completed", "rejected", "in_flight"}
    assert req["arrived"] == 300
    assert req["completed"] + req["rejected"] + req["in_flight"] == req["arrived"]
    assert req["completed"] > 0
    assert EXAMPLE_DATA["slo"], "the example is expected to set an SLO"
    assert 0.0 <= baseline["slo_attainment"] <= 1.0
    assert baseline["seed"] == EXAMPLE_DATA["seed"]
    assert baseline["wall_s"] > 0


def test_same_seed_gives_identical_json(baseline: dict[str, Any]) -> None:
    """Two runs of the same scenario and seed agree on every number except the wall-clock time."""
    again = parse_json_stdout(run_cli("simulate", EXAMPLE, "--json", *SMALL))
    assert without_wall(again) == without_wall(baseline)


def test_other_seed_gives_other_numbers(baseline: dict[str, Any]) -> None:
    """``--seed`` overrides the file's seed and changes the sampled workload, hence the latencies."""
    seed = EXAMPLE_DATA["seed"] + 1
    other = parse_json_stdout(run_cli("simulate", EXAMPLE, "--json", *SMALL, "--seed", str(seed)))
    assert other["seed"] == seed
    assert other["requests"]["arrived"] == 300
    assert other["ttft_s"]["mean"] != baseline["ttft_s"]["mean"]
    assert other["e2e_s"]["p99"] != baseline["e2e_s"]["p99"]


def test_set_rate_changes_the_result(baseline: dict[str, Any]) -> None:
    """``--set workload.arrival.rate_per_s=12`` changes the Poisson rate (8 in the file): the same
    arrival draws (common random numbers) are rescaled by old/new rate, so the last arrival moves
    by exactly that factor."""
    rate = EXAMPLE_DATA["workload"]["arrival"]["rate_per_s"]
    assert rate != 12
    fast = parse_json_stdout(run_cli("simulate", EXAMPLE, "--json", *SMALL,    # 300 requests in 25 s: no warm-up
                                     "--set", "workload.arrival.rate_per_s=12", "--set", "warmup_s=0"))
    last_base = baseline["throughput"]["window_s"][1]
    last_fast = fast["throughput"]["window_s"][1]
    assert EXAMPLE_DATA.get("cooldown_s", 0) == 0  # window_s ends at the last arrival
    assert last_fast == pytest.approx(last_base * rate / 12, rel=1e-9)
    assert without_wall(fast) != without_wall(baseline)


# -- simulate --out -----------------------------------------------------------------------------------
def test_out_writes_every_file_and_formats_agree(out_run: tuple[Path, dict[str, Any]]) -> None:
    """``--out DIR`` writes requests and steps as parquet and CSV with the same rows, plus
    summary.json (equal to the printed JSON) and scenario.yaml."""
    out, printed = out_run
    names = {"requests.parquet", "requests.csv", "steps.parquet", "steps.csv", "summary.json", "scenario.yaml"}
    assert names <= {p.name for p in out.iterdir()}
    requests_pq, requests_csv = pd.read_parquet(out / "requests.parquet"), pd.read_csv(out / "requests.csv")
    steps_pq, steps_csv = pd.read_parquet(out / "steps.parquet"), pd.read_csv(out / "steps.csv")
    assert len(requests_pq) == len(requests_csv) == 300
    assert len(steps_pq) == len(steps_csv) == printed["batch"]["num_steps"] > 0
    assert list(requests_pq.columns) == list(requests_csv.columns)
    assert list(steps_pq.columns) == list(steps_csv.columns)
    pd.testing.assert_series_equal(requests_pq["arrival_time"], requests_csv["arrival_time"], check_exact=False,
                                   rtol=1e-12)
    assert (requests_pq["num_output_tokens"] == requests_csv["num_output_tokens"]).all()
    completed = int((requests_pq["status"].astype(str) == "finished_length_capped").sum())
    assert completed == printed["requests"]["completed"]
    assert json.loads((out / "summary.json").read_text()) == printed


def test_out_same_numbers_as_plain_json(out_run: tuple[Path, dict[str, Any]], baseline: dict[str, Any]) -> None:
    """Writing files does not change the simulation."""
    assert without_wall(out_run[1]) == without_wall(baseline)


def test_scenario_yaml_reproduces_the_run(out_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """scenario.yaml written by ``--out`` holds the effective scenario (overrides applied): loading it
    with :func:`simulator.load_scenario` and simulating gives the same summary, and so does running
    the CLI on it from an unrelated working directory."""
    out, printed = out_run
    written = yaml.safe_load((out / "scenario.yaml").read_text())
    assert written["num_requests"] == 300 and written["seed"] == EXAMPLE_DATA["seed"]
    result = simulate(load_scenario(out / "scenario.yaml"))
    assert without_wall(jsonable(result.summary)) == without_wall(printed)
    elsewhere = parse_json_stdout(run_cli("simulate", str(out / "scenario.yaml"), "--json", cwd=tmp_path))
    assert without_wall(elsewhere) == without_wall(printed)


def test_scenario_yaml_with_relative_trace_path_reproduces_the_run(tmp_path: Path) -> None:
    """A scenario whose trace path is relative to its own file, written to a different --out folder,
    loads back and reproduces the run."""
    src = tmp_path / "scenarios"
    src.mkdir()
    shutil.copy(REPO / "tests" / "data" / "azure_conv_excerpt.csv", src / "trace.csv")
    (src / "replay.yaml").write_text(yaml.safe_dump({
        "model": "llama-3-8b", "hardware": "h100-sxm", "num_requests": 50,
        "workload": {"arrival": {"process": "trace", "path": "trace.csv", "format": "azure"}}}))
    out = tmp_path / "results"
    printed = parse_json_stdout(run_cli("simulate", str(src / "replay.yaml"), "--json", "--out", str(out)))
    again = parse_json_stdout(run_cli("simulate", str(out / "scenario.yaml"), "--json"))
    assert without_wall(again) == without_wall(printed)


# -- simulate (table) --------------------------------------------------------------------------------
def test_plain_simulate_prints_a_table(baseline: dict[str, Any]) -> None:
    """Without ``--json`` the command prints a human table (latency rows, percentile columns) and the
    request counts, not JSON."""
    proc = run_cli("simulate", EXAMPLE, *SMALL)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for word in ("ttft", "tpot", "e2e", "p50", "p99", EXAMPLE_DATA["name"], "llama-3-8b", "h100-sxm"):
        assert word in text, word
    assert f"{baseline['requests']['arrived']} arrived" in text
    # the ttft mean in ms, as in the JSON
    assert f"{baseline['ttft_s']['mean'] * 1000:,.1f}" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


# -- models, profiles ----------------------------------------------------------------------------------
def test_models_lists_the_presets() -> None:
    """``llmplan models`` lists every preset with its total and active parameters and context
    length, in 100 columns piped and on a 100-column terminal."""
    for proc in (run_cli("models"), run_cli("models", COLUMNS="100", TTY_COMPATIBLE="1", FORCE_TERMINAL="1")):
        assert proc.returncode == 0, proc.stderr
        lines = ANSI.sub("", proc.stdout).splitlines()
        assert max(len(line.rstrip()) for line in lines) <= 100, proc.stdout
        for name in MODEL_PRESETS:
            assert any(line.split()[:1] == [name] for line in lines), name
        row = next(line for line in lines if line.split()[:1] == ["llama-3-8b"])
        assert "8192" in row and "32/8" in row
        row = next(line for line in lines if line.split()[:1] == ["deepseek-v3"])
        assert row.split()[1:3] == ["671.03", "37.55"] and "163840" in row and "MLA" in row
        row = next(line for line in lines if line.split()[:1] == ["llama-3.1-70b"])
        assert "131072" in row


def test_profiles_lists_the_profiles_and_their_source() -> None:
    """``llmplan profiles`` lists every hardware profile with its source on a terminal wide enough
    for the table: the default ``h100-sxm`` is imported (measured kernels), ``h100-sxm-datasheet``
    the vendor-peak roofline."""
    proc = run_cli("profiles", COLUMNS="200")
    assert proc.returncode == 0, proc.stderr
    for name in available_profiles():
        assert name in proc.stdout, name
    row = next(line for line in proc.stdout.splitlines() if " h100-sxm-datasheet " in line)
    assert "datasheet" in row and "79.6" in row
    row = next(line for line in proc.stdout.splitlines() if " h100-sxm " in line)
    assert "imported" in row and "79.6" in row and "median <=" in row


def test_profiles_piped_without_a_terminal_keeps_names_whole() -> None:
    """Piped output (no terminal, no COLUMNS) still shows whole profile names and sources."""
    proc = run_cli("profiles")
    assert proc.returncode == 0, proc.stderr
    assert "h100-sxm" in proc.stdout and "datasheet" in proc.stdout


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_profiles_fit_in_100_columns_piped_and_on_a_100_column_terminal() -> None:
    """The listing is at most 100 characters wide, piped (where the console is 200 wide) and on a
    100-column terminal, and still shows every name whole with its source and memory on one line."""
    piped = run_cli("profiles")
    terminal = run_cli("profiles", COLUMNS="100", TTY_COMPATIBLE="1", FORCE_TERMINAL="1")
    for proc in (piped, terminal):
        assert proc.returncode == 0, proc.stderr
        lines = ANSI.sub("", proc.stdout).splitlines()
        assert max(len(line.rstrip()) for line in lines) <= 100, proc.stdout
        assert "…" not in proc.stdout   # nothing cut short
        for name in available_profiles():
            assert any(line.split()[:1] == [name] for line in lines), name
        row = next(line for line in lines if line.split()[:1] == ["h100-sxm-datasheet"])
        assert "datasheet" in row and "79.6" in row
        row = next(line for line in lines if line.split()[:1] == ["cpu-amd-epyc-tiny-llama"])
        assert "measured" in row and "median <=" in row and "worst:" in row
    assert "\x1b[" in terminal.stdout, "TTY_COMPATIBLE/FORCE_TERMINAL did not make it a terminal for rich"


def test_profiles_show_has_what_the_listing_leaves_out() -> None:
    """``profiles show NAME`` names the device, bandwidth, peak FLOP/s and date."""
    proc = run_cli("profiles", "show", "h100-sxm")
    assert proc.returncode == 0, proc.stderr
    for word in ("NVIDIA H100 SXM5", "3.35 TB/s", "bf16 989", "date=", "$3.00"):
        assert word in proc.stdout, word
    assert "basis:" not in proc.stdout                      # an imported profile has no fit to show


def test_profiles_show_gives_a_fitted_profiles_costs_errors_and_warnings() -> None:
    """A profile fitted to a real engine (the committed real-vLLM one, fitted with --leave-one-out): what
    it rests on, each fitted cost with its range over the refits, the held-out and left-out errors, and
    the fit's warning that its search stopped short of the lowest loss."""
    proc = run_cli("profiles", "show", str(REPO / "benchmarks" / "results" / "vllm-cpu-profile"))
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())                     # rich wraps long lines
    for text in ("basis: fitted to vllm-v1 0.32.0's observed runs (6)",
                 "step_s = 1.626 ms (leaving out one run: 1.582 ms to 1.714 ms, s.e. 6%)",
                 "frontend_s = 2.593 ms (leaving out one run: 2.73 ms to 3.788 ms, s.e. 29%)",
                 "median |error|, held-out runs: ttft p50 8%, tpot p50 6%",
                 "median |error|, each fitted run left out: ttft p50 6%",
                 "warning: the search stopped short of the lowest loss",
                 "kernel times below: the base profile's, scaled by kernel_scale"):
        assert text in out, text


# -- --version -----------------------------------------------------------------------------------------
def pyproject_version() -> str:
    return re.search(r'(?m)^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text()).group(1)


def test_version_prints_the_package_version() -> None:
    """``llmplan --version`` prints ``llmplan X.Y.Z`` (the installed package's version) and the
    engine's build (``simulator.native.engine_build``), and exits 0."""
    from importlib.metadata import PackageNotFoundError, version

    from simulator.native import engine_build

    try:
        expected = version("llmplan")
    except PackageNotFoundError:
        expected = pyproject_version()
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"llmplan {expected}\nengine: {engine_build()}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", expected)


def test_version_falls_back_to_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not installed (only on sys.path): the version comes from the checkout's pyproject.toml."""
    import importlib.metadata

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert package_version() == pyproject_version()


# -- progress lines when stderr is not a terminal -------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def progress_lines(total: int, seconds_per_unit: float, **kwargs: Any) -> list[str]:
    """Feed ``PlainProgress`` one unit at a time on a fake clock; the lines it printed."""
    buf, clock = io.StringIO(), FakeClock()
    from rich.console import Console

    plain = PlainProgress("work", "items", Console(file=buf, width=200), True, clock=clock, **kwargs)
    for done in range(1, total + 1):
        clock.now += seconds_per_unit
        plain(done, total, f"item {done}")
    return buf.getvalue().splitlines()


def test_plain_progress_prints_a_line_per_tenth_at_most_once_a_second() -> None:
    slow = progress_lines(160, 1 / 16)         # 10 s: a tenth every second
    assert [line.split(":")[1].split()[0] for line in slow] == [f"{16 * k}/160" for k in range(1, 11)]
    assert slow[0] == "work: 16/160 items (10%), 1 s; item 16"
    assert slow[-1] == "work: 160/160 items (100%), 10 s; item 160"
    fast = progress_lines(1000, 0.0001)        # 0.1 s: only the last line
    assert fast == ["work: 1000/1000 items (100%), 0 s; item 1000"]
    half = progress_lines(160, 1 / 32)         # 5 s: a tenth every half second, a line every other tenth
    assert [line.split(":")[1].split()[0] for line in half] == [f"{32 * k}/160" for k in range(1, 6)]
    crawl = progress_lines(100, 10.0)          # a tenth every 100 s: also a line after 30 s without one
    seconds = [int(line.split(", ")[1].split()[0]) for line in crawl]
    assert seconds[:4] == [30, 60, 90, 100] and len(crawl) == 40
    assert max(b - a for a, b in itertools.pairwise([0, *seconds])) == 30
    assert crawl[-1] == "work: 100/100 items (100%), 1000 s; item 100"


def test_plain_progress_off_prints_nothing() -> None:
    buf = io.StringIO()
    from rich.console import Console

    plain = PlainProgress("work", "items", Console(file=buf), False)
    plain(5, 5)
    assert buf.getvalue() == ""


def test_simulate_prints_progress_lines_when_stderr_is_not_a_terminal() -> None:
    """Piped stderr gets a few plain lines ending with the 100% line (stdout stays one JSON line);
    ``--no-progress`` silences them."""
    proc = run_cli("simulate", EXAMPLE, "--json", *SMALL)
    parse_json_stdout(proc)
    lines = proc.stderr.splitlines()
    name = re.escape(EXAMPLE_DATA["name"])
    pattern = re.compile(rf"simulating {name}: (\d+)/300 requests \((\d+)%\), \d+ s")
    assert 1 <= len(lines) <= 11, proc.stderr
    assert all(pattern.fullmatch(line) for line in lines), proc.stderr
    assert pattern.fullmatch(lines[-1]).groups() == ("300", "100")
    quiet = run_cli("simulate", EXAMPLE, "--json", *SMALL, "--no-progress")
    parse_json_stdout(quiet)
    assert quiet.stderr == ""


def test_calibrate_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    args = ("calibrate", "--device", "cpu", "--model", "tiny-llama", "--quick", "--threads", "1",
            "--max-tokens", "4", "--max-seqs", "2", "--max-context", "64",
            "--max-drift", "1000", "--max-spread", "1000", "--max-load", "1000")   # progress, not noise, is tested
    proc = run_cli(*args, "--out", str(tmp_path / "a"))
    assert proc.returncode == 0, proc.stderr
    progress = [line for line in proc.stderr.splitlines() if not line.startswith("warning: ")]
    assert re.match(r"calibrating: (\d+)/\1 benchmarks \(100%\), \d+ s; \w+", progress[-1]), proc.stderr
    quiet = run_cli(*args, "--no-progress", "--out", str(tmp_path / "b"))
    assert quiet.returncode == 0, quiet.stderr
    assert all(line.startswith("warning: ") for line in quiet.stderr.splitlines()), quiet.stderr   # fit warnings only


# -- plan --out ---------------------------------------------------------------------------------------------
def small_plan(folder: Path) -> Path:
    """Two cells, one candidate, a constant-time hardware profile: a second or two in-process."""
    data = {
        "name": "t",
        "scenario": {"model": "tiny-llama", "num_requests": 100,
                     "hardware": {"cost_model": "constant", "step_time_s": 0.01,
                                  "prefill_time_per_token_s": 0.0001, "price_per_gpu_hour": 2.0,
                                  "memory_bytes": 80 * 2**30},
                     "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 2048},
                     "workload": {"arrival": {"process": "poisson", "rate_per_s": 1.0},
                                  "prompt_tokens": {"dist": "fixed", "value": 64},
                                  "output_tokens": {"dist": "geometric", "mean": 8, "max": 64}}},
        "candidates": [{"name": "std", "set": {}}],
        "slo": {"ttft_p99_ms": 60, "attainment": 0.95},
        "regions": [{"name": "east", "rtt_ms": {"east": 5, "west": 40}},
                    {"name": "west", "rtt_ms": {"west": 5, "east": 40}}],
        "failover": "none",
        "forecast": [{"quarter": "Q1", "region": "east", "peak_rps": 80},
                     {"quarter": "Q1", "region": "west", "peak_rps": 40}],
        "simulation": {"num_requests": 300, "max_replicas": 16},
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


WORKSHEETS = ("worksheet.csv", "worksheet-totals.csv", "worksheet-candidates.csv", "worksheet-assumptions.yaml")


def test_plan_writes_a_plan_out_folder_by_default(tmp_path: Path) -> None:
    """Without ``--out`` the three CSVs go to ./plan-out/ (created), one worksheet row per cell; piped
    stderr gets plain progress lines ending at 100%."""
    plan_file = small_plan(tmp_path / "in")
    proc = run_cli("plan", str(plan_file), "--workers", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "plan-out").iterdir()) == sorted(WORKSHEETS)
    ws = pd.read_csv(tmp_path / "plan-out" / "worksheet.csv")
    assert sorted(ws["region"]) == ["east", "west"] and (ws["status"] == "ok").all()
    assert "plan-out" in proc.stdout.splitlines()[-1]
    assert "std on inline: inline: numbers written in the scenario" in proc.stdout     # what its costs rest on
    last = proc.stderr.splitlines()[-1]
    assert re.fullmatch(r"planning: 2/2 searches \(100%\), \d+ s; Q1 \w+ std: \d+ replicas", last), \
        proc.stderr
    quiet = run_cli("plan", str(plan_file), "--workers", "1", "--no-progress", "--out", "q", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_plan_out_creates_nested_folders_and_still_takes_a_csv_name(tmp_path: Path) -> None:
    plan_file = small_plan(tmp_path)
    nested = tmp_path / "a" / "b" / "c"
    proc = run_cli("plan", str(plan_file), "--workers", "1", "--no-progress", "--out", str(nested))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in nested.iterdir()) == sorted(WORKSHEETS)
    # a .csv name: the worksheet itself, its companions beside it (as before), its folder created
    csv = tmp_path / "d" / "w.csv"
    proc = run_cli("plan", str(plan_file), "--workers", "1", "--no-progress", "--out", str(csv))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["w-assumptions.yaml", "w-candidates.csv",
                                                                   "w-totals.csv", "w.csv"]
    first = pd.read_csv(nested / "worksheet.csv")
    pd.testing.assert_frame_equal(first, pd.read_csv(tmp_path / "d" / "w.csv"))


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_plan_out_that_cannot_be_a_folder_is_one_error_line(tmp_path: Path, where: str) -> None:
    """An --out that is a file (not .csv), or lies under one, fails before planning: exit 2, one line
    naming --out and the path, nothing written."""
    plan_file = small_plan(tmp_path / "in")
    blocker = tmp_path / "results"
    blocker.write_text("not a folder\n")
    out = blocker if where == "a file" else blocker / "sub"
    proc = run_cli("plan", str(plan_file), "--workers", "1", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --out = ") and str(out) in lines[0], proc.stderr
    assert "not a directory" in lines[0]
    assert proc.stdout == "" and blocker.read_text() == "not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "results"]


def test_the_trace_format_help_names_every_registered_format() -> None:
    """``--trace-format``'s one help text (import vllm, observe) lists exactly the formats a trace is read in."""
    import re

    from simulator.cli.support import TRACE_FORMAT_HELP
    from simulator.workload.traces import TRACE_FORMATS

    named = re.search(r"format: ([a-z, ]+) \(", TRACE_FORMAT_HELP)
    assert named is not None and set(named.group(1).split(", ")) == set(TRACE_FORMATS)
