"""Several regions in one simulation: geo routing, spillover and outages.

With ``scenario.fleet`` the run has one pool of replicas per region, each behind its own router
(``deployment.router``). Each request belongs to a client population (drawn by share from the
``network`` stream, as is whether it opens a new connection). :class:`GeoRouter` sends it to the
nearest region (lowest RTT for its population) that is not marked down at the arrival instant;
with ``spillover_waiting_per_replica`` it moves on to the next nearest healthy region while the
nearer one has that many requests waiting per replica (the last healthy one takes it anyway).
A region going down stops receiving new requests; requests already there finish (drain). If
every region is down, requests go to the nearest one regardless (outages never lose traffic).
Client-perceived TTFT and E2E add the RTT to the region actually used (see
:mod:`simulator.cluster.network`), so failover and spillover show their extra RTT.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.cluster.extension import MeasuredRun, Records, RunExtension, SummaryBlock, as_frame
from simulator.cluster.network import client_overhead_s
from simulator.scenario.config import FleetConfig

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd  # the run's frames; this module loads without pandas


class GeoRouter(RunExtension):
    """A router over all replicas of all regions (the :class:`simulator.cluster.router.Router` protocol),
    and the run's extension for regions: the request columns and the summary's ``fleet`` block."""

    def __init__(self, fleet: FleetConfig, make_router: Callable[[np.random.Generator], Any], num_requests: int,
                 routing_rng: np.random.Generator, network_rng: np.random.Generator,
                 clock: Callable[[], float]) -> None:
        self.fleet = fleet
        self.clock = clock
        self.names = [r.name for r in fleet.regions]
        sizes = [r.replicas for r in fleet.regions]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        self.routers = [make_router(g) for g in routing_rng.spawn(len(sizes))]
        shares = np.array([c.share for c in fleet.clients], dtype=float)
        u = network_rng.random(num_requests)
        self.client = np.searchsorted(np.cumsum(shares / shares.sum()), u, side="right").clip(0, len(shares) - 1)
        self.new_connection = network_rng.random(num_requests) >= fleet.keepalive_reuse
        self.rtt = np.array([[c.rtt_ms[n] / 1000.0 for n in self.names] for c in fleet.clients])
        # Regions by distance for each population (ties: the order regions are listed in).
        self.order = [sorted(range(len(self.names)), key=lambda j: (self.rtt[i, j], j))
                      for i in range(len(fleet.clients))]
        self.outages = [(self.names.index(o.region), o.start_s, o.start_s + o.duration_s) for o in fleet.outages]
        self.region = np.full(num_requests, -1, dtype=np.int16)

    @property
    def num_replicas(self) -> int:
        return int(self.offsets[-1])

    def is_down(self, region: int, now: float) -> bool:
        return any(r == region and a <= now < b for r, a, b in self.outages)

    def _waiting_per_replica(self, region: int, replicas: Sequence[Any]) -> float:
        a, b = self.offsets[region], self.offsets[region + 1]
        return sum(replicas[i].num_waiting for i in range(a, b)) / (b - a)

    def route(self, rid: int, replicas: Sequence[Any]) -> int:
        now = self.clock()
        order = self.order[self.client[rid]]
        healthy = [j for j in order if not self.is_down(j, now)] or order
        chosen = healthy[0]
        limit = self.fleet.spillover_waiting_per_replica
        if limit is not None:
            for j in healthy:
                chosen = j
                if self._waiting_per_replica(j, replicas) < limit:
                    break
        self.region[rid] = chosen
        a, b = self.offsets[chosen], self.offsets[chosen + 1]
        return int(a + self.routers[chosen].route(rid, replicas[a:b]))

    def add_columns(self, records: Records) -> pd.DataFrame:
        """``client``, ``region``, ``rtt_s``, ``new_connection``, ``client_ttft_s``, ``client_e2e_s``."""
        requests = as_frame(records)
        names = np.array([*self.names, "(rejected)"], dtype=object)
        clients = np.array([c.name for c in self.fleet.clients], dtype=object)
        region = self.region.astype(np.int64)
        rtt = np.where(region >= 0, self.rtt[self.client, np.maximum(region, 0)], np.nan)
        extra = client_overhead_s(rtt, self.new_connection, self.fleet.setup_round_trips)
        requests["client"] = clients[self.client]
        requests["region"] = names[region]
        requests["rtt_s"] = rtt
        requests["new_connection"] = self.new_connection
        requests["client_ttft_s"] = requests["ttft_s"].to_numpy() + extra
        requests["client_e2e_s"] = requests["e2e_s"].to_numpy() + extra
        return requests

    def summary_blocks(self) -> Sequence[SummaryBlock]:
        return (SummaryBlock("fleet", "requests", fleet_block),)


def fleet_block(run: MeasuredRun) -> dict[str, Any]:
    """The summary's ``fleet`` block: :func:`fleet_summary` of the measured requests."""
    return fleet_summary(run.requests, run.measured)


def fleet_summary(requests: pd.DataFrame, measured_mask: np.ndarray) -> dict[str, Any]:
    """Per region: requests served, spilled or failed over to it (not its clients' nearest), p99s."""
    out: dict[str, Any] = {}
    m = requests[measured_mask]
    for name, g in m.groupby("region", observed=True, sort=False):
        out[str(name)] = {
            "requests": len(g),
            "client_ttft_p99_s": float(np.nanquantile(g["client_ttft_s"], 0.99)) if len(g) else None,
            "client_e2e_p99_s": float(np.nanquantile(g["client_e2e_s"], 0.99)) if len(g) else None,
            "rtt_mean_s": float(g["rtt_s"].mean()) if len(g) else None,
        }
    return out
