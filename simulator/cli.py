"""``llmplan``: the command line for everything the UI does.

Every user error (bad scenario field, unknown preset, unreadable trace, a model that does not
fit) prints one line naming the field and the value and exits with status 2; no tracebacks.
Set ``LLMPLAN_DEBUG=1`` to see the traceback of an unexpected internal error.
"""
from __future__ import annotations

if __name__ == "__main__":  # `python -m simulator.cli`: a Ctrl-C during the imports below ends in one line
    from simulator.startup import guard_startup

    _restore_interrupts = guard_startup()

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import typer
import yaml
from rich import box
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperGroup

from simulator.arguments import check_seed
from simulator.cli_support import (
    PlainProgress,
    _fail,
    at_least,
    check_profile_out,
    err_console,
    guarded,
    jsonable,
    out_console,
)
from simulator.errors import ScenarioError
from simulator.output import check_output_folder, output_folder, write_csv
from simulator.startup import Terminated, loading_modules, run_to_exit, stop_on_sigterm


class _OneLineErrors(TyperGroup):
    """The command group: an option's value of the wrong type (``--seed abc``, ``--timeout abc``) is the
    same one line as every other bad value (``error: --seed = 'abc': must be a whole number``, exit 2),
    not a usage box that does not repeat the value. A missing argument keeps click's usage message."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.BadParameter as exc:   # typer's own copy of click's, as typer raises it
            if type(exc).__name__ == "MissingParameter" or exc.param is None:
                raise
            _fail(str(ScenarioError(_option_name(exc.param), *_bad_value(exc))))


def _option_name(param: Any) -> str:
    """``--seed`` for an option (its longest flag), ``scenario`` for an argument."""
    flags = [o for o in param.opts if o.startswith("-")]
    return max(flags, key=len) if flags else str(param.name)


#: Pydantic's error types for a value of the wrong type (typer converts option values with pydantic).
_TYPE_WORDS = {"int_parsing": "must be a whole number", "int_from_float": "must be a whole number",
               "float_parsing": "must be a number", "bool_parsing": "must be true or false"}


def _bad_value(exc: typer.BadParameter) -> tuple[Any, str]:
    """The value given and what is wrong with it, from typer's conversion error (its cause, a pydantic
    ValidationError, holds the value) or click's message."""
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if callable(errors):
        first = errors(include_url=False)[0]
        return first.get("input"), _TYPE_WORDS.get(first["type"], str(first["msg"]))
    return "?", exc.format_message()


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=_OneLineErrors,
                  help="Simulate LLM inference serving: TTFT/TPOT/E2E tails and the GPUs to hold an SLO.")
