"""``llmplan simulate``, ``compare`` and ``sweep``: one scenario run and printed (or written with
``--out``); ``compare``, ``sweep`` and ``simulate --seeds N`` run several (:mod:`simulator.cli.studies`)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from simulator.arguments import check_seed
from simulator.cli.startup import loading_modules
from simulator.cli.support import PlainProgress, err_console, guarded, jsonable, out_console
from simulator.output import check_output_folder, output_folder, write_csv


@guarded
def simulate(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON summary on stdout."),
    set_: list[str] | None = typer.Option(None, "--set", help="Override a field: key.path=value (repeatable)."),
    seed: int | None = typer.Option(None, "--seed", help="Override the scenario's seed."),
    out: Path | None = typer.Option(None, "--out", help="Write requests/steps (parquet+csv), summary.json, "
                                    "scenario.yaml here (all or nothing)."),
    force: bool = typer.Option(False, "--force", help="Replace the results already in --out."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar (or, when stderr is "
                                     "not a terminal, the progress lines)."),
    seeds: int | None = typer.Option(None, "--seeds", help="Run N seeds (the seed, seed+1, ...) and report each "
                                     "KPI's mean, spread and 95% confidence interval; --out then writes "
                                     "seeds.csv, seed-stats.csv, summary.json."),
) -> None:
    """Simulate a scenario and report latency percentiles, throughput and SLO attainment."""
    with loading_modules():
        from simulator.run.simulate import simulate as run_simulation
        from simulator.scenario.config import load_scenario, parse_overrides

    overrides = parse_overrides(set_)
    if seed is not None:
        overrides["seed"] = check_seed("--seed", seed)
    sc = load_scenario(scenario, overrides)
    if seeds is not None:
        from simulator.cli import studies
        studies.seeds(sc, seeds, json_out=json_out, out=out, force=force, show=not no_progress)
        return
    if out is not None:
        check_output_folder(out, force=force)
    show = not no_progress and err_console.is_terminal
    plain = PlainProgress(f"simulating {sc.name}", "requests", err_console,
                          enabled=not no_progress and not show)
    with Progress(TextColumn("[bold]simulating[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, disable=not show, transient=True) as bar:
        task = bar.add_task(escape(sc.name), total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
            plain(done, total)

        result = run_simulation(sc, on_progress=progress)
    summary = jsonable(result.summary)
    if out is not None:
        write_outputs(result, summary, out, force=force)
    if json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
        if (summary.get("stability") or {}).get("stable") is False:
            err_console.print("warning: the run is unstable (requests in system grow); see summary.stability")
        if (summary.get("steady_state") or {}).get("reached") is False:
            err_console.print("warning: the run never reached steady state; see summary.steady_state")
        return
    print_summary(summary, result)
    if out is not None:
        out_console.print(f"wrote {out}/requests.{{parquet,csv}}, steps.{{parquet,csv}}, summary.json, scenario.yaml")


@guarded
def compare(
    scenarios: list[Path] = typer.Argument(..., help="Two or more scenario files (the first is the baseline), "
                                           "or one with --set variants."),
    set_: list[str] | None = typer.Option(None, "--set", help="One variant of the one scenario: key.path=value, "
                                          "several joined by ';' (repeatable: one variant each)."),
    seed: int | None = typer.Option(None, "--seed", help="Override every run's seed."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
    out: Path | None = typer.Option(None, "--out", help="Write compare.csv and summary.json here."),
    force: bool = typer.Option(False, "--force", help="Replace the results already in --out."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar or lines."),
) -> None:
    """Run scenarios (or variants of one) and show each KPI's change against the first."""
    from simulator.cli import studies
    studies.compare(scenarios, set_ or [], seed=seed, json_out=json_out, out=out, force=force,
                        show=not no_progress)


