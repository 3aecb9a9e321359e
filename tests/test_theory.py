"""The simulator against queueing theory (constant cost model, so the engine is a textbook queue).

With ``step_time_s = d`` and no prefill cost, a request with ``O`` output tokens holds a batch
seat for exactly ``O`` steps (the prefill step emits the first token), so its service time is
``S = O d``. With ``max_num_seqs = 1`` the replica is an M/G/1 queue (M/D/1 for fixed outputs);
with ``max_num_seqs = c`` and geometric outputs of large mean it approaches M/M/c (Erlang C).
Each check runs seeded independent replications and compares the mean queue delay with the
closed form: the 95% t-interval across replications must contain it, and the point estimate must
be within the stated relative tolerance. Replications are seeded, so the test is deterministic.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import make_scenario
from scipy import special, stats

from simulator import simulate

pytestmark = pytest.mark.slow


def replicate(scenario, n_reps: int, first_seed: int = 100) -> list:
    return [simulate(scenario, seed=first_seed + i) for i in range(n_reps)]


def mean_ci(xs: list[float]) -> tuple[float, float, float]:
    x = np.asarray(xs)
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def theory_scenario(*, rate: float, step_s: float, output: dict, max_num_seqs: int, n: int, warmup_s: float):
    return make_scenario(**{
        "num_requests": n, "warmup_s": warmup_s, "cooldown_s": warmup_s,
        "hardware.step_time_s": step_s, "scheduler.max_num_seqs": max_num_seqs,
        "workload.arrival.rate_per_s": rate, "workload.output_tokens": output,
        "workload.prompt_tokens": {"dist": "fixed", "value": 16},
        # P(geometric(mean 200) > 2032 tokens) ~ e^-10: clipping at the context changes nothing measurable
        "workload.over_length": "clip",
    })


def check(results: list, expected: float, rel_tol: float) -> None:
    waits = [r.summary["queue_delay_s"]["mean"] for r in results]
    mean, lo, hi = mean_ci(waits)
    assert lo <= expected <= hi or abs(mean - expected) / expected < rel_tol / 3, (mean, lo, hi, expected)
    assert abs(mean - expected) / expected < rel_tol, (mean, expected)


def test_md1_pollaczek_khinchine():
    """Fixed outputs, one seat: M/D/1, Wq = rho S / (2 (1 - rho))."""
    d, out_tokens, rho = 0.01, 10, 0.7
    service = out_tokens * d
    rate = rho / service
    sc = theory_scenario(rate=rate, step_s=d, output={"dist": "fixed", "value": out_tokens},
                         max_num_seqs=1, n=12000, warmup_s=50)
    expected = rho * service / (2 * (1 - rho))
    check(replicate(sc, 6), expected, rel_tol=0.05)


def test_mg1_geometric_outputs():
    """Geometric outputs (mean m), one seat: M/G/1, Wq = lambda E[S^2] / (2 (1 - rho)),
    E[S^2] = d^2 (2 - p) / p^2 with p = 1/m."""
    d, m, rho = 0.01, 10, 0.7
    p = 1 / m
    rate = rho / (m * d)
    sc = theory_scenario(rate=rate, step_s=d, output={"dist": "geometric", "mean": m},
                         max_num_seqs=1, n=12000, warmup_s=50)
    expected = rate * d**2 * (2 - p) / p**2 / (2 * (1 - rho))
    check(replicate(sc, 6), expected, rel_tol=0.07)


def erlang_c_wait(c: int, rate: float, mean_service: float) -> float:
    a = rate * mean_service
    rho = a / c
    top = a**c / math.factorial(c) / (1 - rho)
    bottom = sum(a**k / math.factorial(k) for k in range(c)) + top
    return (top / bottom) / (c / mean_service - rate)


def test_erlang_c_for_a_batch_of_c_seats():
    """c seats, geometric outputs of mean 200 steps (service nearly exponential): Erlang C.
    Arrivals also wait for the current step boundary (at most d = 1 ms): negligible here."""
    d, m, c, rho = 0.001, 200, 4, 0.8
    rate = rho * c / (m * d)
    sc = theory_scenario(rate=rate, step_s=d, output={"dist": "geometric", "mean": m},
                         max_num_seqs=c, n=12000, warmup_s=40)
    expected = erlang_c_wait(c, rate, m * d)
    check(replicate(sc, 6), expected, rel_tol=0.08)


def test_erlang_c_reference_value():
    """The closed form used above matches a textbook value (M/M/2, lambda=1, mu=1: Wq = 1/3)."""
    assert erlang_c_wait(2, 1.0, 1.0) == pytest.approx(1 / 3)
    assert special.factorial(3) == 6


def test_littles_law_from_engine_state():
    """L = lambda W: the time-average number in system from the engine's own step log
    (running + waiting, weighted by step duration) equals arrival rate x mean sojourn time from
    the request records."""
    sc = theory_scenario(rate=16, step_s=0.001, output={"dist": "geometric", "mean": 200},
                         max_num_seqs=4, n=6000, warmup_s=0)
    r = simulate(sc)
    steps, req = r.steps, r.requests
    area = float(((steps["num_seqs"] + steps["num_waiting"]) * steps["duration_s"]).sum())
    horizon = r.sim_time_s
    L = area / horizon
    lam = len(req) / horizon
    W = float(req["e2e_s"].mean())
    assert pytest.approx(lam * W, rel=0.02) == L
    assert r.summary["requests"]["completed"] == len(req)
