"""``llmplan compare-metrics``: the Prometheus text parser, histogram quantiles, the vLLM /metrics and
``vllm bench serve`` readers, and the comparison with a prediction. The samples in tests/data come
from one simulated run whose true values are in chat_h100_summary.json (make_vllm_samples.py)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.errors import ScenarioError
from simulator.report.compare_metrics import compare, read_measured, read_prediction
from simulator.report.prometheus import Histogram, histogram, parse_prometheus

DATA = Path(__file__).resolve().parent / "data"
CHAT = DATA.parent.parent / "examples" / "chat-h100.yaml"
PROM, BENCH, SUMMARY = DATA / "vllm_metrics.prom", DATA / "vllm_bench_result.json", DATA / "chat_h100_summary.json"


def test_parser_reads_labels_escapes_and_special_values() -> None:
    text = ('# HELP x a counter\n# TYPE x counter\n'
            'x{path="/a\\"b\\\\c",code="200"} 3 1700000000000\n'
            'x{path="/d",code="500",} 4.5e0\n'
            'y +Inf\nz NaN\n')
    m = parse_prometheus(text, "t")
    assert m.types["x"] == "counter" and m.total("x") == 7.5
    assert m.samples["x"][0][0] == {"path": '/a"b\\c', "code": "200"}
    assert math.isinf(m.samples["y"][0][1]) and math.isnan(m.samples["z"][0][1])
    with pytest.raises(ScenarioError, match=re.escape("t line 2 = 'x{a=1} 2': the labels")):
        parse_prometheus("ok 1\nx{a=1} 2\n", "t")
    with pytest.raises(ScenarioError, match="t line 1 = 'not a sample line at all': not a Prometheus sample"):
        parse_prometheus("not a sample line at all\n", "t")
    with pytest.raises(ScenarioError, match="the value 'abc' is not a number"):
        parse_prometheus("x abc\n", "t")


def test_histogram_quantile_follows_promql() -> None:
    h = Histogram((0.1, 0.5, 1.0, math.inf), (10.0, 60.0, 100.0, 100.0), 40.0, 100.0)
    assert h.quantile(0.05) == pytest.approx(0.05)           # first bucket from 0
    assert h.quantile(0.5) == pytest.approx(0.1 + 0.4 * 40 / 50)
    assert h.quantile(0.99) == pytest.approx(0.5 + 0.5 * 39 / 40)
    assert Histogram((1.0, math.inf), (1.0, 5.0), 9.0, 5.0).quantile(0.9) == 1.0   # +Inf bucket: last bound
    assert h.mean == 0.4 and h.resolution(0.3) == (0.1, 0.5)


def test_series_are_summed_and_must_share_bounds() -> None:
    text = "\n".join(f'h_bucket{{engine="{e}",le="{le}"}} {c}' for e, le, c in
                     [(0, 1, 1), (0, "+Inf", 2), (1, 1, 3), (1, "+Inf", 3)]) + "\nh_sum 5\nh_count 5\n"
    h = histogram(parse_prometheus(text, "t"), "h", "t")
    assert h is not None and h.cumulative == (4.0, 5.0) and h.count == 5
    bad = text.replace('engine="1",le="1"', 'engine="1",le="2"')
    with pytest.raises(ScenarioError, match="different bucket bounds"):
        histogram(parse_prometheus(bad, "t"), "h", "t")


def test_vllm_metrics_export_against_the_runs_true_values() -> None:
    measured = read_measured(PROM)
    truth = json.loads(SUMMARY.read_text())
    rows = compare(measured, truth)
    by = {(r["metric"], r["stat"]): r for r in rows}
    assert {m for m, _ in by} >= {"ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_delay_s", "mean_output_tokens"}
    for (metric, stat), r in by.items():
        if stat == "mean" and metric.endswith("_s"):
            # Exact sums and counts: the means agree (ITL over the whole run vs the summary's window).
            assert r["relative_error"] == pytest.approx(0, abs=0.01), (metric, r)
        elif r["bucket_low"] is not None:
            # A quantile is known to its bucket: the true value lies in it.
            assert r["bucket_low"] <= r["predicted"] <= r["bucket_high"], (metric, stat, r)
    assert by[("ttft_s", "p50")]["measured"] != by[("ttft_s", "p50")]["predicted"]     # interpolated, not read


def test_bench_result_against_the_same_run() -> None:
    rows = compare(read_measured(BENCH), json.loads(SUMMARY.read_text()))
    by = {(r["metric"], r["stat"]): r for r in rows}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for stat in ("mean", "p50", "p90", "p99"):
            assert by[(metric, stat)]["relative_error"] == pytest.approx(0, abs=1e-9), (metric, stat)
    assert by[("requests_per_s", "rate")]["measured"] > 0


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    other = tmp_path / "node.prom"
    other.write_text("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    with pytest.raises(ScenarioError, match="has none of vLLM's latency histograms"):
        read_measured(other)
    bench = tmp_path / "b.json"
    bench.write_text('{"foo": 1}')
    with pytest.raises(ScenarioError, match="not a vllm bench serve result"):
        read_measured(bench)
    with pytest.raises(ScenarioError, match="not a simulate --json summary"):
        read_prediction(bench)
    with pytest.raises(ScenarioError, match=r"measured = .*missing\.prom.*file not found"):
        read_measured(tmp_path / "missing.prom")


def test_since_subtracts_an_earlier_export(tmp_path: Path) -> None:
    before = tmp_path / "before.prom"
    # The same export halved: the difference is the other half, with the same quantiles.
    lines = []
    for line in PROM.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            lines.append(line)
            continue
        name, value = line.rsplit(" ", 1)
        lines.append(f"{name} {float(value) / 2!r}")
    before.write_text("\n".join(lines) + "\n")
    whole, half = read_measured(PROM), read_measured(PROM, since=before)
    assert half.totals["requests"] == whole.totals["requests"] / 2
    assert half.stats["ttft_s"]["p90"] == pytest.approx(whole.stats["ttft_s"]["p90"])


def test_cli_table_csv_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cmp.csv"
    res = runner.invoke(app, ["compare-metrics", str(PROM), str(SUMMARY), "--csv", str(out)])
    assert res.exit_code == 0, res.output
    assert "ttft" in res.output and "measured within" in res.output
    df = pd.read_csv(out)
    assert list(df.columns) == ["metric", "stat", "measured", "predicted", "relative_error", "bucket_low",
                                "bucket_high"]
    res = runner.invoke(app, ["compare-metrics", str(BENCH), str(CHAT), "--set", "num_requests=200",
                              "--set", "warmup_s=0", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert {r["metric"] for r in data["rows"]} >= {"ttft_s", "e2e_s"}
    bad = runner.invoke(app, ["compare-metrics", str(PROM), str(SUMMARY), "--set", "seed=1"])
    assert bad.exit_code == 2 and "error: --set" in bad.output


def _prom_with(tmp_path: Path, old: str, new: str) -> Path:
    text = PROM.read_text()
    assert old in text
    path = tmp_path / "m.prom"
    path.write_text(text.replace(old, new, 1))
    return path


def _ttft_bucket(le: str) -> str:
    """The first line of the TTFT histogram's bucket ``le``."""
    return next(line for line in PROM.read_text().splitlines()
                if line.startswith("vllm:time_to_first_token_seconds_bucket") and f'le="{le}"' in line)