def package_version() -> str:
    """The installed ``llmplan``'s version, or the checkout's pyproject.toml version when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llmplan")
    except PackageNotFoundError:
        pass
    for folder in Path(__file__).resolve().parents:
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            text = pyproject.read_text(encoding="utf-8")
            if re.search(r'(?m)^name\s*=\s*"llmplan"', text):
                found = re.search(r'(?m)^version\s*=\s*"([^"]+)"', text)
                if found:
                    return found.group(1)
    return "unknown"


def _print_version(value: bool) -> None:
    if value:
        from simulator.native import engine_build

        out_console.print(f"llmplan {package_version()}\nengine: {engine_build()}", highlight=False, markup=False)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True,
        help="Print the version and the engine's build (compiled or pure Python), and exit.")) -> None:
    pass


@app.command()
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
        from simulator import cli_studies
        cli_studies.seeds(sc, seeds, json_out=json_out, out=out, force=force, show=not no_progress)
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


@app.command()
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
    from simulator import cli_studies
    cli_studies.compare(scenarios, set_ or [], seed=seed, json_out=json_out, out=out, force=force,
                        show=not no_progress)


@app.command()
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
    from simulator import cli_studies
    from simulator.scenario.config import load_scenario, parse_overrides

    overrides = parse_overrides(set_)
    if seed is not None:
        overrides["seed"] = seed
    cli_studies.sweep(load_scenario(scenario, overrides), rates, concurrency, json_out=json_out, out=out,
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
                          f"KV blocks={sys_.kv_plan.num_gpu_blocks:,} x {sys_.kv_plan.block_size}")
    dep = summary.get("deployment")
    if dep:
        split = (f" x PP {dep['pipeline_parallel_size']}" if "pipeline_parallel_size" in dep else "") + (
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


@app.command()
@guarded
def models() -> None:
    """List model presets: total and active parameters, experts, attention, context, KV per token."""
    from simulator.scenario.models import MODEL_PRESETS

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, caption_justify="left",
                  caption="total/active: billions of weights (all experts / those one token uses); experts: "
                  "routed/top-k (+shared); attention: heads/KV heads, MLA latent+rope, SW window (x layers "
                  "when not all); KiB/token: KV cache per token, whole model, model dtype. docs/models.md")
    for col in ("name", "total", "active", "layers", "experts", "attention", "context", "KiB/token"):
        table.add_column(col, justify="left" if col in ("name", "experts", "attention") else "right")
    for name, m in MODEL_PRESETS.items():
        experts = (f"{m.num_experts}/{m.num_experts_per_tok}" + (f"+{m.num_shared_experts}" if m.num_shared_experts
                                                                 else "")) if m.is_moe else "-"
        attention = f"{m.num_attention_heads}/{m.num_key_value_heads}"
        if m.is_mla:
            attention += f" MLA {m.kv_lora_rank}+{m.qk_rope_head_dim}"
        if m.num_sliding_layers:
            attention += f" SW {m.sliding_window}" + (f"x{m.num_sliding_layers}" if m.num_sliding_layers < m.num_layers
                                                      else "")
        table.add_row(name, f"{m.num_params / 1e9:.2f}", f"{m.num_active_params / 1e9:.2f}", str(m.num_layers),
                      experts, attention, str(m.max_model_len), f"{m.kv_bytes_per_token() / 1024:.1f}")
    out_console.print(table)


profiles_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                           help="List hardware profiles, or `show NAME` for one profile's fit quality.")
app.add_typer(profiles_app, name="profiles")


@profiles_app.callback(invoke_without_command=True)
@guarded
def profiles(ctx: typer.Context) -> None:
    """List hardware profiles: name, source, memory, price, held-out fit error, in 100 columns
    (`profiles show NAME` adds the device, bandwidth, peak FLOP/s and date)."""
    if ctx.invoked_subcommand is not None:
        return
    from simulator.report.profile_report import fit_headline
    from simulator.scenario.profiles import available_profiles, load_profile

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True,
                  caption_justify="left",
                  caption="GiB: GPU memory; $/h: price per GPU-hour; fit error: held-out error of the "
                  "measured per-op tables, worst family. `llmplan profiles show NAME`: device, bandwidth, "
                  "peak FLOP/s, date and the fit per op.")
    for col in ("name", "source", "GiB", "$/h", "fit error (held out)"):
        table.add_column(col, justify="right" if col in ("GiB", "$/h") else "left")
    for name, path in available_profiles().items():
        try:
            p = load_profile(str(path))
            fit = fit_headline(p) if p.table is not None else f"- ({p.cost_model}, no measurements)"
        except ScenarioError as exc:
            table.add_row(escape(name), "[red]invalid[/]", "-", "-", escape(str(exc)))
            continue
        table.add_row(escape(name), p.source, f"{p.memory_bytes / 2**30:.1f}" if p.memory_bytes else "-",
                      f"{p.price_per_gpu_hour:.2f}" if p.price_per_gpu_hour is not None else "-", escape(fit))
    out_console.print(table, width=min(out_console.width, 100))


@profiles_app.command("show")
@guarded
def profiles_show(name: str = typer.Argument(..., help="Profile name or path.")) -> None:
    """One profile: provenance, and per op its held-out fit error and roofline efficiency."""
    from simulator.report.profile_report import TARGET_MEDIAN, TARGET_P90, family_report, op_report
    from simulator.scenario.profiles import load_profile

    p = load_profile(name, field="profile")
    measured = p.table is not None
    # The per-op table is read (and checked) before anything is printed: a bad row is one error line.
    ops, fam = (op_report(p), family_report(p)) if measured else (None, None)
    prov = p.provenance
    out_console.print(f"[bold]{escape(p.name)}[/]  {escape(p.device)}  source={p.source}  cost_model={p.cost_model}  "
                      f"date={prov.get('date', '-')}")
    memory = f"{p.memory_bytes / 2**30:.1f} GiB" if p.memory_bytes else "-"
    if p.memory_bandwidth_bytes_per_s:
        memory += f" at {p.memory_bandwidth_bytes_per_s / 1e12:.2f} TB/s"
    peaks = ", ".join(f"{k} {v / 1e12:,.0f}" if v >= 1e13 else f"{k} {v / 1e12:.2g}"
                      for k, v in p.peak_flops.items()) or "-"
    price = f"${p.price_per_gpu_hour:.2f}" if p.price_per_gpu_hour is not None else "-"
    out_console.print(f"  memory {memory}; peak TFLOP/s: {peaks}; price per GPU-hour: {price}",
                      highlight=False, markup=False)
    for key in ("tool", "model", "dtype", "torch_version", "cpu_model", "torch_threads", "git_revision", "document",
                "imported_from", "license"):
        if key in prov:
            out_console.print(f"  {key}: {escape(str(prov[key]))}", highlight=False)
    if isinstance(prov.get("noise"), dict):
        n = prov["noise"]
        out_console.print(f"  noise: p90-p10 spread {100 * n.get('median_rel_spread_p90_p10', 0):.0f}% of the median "
                          f"(median over benchmarks), reference drift {100 * n.get('reference_drift', 0):+.1f}%, "
                          f"load average {n.get('load_average_before', ['-'])[0]}", highlight=False)
    if ops is None or fam is None or ops.empty:
        eff = p.efficiency
        why = "no per-op measurements" if ops is None else f"the per-op table {p.table} has no rows (a header alone)"
        out_console.print(f"{why}: a roofline with assumed efficiencies (GEMM {eff.gemm_max:.0%} "
                          f"of peak, memory {eff.memory:.0%}, attention {eff.attention_compute:.0%}/"
                          f"{eff.attention_memory:.0%}); fit error: n/a", highlight=False, markup=False)
        return
    table = Table(title="per op: leave-one-out error on held-out shapes, best efficiency vs the profile's peak",
                  title_justify="left")
    for col in ("op", "family", "points", "median |err|", "p90 |err|", "max |err|", "best", "of peak"):
        table.add_column(col, justify="left" if col in ("op", "family") else "right")
    for r in ops.to_dict("records"):
        best = f"{r['best'] / 1e9:,.1f} G{r['unit'].split('/')[0]}/s"
        table.add_row(r["op"], r["family"], str(r["points"]), _pct(r["median_abs_error"]), _pct(r["p90_abs_error"]),
                      _pct(r["max_abs_error"]), best, _pct(r["efficiency"]))
    out_console.print(table)
    ftable = Table(title=f"per family (target: median <= {TARGET_MEDIAN:.0%}, p90 <= {TARGET_P90:.0%})",
                   title_justify="left")
    for col in ("family", "points", "median |err|", "p90 |err|", "max |err|", "target"):
        ftable.add_column(col, justify="left" if col == "family" else "right")
    for r in fam.to_dict("records"):
        ftable.add_row(r["family"], str(r["points"]), _pct(r["median_abs_error"]), _pct(r["p90_abs_error"]),
                       _pct(r["max_abs_error"]), "met" if r["meets_target"] else "[red]missed[/]")
    out_console.print(ftable)


def _pct(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * x:.1f}%"


@app.command()
@guarded
def calibrate(
    out: Path = typer.Option(..., "--out", help="Folder for the measured profile (profile.yaml + ops.csv)."),
    model: str = typer.Option("llama-3-8b", "--model", help="Model preset whose shapes to time, or a model file "
                              "(YAML: an inline spec as a scenario's model: takes it)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (shards the shapes; >1 times all-reduces)."),
    dtype: str | None = typer.Option(None, "--dtype", help="fp32, bf16, fp16, or fp8 (the layer GEMMs alone, W8A8 "
                                     "via torch._scaled_mm; default: bf16 on GPU, fp32 on CPU)."),
    quick: bool = typer.Option(False, "--quick", help="A small grid and few repeats: a minute-scale run."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="Largest token count timed."),
    max_seqs: int | None = typer.Option(None, "--max-seqs", help="Largest decode batch / sampled rows timed."),
    max_context: int | None = typer.Option(None, "--max-context", help="Longest context timed."),
    threads: int | None = typer.Option(None, "--threads", help="torch CPU threads (default: torch's)."),
    memory_limit_gib: float | None = typer.Option(None, "--memory-limit-gib",
                                                     help="Refuse a grid needing more (default: 80% of free memory)."),
    fresh: bool = typer.Option(False, "--fresh", help="Discard partial results in --out and start over."),
    force: bool = typer.Option(False, "--force", help="Measure again over a finished profile in --out (replacing "
                               "it when the new one is written)."),
    clock: str = typer.Option("auto", "--clock", help="CPU timing: wall, thread (CPU time; needs --threads 1) "
                              "or auto (thread when single-threaded)."),
    name: str | None = typer.Option(None, "--name", help="Profile name (default: the folder's name)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar (or, when stderr is "
                                     "not a terminal, the progress lines)."),
    max_drift: float = typer.Option(0.25, "--max-drift", help="Noise bound: the reference kernel's largest "
                                    "slowdown from the start of the run (fraction; benchmarks timed past it are "
                                    "timed again, 3 times at most, then the run is refused; a speed-up past it "
                                    "makes the faster probe the reference)."),
    max_spread: float = typer.Option(0.5, "--max-spread", help="Noise bound: the reference kernel's largest "
                                     "(p90 - p10) / median over one probe."),
    max_load: float | None = typer.Option(None, "--max-load", help="Noise bound: the largest 1-minute load "
                                          "average per CPU (default: 3 on the thread clock, 1.5 on the wall "
                                          "clock, not checked on a GPU)."),
    from_observation: list[Path] | None = typer.Option(None, "--from-observation", help="Fit a profile to a real "
                                                       "engine instead: an observed run (`llmplan observe`, or "
                                                       "`vllm bench serve --save-detailed` JSON); repeat for more."),
    holdout: list[Path] | None = typer.Option(None, "--holdout", help="With --from-observation: a run kept out "
                                              "of the fit, its prediction error reported; repeatable."),
    hardware: str | None = typer.Option(None, "--hardware", help="With --from-observation: the base profile "
                                        "whose costs are fitted (default: the --scenario's hardware)."),
    scenario: Path | None = typer.Option(None, "--scenario", help="With --from-observation: a scenario whose "
                                         "engine, scheduler and deployment are the observed server's settings."),
    engine: str | None = typer.Option(None, "--engine", help="With --from-observation: engine preset (vllm-v1, "
                                      "sglang, ...), over the --scenario's."),
    fit: str = typer.Option("step_s,kernel_scale", "--fit", help="With --from-observation: the costs fitted, "
                            "from step_s, kernel_scale, per_seq_s."),
    max_evals: int = typer.Option(60, "--max-evals", help="With --from-observation: most simulations of each run."),
) -> None:
    """Time real torch kernels over the model's shapes and write a measured hardware profile, or, with
    --from-observation, fit a profile's costs to a real engine's observed runs (source: fitted).

    The machine's noise is probed throughout (a reference kernel and the load average): benchmarks
    timed during a noisy stretch are timed again, and a machine that stays noisy is refused (exit 2)."""
    # Options of one mode given in the other are refused, not ignored (None or a default: not given).
    fitting = {"--hardware": hardware, "--scenario": scenario, "--engine": engine,
               "--fit": None if fit == "step_s,kernel_scale" else fit,
               "--max-evals": None if max_evals == 60 else max_evals}
    timing = {"--device": None if device == "auto" else device, "--tp": None if tp == 1 else tp, "--dtype": dtype,
              "--quick": quick or None, "--max-tokens": max_tokens, "--max-seqs": max_seqs,
              "--max-context": max_context, "--threads": threads, "--memory-limit-gib": memory_limit_gib,
              "--fresh": fresh or None, "--clock": None if clock == "auto" else clock}
    if from_observation or holdout:
        from calibrate.fit import FitSettings, format_report, run_fit

        if not from_observation:
            raise ScenarioError("--holdout", [str(h) for h in holdout or []], "needs --from-observation runs to fit on")
        given = [k for k, v in timing.items() if v is not None]
        if given:
            raise ScenarioError(given[0], timing[given[0]], "times torch kernels; it does not apply to "
                                "--from-observation (a fit to observed runs)")
        check_profile_out(out, force)
        doc = run_fit(FitSettings(tuple(map(str, from_observation)), model, hardware, tuple(map(str, holdout or ())),
                                  str(scenario) if scenario else None, engine, tuple(fit.split(",")), max_evals, name),
                      out, log=lambda m: err_console.print(escape(m), highlight=False),
                      command="llmplan " + " ".join(sys.argv[1:]))
        for line in format_report(doc):
            out_console.print(escape(line), highlight=False)
        return
    given = [k for k, v in fitting.items() if v is not None]
    if given:
        raise ScenarioError(given[0], fitting[given[0]], "applies to a fit (--from-observation OBS) only")
    try:
        from calibrate.runner import run_calibration
    except ModuleNotFoundError as exc:
        if exc.name == "torch" or "torch" in str(exc):
            _fail("torch is not installed: `llmplan calibrate` needs the calibrate extra "
                  "(pip install -e .[calibrate])")
        raise
    for flag, value in (("--tp", tp), ("--max-tokens", max_tokens), ("--max-seqs", max_seqs),
                        ("--max-context", max_context), ("--threads", threads)):
        at_least(flag, value, 1)
    if memory_limit_gib is not None and not (math.isfinite(memory_limit_gib) and memory_limit_gib > 0):
        raise ScenarioError("--memory-limit-gib", memory_limit_gib, "must be a positive number of GiB")
    for flag, bound in (("--max-drift", max_drift), ("--max-spread", max_spread), ("--max-load", max_load)):
        if bound is not None and not (math.isfinite(bound) and bound > 0):   # nan would turn the check off
            raise ScenarioError(flag, bound, "must be a positive number (a noise bound)")
    check_profile_out(out, force, name)
    fresh = fresh or force
    show = not no_progress and err_console.is_terminal
    plain = PlainProgress("calibrating", "benchmarks", err_console, enabled=not no_progress and not show)
    state = {"done": 0, "total": 0}
    with Progress(TextColumn("[bold]calibrating[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err_console, disable=not show, transient=True) as bar:
        task = bar.add_task("", total=None)

        def started(done: int, total: int) -> None:
            state.update(done=done, total=total)
            bar.update(task, completed=done, total=total, description="resuming" if done else "")

        def progress(done: int, total: int, label: str) -> None:
            state.update(done=done, total=total)
            bar.update(task, completed=done, total=total, description=label)
            plain(done, total, label)

        try:
            path = run_calibration(out, model, device=device, tp=tp, dtype=dtype, quick=quick, max_tokens=max_tokens,
                                   max_seqs=max_seqs, max_context=max_context, threads=threads,
                                   memory_limit_bytes=memory_limit_gib * 2**30 if memory_limit_gib else None,
                                   fresh=fresh, clock=clock, name=name, on_progress=progress, on_start=started,
                                   command="llmplan " + " ".join(sys.argv[1:]),
                                   noise={"max_drift": max_drift, "max_spread": max_spread,
                                          **({"max_load_per_cpu": max_load} if max_load is not None else {})})
        except KeyboardInterrupt:
            _fail(f"interrupted: {state['done']} of {state['total']} benchmarks kept in {out}/ops.partial.csv; "
                  "run the same command again to resume", code=130)
    from simulator.report.profile_report import family_report
    from simulator.scenario.profiles import load_profile

    p = load_profile(str(path))
    out_console.print(f"wrote {path} ({p.device}); use it with `hardware: {path.parent}`")
    measured_dtype = p.provenance.get("dtype")
    if measured_dtype:
        example = (f", e.g. llmplan simulate examples/cpu-tiny-llama.yaml --set hardware={path.parent}"
                   if (model, measured_dtype) == ("tiny-llama", "fp32") else "")
        out_console.print(f"  kernels timed in {measured_dtype}: serve the scenario's model in "
                          f"{measured_dtype}{example}", highlight=False)
    noise = p.provenance.get("noise", {}).get("monitor", {})
    if noise:
        out_console.print(f"  noise: {len(noise['probes'])} probes of the reference kernel, largest drift "
                          f"{100 * noise['max_abs_drift']:.0f}% (bound {100 * noise['bounds']['max_drift']:.0f}%), "
                          f"{noise['benchmarks_remeasured']} benchmarks timed again"
                          + (f", {len(noise['rebaselines'])} re-baselines (the machine got faster)"
                             if noise.get("rebaselines") else ""), highlight=False)
    for warning in p.provenance.get("fit_warnings", []):
        err_console.print(f"[bold yellow]warning:[/] {escape(warning)}", highlight=False)
    for r in family_report(p).to_dict("records"):
        out_console.print(f"  {r['family']:<13} held-out error: median {_pct(r['median_abs_error'])}, "
                          f"p90 {_pct(r['p90_abs_error'])} over {r['points']} points", highlight=False)


@app.command()
@guarded
def observe(
    url: str = typer.Argument(..., help="The server, e.g. http://127.0.0.1:8000 (OpenAI-compatible, streaming)."),
    out: Path = typer.Option(..., "--out", help="Observation file to write (JSON)."),
    rate: float | None = typer.Option(None, "--rate", help="Poisson arrivals at this many requests/s."),
    concurrency: int | None = typer.Option(None, "--concurrency", help="A closed loop of this many clients."),
    offline: bool = typer.Option(False, "--offline", help="An offline burst: every request sent at once."),
    num_requests: int = typer.Option(..., "--num-requests", help="Requests to send (at most)."),
    duration_s: float | None = typer.Option(None, "--duration-s", help="Stop sending after this long."),
    prompt_tokens: str = typer.Option(..., "--prompt-tokens", help="Prompt length: N, or LO:HI (uniform)."),
    output_tokens: str = typer.Option(..., "--output-tokens", help="Output length: N, or LO:HI (uniform)."),
    prefix_tokens: int = typer.Option(0, "--prefix-tokens", help="Leading tokens the prompts of a group share."),
    prefix_groups: int = typer.Option(1, "--prefix-groups", help="Groups of prompts sharing a prefix."),
    model: str | None = typer.Option(None, "--model", help="Served model name (default: the first at /v1/models)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the arrivals, lengths and prompts (use a fresh one per "
                             "run: a server's prefix cache remembers the last run's prompts)."),
    timeout_s: float = typer.Option(600.0, "--timeout-s", help="Longest wait for one response."),
    ignore_eos: bool = typer.Option(True, "--ignore-eos/--no-ignore-eos", help="Send ignore_eos (vLLM)."),
    min_tokens: bool = typer.Option(True, "--min-tokens/--no-min-tokens", help="Send min_tokens = max_tokens."),
    token_ids: str = typer.Option("1000:20000", "--token-ids", help="Prompt token ids are drawn from LO:HI."),
    metrics: bool = typer.Option(True, "--metrics/--no-metrics", help="Read /metrics before and after."),
    text_prompts: bool = typer.Option(False, "--text-prompts", help="Prompts as text (one common word per "
                                      "token) for servers that take no token ids; lengths from the server's usage."),
) -> None:
    """Drive a streaming endpoint (vLLM, SGLang, TGI) with a controlled load and record every request's
    send, first-token and chunk instants and token counts, plus /metrics before and after."""
    from calibrate.observe import Lengths, Load
    from calibrate.observe import observe as run_observe

    modes = [m for m, on in (("poisson", rate is not None), ("closed", concurrency is not None),
                             ("offline", offline)) if on]
    if len(modes) != 1:
        raise ScenarioError("load", ", ".join(modes) or None, "give exactly one of --rate (Poisson), --concurrency "
                            "(closed loop) or --offline (a burst)")
    ids = token_ids.split(":")
    if len(ids) != 2 or not all(i.strip().isdigit() for i in ids):
        raise ScenarioError("--token-ids", token_ids, "LO:HI, two non-negative integers")
    load = Load(modes[0], num_requests, Lengths.parse(prompt_tokens, "--prompt-tokens"),
                Lengths.parse(output_tokens, "--output-tokens"), rate_per_s=rate, concurrency=concurrency,
                duration_s=duration_s, prefix_tokens=prefix_tokens, prefix_groups=prefix_groups, seed=seed,
                ignore_eos=ignore_eos, min_tokens=min_tokens, token_ids=(int(ids[0]), int(ids[1])),
                timeout_s=timeout_s, text_prompts=text_prompts)
    doc = run_observe(url, load, out, model=model, metrics=metrics,
                      log=lambda m: err_console.print(escape(m), highlight=False))
    h = doc["header"]
    out_console.print(f"wrote {out}: {h['requests_sent']} requests to {escape(h['model'])} at {escape(url)}, "
                      f"{h['requests_failed']} failed; metrics {'read' if h['metrics_before'] else 'not available'}",
                      highlight=False)


#: The import-profile options that only some sources read: option -> those sources.
_IMPORT_OPTIONS = {"gpu": ("vidur",), "data": ("vidur", "default"), "system": ("aiconfigurator", "default"),
                   "framework": ("aiconfigurator",), "wheel": ("aiconfigurator", "default"),
                   "compact": ("aiconfigurator",)}


@app.command("import-profile")
@guarded
def import_profile(
    ctx: typer.Context,
    source: str = typer.Argument(..., help="vidur, aiconfigurator, or default (the shipped GPU profiles: "
                                 "AIConfigurator + Vidur, compact, fitted efficiencies)."),
    out: Path = typer.Option(..., "--out", help="Folder for the imported profile (profile.yaml + ops.csv)."),
    gpu: str = typer.Option("h100", "--gpu", help="vidur: h100 or a100."),
    data: Path | None = typer.Option(None, "--data", help="vidur, default: folder of Vidur's CSVs "
                                        "(default: shared/data/llm_traces/vidur_profiling beside the repo)."),
    system: str = typer.Option("h100_sxm", "--system",
                               help="aiconfigurator, default: h100_sxm, h200_sxm, b200_sxm, a100_sxm, l40s."),
    framework: str = typer.Option("vllm", "--framework", help="aiconfigurator: vllm, sglang or trtllm tables."),
    wheel: Path | None = typer.Option(None, "--wheel", help="aiconfigurator, default: the aiconfigurator-core "
                                      "wheel or a folder it was unpacked into (default: the installed package)."),
    compact: bool = typer.Option(False, "--compact", help="aiconfigurator: keep only the compact grid."),
    name: str | None = typer.Option(None, "--name", help="Profile name (default: <gpu>-<source>; default: <gpu>)."),
    force: bool = typer.Option(False, "--force", help="Replace a profile already in --out."),
) -> None:
    """Convert someone else's per-op measurements into a `source: imported` profile."""
    from calibrate.importers import import_aiconfigurator, import_default, import_vidur

    if source not in ("vidur", "aiconfigurator", "default"):
        raise ScenarioError("source", source, "allowed: vidur, aiconfigurator, default")
    for option, sources in _IMPORT_OPTIONS.items():   # an option of another source would be ignored
        given = getattr(ctx.get_parameter_source(option), "name", None) == "COMMANDLINE"
        if given and source not in sources:
            value = ctx.params[option]
            raise ScenarioError(f"--{option}", str(value) if isinstance(value, Path) else value,
                                f"applies to import-profile {' and '.join(sources)} only, not {source}")
    check_profile_out(out, force, name)
    vidur_data = data or Path(__file__).resolve().parents[2] / "shared" / "data" / "llm_traces" / "vidur_profiling"
    if source == "vidur":
        path = import_vidur(vidur_data, gpu, out, name)
    elif source == "aiconfigurator":
        path = import_aiconfigurator(system, out, framework, name, source=wheel, compact=compact)
    elif source == "default":
        path = import_default(system, out, source=wheel, vidur_dir=vidur_data if vidur_data.is_dir() else None,
                              name=name, command="llmplan " + " ".join(sys.argv[1:]))
    else:
        raise ScenarioError("source", source, "allowed: vidur, aiconfigurator, default")
    out_console.print(f"wrote {path}; use it with `hardware: {path.parent}`")


