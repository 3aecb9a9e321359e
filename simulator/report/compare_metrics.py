"""Measured latencies beside a prediction (``llmplan compare-metrics``).

The measurement is a vLLM server's Prometheus export (the text of ``/metrics``) or a ``vllm bench
serve`` result JSON (``--save-result``); the prediction a scenario (simulated here) or a ``simulate
--json`` summary. Each metric both sides have becomes a row: measured and predicted mean, p50, p90
and p99 and the relative error ``predicted / measured - 1``.

From ``/metrics`` (histograms summed over their label sets; quantiles interpolated within a bucket
as PromQL's ``histogram_quantile`` does, so each is known only to its bucket, which the row shows):

================================================  =====================================
vLLM metric                                        compared with
================================================  =====================================
``vllm:time_to_first_token_seconds``               ``ttft_s``
``vllm:request_time_per_output_token_seconds``     ``tpot_s`` (per request)
``vllm:inter_token_latency_seconds``               ``itl_s`` (per token)
``vllm:time_per_output_token_seconds``             ``itl_s`` (older vLLM: one observation per token)
``vllm:e2e_request_latency_seconds``               ``e2e_s``
``vllm:request_queue_time_seconds``                ``queue_delay_s``
``vllm:request_success_total``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``
                                                   mean prompt and output tokens per request
================================================  =====================================

A server's counters and histograms accumulate from its start: export them after a run on a fresh
server, or give the export taken before the run (``since``) to compare the difference.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import ScenarioError
from simulator.report.prometheus import Histogram, Metrics, histogram, parse_prometheus, read_prometheus

STATS = ("mean", "p50", "p90", "p99")
#: Summary metric -> vLLM histograms measuring it, preferred first.
VLLM_HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft_s": ("vllm:time_to_first_token_seconds",),
    "tpot_s": ("vllm:request_time_per_output_token_seconds",),
    "itl_s": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e_s": ("vllm:e2e_request_latency_seconds",),
    "queue_delay_s": ("vllm:request_queue_time_seconds",),
}
#: ``vllm bench serve`` result keys (``mean_<key>_ms``, ``median_<key>_ms``, ``p<N>_<key>_ms``) per metric.
BENCH_KEYS = {"ttft_s": "ttft", "tpot_s": "tpot", "itl_s": "itl", "e2e_s": "e2el"}


@dataclass
class Measured:
    """What a measurement file says: per metric, its statistics in seconds; per-request means and
    rates; for a histogram, the bucket each statistic lies in; notes on what was read."""

    source: str
    kind: str
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    buckets: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    totals: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def read_measured(path: Path, since: Path | None = None) -> Measured:
    """A vLLM ``/metrics`` export or a ``vllm bench serve`` result JSON (by content: a JSON object is
    the latter); ``since``: an export taken before the run, subtracted from ``path``'s.

    Raises:
        ScenarioError: naming the file when it is neither, or has none of the metrics compared.
    """
    if not path.is_file():
        raise ScenarioError("measured", str(path), "file not found")
    text = _text(path, "measured")
    if text.lstrip().startswith("{"):
        if since is not None:
            raise ScenarioError("--since", str(since), "applies to Prometheus exports, not a bench result JSON")
        return _read_bench(path, text)
    metrics = parse_prometheus(text, str(path))
    if since is not None:
        metrics = _difference(metrics, read_prometheus(since))
    return _read_metrics(metrics, str(path), since)


def _read_metrics(metrics: Metrics, source: str, since: Path | None = None) -> Measured:
    out = Measured(source, "prometheus")
    empty = False
    for metric, names in VLLM_HISTOGRAMS.items():
        for name in names:
            h = histogram(metrics, name, source)
            if h is not None and h.count <= 0:
                empty = True
            if h is None or h.count <= 0:
                continue
            out.stats[metric] = _histogram_stats(h)
            for stat, value in out.stats[metric].items():
                if stat != "mean":
                    out.buckets[(metric, stat)] = h.resolution(value)
            out.notes.append(f"{metric.removesuffix('_s')}: {name} ({h.count:,.0f} observations, {len(h.bounds)} "
                             "buckets)")
            break
    requests = metrics.total("vllm:request_success_total")
    if requests:
        out.totals["requests"] = requests
        for key, name in (("mean_prompt_tokens", "vllm:prompt_tokens_total"),
                          ("mean_output_tokens", "vllm:generation_tokens_total")):
            total = metrics.total(name)
            if total is not None:
                out.totals[key] = total / requests
    if not out.stats and empty:
        raise ScenarioError("measured", source, "vLLM's latency histograms hold no observations"
                            + (f" after {since}'s are subtracted (--since): export /metrics before the run and "
                               "after it" if since is not None else ": export /metrics after the run"))
    if not out.stats:
        raise ScenarioError("measured", source, "has none of vLLM's latency histograms ("
                            + ", ".join(n for names in VLLM_HISTOGRAMS.values() for n in names) + ")")
    return out


def _histogram_stats(h: Histogram) -> dict[str, float]:
    stats = {"mean": h.mean}
    for stat in STATS[1:]:
        stats[stat] = h.quantile(int(stat[1:]) / 100)
    return {k: v for k, v in stats.items() if v is not None}


def _difference(after: Metrics, before: Metrics) -> Metrics:
    """``after - before`` per series (a counter or histogram over the run between two exports)."""
    out = Metrics(types=dict(after.types))
    for name, series in after.samples.items():
        old = {tuple(sorted(labels.items())): value for labels, value in before.samples.get(name, [])}
        out.samples[name] = [(labels, value - old.get(tuple(sorted(labels.items())), 0.0)) for labels, value in series]
    return out


def _text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(what, str(path), f"cannot read the file as UTF-8 text ({exc})") from None


def _bench_total(data: dict[str, Any], name: str, path: Path) -> float | None:
    """A count or rate of a bench result (None when absent), refused unless a non-negative finite number."""
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ScenarioError(f"{path} {name}", value, "must be a non-negative number")
    return float(value)


def _read_bench(path: Path, text: str) -> Measured:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError("measured", str(path), f"not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise ScenarioError("measured", str(path), "a vllm bench serve result is a JSON object")
    out = Measured(str(path), "vllm-bench")
    for metric, key in BENCH_KEYS.items():
        stats: dict[str, float] = {}
        for stat, name in (("mean", f"mean_{key}_ms"), ("p50", f"median_{key}_ms"), ("p50", f"p50_{key}_ms"),
                           ("p90", f"p90_{key}_ms"), ("p99", f"p99_{key}_ms")):
            value = data.get(name)
            if value is None or stat in stats:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ScenarioError(f"{path} {name}", value, "must be a number of milliseconds")
            stats[stat] = value / 1000.0
        if stats:
            out.stats[metric] = stats
    if not out.stats:
        raise ScenarioError("measured", str(path), "not a vllm bench serve result: none of mean_ttft_ms, "
                            "median_ttft_ms, p99_ttft_ms, ... (save it with --save-result)")
    completed = _bench_total(data, "completed", path)
    if completed:
        out.totals["requests"] = completed
        for key, name in (("mean_prompt_tokens", "total_input_tokens"), ("mean_output_tokens", "total_output_tokens")):
            total = _bench_total(data, name, path)
            if total is not None:
                out.totals[key] = total / completed
    for key, name in (("requests_per_s", "request_throughput"), ("output_tokens_per_s", "output_throughput")):
        rate = _bench_total(data, name, path)
        if rate is not None:
            out.totals[key] = rate
    out.notes.append(f"vllm bench serve result: {int(out.totals.get('requests', 0)):,} requests completed")
    return out


def read_prediction(path: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The summary of a prediction: a ``simulate --json`` summary (``.json``) or a scenario, simulated."""
    if path.suffix.lower() == ".json":
        if overrides:
            raise ScenarioError("--set", overrides, "applies to a scenario, not to a summary JSON")
        if not path.is_file():
            raise ScenarioError("prediction", str(path), "file not found")
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ScenarioError("prediction", str(path), f"not a readable JSON file ({exc})") from None
        if not isinstance(summary, dict) or "ttft_s" not in summary:
            raise ScenarioError("prediction", str(path), "not a simulate --json summary (no ttft_s)")
        return summary
    from simulator.run.simulate import simulate
    from simulator.scenario.config import load_scenario
    return simulate(load_scenario(path, overrides)).summary


