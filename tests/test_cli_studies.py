"""``llmplan compare``, ``llmplan sweep`` and ``llmplan simulate --seeds N``: the numbers are those of the
library functions the dashboard uses (KPIs, baselines, load sweep), recomputed here independently, in the
table, ``--json`` and ``--out`` forms; bad options are one-line errors."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from simulator import load_scenario, simulate
from simulator.critical_values import t_ppf
from simulator.report.analysis import load_sweep, max_load_meeting_slo, run_kpis

SCENARIO = {
    "name": "small", "seed": 3, "num_requests": 300, "model": "tiny-llama",
    "hardware": {"cost_model": "constant", "step_time_s": 0.01, "prefill_time_per_token_s": 0.0001,
                 "price_per_gpu_hour": 2.0},
    "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 2048},
    "workload": {"arrival": {"process": "poisson", "rate_per_s": 20.0},
                 "prompt_tokens": {"dist": "geometric", "mean": 64, "max": 512},
                 "output_tokens": {"dist": "geometric", "mean": 16, "max": 128}},
    "slo": {"ttft_p99_ms": 200, "tpot_p99_ms": 30},
}


def invoke(*args: str):
    from simulator.cli import app

    return CliRunner().invoke(app, [*args, "--no-progress"])


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump(SCENARIO))
    b.write_text(yaml.safe_dump({**SCENARIO, "scheduler": {**SCENARIO["scheduler"], "max_num_seqs": 2}}))
    return a, b


def kpi_values(path: Path, overrides: dict | None = None) -> dict[str, float | None]:
    return {k.label: k.value for k in run_kpis(simulate(load_scenario(path, overrides or {})))}


def test_compare_two_files_is_each_kpi_against_the_first(files, tmp_path):
    a, b = files
    res = invoke("compare", str(a), str(b), "--json", "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.splitlines()[-1])
    assert doc["baseline"] == "a.yaml" and doc["runs"] == ["a.yaml", "b.yaml"]
    base, other = kpi_values(a), kpi_values(b)
    rows = {r["kpi"]: r for r in doc["compare"]}
    assert set(rows) == set(base)
    ttft = rows["TTFT p99"]
    assert ttft["baseline"] == pytest.approx(base["TTFT p99"]) and ttft["value"] == pytest.approx(other["TTFT p99"])
    assert ttft["delta"] == pytest.approx(other["TTFT p99"] - base["TTFT p99"])
    assert other["TTFT p99"] > 1.5 * base["TTFT p99"] and ttft["better"] is False   # 2 seqs queue far longer
    csv = pd.read_csv(tmp_path / "out" / "compare.csv")
    assert list(csv["kpi"]) == [r["kpi"] for r in doc["compare"]]
    assert csv["value"].to_numpy() == pytest.approx([r["value"] for r in doc["compare"]], nan_ok=True)
    table = invoke("compare", str(a), str(b))
    assert table.exit_code == 0 and "compared with a.yaml (baseline)" in table.stdout and "TTFT p99" in table.stdout


def test_compare_set_variants_of_one_scenario(files):
    a, _ = files
    res = invoke("compare", str(a), "--set", "scheduler.max_num_seqs=2",
                 "--set", "scheduler.max_num_seqs=2;deployment.replicas=2", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.splitlines()[-1])
    assert doc["runs"] == ["a.yaml", "scheduler.max_num_seqs=2", "scheduler.max_num_seqs=2;deployment.replicas=2"]
    two = kpi_values(a, {"scheduler.max_num_seqs": 2, "deployment.replicas": 2})
    row = next(r for r in doc["compare"] if r["run"] == doc["runs"][2] and r["kpi"] == "TTFT p99")
    assert row["value"] == pytest.approx(two["TTFT p99"])


@pytest.mark.parametrize("args, expect", [
    (("one",), "give a second scenario file, or --set variants"),
    (("two", "--set", "seed=1"), "--set variants compare one scenario with itself"),
    (("one", "--set", ";"), "--set = ';': give key.path=value"),
])
def test_compare_bad_input_is_one_line(files, args, expect):
    a, b = files
    paths = {"one": [str(a)], "two": [str(a), str(b)]}[args[0]]
    res = invoke("compare", *paths, *args[1:])
    assert res.exit_code == 2 and expect in res.output and res.output.count("\n") == 1, res.output


def test_simulate_seeds_mean_spread_and_confidence_interval(files, tmp_path):
    a, _ = files
    res = invoke("simulate", str(a), "--seeds", "4", "--seed", "10", "--json", "--out", str(tmp_path / "s"))
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.splitlines()[-1])
    assert doc["seeds"] == [10, 11, 12, 13]
    values = [kpi_values(a, {"seed": s})["TTFT p99"] for s in doc["seeds"]]
    m = next(r for r in doc["metrics"] if r["kpi"] == "TTFT p99")
    mean = sum(values) / 4
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 3)
    assert m["mean"] == pytest.approx(mean) and m["std"] == pytest.approx(std) and std > 0
    assert m["ci_high"] - m["mean"] == pytest.approx(t_ppf(0.975, 3) * std / 2)
    assert (m["min"], m["max"], m["n"]) == (pytest.approx(min(values)), pytest.approx(max(values)), 4)
    per_seed = pd.read_csv(tmp_path / "s" / "seeds.csv")
    assert list(per_seed["seed"]) == [10, 11, 12, 13]
    assert per_seed["ttft_p99"].to_numpy() == pytest.approx(values)
    assert {"seed-stats.csv", "summary.json", "scenario.yaml"} <= {p.name for p in (tmp_path / "s").iterdir()}
    table = invoke("simulate", str(a), "--seeds", "2")
    assert table.exit_code == 0 and "95% confidence interval" in table.stdout and "TTFT p99" in table.stdout
    one = invoke("simulate", str(a), "--seeds", "1")
    assert one.exit_code == 2 and "--seeds = 1: give 2 or more seeds" in one.output


def test_sweep_rates_and_concurrency_are_the_load_curves(files, tmp_path):
    a, _ = files
    res = invoke("sweep", str(a), "--rates", "10,40,160", "--json", "--out", str(tmp_path / "w"))
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.splitlines()[-1])
    want = load_sweep(load_scenario(a), [10, 40, 160])
    got = pd.DataFrame(doc["sweep"])
    assert list(got["rate_per_s"]) == [10, 40, 160]
    assert got["ttft_p99_s"].to_numpy() == pytest.approx(want["ttft_p99_s"].to_numpy())
    limit = max_load_meeting_slo(want)
    assert doc["limit"]["max_rate_per_s"] == limit["max_rate_per_s"]
    assert pd.read_csv(tmp_path / "w" / "sweep.csv")["rate_per_s"].tolist() == [10, 40, 160]
    table = invoke("sweep", str(a), "--rates", "10,40,160")
    assert table.exit_code == 0 and "largest load meeting the SLO" in table.stdout
    closed = invoke("sweep", str(a), "--concurrency", "1,4", "--set", "num_requests=200", "--json")
    assert closed.exit_code == 0, closed.output
    rows = json.loads(closed.stdout.splitlines()[-1])["sweep"]
    assert [r["concurrency"] for r in rows] == [1, 4] and rows[1]["throughput_rps"] > rows[0]["throughput_rps"]


@pytest.mark.parametrize("args, expect", [
    ((), "give exactly one of --rates and --concurrency"),
    (("--rates", "1", "--concurrency", "2"), "give exactly one of --rates and --concurrency"),
    (("--rates", "1,x"), "--rates = '1,x': comma-separated positive arrival rates"),
    (("--rates", "0,2"), "--rates = '0,2'"),
    (("--concurrency", "1.5"), "--concurrency = '1.5': comma-separated whole numbers of clients"),
])
def test_sweep_bad_loads_are_one_line(files, args, expect):
    res = invoke("sweep", str(files[0]), *args)
    assert res.exit_code == 2 and expect in res.output, res.output