@app.command()
@guarded
def validate(
    out: Path = typer.Option(..., "--out", help="Folder for validation.csv/.json/.html and per-request records."),
    model: str = typer.Option("tiny-llama", "--model", help="Model preset the reference engine runs (random weights)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    loads: str = typer.Option("0.2,0.4,0.6,0.8", "--loads", help="Load fractions of the predicted capacity."),
    profile: str | None = typer.Option(None, "--profile", help="Kernel profile to reuse (default: calibrate one)."),
    repeats: int = typer.Option(3, "--repeats", help="Engine runs per load (their spread is the stated noise)."),
    num_requests: int = typer.Option(200, "--num-requests", help="Requests per load."),
    capacity_requests: int = typer.Option(64, "--capacity-requests", help="Requests in the saturated runs."),
    seed: int = typer.Option(0, "--seed", help="Workload seed (both sides serve the same requests)."),
    policy: str = typer.Option("continuous", "--policy", help="continuous or chunked_prefill."),
    max_num_seqs: int = typer.Option(16, "--max-num-seqs"),
    max_num_batched_tokens: int = typer.Option(1024, "--max-num-batched-tokens"),
    max_model_len: int = typer.Option(1024, "--max-model-len"),
    prompt_mean: float = typer.Option(128.0, "--prompt-mean", help="Lognormal prompt length mean (sigma 0.5)."),
    prompt_max: int = typer.Option(512, "--prompt-max"),
    output_mean: float = typer.Option(32.0, "--output-mean", help="Geometric output length mean."),
    output_max: int = typer.Option(128, "--output-max"),
    clock: str = typer.Option("wall", "--clock", help="wall (real time) or thread (CPU time of each step; "
                              "immune to time-slicing on a shared CPU)."),
    threads: int = typer.Option(1, "--threads", help="torch CPU threads for engine and calibration."),
    dtype: str | None = typer.Option(None, "--dtype", help="fp32, bf16 or fp16 (default: fp32 on CPU, bf16 on GPU)."),
    force: bool = typer.Option(False, "--force", help="Replace the results already in --out."),
) -> None:
    """Run a real torch serving engine and the simulator on the same requests; compare tails."""
    try:
        from calibrate.validate import ValidateSettings, check_settings, format_table, run_validation
    except ModuleNotFoundError as exc:
        if exc.name == "torch" or "torch" in str(exc):
            _fail("torch is not installed: `llmplan validate` needs the calibrate extra "
                  "(pip install -e .[calibrate])")
        raise
    try:
        fractions = tuple(float(x) for x in loads.split(",") if x.strip())
    except ValueError:
        raise ScenarioError("--loads", loads, "comma-separated load fractions, e.g. 0.2,0.4,0.6,0.8") from None
    if not fractions or any(not 0 < f <= 2 for f in fractions):
        raise ScenarioError("--loads", loads, "each load fraction must be in (0, 2]")
    if repeats < 1:
        raise ScenarioError("--repeats", repeats, "must be >= 1")
    if clock not in ("wall", "thread"):
        raise ScenarioError("--clock", clock, "allowed: wall, thread")
    settings = ValidateSettings(model=model, device=device, loads=fractions, profile=profile, repeats=repeats,
                                num_requests=num_requests, capacity_requests=capacity_requests, seed=seed,
                                policy=policy, max_num_seqs=max_num_seqs,
                                max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
                                prompt_mean=prompt_mean, prompt_max=prompt_max, output_mean=output_mean,
                                output_max=output_max, clock=clock, threads=threads, dtype=dtype)
    check_settings(settings)          # seconds, not the minutes the calibration takes before a late error
    check_output_folder(out, force=force)
    doc = run_validation(settings, out, log=lambda m: err_console.print(escape(m), highlight=False),
                         command="llmplan " + " ".join(sys.argv[1:]), force=force)
    out_console.print(format_table(doc), highlight=False, soft_wrap=True)
    out_console.print(f"wrote {out}/validation.csv, {out}/validation.json; {doc['plot']}", highlight=False)


@app.command()
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
    from simulator.planner import load_plan, write_worksheets
    from simulator.planner import plan as run_plan
    from simulator.planner.backends import check_backend
    from simulator.planner.compare import delta_report, read_previous
    from simulator.planner.report import PlanProgressDisplay, plan_size, print_plan
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


# Commands whose code lives in their own modules register themselves here.
from simulator.importers.commands import register as _register_import_commands  # noqa: E402

_register_import_commands(app)


def main() -> None:
    """Run the CLI. A Ctrl-C outside a command (while the arguments are parsed) also ends in one line;
    SIGTERM stops a command as a Ctrl-C does (:class:`simulator.startup.Terminated`: status 143)."""
    stop_on_sigterm()
    try:
        app()
    except Terminated:
        err_console.print("[bold red]error:[/] terminated", highlight=False)
        sys.exit(143)
    except KeyboardInterrupt:
        err_console.print("[bold red]error:[/] interrupted", highlight=False)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    _restore_interrupts()
    run_to_exit(main)
