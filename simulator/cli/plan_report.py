"""Terminal display for ``llmplan plan``: a progress bar per region/quarter and the result tables."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from simulator.planner.config import LoadedPlan
from simulator.planner.run import PlanProgress, PlanResult


class PlanProgressDisplay:
    """One bar per forecast cell (candidates searched) plus an overall bar, on ``console``; ``plain``, when
    given, is also called as ``plain(done, total, note)`` after every search (plain progress lines)."""

    def __init__(self, loaded: LoadedPlan, console: Console, enabled: bool,
                 plain: Callable[[int, int, str], None] | None = None) -> None:
        self.plain = plain
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console,
                                 disable=not enabled, transient=False)
        n = len(loaded.config.candidates)
        self.total = self.progress.add_task("[bold]all cells[/]", total=n * len(loaded.forecast), note="")
        self.cells = {(str(q), r): self.progress.add_task(f"{escape(str(q))} {escape(r)}", total=n, note="")
                      for q, r in zip(loaded.forecast["quarter"], loaded.forecast["region"], strict=True)}
        self.notes: dict[tuple[str, str], list[str]] = {}

    def __enter__(self) -> PlanProgressDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, ev: PlanProgress) -> None:
        key = (ev.quarter, ev.region)
        text = f"{ev.candidate}: {ev.replicas}" if ev.status == "ok" else f"{ev.candidate}: infeasible"
        self.notes.setdefault(key, []).append(escape(text))
        self.progress.update(self.cells[key], completed=ev.cell_done, note=", ".join(self.notes[key]))
        self.progress.update(self.total, completed=ev.done)
        if self.plain is not None:
            found = f"{ev.replicas} replicas" if ev.status == "ok" else "infeasible"
            self.plain(ev.done, ev.total, f"{ev.quarter} {ev.region} {ev.candidate}: {found}")


def plan_size(loaded: LoadedPlan) -> str:
    """What a plan is about to run, printed before it starts: its searches (cells x candidates, and the
    limit), the replica counts each may try, the requests per run and the seeds per count."""
    from simulator.planner.search import AUTO_REPLICATIONS, MAX_AUTO_REPLICATIONS
    from simulator.scenario.limits import MAX_PLAN_SEARCHES

    cells, cands, sim = len(loaded.forecast), len(loaded.config.candidates), loaded.config.simulation
    seeds = (f"{AUTO_REPLICATIONS} seeds per count ({MAX_AUTO_REPLICATIONS} where the decision is noisy)"
             if sim.replications == "auto" else f"{sim.replications} seeds per count")
    return (f"plan: {cells * cands:,} searches ({cells:,} cells x {cands} candidates; at most "
            f"{MAX_PLAN_SEARCHES:,}), each over 1-{sim.max_replicas} replicas, runs of {sim.num_requests:,} "
            f"requests, {seeds}")


def _f(x: Any, fmt: str) -> str:
    try:
        return "-" if x is None or x is pd.NA or x != x else format(x, fmt)
    except (TypeError, ValueError):
        return str(x)


def print_plan(result: PlanResult, console: Console, delta: pd.DataFrame | None = None) -> None:
    ws = result.worksheet
    cur = str(ws["currency"].iloc[0]) if "currency" in ws and len(ws) else "USD"
    table = Table(title="capacity plan (cheapest candidate per region and quarter; GPUs at the peak, "
                        "GPU-hours and cost as provisioned)", title_justify="left")
    cols = ("quarter", "region", "design rps", "candidate", "replicas", "GPUs peak", "provisioning",
            "GPU-h/quarter", "TTFT p99 ms", "TPOT p99 ms", "attain %", f"{cur}/quarter", f"{cur}/1M tok",
            "binding")
    for c in cols:
        left = c in ("quarter", "region", "candidate", "provisioning", "binding")
        table.add_column(c, justify="left" if left else "right")
    for r in ws.to_dict("records"):
        status_ok = r["status"] == "ok"
        replicas = escape(str(r["pool_replicas"])) if r.get("pool_replicas") else _f(r["replicas"], "d")  # per pool
        table.add_row(escape(str(r["quarter"])), escape(r["region"]), _f(r["design_rps"], ".1f"),
                      escape(r["candidate"]) if status_ok else "[red]none meets the SLO[/]",
                      replicas if status_ok else "-", _f(r["gpus"], "d") if status_ok else "-",
                      escape(str(r["provisioning"])), _f(r["gpu_hours"], ",.0f"),
                      _f(r["ttft_p99_ms"], ",.0f"), _f(r["tpot_p99_ms"], ".1f"), _f(100 * r["slo_attainment"], ".2f"),
                      _f(r["cost_per_quarter"], ",.0f"), _f(r["cost_per_million_tokens"], ".3f"),
                      escape(str(r["binding_constraint"])))
    console.print(table)
    tot = Table(title="totals (GPUs peak and reserved: summed over regions, the largest quarter over quarters; "
                      "hours of each calendar quarter)", title_justify="left")
    for c in ("quarter", "region", "hours", "GPUs peak", "GPUs reserved", "GPU-hours", "on-demand GPU-h", cur,
              f"{cur}/1M tok", f"{cur}/success. req", "infeasible cells"):
        tot.add_column(c, justify="left" if c in ("quarter", "region") else "right")
    c = cur.lower()
    for r in result.totals.to_dict("records"):
        tot.add_row(escape(str(r["quarter"])), escape(str(r["region"])), _f(r.get("period_hours"), ",.1f"),
                    _f(r["gpus_peak"], "d"), _f(r.get("gpus_reserved"), "d"),
                    _f(r["gpu_hours"], ",.0f"), _f(r.get("on_demand_gpu_hours"), ",.0f"), _f(r[f"cost_{c}"], ",.0f"),
                    _f(r[f"{c}_per_1m_tokens"], ".3f"), _f(r.get(f"{c}_per_successful_request"), ".3g"),
                    str(r["infeasible_cells"]))
    console.print(tot)
    if delta is not None:
        print_delta(delta, console)
    provisioning = set(ws["provisioning"]) if "provisioning" in ws else set()
    if provisioning & {"peak", "static"}:
        console.print("[dim]provisioning: peak = no diurnal shape, the peak fleet costed all day; "
                      "static = a shape but no autoscaler, the peak fleet runs all day; diurnal = the "
                      "autoscaler's fleet hour by hour (docs/planner.md)[/]")
    for name, c in ((result.assumptions or {}).get("candidates") or {}).items():   # what each one's costs rest on
        basis = c.get("hardware_basis")
        if basis:
            basis = "; ".join(f"{k}: {v}" for k, v in basis.items()) if isinstance(basis, dict) else basis
            console.print(f"[dim]{escape(str(name))} on {escape(str(c.get('hardware')))}: {escape(str(basis))}[/]")
    sims = int(result.candidates["simulations"].sum())
    console.print(f"[dim]{len(result.candidates)} searches, {sims} simulations in {result.wall_s:.1f} s wall[/]")


def print_delta(delta: pd.DataFrame, console: Console) -> None:
    """The plan-to-plan changes: each changed cell's explanation, then each quarter's."""
    changed = delta[delta["change"] != "unchanged"]
    if not len(changed):
        console.print("[dim]compared with the earlier plan: no cell changed[/]")
        return
    console.print("[bold]changes since the earlier plan[/] (worksheet-delta.csv)")
    for r in changed.to_dict("records"):
        console.print("  " + escape(str(r["explanation"])), highlight=False)
