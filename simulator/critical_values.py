"""Critical values of the two distributions every run summary needs, in pure Python.

The summary's confidence intervals need Student's t quantile (the CI of a mean, the stability
test's slope) and the binomial quantile (the distribution-free CI of a percentile). Importing
SciPy for them (``scipy.stats``, or even ``scipy.special`` with its array-API layer) costs a
sixth to a third of a second of every process's start-up, more than simulating thousands of
requests, so they are computed here from the regularized incomplete beta function:

* ``binom_ppf(q, n, p)`` is the smallest ``k`` with ``P(X <= k) >= q``, where
  ``P(X <= k) = I_{1-p}(n - k, k + 1)``: an integer, equal to ``scipy.stats.binom.ppf`` (the
  tests compare thousands of cases; they can differ only where ``P(X <= k)`` lies within about
  1e-13 of ``q``).
* ``t_ppf(q, df)`` solves ``P(T > t) = 1 - q`` (``P(T > t) = I_x(df/2, 1/2) / 2`` with
  ``x = df / (df + t^2)``) by Newton's method below 1,000 degrees of freedom, and from 1,000 up
  uses the Cornish-Fisher expansion around the normal quantile (Abramowitz & Stegun 26.7.5, four
  terms; its error is below 1e-15 there). The result is within 1 part in 1e13 of
  ``scipy.stats.t.ppf`` for the 0.9 to 0.9999 quantiles (``tests/test_speed.py`` checks every
  ``df`` to 1,100 and some beyond), so a confidence interval may differ from SciPy's in its last
  two or three digits and no more.
"""
from __future__ import annotations

import functools
import math
from statistics import NormalDist

_TINY = 1e-300
_EPS = 1e-16
_MAX_TERMS = 1_000_000
_HALF_LN_PI = 0.5 * math.log(math.pi)
_SERIES_DF = 1000
"""From this many degrees of freedom up, the t quantile comes from the Cornish-Fisher expansion."""
_NORMAL = NormalDist()


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta ``I_x(a, b)`` (modified
    Lentz's method; it converges fast for ``x < (a + 1) / (a + b + 2)``)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"the incomplete beta I_{x}({a}, {b}) did not converge")  # pragma: no cover


def _incomplete_beta(a: float, b: float, x: float, y: float, ln_beta: float) -> float:
    """``I_x(a, b)`` for ``0 < x < 1`` and ``y = 1 - x`` (given, so that neither loses digits),
    with ``ln_beta = ln B(a, b)``."""
    front = math.exp(a * math.log(x) + b * math.log(y) - ln_beta)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, y) / b


def _binom_cdf(k: int, n: int, p: float) -> float:
    """``P(X <= k)`` for ``X ~ Binomial(n, p)``, ``0 < p < 1``."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    a, b = float(n - k), float(k + 1)
    ln_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    return _incomplete_beta(a, b, 1.0 - p, p, ln_beta)


@functools.lru_cache(maxsize=256)
def binom_ppf(q: float, n: int, p: float) -> float:
    """Smallest ``k`` with ``P(Binomial(n, p) <= k) >= q`` for ``q`` in (0, 1) (``scipy.stats.binom.ppf``)."""
    if not 0.0 < q < 1.0 or n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binom_ppf needs 0 < q < 1, n >= 0 and 0 <= p <= 1; got q={q}, n={n}, p={p}")
    if p == 0.0 or n == 0:
        return 0.0
    if p == 1.0:
        return float(n)
    guess = n * p + _NORMAL.inv_cdf(q) * math.sqrt(n * p * (1.0 - p))
    k = min(n, max(0, math.floor(guess)))
    while k > 0 and _binom_cdf(k - 1, n, p) >= q:
        k -= 1
    while k < n and _binom_cdf(k, n, p) < q:
        k += 1
    return float(k)


def _stirling_tail(z: float) -> float:
    """``ln Gamma(z) - ((z - 1/2) ln z - z + ln(2 pi) / 2)`` for ``z >= 20`` (Stirling's series, to 1e-17)."""
    z2 = z * z
    return (1 / 12 - (1 / 360 - (1 / 1260 - (1 / 1680 - 1 / (1188 * z2)) / z2) / z2) / z2) / z


def _ln_beta_half(a: float) -> float:
    """``ln B(a, 1/2)``, to an absolute error near 1e-16 even where ``ln Gamma(a)`` is large."""
    if a < 20:
        return math.lgamma(a) + _HALF_LN_PI - math.lgamma(a + 0.5)
    ln_ratio = 0.5 * math.log(a) + (a * math.log1p(0.5 / a) - 0.5) + _stirling_tail(a + 0.5) - _stirling_tail(a)
    return _HALF_LN_PI - ln_ratio   # ln(Gamma(a + 1/2) / Gamma(a)) without the large terms that cancel


def _t_upper_tail(t: float, df: int) -> float:
    """``P(T > t)`` for ``t > 0``."""
    a, t2 = df / 2.0, t * t
    return 0.5 * _incomplete_beta(a, 0.5, df / (df + t2), t2 / (df + t2), _ln_beta_half(a))


def _t_density(t: float, df: int) -> float:
    a = df / 2.0
    return math.exp(-(a + 0.5) * math.log1p(t * t / df) - 0.5 * math.log(df) - _ln_beta_half(a))


def _t_series(q: float, df: int) -> float:
    """Cornish-Fisher expansion of the t quantile in powers of ``1/df`` (A&S 26.7.5), ``q > 1/2``."""
    z = _NORMAL.inv_cdf(q)
    z2 = z * z
    g1 = (z2 + 1) * z / 4
    g2 = ((5 * z2 + 16) * z2 + 3) * z / 96
    g3 = (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384
    g4 = ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160
    return z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df


@functools.lru_cache(maxsize=256)
def t_ppf(q: float, df: int) -> float:
    """Quantile ``q`` (in (0, 1)) of Student's t with ``df >= 1`` degrees of freedom (``scipy.stats.t.ppf``)."""
    if not 0.0 < q < 1.0 or df < 1:
        raise ValueError(f"t_ppf needs 0 < q < 1 and df >= 1; got q={q}, df={df}")
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    if q == 0.5:
        return 0.0
    if df == 1:
        return 1.0 / math.tan(math.pi * (1.0 - q))   # tan(pi (q - 1/2)), without the loss near q = 1
    if df >= _SERIES_DF:
        return _t_series(q, df)
    tail = 1.0 - q
    t = _t_series(q, df)
    for _ in range(100):
        step = (_t_upper_tail(t, df) - tail) / _t_density(t, df)
        t += step
        if abs(step) <= 4 * _EPS * abs(t):
            break
    return t