def compare(measured: Measured, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (metric, statistic) both sides have: measured, predicted, relative error, and the
    measurement's bucket (Prometheus histograms)."""
    rows: list[dict[str, Any]] = []
    for metric, stats in measured.stats.items():
        predicted = _section(summary, metric)
        for stat in STATS:
            m, p = stats.get(stat), _predicted(predicted, metric, stat)
            if m is None or p is None:
                continue
            lo, hi = measured.buckets.get((metric, stat), (None, None))
            rows.append({"metric": metric, "stat": stat, "measured": m, "predicted": p,
                         "relative_error": _rel(m, p), "bucket_low": lo, "bucket_high": hi})
    tp = _section(summary, "throughput")
    rps = _predicted(tp, "throughput", "requests_per_s")
    output_tps = _predicted(tp, "throughput", "output_tokens_per_s")
    input_tps = _predicted(tp, "throughput", "input_tokens_per_s")
    predicted_totals = {
        "requests_per_s": rps, "output_tokens_per_s": output_tps,
        "mean_prompt_tokens": input_tps / rps if rps and input_tps else None,
        "mean_output_tokens": output_tps / rps if rps and output_tps else None,
    }
    for key, p in predicted_totals.items():
        m = measured.totals.get(key)
        if m is not None and p is not None:
            rows.append({"metric": key, "stat": "mean" if key.startswith("mean") else "rate", "measured": m,
                         "predicted": p, "relative_error": _rel(m, p), "bucket_low": None, "bucket_high": None})
    if not rows:
        raise ScenarioError("prediction", summary.get("name"), f"shares no metric with {measured.source} "
                            f"(measured: {', '.join(measured.stats)})")
    return rows


def _section(summary: dict[str, Any], name: str) -> dict[str, Any]:
    """The summary's ``name`` section (empty when it has none)."""
    section = summary.get(name)
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ScenarioError(f"prediction: {name}", str(section)[:40], "must be a mapping, as `llmplan simulate "
                            "--json` writes it")
    return section


def _predicted(section: dict[str, Any], name: str, stat: str) -> float | None:
    """A summary figure (None when absent), refused unless a non-negative finite number."""
    v = section.get(stat)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ScenarioError(f"prediction: {name}.{stat}", v, "must be a non-negative number, as `llmplan simulate "
                            "--json` writes it")
    return float(v)


def _rel(measured: float, predicted: float) -> float | None:
    return predicted / measured - 1 if measured else None


def comparison_table(rows: list[dict[str, Any]], measured: Measured, prediction: str) -> Any:
    """The rows as a rich table: latencies in ms, the error in percent."""
    from rich.table import Table

    table = Table(title=f"measured ({measured.kind}: {measured.source}) vs predicted ({prediction})",
                  title_justify="left")
    for col in ("metric", "stat", "measured", "predicted", "error", "measured within"):
        table.add_column(col, justify="left" if col in ("metric", "stat") else "right")
    for r in rows:
        latency = r["metric"] in VLLM_HISTOGRAMS
        fmt = (lambda v: f"{v * 1000:,.1f} ms") if latency else (lambda v: f"{v:,.2f}")
        err = r["relative_error"]
        lo, hi = r["bucket_low"], r["bucket_high"]
        within = "-" if lo is None else f"{lo * 1000:,.0f}-{'inf' if math.isinf(hi) else f'{hi * 1000:,.0f}'} ms"
        name = r["metric"].removesuffix("_s") if latency else r["metric"]
        table.add_row(name, r["stat"], fmt(r["measured"]), fmt(r["predicted"]),
                      "-" if err is None else f"{100 * err:+.1f}%", within)
    return table
