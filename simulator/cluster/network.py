"""The network between clients and a serving region: what the client sees on top of the server.

The engine's latencies start when a request reaches the server and end when a token leaves it.
A client also pays the path: half a round trip to send the request and half a round trip for the
first token (and for the last token) to come back, so client-perceived TTFT and E2E are the
server's plus one RTT. A request on a new connection first pays the connection set-up, a fixed
number of round trips (TCP handshake 1, TLS 1.3 1 more, TLS 1.2 2 more); one sent on a
kept-alive connection pays none. TPOT is unchanged (tokens stream back at the server's pace).

Clients form populations (``clients``), each with a share of the requests and an RTT to this
region; each request's population and connection reuse are drawn from the run's own
``network`` random stream, so they never perturb the arrival or length streams.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.cluster.extension import Records, RunExtension, as_frame


@dataclass(frozen=True)
class ClientPopulation:
    name: str
    share: float
    rtt_s: float


@dataclass(frozen=True)
class ClientNetwork:
    """Who sends the requests and over which connections."""

    clients: tuple[ClientPopulation, ...]
    setup_round_trips: int = 2
    keepalive_reuse: float = 1.0

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per request: population index, RTT (s) and whether it opens a new connection."""
        shares = np.array([c.share for c in self.clients], dtype=float)
        shares = shares / shares.sum()
        if len(self.clients) == 1:
            who = np.zeros(n, dtype=np.int16)
        else:
            who = np.searchsorted(np.cumsum(shares), rng.random(n), side="right").clip(0, len(shares) - 1)
            who = who.astype(np.int16)
        rtt = np.array([c.rtt_s for c in self.clients])[who]
        new = rng.random(n) >= self.keepalive_reuse
        return who, rtt, new


def client_overhead_s(rtt_s: np.ndarray, new_connection: np.ndarray, setup_round_trips: int) -> np.ndarray:
    """Seconds the network adds to a request's client-perceived TTFT (and E2E)."""
    return rtt_s * (1.0 + setup_round_trips * new_connection.astype(float))


def client_latency_columns(requests, network: ClientNetwork, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``client``, ``rtt_s``, ``new_connection``, ``client_ttft_s``, ``client_e2e_s`` (and
    ``client_ttua_s`` where the frame has ``ttua_s``) for a request frame or a run's request columns,
    drawn from ``rng``."""
    n = len(requests["ttft_s"])
    who, rtt, new = network.draw(n, rng)
    extra = client_overhead_s(rtt, new, network.setup_round_trips)
    names = np.array([c.name for c in network.clients], dtype=object)
    cols = {"client": names[who] if n else np.array([], dtype=object), "rtt_s": rtt,
            "new_connection": new, "client_ttft_s": np.asarray(requests["ttft_s"]) + extra,
            "client_e2e_s": np.asarray(requests["e2e_s"]) + extra}
    if "ttua_s" in requests:
        cols["client_ttua_s"] = np.asarray(requests["ttua_s"]) + extra
    return cols


def add_client_latencies(requests, network: ClientNetwork, rng: np.random.Generator) -> None:
    """Add :func:`client_latency_columns` to a requests DataFrame (in place)."""
    for name, col in client_latency_columns(requests, network, rng).items():
        requests[name] = col


def with_client_latencies(requests, network: ClientNetwork, rng: np.random.Generator):
    """New request records: ``requests`` (a frame or a run's request columns, left as they are) with
    :func:`client_latency_columns` (the same columns and draws as :func:`add_client_latencies`; for a
    frame in one concatenation instead of a copy and an insert per column)."""
    cols = client_latency_columns(requests, network, rng)
    if hasattr(requests, "with_columns"):     # simulator.run.records.RequestColumns
        return requests.with_columns(cols)
    import pandas as pd
    again = [c for c in cols if c in requests.columns]
    kept = requests.drop(columns=again) if again else requests
    return pd.concat([kept, pd.DataFrame(cols, index=requests.index)], axis=1)


def network_from_clients(clients: Sequence[tuple[str, float, float]], setup_round_trips: int,
                         keepalive_reuse: float) -> ClientNetwork:
    """Build from ``(name, share, rtt_s)`` tuples."""
    return ClientNetwork(tuple(ClientPopulation(n, s, r) for n, s, r in clients), setup_round_trips, keepalive_reuse)


class NetworkLatencies(RunExtension):
    """The run's extension for ``network``: the client-perceived latency columns
    (:func:`add_client_latencies`), drawn after the run from the run's ``network`` stream."""

    def __init__(self, network: ClientNetwork, rng: np.random.Generator) -> None:
        self.network, self.rng = network, rng

    def add_columns(self, records: Records) -> Records:
        requests = as_frame(records)
        add_client_latencies(requests, self.network, self.rng)
        return requests


def network_from_config(cfg) -> ClientNetwork:  # simulator.scenario.config.NetworkConfig
    return network_from_clients([(c.name, c.share, c.rtt_ms / 1000.0) for c in cfg.clients],
                                cfg.setup_round_trips, cfg.keepalive_reuse)
