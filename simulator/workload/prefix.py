"""Workload structure that prefix caching can exploit: shared system prompts, multi-turn
sessions and the Mooncake trace's ``hash_ids``, turned into per-request block identities
(:class:`simulator.workload.block_hashes.BlockHashes`).

* ``workload.prefix``: a fraction ``share`` of requests (of sessions' first turns) start with
  one of ``num_prefixes`` system prompts of ``prefix_tokens`` tokens, drawn with the ``prefix``
  random stream. The prefix is part of the drawn prompt length. A prefixed request whose prompt
  is not longer than the prefix is an error (``short_prompt: error``) or shares only its first
  ``prompt - 1`` tokens of it (``short_prompt: clip``).
* ``workload.sessions``: the arrival process gives each session's first turn; a session has
  ``turns`` turns (a length distribution); turn k+1 arrives an exponential gap of mean
  ``turn_gap_s`` after turn k arrived (open loop: the arrival sequence is drawn before the run,
  so a turn does not wait for the previous answer); its prompt is the previous turn's prompt +
  its answer (its drawn output length) + ``followup_tokens`` new tokens. Later turns use the
  ``sessions`` random stream. With ``num_requests`` the first ``num_requests`` turns by arrival
  are kept, with ``duration_s`` the turns arriving before it.
* Mooncake traces (``format: mooncake`` with trace lengths): the ``hash_ids`` are replayed.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from simulator.errors import ScenarioError
from simulator.scenario.config import Scenario, TraceArrival
from simulator.workload.block_hashes import (
    BlockHashes,
    fresh_block_hashes,
    mooncake_block_hashes,
    prefix_block_hashes,
    session_block_hashes,
)
from simulator.workload.lengths import make_length
from simulator.workload.send_delay import SEND_DELAY_S


def shape_prefixes(scenario: Scenario, arrivals: Any, times: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                   rngs: dict[str, np.random.Generator]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, BlockHashes | None, np.ndarray | None,
                              np.ndarray | None]:
    """Expand sessions, assign system prompts, and (with prefix caching on, or a router that
    routes by prefix) build block ids. The last two items are each request's session (its first
    turn's index; None without sessions) and, for closed-loop sessions, its gap after the previous
    turn's answer ended (None otherwise)."""
    wl = scenario.workload
    n = len(times)
    parent = np.full(n, -1, dtype=np.int64)
    session = turn_gap = None
    if wl.sessions is not None:
        times, prompt, output, parent, turn_gap = expand_sessions(scenario, times, prompt, output, rngs["sessions"])
        n = len(times)
        session = session_ids(parent)
    prefix_index = prefix_len = None
    if wl.prefix is not None:
        prefix_index, prefix_len = assign_prefixes(wl.prefix, prompt, parent, rngs["prefix"])
    a = wl.arrival
    table = getattr(arrivals, "table", None)
    if isinstance(a, TraceArrival) and a.use_trace_lengths and table is not None \
            and ("session" in table.columns or "prefix" in table.columns):
        if wl.prefix is not None:
            raise ScenarioError("workload.prefix", wl.prefix.model_dump(), f"the trace {a.path} says which requests "
                                "share prefixes and sessions (its session_id / prefix_hash columns); drop "
                                "workload.prefix, or set workload.arrival.use_trace_lengths: false")
        hashes, session = trace_structure(scenario, table.iloc[:n], prompt, output)
        return times, prompt, output, hashes, session, None
    if not needs_block_ids(scenario):
        return times, prompt, output, None, session, turn_gap
    bs = scenario.scheduler.block_size
    num_blocks = (prompt + output) // bs
    if isinstance(a, TraceArrival) and a.format == "mooncake" and a.use_trace_lengths:
        hash_ids = arrivals.table["hash_ids"].iloc[:n].tolist()
        return times, prompt, output, mooncake_block_hashes(hash_ids, prompt, num_blocks, bs), session, turn_gap
    if prefix_index is not None:
        assert wl.prefix is not None and prefix_len is not None
        base = prefix_block_hashes(num_blocks, prefix_index, prefix_len, wl.prefix.num_prefixes,
                                   wl.prefix.prefix_tokens, bs)
    else:
        base = fresh_block_hashes(num_blocks, bs)
    if wl.sessions is not None:
        base = session_block_hashes(num_blocks, parent, base)
    return times, prompt, output, base, session, turn_gap


