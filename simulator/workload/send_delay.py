"""The jitter between a closed-loop request's sending and its arrival at the engine."""
from __future__ import annotations

SEND_DELAY_S = (0.5e-6, 1e-6)
"""A closed-loop request (a client's next request, a closed session's next turn) reaches the engine
between these many seconds after it is sent (uniform, drawn per request: a network's jitter). With a
constant cost model and a fixed think time every instant of a closed loop would lie on one lattice,
requests would arrive exactly on step boundaries, and rounding (step ends accumulated step by step
or in closed form over a decode run differ by ~1e-14 s) would decide whether one joins the step
starting there, or whether a timeout passes at a boundary. The jitter moves every arrival off the
lattice, far beyond rounding and above the deadlines' 1 ns tolerance, yet far below any step time."""
