"""Critical values of the two distributions every run summary needs, without ``scipy.stats``.

The summary's confidence intervals need Student's t quantile (the CI of a mean, the stability
test's slope) and the binomial quantile (the distribution-free CI of a percentile). Importing
``scipy.stats`` for them costs a third of a second, more than simulating thousands of requests,
so these call the special functions ``scipy.stats`` itself evaluates: ``t.ppf(q, df)`` is
``scipy.special.stdtrit(df, q)`` and ``binom.ppf(q, n, p)`` is the Boost ``_binom_ppf`` ufunc
(same inputs, same float results; ``tests/test_speed.py`` compares them over a grid). When a SciPy
release moves the private ufunc, the public ``scipy.stats`` path is used instead.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scipy.special import stdtrit


def _binom_ppf_public(q: float, n: int, p: float) -> float:
    from scipy import stats

    return float(stats.binom.ppf(q, n, p))


_binom_ppf: Callable[[float, int, float], Any]
try:
    from scipy.special import _ufuncs

    _binom_ppf = _ufuncs._binom_ppf
except (ImportError, AttributeError):  # pragma: no cover - another SciPy layout
    _binom_ppf = _binom_ppf_public


def t_ppf(q: float, df: int) -> float:
    """Quantile ``q`` (in (0, 1)) of Student's t with ``df >= 1`` degrees of freedom (``scipy.stats.t.ppf``)."""
    return float(stdtrit(df, q))


def binom_ppf(q: float, n: int, p: float) -> float:
    """Smallest ``k`` with ``P(Binomial(n, p) <= k) >= q`` for ``q`` in (0, 1) (``scipy.stats.binom.ppf``)."""
    return float(_binom_ppf(q, n, p))