def trace_structure(scenario: Scenario, table: Any, prompt: np.ndarray, output: np.ndarray
                    ) -> tuple[BlockHashes | None, np.ndarray | None]:
    """Block identities (with prefix caching or prefix routing on; else None) and sessions (None without
    a ``session_id`` column) from a ``requests`` trace's columns.

    * ``session_id``: the requests of one id are one conversation's turns, in arrival order; a turn
      whose prompt holds at least its previous turn's prompt + output starts with every full block of
      them (a client that resends the history), otherwise it shares none (the history was cut).
      Every turn keeps the session for ``session_affinity`` routing.
    * ``prefix_hash`` + ``prefix_tokens``: requests with the same hash start with the same tokens, as
      many as the smaller ``prefix_tokens`` of the two (its full blocks are shared).
    """
    import pandas as pd

    n = len(prompt)
    session = parent = None
    if "session" in table.columns:
        session = np.arange(n, dtype=np.int64)
        parent = np.full(n, -1, dtype=np.int64)
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for r, key in enumerate(table["session"].tolist()):
            if key is None:
                continue
            if key in first:
                session[r] = first[key]
                p = last[key]
                if prompt[r] >= prompt[p] + output[p]:
                    parent[r] = p
            else:
                first[key] = r
            last[key] = r
    if not needs_block_ids(scenario):
        return None, session
    bs = scenario.scheduler.block_size
    num_blocks = (prompt + output) // bs
    if "prefix" in table.columns:
        codes, uniques = pd.factorize(table["prefix"])          # -1 where a request has no prefix
        tokens = np.where(codes >= 0, table["prefix_tokens"].to_numpy(np.int64), 0)
        base = prefix_block_hashes(num_blocks, codes.astype(np.int64), tokens, max(len(uniques), 1),
                                   int(tokens.max()), bs)
    else:
        base = fresh_block_hashes(num_blocks, bs)
    if parent is not None and (parent >= 0).any():
        base = session_block_hashes(num_blocks, parent, base)
    return base, session


def requests_per_session(scenario: Scenario) -> float:
    """Mean requests (turns) per session: with ``workload.sessions`` the arrival process starts
    sessions, so an offered load of R requests/s is R / this many sessions/s (the planner's forecasts
    and the load sweeps count requests); 1 without sessions."""
    sessions = scenario.workload.sessions
    if sessions is None:
        return 1.0
    return max(1.0, float(make_length(sessions.turns, scenario, "workload.sessions.turns").mean))


def needs_block_ids(scenario: Scenario) -> bool:
    """Block identities are built for prefix caching and for routing by prefix."""
    return scenario.scheduler.enable_prefix_caching or scenario.deployment.router == "prefix_affinity"


def session_ids(parent: np.ndarray) -> np.ndarray:
    """Each request's session: the index of its session's first turn (``parent[r] < r``)."""
    session = np.arange(len(parent), dtype=np.int64)
    for r in np.flatnonzero(parent >= 0):
        session[r] = session[parent[r]]
    return session