@guarded
def sweep(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    rates: str | None = typer.Option(None, "--rates", help="Arrival rates in requests/s, e.g. 2,4,8."),
    concurrency: str | None = typer.Option(None, "--concurrency", help="Closed-loop clients, e.g. 8,16,32."),
    set_: list[str] | None = typer.Option(None, "--set", help="Override a field: key.path=value (repeatable)."),
    seed: int | None = typer.Option(None, "--seed", help="Override the scenario's seed."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
    out: Path | None = typer.Option(None, "--out", help="Write sweep.csv, summary.json, scenario.yaml here."),
    force: bool = typer.Option(False, "--force", help="Replace the results already in --out."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar or lines."),
) -> None:
    """Latency tails against load, and the largest swept load that meets the SLO."""
    from simulator.cli import studies
    from simulator.scenario.config import load_scenario, parse_overrides

    overrides = parse_overrides(set_)
    if seed is not None:
        overrides["seed"] = seed
    studies.sweep(load_scenario(scenario, overrides), rates, concurrency, json_out=json_out, out=out,
                      force=force, show=not no_progress)


def write_outputs(result: Any, summary: dict[str, Any], out: Path, *, force: bool = False) -> None:
    """Write the run's records and summary as the folder ``out``, all or nothing (see
    :mod:`simulator.output`); ``scenario.yaml`` keeps the absolute ``base_dir`` so relative trace/profile
    paths still resolve when it is loaded again."""
    with output_folder(out, force=force) as stage:
        result.requests.to_parquet(stage / "requests.parquet", index=False)
        write_csv(result.requests, stage / "requests.csv")
        result.steps.to_parquet(stage / "steps.parquet", index=False)
        write_csv(result.steps, stage / "steps.csv")
        (stage / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        scenario = result.scenario.model_dump(mode="json", exclude_none=True)
        scenario["base_dir"] = str(Path(result.scenario.base_dir).resolve())
        (stage / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))


def _ms(x: Any) -> str:
    return "-" if x is None else f"{x * 1000:,.1f}"


def _num(x: Any, spec: str) -> str:
    """``x`` formatted, or ``-`` when there is no value (an empty measurement window)."""
    return "-" if x is None else format(x, spec)


def print_summary(summary: dict[str, Any], result: Any) -> None:
    sys_ = result.system
    if getattr(sys_, "pools", ()):   # model routing: one line per pool below
        out_console.print(f"[bold]{summary['name']}[/]  pools={', '.join(escape(n) for n in summary['pools'])}  "
                          f"seed={summary['seed']}")
    else:
        out_console.print(f"[bold]{summary['name']}[/]  model={sys_.model.name}  hardware={sys_.profile.name} "
                          f"({sys_.profile.source})  seed={summary['seed']}  "
                          f"KV blocks={sys_.kv_plan.num_gpu_blocks:,} x {sys_.kv_plan.block_size}"
                          + (" per DP rank" if result.scenario.deployment.data_parallel_size > 1 else ""))
        out_console.print(f"[dim]step costs: {escape(sys_.profile.basis())}[/]")
    dep = summary.get("deployment")
    if dep:
        split = (f" x PP {dep['pipeline_parallel_size']}" if "pipeline_parallel_size" in dep else "") + (
            f" x DP {dep['data_parallel_size']}" if "data_parallel_size" in dep else "") + (
            f", EP {dep['expert_parallel_size']}" if "expert_parallel_size" in dep else "")
        out_console.print(f"GPUs: {dep['num_gpus']} ({dep['replicas']} replicas x TP {dep['tensor_parallel_size']}"
                          f"{split})  "
                          f"weights {dep['quantization']} (GEMMs in {dep['compute_dtype']}), "
                          f"KV {dep['kv_cache_dtype']}, "
                          f"max concurrency {dep['max_concurrency']:.1f}x at max_model_len"
                          f"{'' if dep['stream'] else ', non-streaming (TTFT = E2E)'}")
    table = Table(title="latency (ms)", title_justify="left")
    for col in ("metric", "mean", "p50", "p90", "p95", "p99", "p99 95% CI", "n"):
        table.add_column(col, justify="right" if col != "metric" else "left")
    for metric in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_delay_s", "ttua_s",
                   *(m for m in ("client_ttft_s", "client_e2e_s", "client_ttua_s") if m in summary)):
        if metric not in summary:
            continue
        s = summary[metric]
        ci = (s.get("ci95") or {}).get("p99")
        table.add_row(metric.removesuffix("_s"), _ms(s.get("mean")), *(_ms(s.get(f"p{p}")) for p in (50, 90, 95, 99)),
                      f"{_ms(ci[0])}-{_ms(ci[1])}" if ci else "-", str(s.get("n", "")))
    tasks = summary.get("tasks")
    if tasks is not None:   # whole sessions: from the first turn's arrival to the last usable answer
        s = tasks["task_ttua_s"]
        ci = (s.get("ci95") or {}).get("p99")
        table.add_row("task_ttua", _ms(s.get("mean")), *(_ms(s.get(f"p{p}")) for p in (50, 90, 95, 99)),
                      f"{_ms(ci[0])}-{_ms(ci[1])}" if ci else "-", str(s.get("n", "")))
    out_console.print(table)
    if tasks is not None:
        out_console.print(f"tasks ({tasks['loop']}-loop sessions): {tasks['started']} started in the window, "
                          f"{tasks['completed']} completed, {tasks['failed']} failed (a turn dropped), "
                          f"{tasks['unfinished']} unfinished; {_num(tasks['calls_per_task'], '.2f')} calls sent "
                          f"per task of {_num(tasks['turns_per_task'], '.2f')} turns")
    tp, rq = summary["throughput"], summary["requests"]
    bench = summary.get("benchmark")
    if bench:
        load = (f"closed loop of {bench['concurrency']} clients, think time {bench['think_time_s']:g} s "
                f"({bench['think_time_dist']})" if bench["mode"] == "closed_loop"
                else f"offline, {bench['concurrency']} requests at t=0, makespan {bench['makespan_s']:.2f} s")
        batch = bench["mean_running_batch"]
        out_console.print(f"benchmark: {load}; mean running batch {'-' if batch is None else f'{batch:.1f}'} seqs; "
                          f"measured over {tp['window_s'][0]:.2f}-{tp['window_s'][1]:.2f} s")
        every = bench.get("every_request")
        if every:
            def ms(block: dict[str, Any], p: str) -> str:
                return _num(None if block.get(p) is None else 1000 * block[p], ".1f")
            out_console.print(
                f"every request (as vllm bench serve counts them, start-up included): {every['completed']} completed, "
                f"{_num(every['requests_per_s'], '.2f')} req/s, {_num(every['output_tokens_per_s'], ',.0f')} output "
                f"tok/s; TTFT p50/p99 {ms(every['ttft_s'], 'p50')}/{ms(every['ttft_s'], 'p99')} ms, TPOT p50/p99 "
                f"{ms(every['tpot_s'], 'p50')}/{ms(every['tpot_s'], 'p99')} ms, ITL p99 {ms(every['itl_s'], 'p99')} ms")
    out_console.print(
        f"throughput: {_num(tp['requests_per_s'], '.2f')} req/s, {_num(tp['output_tokens_per_s'], ',.0f')} "
        "output tok/s  |  "
        f"requests: {rq['arrived']} arrived, {rq['completed']} completed, {rq['rejected']} rejected "
        f"({rq.get('shed', 0)} shed), {rq.get('timed_out', 0)} timed out, "
        f"{rq['in_flight']} in flight, {rq['preemptions']} preemptions")
    b, kv = summary["batch"], summary["kv_cache"]
    out_console.print(f"batch: mean {b['mean_num_seqs'] or 0:.1f} seqs (max {b['max_num_seqs']})  |  "
                      f"KV usage: mean {100 * (kv['mean_usage'] or 0):.1f}%, max {100 * (kv['max_usage'] or 0):.1f}%")
    pc = summary.get("prefix_cache")
    if pc is not None:
        out_console.print(f"prefix cache: hit rate {100 * (pc['hit_rate'] or 0):.1f}% "
                          f"({pc['hit_tokens']:,} of {pc['queries']:,} prompt tokens), {pc['evictions']:,} evictions")
    path = summary.get("request_path") or {}
    if "response_cache" in path:
        rc = path["response_cache"]
        out_console.print(f"response cache ({rc['kind']}): hit rate {100 * (rc['hit_rate'] or 0):.1f}% "
                          f"({rc['hits']:,} of {rc['lookups']:,}), {rc['engine_requests']:,} requests reached the "
                          f"engine, {rc['output_tokens_saved']:,} output tokens not computed")
    if "coalescing" in path:
        out_console.print(f"coalescing: {path['coalescing']['merged']:,} requests shared an identical prompt in flight")
    if "stages" in path:
        st_ = path["stages"]
        out_console.print(f"stages: mean {1000 * (st_['pre_s'] or 0):.1f} ms before the engine, "
                          f"{1000 * (st_['post_s'] or 0):.1f} ms after it")
    slo = summary.get("slo") or {}
    if "passed" in slo:
        checks = ", ".join(f"{c['name']} {'met' if c['met'] else '[red]MISSED[/]'}" for c in slo["checks"])
        att = summary["slo_attainment"]
        verdict = {"pass": "[green]met[/]", "marginal": "[yellow]MARGINAL[/]"}.get(slo.get("outcome", ""),
                                                                                  "[red]NOT MET[/]")
        out_console.print(f"SLO {verdict}: "
                          f"{100 * (att or 0):.2f}% of {slo['judged']} requests within every threshold"
                          f"{'; ' + checks if checks else ''}; {slo['dropped']} dropped "
                          f"(budget {100 * slo['max_drop_fraction']:g}%); "
                          f"goodput {summary['goodput_requests_per_s'] or 0:.2f} req/s")
        for failure in slo["failures"]:
            out_console.print(f"  [red]-[/] {escape(failure)}")
    st = summary.get("stability") or {}
    if st.get("stable") is False:
        ratio = st["offered_load_ratio"]   # None: no request left the system inside the window
        served = f"offered/served {ratio:.2f}" if ratio is not None else "no request completed in the window"
        out_console.print(f"[bold red]warning: the run is unstable[/]: the requests in system grow "
                          f"{st['backlog_growth_per_s']:.2f} requests/s ({100 * st['backlog_growth_fraction']:.1f}% of "
                          f"arrivals; {served}); "
                          "its percentiles grow with the run "
                          "length. Add capacity or lower the load.")
    steady = summary.get("steady_state") or {}
    if steady.get("reached") is False:
        out_console.print(f"[bold yellow]warning: the run never reached steady state[/]: {escape(steady['reason'])}; "
                          f"measured from {steady['warmup_s']:.1f} s, its latencies are lower than the deployment's "
                          "steady ones. Raise num_requests (or duration_s).")
    elif steady.get("applies") and steady.get("truncated_requests"):
        out_console.print(f"steady state from {steady['warmup_s']:.1f} s: {steady['truncated_requests']:,} earlier "
                          f"arrivals after warmup_s left out (warm-up found by MSER-5, set by "
                          f"{escape(steady['binding_series'])})")
    for region, f in (summary.get("fleet") or {}).items():
        out_console.print(f"region {escape(region)}: {f['requests']} requests, "
                          f"client TTFT p99 {_ms(f['client_ttft_p99_s'])} ms, "
                          f"E2E p99 {_ms(f['client_e2e_p99_s'])} ms, mean RTT {_ms(f['rtt_mean_s'])} ms")
    for name, pl in (summary.get("pools") or {}).items():
        out_console.print(f"pool {escape(name)}: {escape(pl['model'])} on {pl['num_gpus']} x {escape(pl['hardware'])} "
                          f"(KV blocks {pl['num_gpu_blocks']:,}), "
                          f"{pl['requests']['arrived']} requests; p50/p99 TTFT {_ms(pl['ttft_s']['p50'])}/"
                          f"{_ms(pl['ttft_s']['p99'])} ms, "
                          f"TPOT {_ms(pl['tpot_s']['p50'])}/{_ms(pl['tpot_s']['p99'])} ms, "
                          f"E2E {_ms(pl['e2e_s']['p50'])}/{_ms(pl['e2e_s']['p99'])} ms")
    auto = summary.get("autoscaler")
    if auto:
        out_console.print(f"autoscaler: cold start {auto['cold_start_s']:.1f} s, {auto['scale_events']} changes, "
                          f"mean {auto['mean_active_replicas'] or 0:.2f} / max {auto['max_active_replicas']} replicas, "
                          f"{auto['gpu_replica_seconds'] / 3600:.2f} replica-hours; TTFT p99 during ramps "
                          f"{_ms(auto['ttft_p99_in_ramps_s'])} ms ({auto['ramp_s']:.0f} s), outside "
                          f"{_ms(auto['ttft_p99_outside_ramps_s'])} ms")
    out_console.print(f"[dim]simulated {summary['sim_time_s']:.1f} s in {summary['wall_s']:.2f} s wall[/]")
