"""The Prometheus text exposition format (what a vLLM server's ``/metrics`` returns), read without a
client library: samples, label sets, histograms and their quantiles.

:func:`parse_prometheus` reads every sample line ``name{label="value",...} value [timestamp]``
(``# HELP``/``# TYPE`` lines give the metric types; other comments are skipped); label values may
hold the escapes ``\\\\``, ``\\"`` and ``\\n``; values may be ``+Inf``, ``-Inf`` or ``NaN``.
:func:`histogram` sums a histogram's series over their label sets (vLLM exports one per model name
and engine) and :meth:`Histogram.quantile` interpolates a quantile within its bucket as PromQL's
``histogram_quantile`` does.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from simulator.errors import ScenarioError

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(\{{(.*)\}})?\s+(\S+)(\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass
class Metrics:
    """The samples of one export: ``samples[name]`` is a list of (labels, value); ``types[name]`` the
    ``# TYPE`` of each metric family."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def total(self, name: str) -> float | None:
        """The sum of a counter's or gauge's series (None: the export has no such metric)."""
        series = self.samples.get(name)
        return None if not series else float(sum(v for _, v in series))


@dataclass(frozen=True)
class Histogram:
    """A histogram summed over its series: cumulative counts per upper bound (ascending, the last
    ``+Inf``), the sum and the count of the observations."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """PromQL's ``histogram_quantile``: linear interpolation within the bucket holding rank
        ``q x count`` (the first bucket starts at 0); a rank in the ``+Inf`` bucket gives the largest
        finite bound. None for an empty histogram."""
        total = self.cumulative[-1] if self.cumulative else 0.0
        if total <= 0:
            return None
        rank = q * total
        prev_bound, prev_count = 0.0, 0.0
        for bound, count in zip(self.bounds, self.cumulative, strict=True):
            if count >= rank:
                if math.isinf(bound):
                    return prev_bound
                if bound <= 0 or count == prev_count:
                    return bound
                return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
            prev_bound, prev_count = bound, count
        return prev_bound

    def resolution(self, value: float) -> tuple[float, float]:
        """The bucket (lower, upper bound) ``value`` falls in: how precisely the export knows it."""
        lower = 0.0
        for bound in self.bounds:
            if value <= bound:
                return lower, bound
            lower = bound
        return lower, math.inf


def parse_prometheus(text: str, source: str) -> Metrics:
    """Every sample of a text-format export.

    Raises:
        ScenarioError: naming ``source`` and the line of a sample that cannot be read.
    """
    out = Metrics()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                out.types[parts[2]] = parts[3].strip()
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise ScenarioError(f"{source} line {lineno}", line[:80], "not a Prometheus sample "
                                '(name{label="value",...} value); is this a /metrics text export?')
        name, label_text, value_text = m.group(1), m.group(3), m.group(4)
        try:
            value = _value(value_text)
            labels = _labels(label_text or "")
        except ValueError as exc:
            raise ScenarioError(f"{source} line {lineno}", line[:80], str(exc)) from None
        out.samples.setdefault(name, []).append((labels, value))
    if not out.samples:
        raise ScenarioError("metrics", source, "no Prometheus samples in the file")
    return out


def _value(text: str) -> float:
    special = {"+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if text in special:
        return special[text]
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"the value {text!r} is not a number") from None


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            raise ValueError(f"the labels {{{text}}} are not name=\"value\" pairs")
        labels[m.group(1)] = re.sub(r'\\[\\"n]', lambda e: _ESCAPES[e.group(0)], m.group(2))
        pos = m.end()
    return labels


def histogram(metrics: Metrics, name: str, source: str) -> Histogram | None:
    """Histogram ``name`` (its ``_bucket``, ``_sum`` and ``_count`` samples) summed over every label
    set; None when the export has none.

    Raises:
        ScenarioError: the buckets of its series do not share the same bounds, or lack ``+Inf``.
    """
    buckets = metrics.samples.get(f"{name}_bucket")
    if not buckets:
        return None
    per_bound: dict[float, float] = {}
    series_bounds: dict[tuple[tuple[str, str], ...], set[float]] = {}
    for labels, value in buckets:
        if "le" not in labels:
            raise ScenarioError(f"{source} {name}_bucket", labels, "a bucket without its le label")
        try:
            bound = _value(labels["le"])
        except ValueError:
            bound = math.nan
        if math.isnan(bound):
            raise ScenarioError(f"{source} {name}_bucket le", labels["le"], "a bucket's upper bound must be a number "
                                "or +Inf")
        _count(value, f"{source} {name}_bucket{{le={labels['le']!r}}}")
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        series_bounds.setdefault(key, set()).add(bound)
        per_bound[bound] = per_bound.get(bound, 0.0) + value
    shapes = {frozenset(b) for b in series_bounds.values()}
    if len(shapes) > 1:
        raise ScenarioError(f"{source} {name}_bucket", len(shapes), "its series have different bucket bounds; "
                            "they cannot be summed")
    bounds = tuple(sorted(per_bound))
    if not bounds or not math.isinf(bounds[-1]):
        raise ScenarioError(f"{source} {name}_bucket", bounds[-1] if bounds else None, 'no le="+Inf" bucket')
    cumulative = tuple(per_bound[b] for b in bounds)
    for lower, upper, above in zip(bounds, bounds[1:], cumulative[1:], strict=False):
        if above < per_bound[lower]:
            raise ScenarioError(f"{source} {name}_bucket{{le={upper:g}}}", above, "fewer observations than the "
                                f"bucket below it (le={lower:g}: {per_bound[lower]:g}); bucket counts are "
                                "cumulative")
    total_s = metrics.total(f"{name}_sum")
    count = metrics.total(f"{name}_count")
    return Histogram(bounds, cumulative, _count(total_s, f"{source} {name}_sum") if total_s is not None else 0.0,
                     _count(count, f"{source} {name}_count") if count else cumulative[-1])


def _count(value: float, where: str) -> float:
    """A histogram's count or sum: finite and not negative (after ``--since``, a negative one means
    the export taken before is not of the same server run)."""
    if not math.isfinite(value) or value < 0:
        raise ScenarioError(where, value, "must be a finite number, not negative (a difference with --since: "
                            "both exports must come from the same server run, the earlier one given to --since)")
    return value


def read_prometheus(path: Path) -> Metrics:
    """:func:`parse_prometheus` of a file (UTF-8 text)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError("metrics", str(path), f"cannot read the file ({exc})") from None
    return parse_prometheus(text, str(path))
