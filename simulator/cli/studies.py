"""The command line's studies of several runs: ``compare``, ``sweep`` and ``simulate --seeds N``.

Each prints a table on the terminal, one JSON document with ``--json``, and with ``--out DIR``
writes the table as CSV and the JSON as ``summary.json`` (all or nothing, as ``simulate --out``).
The numbers come from :mod:`simulator.report` (the dashboard's KPIs, baselines and load sweep);
this module only runs, prints and writes them.
"""
from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from simulator.cli.support import PlainProgress, err_console, jsonable, out_console
from simulator.errors import ScenarioError
from simulator.output import check_output_folder, output_folder, write_csv
from simulator.report.analysis import KPI, display_digits, max_load_meeting_slo, run_kpis
from simulator.report.comparisons import compare_table, records, seed_runs, seed_stats, variant_overrides
from simulator.scenario.config import Scenario


# -- running --------------------------------------------------------------------------------------------
@contextmanager
def runs_progress(what: str, total: int, show: bool) -> Iterator[Callable[[int, str], None]]:
    """A bar (terminal) or plain lines (a log) over ``total`` runs; yields ``step(done, label)``."""
    bar_on = show and err_console.is_terminal
    plain = PlainProgress(what, "runs", err_console, enabled=show and not bar_on)
    with Progress(TextColumn(f"[bold]{escape(what)}[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err_console, disable=not bar_on,
                  transient=True) as bar:
        task = bar.add_task("", total=total)

        def step(done: int, label: str) -> None:
            bar.update(task, completed=done, description=escape(label))
            plain(done, total, label)
        yield step


def _kpis_of(scenarios: Sequence[tuple[str, Scenario]], what: str, show: bool) -> list[tuple[str, list[KPI]]]:
    from simulator.run.simulate import simulate

    out = []
    with runs_progress(what, len(scenarios), show) as step:
        for i, (label, sc) in enumerate(scenarios):
            step(i, label)
            out.append((label, run_kpis(simulate(sc))))
        step(len(scenarios), "")
    return out


def _write(out: Path, force: bool, tables: dict[str, pd.DataFrame], doc: dict[str, Any],
           scenario: Scenario | None = None) -> None:
    with output_folder(out, force=force) as stage:
        for name, frame in tables.items():
            write_csv(frame, stage / name)
        (stage / "summary.json").write_text(json.dumps(jsonable(doc), indent=2) + "\n")
        if scenario is not None:
            data = scenario.model_dump(mode="json", exclude_none=True)
            data["base_dir"] = str(Path(scenario.base_dir).resolve())
            (stage / "scenario.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    out_console.print(f"wrote {out}/{', '.join(tables)}, summary.json" + (", scenario.yaml" if scenario else ""),
                      highlight=False)


def _fmt(x: Any, unit: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.{display_digits(unit)}f}"


# -- compare ----------------------------------------------------------------------------------------------
def compare(files: Sequence[Path], sets: Sequence[str], *, seed: int | None, json_out: bool, out: Path | None,
            force: bool, show: bool) -> None:
    """``llmplan compare A.yaml B.yaml ...``, or ``llmplan compare S.yaml --set K=V[;K=V] ...``: every
    run against the first."""
    from simulator.scenario.config import load_scenario

    if not files:
        raise ScenarioError("scenarios", [], "give two or more scenario files, or one and --set variants")
    if len(files) > 1 and sets:
        raise ScenarioError("--set", list(sets), "--set variants compare one scenario with itself; with several "
                            "files, each file is a run")
    if len(files) == 1 and not sets:
        raise ScenarioError("scenarios", [str(f) for f in files], "give a second scenario file, or --set "
                            "variants of this one (e.g. --set scheduler.max_num_seqs=128)")
    over = {"seed": seed} if seed is not None else {}
    if sets:
        runs = [(files[0].name, load_scenario(files[0], over))]
        for text in sets:
            runs.append((text, load_scenario(files[0], {**_overrides(variant_overrides(text)), **over})))
    else:
        runs = [(f.name if [g.name for g in files].count(f.name) == 1 else str(f), load_scenario(f, over))
                for f in files]
    if out is not None:
        check_output_folder(out, force=force)
    table = compare_table(_kpis_of(runs, "comparing", show))
    doc = {"baseline": runs[0][0], "runs": [label for label, _ in runs], "compare": records(table)}
    if out is not None:
        _write(out, force, {"compare.csv": table}, doc)
    if json_out:
        sys.stdout.write(json.dumps(jsonable(doc)) + "\n")
        return
    print_compare(table, runs[0][0])


def _overrides(items: list[str]) -> dict[str, Any]:
    from simulator.scenario.config import parse_overrides

    return parse_overrides(items)


def print_compare(table: pd.DataFrame, baseline: str) -> None:
    grid = Table(title=f"compared with {baseline} (baseline)", title_justify="left")
    grid.add_column("KPI")
    grid.add_column("unit")
    grid.add_column(escape(baseline), justify="right")
    labels = list(dict.fromkeys(table["run"]))
    for label in labels:
        grid.add_column(escape(label), justify="right")
        grid.add_column("change", justify="right")
    first = table[table["run"] == labels[0]]
    for i, kpi in enumerate(first["kpi"]):
        row = [kpi, first["unit"].iat[i], _fmt(first["baseline"].iat[i], first["unit"].iat[i])]
        for label in labels:
            r = table[table["run"] == label].iloc[i]
            row += [_fmt(r["value"], r["unit"]), _change(r)]
        grid.add_row(*row)
    out_console.print(grid)
    out_console.print("change: relative to the baseline; [green]green[/] better, [red]red[/] worse", highlight=False)


def _change(r: pd.Series) -> str:
    """The change in percent (absolute without a baseline value), coloured when better or worse; a
    change that rounds to zero where the KPI is shown is ``0`` (:func:`kpi_change`)."""
    if r["delta"] is None or pd.isna(r["delta"]):
        return "-"
    if r["better"] is None or pd.isna(r["better"]):
        return "0"
    text = f"{r['delta_pct']:+.1f}%" if r["delta_pct"] is not None and not pd.isna(r["delta_pct"]) \
        else f"{r['delta']:+.3g}"
    return f"[green]{text}[/]" if r["better"] else f"[red]{text}[/]"


# -- seeds ------------------------------------------------------------------------------------------------
def seeds(sc: Scenario, n: int, *, json_out: bool, out: Path | None, force: bool, show: bool) -> None:
    """``llmplan simulate S --seeds N``: the run at seeds ``seed .. seed + N - 1``, each KPI's mean, spread
    and 95% confidence interval."""
    if n < 2:
        raise ScenarioError("--seeds", n, "give 2 or more seeds for a spread (one seed: leave --seeds out)")
    if out is not None:
        check_output_folder(out, force=force)
    first = int(sc.seed)
    runs = _kpis_of([(f"seed {first + i}", sc.with_overrides({"seed": first + i})) for i in range(n)],
                    f"simulating {sc.name}", show)
    by_seed = [(first + i, kpis) for i, (_, kpis) in enumerate(runs)]
    stats, per_seed = seed_stats(by_seed), seed_runs(by_seed)
    doc = {"name": sc.name, "seeds": [s for s, _ in by_seed], "confidence": 0.95, "metrics": records(stats),
           "runs": records(per_seed)}
    if out is not None:
        _write(out, force, {"seed-stats.csv": stats, "seeds.csv": per_seed}, doc, scenario=sc)
    if json_out:
        sys.stdout.write(json.dumps(jsonable(doc)) + "\n")
        return
    grid = Table(title=f"{sc.name}: {n} seeds ({first}-{first + n - 1}); mean, sample standard deviation and "
                 "the 95% confidence interval of the mean", title_justify="left")
    for col in ("KPI", "unit", "mean", "std", "95% CI", "min", "max", "n"):
        grid.add_column(col, justify="left" if col in ("KPI", "unit") else "right")
    for r in stats.to_dict("records"):
        u = r["unit"]
        grid.add_row(r["kpi"], u, _fmt(r["mean"], u), _fmt(r["std"], u),
                     f"{_fmt(r['ci_low'], u)} to {_fmt(r['ci_high'], u)}", _fmt(r["min"], u), _fmt(r["max"], u),
                     str(r["n"]))
    out_console.print(grid)


# -- sweep ------------------------------------------------------------------------------------------------
SWEEP_COLUMNS = (("ttft_p50_s", "TTFT p50 ms"), ("ttft_p99_s", "TTFT p99 ms"), ("tpot_p50_s", "TPOT p50 ms"),
                 ("tpot_p99_s", "TPOT p99 ms"), ("e2e_p99_s", "E2E p99 ms"))


def parse_loads(text: str, option: str, whole: bool) -> list[float]:
    """``"1,2.5,4"`` -> loads; whole numbers >= 1 for ``--concurrency``.

    Raises:
        ScenarioError: not a comma-separated list of positive numbers.
    """
    allowed = ("comma-separated whole numbers of clients >= 1, e.g. 8,16,32" if whole
               else "comma-separated positive arrival rates in requests/s, e.g. 2,4,8")
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ScenarioError(option, text, allowed) from None
    if not loads or any(not math.isfinite(v) or v <= 0 or (whole and v != int(v)) for v in loads):
        raise ScenarioError(option, text, allowed)
    return loads


def sweep(sc: Scenario, rates: str | None, concurrency: str | None, *, json_out: bool, out: Path | None,
          force: bool, show: bool) -> None:
    """``llmplan sweep S --rates r1,r2,...`` or ``--concurrency c1,c2,...``: latency against load and the
    largest swept load whose every check of the SLO holds (the Load curve page's sweep)."""
    from simulator.report.analysis import load_sweep

    if (rates is None) == (concurrency is None):
        raise ScenarioError("--rates/--concurrency", rates or concurrency, "give exactly one of --rates and "
                            "--concurrency")
    axis = "rate" if rates is not None else "concurrency"
    loads = parse_loads(rates or concurrency or "", "--rates" if rates is not None else "--concurrency",
                        whole=axis == "concurrency")
    if out is not None:
        check_output_folder(out, force=force)
    with runs_progress(f"sweeping {sc.name}", len(loads), show) as step:
        done = {"n": 0}

        def on_run(_: str, load: float) -> None:
            step(done["n"], f"{load:g}")
            done["n"] += 1
        table = load_sweep(sc, loads, axis=axis, on_run=on_run)
        step(len(loads), "")
    limit = max_load_meeting_slo(table)
    doc = {"name": sc.name, "axis": axis, "sweep": records(table), "limit": limit}
    if out is not None:
        _write(out, force, {"sweep.csv": table}, doc, scenario=sc)
    if json_out:
        sys.stdout.write(json.dumps(jsonable(doc)) + "\n")
        return
    closed = axis == "concurrency"
    grid = Table(title=f"{sc.name}: latency against {'closed-loop clients' if closed else 'arrival rate'}",
                 title_justify="left")
    cols = (["clients"] if closed else []) + ["req/s", *(label for _, label in SWEEP_COLUMNS), "SLO attain %",
                                              "SLO", "stable"]
    for col in cols:
        grid.add_column(col, justify="right")
    for r in table.to_dict("records"):
        att = r["slo_attainment"]
        grid.add_row(*([str(r["concurrency"])] if closed else []), f"{r['rate_per_s']:,.2f}",
                     *(_fmt(None if r[k] is None else 1e3 * r[k], "ms") for k, _ in SWEEP_COLUMNS),
                     "-" if att is None or pd.isna(att) else f"{100 * att:.2f}",
                     "-" if r["slo_met"] is None or pd.isna(r["slo_met"]) else
                     ("[green]met[/]" if r["slo_met"] else "[red]missed[/]"),
                     "-" if r["stable"] is None else ("yes" if r["stable"] else "[red]no[/]"))
    out_console.print(grid)
    if limit["max_rate_per_s"] is None:
        out_console.print(f"largest load meeting the SLO: none ({limit['reason']})", highlight=False)
    else:
        load = (f"{limit['max_concurrency']} clients ({limit['max_rate_per_s']:.2f} req/s)" if closed
                else f"{limit['max_rate_per_s']:g} req/s")
        out_console.print(f"largest load meeting the SLO: {load}, {limit['max_rate_per_gpu']:.3g} req/s per GPU; "
                          f"{limit['reason']}", highlight=False)
