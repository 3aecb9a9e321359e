"""Token-length distributions (``lognormal``, ``geometric``, ``fixed``, ``uniform``, ``empirical``),
registered under the strings the YAML uses; each draws from an explicit ``numpy.random.Generator``."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.errors import ScenarioError
from simulator.registry import Registry
from simulator.scenario.config import (
    EmpiricalLength,
    FixedLength,
    GeometricLength,
    LognormalLength,
    Scenario,
    UniformLength,
)
from simulator.scenario.files import read_csv, require_file
from simulator.scenario.limits import MAX_MODEL_LEN

LENGTHS: Registry[Callable[..., Any]] = Registry("length distribution", "workload.*_tokens.dist")
register_length = LENGTHS.register


@register_length("fixed")
class Fixed:
    def __init__(self, cfg: FixedLength, scenario: Scenario, field: str) -> None:
        self.value = cfg.value
        self.max = cfg.value

    @property
    def mean(self) -> float:
        return float(self.value)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


@register_length("uniform")
class Uniform:
    def __init__(self, cfg: UniformLength, scenario: Scenario, field: str) -> None:
        self.lo, self.max = cfg.min, cfg.max

    @property
    def mean(self) -> float:
        return (self.lo + self.max) / 2.0

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.lo, self.max + 1, n, dtype=np.int64)


@register_length("geometric")
class Geometric:
    """P(k) = p (1-p)^(k-1) on k >= 1 with p = 1 / mean; truncated to ``max`` by resampling."""

    def __init__(self, cfg: GeometricLength, scenario: Scenario, field: str) -> None:
        self.p = 1.0 / cfg.mean
        self.max = cfg.max
        self.cfg, self.field = cfg, field

    @property
    def mean(self) -> float:
        if self.max is None:
            return 1.0 / self.p
        k = np.arange(1, self.max + 1)
        pmf = self.p * (1 - self.p) ** (k - 1)
        return float((k * pmf).sum() / pmf.sum())

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return _resample_within(lambda m: rng.geometric(self.p, m).astype(np.int64), n, None, self.max, self.field,
                                self.cfg)


@register_length("lognormal")
class Lognormal:
    """Rounded lognormal with mean ``mean`` before truncation, truncated to [min, max] by resampling."""

    def __init__(self, cfg: LognormalLength, scenario: Scenario, field: str) -> None:
        self.mu = math.log(cfg.mean) - cfg.sigma**2 / 2.0
        self.sigma, self.min, self.max = cfg.sigma, cfg.min, cfg.max
        self._mean = cfg.mean
        self.cfg, self.field = cfg, field
        if self.max is not None and self.max < self.min:
            raise ScenarioError(f"{field}.max", self.max, f"is below min={self.min}")

    @property
    def mean(self) -> float:
        """Mean of the untruncated distribution (the truncated one is slightly lower)."""
        return self._mean

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        draw = lambda m: np.rint(rng.lognormal(self.mu, self.sigma, m)).astype(np.int64)  # noqa: E731
        return _resample_within(draw, n, self.min, self.max, self.field, self.cfg)


@register_length("empirical")
class Empirical:
    """Draws (with replacement) from a CSV column; see :class:`simulator.scenario.config.EmpiricalLength`."""

    def __init__(self, cfg: EmpiricalLength, scenario: Scenario, field: str) -> None:
        path = scenario.resolve_path(cfg.path)
        require_file(path, f"{field}.path", cfg.path, "CSV file", missing="file not found")
        table = read_csv(path, f"{field}.path")
        if cfg.column not in table.columns:
            raise ScenarioError(f"{field}.column", cfg.column,
                                f"no such column in {path.name}; columns: {', '.join(map(str, table.columns))}")
        import pandas as pd
        values = pd.to_numeric(table[cfg.column], errors="coerce").to_numpy(dtype=float)
        if len(values) == 0:
            raise ScenarioError(f"{field}.column", cfg.column, "needs a non-empty column of integers >= 1")
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~np.isfinite(values) | (values < 1) | (values % 1 != 0) | (values > MAX_MODEL_LEN))
        if len(bad):   # row 1 is the header, as a spreadsheet counts
            raise ScenarioError(f"{path} row {int(bad[0]) + 2} column {cfg.column}", table[cfg.column].iloc[bad[0]],
                                f"token counts must be integers from 1 to {MAX_MODEL_LEN:,}")
        self.path = path.resolve()
        self.values = values.astype(np.int64)
        self.max = int(self.values.max())

    @property
    def mean(self) -> float:
        return float(self.values.mean())

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.values[rng.integers(0, len(self.values), n)]


def _resample_within(draw: Callable[[int], np.ndarray], n: int, lo: int | None, hi: int | None, field: str,
                     cfg: Any) -> np.ndarray:
    """``n`` draws within ``[lo, hi]`` (None: unbounded), those outside drawn again; an error naming ``field``
    (the distribution ``cfg``) when 1,000 rounds still leave some outside."""
    out = draw(n)
    for _ in range(1000):
        bad = np.flatnonzero(((out > hi) if hi is not None else False) | ((out < lo) if lo is not None else False))
        if len(bad) == 0:
            return out
        out[bad] = draw(len(bad))
    bounds = f"[{lo if lo is not None else 1}, {hi if hi is not None else 'no max'}]"
    raise ScenarioError(field, cfg.model_dump(exclude_none=True),
                        f"almost every draw falls outside {bounds} (lengths outside min/max are drawn again): "
                        "widen min/max or move the mean inside them")


def make_length(cfg: Any, scenario: Scenario, field: str) -> Any:
    return LENGTHS.lookup(cfg.dist)(cfg, scenario, field)


# -- putting it together ---------------------------------------------------------------------------
