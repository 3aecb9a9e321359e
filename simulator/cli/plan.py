"""``llmplan plan``: size every region and quarter of a forecast (:mod:`simulator.planner`), with
progress bars and the result tables of :mod:`simulator.cli.plan_report`."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from simulator.cli.support import PlainProgress, err_console, guarded, out_console


@guarded
def plan(
    plan_file: Path = typer.Argument(..., help="Plan YAML file (see examples/plan-fy27.yaml)."),
    out: Path = typer.Option(Path("plan-out"), "--out",
                             help="Folder for worksheet.csv, worksheet-totals.csv and "
                             "worksheet-candidates.csv (created with its parents); a name ending in .csv is "
                             "the worksheet itself, the other two beside it."),
    force: bool = typer.Option(False, "--force", help="Replace worksheets already at --out."),
    backend: str = typer.Option("local", "--backend", help="local (processes on this machine) or dask."),
    address: str | None = typer.Option(None, "--address", help="Dask scheduler address, e.g. tcp://host:8786."),
    workers: int | None = typer.Option(None, "--workers", help="Local worker processes (default: CPU count)."),
    timeout: float = typer.Option(10.0, "--timeout", help="Seconds to wait for the Dask scheduler to answer."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bars (or, when stderr "
                                     "is not a terminal, the progress lines)."),
    export: str | None = typer.Option(None, "--export", help="k8s: also write --out/k8s/<quarter>/<region>.yaml, "
                                      "a Deployment and HPA per region (docs/planner.md)."),
    compare: Path | None = typer.Option(None, "--compare", help="An earlier plan's --out folder (or worksheet "
                                        ".csv): also write worksheet-delta.csv, each change with its reason."),
) -> None:
    """Size every region and quarter of a forecast: cheapest candidate and replicas meeting the SLOs."""
    from simulator.cli.plan_report import PlanProgressDisplay, plan_size, print_plan
    from simulator.planner import load_plan, write_worksheets
    from simulator.planner import plan as run_plan
    from simulator.planner.backends import check_backend
    from simulator.planner.compare import delta_report, read_previous
    from simulator.planner.worksheet import check_out

    check_backend(backend, workers=workers, address=address, timeout_s=timeout)
    loaded = load_plan(plan_file)
    check_out(out, force=force)
    if export is not None:
        from simulator.planner.k8s import check_export
        check_export(export, loaded, out)
    previous = read_previous(compare) if compare is not None else None
    show = not no_progress and err_console.is_terminal
    if not no_progress:   # before the first search: how much work the plan is
        err_console.print(plan_size(loaded), markup=False, highlight=False, soft_wrap=True)
    plain = PlainProgress("planning", "searches", err_console, enabled=not no_progress and not show)
    with PlanProgressDisplay(loaded, err_console, show, plain=plain) as display:
        result = run_plan(loaded, on_progress=display, backend=backend, workers=workers, address=address,
                          timeout_s=timeout)
    delta = delta_report(previous, result.summary, result.assumptions or {}) if previous is not None else None
    exported = None
    if export is not None:
        from simulator.planner.k8s import EXPORTS
        exported = EXPORTS[export].write(loaded, result.worksheet)
    paths = write_worksheets(result, out, force=force, delta=delta, extra=exported.files if exported else None)
    print_plan(result, out_console, delta=delta)
    if exported is not None:
        skipped = f" (none for the {len(exported.skipped)} cells no candidate meets)" if exported.skipped else ""
        out_console.print(f"wrote {len(exported.files)} files under {out}/{export}/{skipped}", highlight=False)
    bad = result.worksheet[result.worksheet["status"] != "ok"]
    for r in bad.to_dict("records"):
        err_console.print(f"[yellow]warning:[/] {escape(str(r['quarter']))} {escape(r['region'])}: no candidate meets "
                          "the SLO; see the candidates CSV for the best each achieved", highlight=False)
    out_console.print("wrote " + ", ".join(str(p) for p in paths.values()))