def assign_prefixes(cfg: Any, prompt: np.ndarray, parent: np.ndarray, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Which system prompt each request starts with (-1: none) and how many of its tokens."""
    n = len(prompt)
    chosen = (rng.random(n) < cfg.share) & (parent < 0)
    which = rng.integers(0, cfg.num_prefixes, n)
    index = np.where(chosen, which, -1)
    length = np.where(chosen, cfg.prefix_tokens, 0).astype(np.int64)
    short = chosen & (prompt <= cfg.prefix_tokens)
    if short.any():
        i = int(np.flatnonzero(short)[0])
        if cfg.short_prompt == "error":
            raise ScenarioError(
                "workload.prefix.prefix_tokens", cfg.prefix_tokens,
                f"not shorter than request {i}'s prompt of {int(prompt[i])} tokens ({int(short.sum())} of "
                f"{int(chosen.sum())} prefixed requests are that short); the prefix is part of the prompt: "
                "raise workload.prompt_tokens (its min) above prefix_tokens, lower prefix_tokens, or set "
                "workload.prefix.short_prompt: clip")
        length = np.where(short, prompt - 1, length)
    return index, length


def expand_sessions(scenario: Scenario, starts: np.ndarray, first_prompt: np.ndarray, first_output: np.ndarray,
                    rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Turn session starts into every turn's arrival, prompt, output, previous turn and (closed loop)
    gap before it.

    Open loop: turns are ordered by arrival; ``num_requests`` keeps the first turns, ``duration_s``
    those arriving before it. Closed loop: a later turn's arrival is known only in the run (NaN
    here) and the last item gives its gap after the previous answer ends; turns stay session by
    session, sessions in start order, and ``num_requests`` keeps the whole sessions whose turns fit
    in it (the first session cut to it when even that one does not), ``duration_s`` the sessions
    starting before it."""

    wl = scenario.workload
    cfg = wl.sessions
    assert cfg is not None
    num_sessions = len(starts)
    turns = make_length(cfg.turns, scenario, "workload.sessions.turns").sample(num_sessions, rng)
    total = int(turns.sum())
    first = np.cumsum(turns) - turns                      # index of each session's first turn
    session = np.repeat(np.arange(num_sessions), turns)
    k = np.arange(total) - first[session]                 # turn number within the session, from 0
    tools = cfg.parallel_tool_calls
    if cfg.turn_gap_dist == "fixed":
        drawn = np.full(total, float(cfg.turn_gap_s))
    elif tools == 1:
        drawn = rng.exponential(cfg.turn_gap_s, total)
    else:   # the slowest of the parallel tool calls
        drawn = rng.exponential(cfg.turn_gap_s, (total, tools)).max(axis=1)
    gaps = np.where(k > 0, drawn, 0.0)
    followup = make_length(cfg.followup_tokens or wl.prompt_tokens, scenario,
                           "workload.sessions.followup_tokens" if cfg.followup_tokens else "workload.prompt_tokens")
    new_user = followup.sample(total, rng) if tools == 1 else followup.sample(total * tools, rng).reshape(
        total, tools).sum(axis=1)
    output_dist = make_length(wl.output_tokens, scenario, "workload.output_tokens")
    output = output_dist.sample(total, rng)
    output[first] = first_output
    # Tokens each turn adds to the conversation before its own answer: the first turn's prompt,
    # then the previous answer + the new user message.
    added = np.where(k > 0, np.roll(output, 1) + new_user, 0)
    added[first] = first_prompt
    cum = np.cumsum(added)
    prompt = cum - (cum[first] - added[first])[session]
    parent = np.where(k > 0, np.arange(total) - 1, -1)
    if cfg.loop == "closed":   # each later turn also crosses the network: SEND_DELAY_S's jitter
        gaps = gaps + np.where(k > 0, rng.uniform(*SEND_DELAY_S, total), 0.0)
        return _closed_sessions(scenario, starts, turns, first, gaps, prompt, output, parent)
    cum_gap = np.cumsum(gaps)
    arrival = starts[session] + cum_gap - (cum_gap[first] - gaps[first])[session]
    order = np.argsort(arrival, kind="stable")
    if scenario.num_requests is not None:
        order = order[: scenario.num_requests]
    if scenario.duration_s is not None:
        order = order[arrival[order] < scenario.duration_s]
    new_index = np.full(total, -1, dtype=np.int64)
    new_index[order] = np.arange(len(order))
    parent = np.where(parent[order] >= 0, new_index[np.maximum(parent[order], 0)], -1)
    assert (parent < np.arange(len(order))).all(), "a turn must arrive after the turn it continues"
    return arrival[order], prompt[order].astype(np.int64), output[order].astype(np.int64), parent, None


def _closed_sessions(scenario: Scenario, starts: np.ndarray, turns: np.ndarray, first: np.ndarray,
                     gaps: np.ndarray, prompt: np.ndarray, output: np.ndarray, parent: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The closed loop's turns (see :func:`expand_sessions`): whole sessions, in start order."""
    keep = len(starts)
    if scenario.duration_s is not None:
        keep = min(keep, int(np.searchsorted(starts, scenario.duration_s, side="left")))
    total = int(first[keep]) if keep < len(starts) else len(gaps)
    if scenario.num_requests is not None and total > scenario.num_requests:
        ends = first + turns                       # one past each session's last turn
        whole = int(np.searchsorted(ends, scenario.num_requests, side="right"))
        total = int(ends[whole - 1]) if whole > 0 else scenario.num_requests
    arrival = np.full(total, np.nan)
    first = first[first < total]
    arrival[first] = starts[: len(first)]
    return (arrival, prompt[:total].astype(np.int64), output[:total].astype(np.int64), parent[:total],
            gaps[:total])
