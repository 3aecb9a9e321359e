"""Issue 41: the last bad inputs of the command line, and the Python API's own arguments.

Every case is one error naming the option, field or argument and its value: from the CLI one
``error:`` line and exit status 2, from the API a :class:`ScenarioError` (a ``ValueError``) raised
before any work. The terminal output never turns a finished run into a failure.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from test_errors import assert_one_error_line, run_cli

import simulator
from simulator import ScenarioError, load_profile, load_scenario, resolve, scenario_from_dict, simulate
from simulator.planner import load_plan

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = str(REPO / "examples" / "cpu-tiny-llama.yaml")
SMALL: dict[str, Any] = {
    "name": "c", "num_requests": 20, "model": "tiny-llama", "hardware": {"cost_model": "constant", "step_time_s": 0.01},
    "workload": {"arrival": {"process": "poisson", "rate_per_s": 5.0},
                 "prompt_tokens": {"dist": "fixed", "value": 32}, "output_tokens": {"dist": "fixed", "value": 4}},
}
PLAN: dict[str, Any] = {
    "scenario": SMALL, "candidates": [{"name": "a", "price_per_gpu_hour": 1.0}], "slo": {"ttft_p99_ms": 500},
    "regions": [{"name": "r", "rtt_ms": {"r": 1}}], "forecast": [{"quarter": "Q1", "region": "r", "peak_rps": 2}],
    "simulation": {"num_requests": 200, "max_replicas": 4},
}


def error(fn: Any, *needles: str) -> str:
    """``fn()`` raises one single-line ScenarioError holding every needle; its text."""
    with pytest.raises(ScenarioError) as info:
        fn()
    text = str(info.value)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    return text


@pytest.fixture(scope="module")
def scenario() -> simulator.Scenario:
    return scenario_from_dict(SMALL)


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("plan") / "plan.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    return str(path)


# -- the command line ------------------------------------------------------------------------------------
def test_a_non_ascii_name_on_a_non_utf8_terminal_is_a_finished_run(tmp_path: Path) -> None:
    """With ``LC_ALL=C`` the table printed after the files were written raised UnicodeEncodeError: exit 1
    after a finished run. Now the name is written as escapes and the table in ASCII: exit 0."""
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "name": "café-Ω"}, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "o"
    proc = run_cli("simulate", str(path), "--out", str(out), LC_ALL="C", LANG="C", PYTHONCOERCECLOCALE="0",
                   PYTHONUTF8="0", PYTHONIOENCODING="")
    assert proc.returncode == 0, proc.stderr
    assert "caf\\xe9-\\u03a9" in proc.stdout and "latency (ms)" in proc.stdout
    assert (out / "summary.json").is_file()


@pytest.mark.parametrize("args, words", [
    (("simulate", EXAMPLE, "--seed", "abc"), "--seed = 'abc': must be a whole number"),
    (("simulate", EXAMPLE, "--seed", "1.5"), "--seed = '1.5': must be a whole number"),
    (("simulate", EXAMPLE, "--seed", str(2**70)), f"--seed = {2**70}: must be a whole number from 0 to 2^62"),
    (("plan", "p.yaml", "--timeout", "abc"), "--timeout = 'abc': must be a number"),
    (("plan", "p.yaml", "--workers", "two"), "--workers = 'two': must be a whole number"),
])
def test_a_value_of_the_wrong_type_is_the_one_line_error(args: tuple[str, ...], words: str) -> None:
    """They printed a usage box that did not repeat the value."""
    assert_one_error_line(run_cli(*args), words)


def test_an_out_name_too_long_for_the_file_system_names_out(tmp_path: Path, plan_file: str) -> None:
    """A 300-character --out ended in ``internal error: OSError [Errno 36]`` after the run (exit 1)."""
    out = tmp_path / ("o" * 300)
    line = assert_one_error_line(run_cli("simulate", EXAMPLE, "--out", str(out)), "--out = ", "choose a shorter name")
    assert "at most" in line
    # the staging folder's name is longer than the folder's: a name that fits only without it is refused too
    assert_one_error_line(run_cli("simulate", EXAMPLE, "--out", str(tmp_path / ("o" * 250))), "--out = ", "at most")
    assert_one_error_line(run_cli("plan", plan_file, "--out", str(tmp_path / ("w" * 250 + ".csv"))), "--out = ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [("simulate", EXAMPLE), ("plan", "PLAN"), ("calibrate", "--quick"),
                                     ("import-profile", "vidur")])
def test_an_out_folder_with_a_control_character_is_refused(tmp_path: Path, command: tuple[str, ...],
                                                           plan_file: str) -> None:
    """``simulate --out $'o\\nx'`` made a folder with a newline in its name."""
    out = tmp_path / "o\nx"
    command = tuple(plan_file if part == "PLAN" else part for part in command)
    assert_one_error_line(run_cli(*command, "--out", str(out)), "--out = ", "\\n", "control characters")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [("calibrate", "--quick"), ("import-profile", "vidur")])
def test_a_profile_name_with_a_control_character_is_refused_before_measuring(tmp_path: Path,
                                                                            command: tuple[str, ...]) -> None:
    """``calibrate --name $'a\\nb'`` was accepted and measuring started."""
    out = tmp_path / "p"
    assert_one_error_line(run_cli(*command, "--out", str(out), "--name", "a\nb"), "--name = 'a\\nb'",
                          "control characters")
    assert not out.exists()


@pytest.mark.parametrize("where, change", [
    ("name", lambda d: d.update(name="a\x1b[31mb")),
    ("workload.tiers.0.name", lambda d: d["workload"].update(tiers=[{"name": "a\nb", "share": 1.0}])),
    ("model.name", lambda d: d.update(model={**simulator.MODEL_PRESETS["tiny-llama"].model_dump(), "name": "m\tx"})),
])
def test_scenario_names_with_control_characters_are_refused(where: str, change: Any) -> None:
    data = copy.deepcopy(SMALL)
    change(data)
    error(lambda: scenario_from_dict(data), f"{where} = ", "must not hold control characters")


@pytest.mark.parametrize("where, change", [
    ("name", lambda p: p.update(name="plan\r")),
    ("candidates[0].name", lambda p: p["candidates"][0].update(name="a\u2028b")),
    ("regions[0].name", lambda p: p["regions"][0].update(name="r\x00")),
    ("forecast[0].quarter", lambda p: p["forecast"][0].update(quarter="Q\n1")),
])
def test_plan_names_with_control_characters_are_refused(where: str, change: Any) -> None:
    plan = copy.deepcopy(PLAN)
    change(plan)
    error(lambda: load_plan(plan), f"{where} = ", "must not hold control characters")


def test_a_forecast_peak_typed_nan_is_named_as_not_finite(tmp_path: Path) -> None:
    """A CSV cell ``nan`` was reported as ``None: required value is missing``; an inline ``'nan'`` as above
    the largest peak."""
    csv = tmp_path / "f.csv"
    csv.write_text("quarter,region,peak_rps\nQ1,r,nan\n")
    error(lambda: load_plan({**PLAN, "forecast": str(csv)}, tmp_path), "f.csv row 2 column peak_rps = 'nan'",
          "finite number")
    csv.write_text("quarter,region,peak_rps\nQ1,r,\n")   # an empty cell is still a missing value
    error(lambda: load_plan({**PLAN, "forecast": str(csv)}, tmp_path), "peak_rps = None",
          "required value is missing")
    csv.write_text("quarter,region,peak_rps\nQ1,NA,3\n")   # and "NA" is a name (North America), not missing
    error(lambda: load_plan({**PLAN, "forecast": str(csv)}, tmp_path), "f.csv row 2 column region = 'NA'",
          "unknown region")
    csv.write_text("quarter,region,peak_rps\nQ1,r,3\nQ1,r,4\n")   # the spreadsheet's row numbers, both rows
    error(lambda: load_plan({**PLAN, "forecast": str(csv)}, tmp_path), "f.csv row 3 = 'Q1 r'",
          "appear twice (also f.csv row 2)")
    rows = [{"quarter": "Q1", "region": "r", "peak_rps": "nan"}]
    error(lambda: load_plan({**PLAN, "forecast": rows}), "forecast[0].peak_rps = 'nan'", "finite number")


def test_a_trace_of_too_many_rows_names_the_trace_file(tmp_path: Path) -> None:
    """A trace of 1,000,001 rows blamed ``num_requests = None`` and did not name the trace."""
    from simulator.scenario.limits import MAX_NUM_REQUESTS

    trace = tmp_path / "big.csv"
    n = MAX_NUM_REQUESTS + 1
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "2023-11-16 18:15:46,8,2\n" * n)
    data = {k: v for k, v in SMALL.items() if k != "num_requests"}
    data["workload"] = {**SMALL["workload"], "arrival": {"process": "trace", "path": str(trace), "format": "azure"}}
    error(lambda: simulate(scenario_from_dict(data)), f"workload.arrival.path = '{trace}'",
          f"the trace replays {n:,} requests", "set num_requests")


def test_a_plan_too_big_is_refused_and_a_plan_says_its_size_before_it_starts(tmp_path: Path) -> None:
    """A forecast of 40,000 cells ran with no limit, no estimate and no output for minutes."""
    from simulator.scenario.limits import MAX_PLAN_SEARCHES

    csv = tmp_path / "f.csv"
    cells = MAX_PLAN_SEARCHES // 2 + 1
    csv.write_text("quarter,region,peak_rps\n" + "".join(f"Q{i},r,2\n" for i in range(cells)))
    big = {**PLAN, "forecast": str(csv), "candidates": [{"name": "a", "price_per_gpu_hour": 1.0},
                                                        {"name": "b", "price_per_gpu_hour": 2.0}]}
    error(lambda: load_plan(big, tmp_path), f"forecast = '{cells:,} cells x 2 candidates'",
          f"{2 * cells:,} searches, at most {MAX_PLAN_SEARCHES:,}")
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big))
    assert_one_error_line(run_cli("plan", str(path), "--out", str(tmp_path / "out")), "at most 5,000")
    small = tmp_path / "small.yaml"
    small.write_text(yaml.safe_dump(PLAN))
    proc = run_cli("plan", str(small), "--workers", "1", "--out", str(tmp_path / "ok"))
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first == ("plan: 1 searches (1 cells x 1 candidates; at most 5,000), each over 1-4 replicas, runs of "
                     "200 requests, 3 seeds per count (8 where the decision is noisy)"), proc.stderr


# -- the Python API ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path, words", [
    (123, "path = 123: must be a scenario file path (a str or pathlib.Path), not int"),
    (None, "path = None: must be a scenario file path"),
    (b"s.yaml", "path = b's.yaml'"),
    ("", "path = '': must be a scenario file path, not empty text"),
    ("a\x00b.yaml", "NUL"),
])
def test_load_scenario_checks_its_path(path: Any, words: str) -> None:
    error(lambda: load_scenario(path), words)


@pytest.mark.parametrize("overrides, words", [
    ("num_requests=5", "overrides = 'num_requests=5': must be a list of \"key.path=value\" strings or a dict",
     ),
    ({1: 2}, "the key 1 is not text"),
    (["num_requests=5", 7], "the item 7 is not text"),
    (5, "not int"),
])
def test_load_scenario_checks_its_overrides(overrides: Any, words: str) -> None:
    """A string where a list is expected was read letter by letter and blamed ``--set = 'n'``."""
    text = error(lambda: load_scenario(EXAMPLE, overrides), words)
    assert "--set" not in text


def test_load_scenario_takes_every_form_of_overrides() -> None:
    for overrides in (["num_requests=5"], ("num_requests=5",), {"num_requests": 5}):
        assert load_scenario(Path(EXAMPLE), overrides).num_requests == 5


@pytest.mark.parametrize("data, base_dir, words", [
    ("name: x", None, "scenario = 'name: x': must be a mapping"),
    (SMALL, 5, "base_dir = 5: must be a folder path"),
    (SMALL, "", "base_dir = '': must be a folder path, not empty text"),
])
def test_scenario_from_dict_checks_its_arguments(data: Any, base_dir: Any, words: str) -> None:
    error(lambda: scenario_from_dict(data, base_dir=base_dir), words)


@pytest.mark.parametrize("value", ["s.yaml", None, SMALL, Path("s.yaml")])
def test_simulate_and_resolve_check_the_scenario(value: Any) -> None:
    """``simulate('s.yaml')`` and ``resolve(None)`` raised AttributeError from deep inside."""
    for fn in (simulate, resolve):
        error(lambda fn=fn: fn(value), "scenario = ", f": must be a Scenario, not {type(value).__name__}",
              "load_scenario(path)")


@pytest.mark.parametrize("seed, words", [
    ("abc", "seed = 'abc': must be a whole number from 0 to 2^62, not str"),
    (1.5, "seed = 1.5: must be a whole number from 0 to 2^62, not float"),
    (True, "seed = True"),
    (-1, "seed = -1: must be a whole number from 0 to 2^62"),
    (2**70, f"seed = {2**70}: must be a whole number from 0 to 2^62"),
])
def test_simulate_checks_its_seed_with_the_clis_limits(scenario: simulator.Scenario, seed: Any, words: str) -> None:
    error(lambda: simulate(scenario, seed=seed), words)


def test_simulate_takes_any_whole_seed_within_the_limits(scenario: simulator.Scenario) -> None:
    assert simulate(scenario, seed=2**62).scenario.seed == 2**62
    assert simulate(scenario, seed=np.int64(3)).scenario.seed == 3


def test_simulate_checks_on_progress_and_fast_forward_before_the_run(scenario: simulator.Scenario) -> None:
    """``on_progress=5`` failed seconds into the run."""
    error(lambda: simulate(scenario, on_progress=5), "on_progress = 5: must be None or a function")
    error(lambda: simulate(scenario, fast_forward="no"), "fast_forward = 'no': must be True or False")
    calls: list[tuple[int, int]] = []
    simulate(scenario, on_progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1]


@pytest.mark.parametrize("kwargs, words", [
    ({"ref": 5}, "hardware = 5: must be a profile name, a path to a profile, a mapping or a HardwareProfile"),
    ({"ref": None}, "hardware = None"),
    ({"ref": "h100-sxm", "base_dir": None}, "base_dir = None: must be a folder path"),
    ({"ref": "h100-sxm", "field": 3}, "field = 3: must be text"),
])
def test_load_profile_checks_its_arguments(kwargs: dict[str, Any], words: str) -> None:
    error(lambda: load_profile(**kwargs), words)


def test_load_profile_still_takes_a_path_object() -> None:
    assert load_profile(REPO / "hwprofiles" / "h100-sxm").name == "h100-sxm"


def test_every_public_function_is_covered_here() -> None:
    """A new public function of ``simulator`` gets its argument checks and a test here."""
    functions = sorted(name for name in simulator.__all__ if callable(getattr(simulator, name))
                       and not isinstance(getattr(simulator, name), type))
    assert functions == ["available_profiles", "load_profile", "load_scenario", "resolve", "scenario_from_dict",
                         "simulate"]
    assert isinstance(simulator.available_profiles(), dict)   # no arguments to check
