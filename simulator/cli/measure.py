"""``llmplan calibrate``, ``observe`` and ``validate``: real kernels timed into a profile (or a profile
fitted to an engine's observed runs), a real endpoint driven and recorded, and a real torch engine
run beside the simulator. Each imports its torch or HTTP code from :mod:`calibrate` when called."""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from simulator.cli.support import (
    TRACE_FORMAT_HELP,
    PlainProgress,
    _fail,
    at_least,
    check_profile_out,
    err_console,
    guarded,
    out_console,
    percent,
)
from simulator.errors import ScenarioError
from simulator.output import check_output_folder


@contextmanager
def _needs_torch(command: str) -> Iterator[None]:
    """Imports of ``llmplan COMMAND``'s torch code: without torch, one line naming the extra to install."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name == "torch" or "torch" in str(exc):
            _fail(f"torch is not installed: `llmplan {command}` needs the calibrate extra "
                  "(pip install -e .[calibrate])")
        raise


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
    fit: str | None = typer.Option(None, "--fit", help="With --from-observation: the costs fitted, comma-"
                                   "separated (default step_s,kernel_scale,per_token_s,frontend_s; per_seq_s "
                                   "may be added)."),
    max_evals: int | None = typer.Option(None, "--max-evals", help="With --from-observation: most simulations "
                                         "of each run (default 400: the four default costs need 300-360)."),
    engine_steps: list[Path] | None = typer.Option(None, "--engine-steps", help="With --from-observation: a "
                                                   "`vllm serve --enable-logging-iteration-details` log of the "
                                                   "observed runs; kernel_scale is then regressed on the engine's "
                                                   "own step times. Repeatable."),
    leave_one_out: bool = typer.Option(False, "--leave-one-out", help="With --from-observation (3 runs or "
                                       "more): refit once without each fitted run, and report how far each "
                                       "cost moves, each run's error when left out, and the held-out errors' "
                                       "range over the refits (one more fit's time per run)."),
    workers: int | None = typer.Option(None, "--workers", help="With --leave-one-out: processes the refits run "
                                       "in (default: the CPU count; 1 runs them in this process)."),
) -> None:
    """Time real torch kernels over the model's shapes and write a measured hardware profile, or, with
    --from-observation, fit a profile's costs to a real engine's observed runs (source: fitted).

    The machine's noise is probed throughout (a reference kernel and the load average): benchmarks
    timed during a noisy stretch are timed again, and a machine that stays noisy is refused (exit 2)."""
    # Options of one mode given in the other are refused, not ignored (None or a default: not given).
    fitting = {"--hardware": hardware, "--scenario": scenario, "--engine": engine,
               "--fit": fit,
               "--max-evals": max_evals, "--engine-steps": [str(p) for p in engine_steps] if engine_steps else None,
               "--leave-one-out": leave_one_out or None, "--workers": workers}
    timing = {"--device": None if device == "auto" else device, "--tp": None if tp == 1 else tp, "--dtype": dtype,
              "--quick": quick or None, "--max-tokens": max_tokens, "--max-seqs": max_seqs,
              "--max-context": max_context, "--threads": threads, "--memory-limit-gib": memory_limit_gib,
              "--fresh": fresh or None, "--clock": None if clock == "auto" else clock}
    if from_observation or holdout:
        from calibrate.fit import DEFAULT_MAX_EVALS, DEFAULT_PARAMETERS, FitSettings, format_report, run_fit

        if not from_observation:
            raise ScenarioError("--holdout", [str(h) for h in holdout or []], "needs --from-observation runs to fit on")
        given = [k for k, v in timing.items() if v is not None]
        if given:
            raise ScenarioError(given[0], timing[given[0]], "times torch kernels; it does not apply to "
                                "--from-observation (a fit to observed runs)")
        check_profile_out(out, force)
        doc = run_fit(FitSettings(tuple(map(str, from_observation)), model, hardware, tuple(map(str, holdout or ())),
                                  str(scenario) if scenario else None, engine,
                                  tuple(fit.split(",")) if fit is not None else DEFAULT_PARAMETERS,
                                  max_evals if max_evals is not None else DEFAULT_MAX_EVALS, name,
                                  engine_steps=tuple(map(str, engine_steps or ())), leave_one_out=leave_one_out,
                                  workers=workers),
                      out, log=lambda m: err_console.print(escape(m), highlight=False),
                      command="llmplan " + " ".join(sys.argv[1:]))
        for line in format_report(doc):
            out_console.print(escape(line), highlight=False)
        return
    given = [k for k, v in fitting.items() if v is not None]
    if given:
        raise ScenarioError(given[0], fitting[given[0]], "applies to a fit (--from-observation OBS) only")
    with _needs_torch("calibrate"):
        from calibrate.runner import run_calibration
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
        out_console.print(f"  {r['family']:<13} held-out error: median {percent(r['median_abs_error'])}, "
                          f"p90 {percent(r['p90_abs_error'])} over {r['points']} points", highlight=False)


@guarded
def observe(
    url: str = typer.Argument(..., help="The server, e.g. http://127.0.0.1:8000 (OpenAI-compatible, streaming)."),
    out: Path = typer.Option(..., "--out", help="Observation file to write (JSON)."),
    rate: float | None = typer.Option(None, "--rate", help="Poisson arrivals at this many requests/s."),
    concurrency: int | None = typer.Option(None, "--concurrency", help="A closed loop of this many clients."),
    offline: bool = typer.Option(False, "--offline", help="An offline burst: every request sent at once."),
    num_requests: int = typer.Option(..., "--num-requests", help="Requests to send (at most)."),
    duration_s: float | None = typer.Option(None, "--duration-s", help="Stop sending after this long."),
    prompt_tokens: str | None = typer.Option(None, "--prompt-tokens", help="Prompt length: N, or LO:HI (uniform)."),
    output_tokens: str | None = typer.Option(None, "--output-tokens", help="Output length: N, or LO:HI (uniform)."),
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
    chat: bool = typer.Option(False, "--chat", help="Send each prompt as a user message to /v1/chat/completions "
                              "(text; the chat template's tokens are counted from the server's usage)."),
    lengths_from: Path | None = typer.Option(None, "--lengths-from", help="Take each request's prompt and output "
                                             "tokens from this trace, in its order (instead of --prompt-tokens and "
                                             "--output-tokens)."),
    replay: Path | None = typer.Option(None, "--replay", help="Send the trace's requests at its instants, with "
                                       "its lengths (a load, like --rate)."),
    trace_format: str = typer.Option("requests", "--trace-format", help=TRACE_FORMAT_HELP),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="Environment variable holding the API "
                                           "key to send as 'Authorization: Bearer' (never written to the file)."),
) -> None:
    """Drive a streaming endpoint (vLLM, SGLang, TGI) with a controlled load and record every request's
    send, first-token and chunk instants and token counts, plus /metrics before and after."""
    from calibrate.observe import Lengths, Load, TraceRequests
    from calibrate.observe import observe as run_observe

    modes = [m for m, on in (("poisson", rate is not None), ("closed", concurrency is not None),
                             ("offline", offline), ("trace", replay is not None)) if on]
    if len(modes) != 1:
        raise ScenarioError("load", ", ".join(modes) or None, "give exactly one of --rate (Poisson), --concurrency "
                            "(closed loop), --offline (a burst) or --replay (a trace's instants)")
    source = replay if replay is not None else lengths_from
    if replay is not None and lengths_from is not None:
        raise ScenarioError("--lengths-from", str(lengths_from), "--replay takes the lengths from its trace already")
    given = [o for o, v in (("--prompt-tokens", prompt_tokens), ("--output-tokens", output_tokens)) if v is not None]
    if source is not None and given:
        raise ScenarioError(given[0], prompt_tokens if given[0] == "--prompt-tokens" else output_tokens,
                            f"the lengths come from {source} ({'--replay' if replay else '--lengths-from'})")
    if source is None and len(given) < 2:
        raise ScenarioError("--prompt-tokens" if prompt_tokens is None else "--output-tokens", None,
                            "give --prompt-tokens and --output-tokens, or take the lengths from a trace "
                            "(--lengths-from, --replay)")
    ids = token_ids.split(":")
    if len(ids) != 2 or not all(i.strip().isdigit() for i in ids):
        raise ScenarioError("--token-ids", token_ids, "LO:HI, two non-negative integers")
    trace = None
    if source is not None:
        trace = TraceRequests.read(source, trace_format, num_requests, "--replay" if replay else "--lengths-from",
                                   arrivals=replay is not None)
        plen, olen = trace.lengths()
    else:
        assert prompt_tokens is not None and output_tokens is not None
        plen, olen = Lengths.parse(prompt_tokens, "--prompt-tokens"), Lengths.parse(output_tokens, "--output-tokens")
    load = Load(modes[0], num_requests, plen, olen, rate_per_s=rate, concurrency=concurrency, trace=trace,
                duration_s=duration_s, prefix_tokens=prefix_tokens, prefix_groups=prefix_groups, seed=seed,
                ignore_eos=ignore_eos, min_tokens=min_tokens, token_ids=(int(ids[0]), int(ids[1])),
                timeout_s=timeout_s, text_prompts=text_prompts or chat, api="chat" if chat else "completions")
    key = None
    if api_key_env is not None:
        key = os.environ.get(api_key_env, "").strip()
        if not key:
            raise ScenarioError("--api-key-env", api_key_env, "no such environment variable, or it is empty: "
                                "export the key in it first")
    doc = run_observe(url, load, out, model=model, metrics=metrics, api_key=key,
                      log=lambda m: err_console.print(escape(m), highlight=False))
    h = doc["header"]
    out_console.print(f"wrote {out}: {h['requests_sent']} requests to {escape(h['model'])} at {escape(url)}, "
                      f"{h['requests_failed']} failed; metrics {'read' if h['metrics_before'] else 'not available'}",
                      highlight=False)


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
    with _needs_torch("validate"):
        from calibrate.validate import ValidateSettings, check_settings, format_table, run_validation
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