@pytest.mark.parametrize("edit, words", [
    (lambda line: line.replace('le="0.01"', 'le="abc"'), ("time_to_first_token_seconds_bucket le = 'abc'",
                                                        "upper bound must be a number")),
    (lambda line: line.replace('le="0.01"', 'le="NaN"'), ("le = 'NaN'",)),
    (lambda line: line.rsplit(" ", 1)[0] + " NaN", ("time_to_first_token_seconds_bucket{le='0.01'} = nan",
                                                   "must be a finite number")),
    (lambda line: line.rsplit(" ", 1)[0] + " -3", ("= -3.0", "not negative")),
    (lambda line: line.rsplit(" ", 1)[0] + " 1e12", ("fewer observations than the bucket below it (le=0.01",
                                                    "cumulative")),
])
def test_a_bad_histogram_bucket_is_one_error_naming_it(tmp_path: Path, edit: Any, words: tuple[str, ...]) -> None:
    """A bucket bound that is not a number (an internal ValueError before), a count that is NaN, negative,
    or larger than the next bucket's (quantiles from them were silently wrong)."""
    line = _ttft_bucket("0.01")
    path = _prom_with(tmp_path, line, edit(line))
    with pytest.raises(ScenarioError) as info:
        read_measured(path)
    for w in words:
        assert w in str(info.value)


def test_since_from_another_run_or_the_same_instant_is_named(tmp_path: Path) -> None:
    """--since the same export: no observations between them; an export with more observations than
    the later one (another server run): a negative count, named."""
    with pytest.raises(ScenarioError, match=r"hold no observations after .* are subtracted"):
        read_measured(PROM, since=PROM)
    line = _ttft_bucket("+Inf")
    bigger = _prom_with(tmp_path, line, line.rsplit(" ", 1)[0] + " 1e9")
    with pytest.raises(ScenarioError, match=r"must be a finite number, not negative \(a difference with --since"):
        read_measured(PROM, since=bigger)


@pytest.mark.parametrize("section, key, value", [("ttft_s", "p99", ""), ("ttft_s", "p50", True),
                                                 ("throughput", "requests_per_s", "6.6"),
                                                 ("throughput", "input_tokens_per_s", -1.0)])
def test_a_summary_with_a_bad_figure_is_refused_naming_it(tmp_path: Path, section: str, key: str,
                                                          value: Any) -> None:
    """A hand-edited summary JSON whose figure is text, a boolean or negative (a TypeError before)."""
    doc = json.loads(SUMMARY.read_text())
    doc[section][key] = value
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ScenarioError, match=re.escape(f"prediction: {section}.{key}")):
        compare(read_measured(PROM), read_prediction(path))
    doc[section] = [1, 2]
    path.write_text(json.dumps(doc))
    with pytest.raises(ScenarioError, match=re.escape(f"prediction: {section} = '[1, 2]': must be a mapping")):
        compare(read_measured(PROM), read_prediction(path))


def test_a_bench_result_with_a_bad_total_is_refused(tmp_path: Path) -> None:
    doc = json.loads(BENCH.read_text())
    doc["completed"] = "200"
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ScenarioError, match="completed = '200': must be a non-negative number"):
        read_measured(path)
