"""``llmplan import vllm`` and ``llmplan compare-metrics``: a scenario written from a ``vllm serve`` command
line, and a server's measured latencies beside a prediction (the logic is in
:mod:`simulator.importers.vllm_serve` and :mod:`simulator.report.compare_metrics`)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from simulator.cli.support import TRACE_FORMAT_HELP, at_least, err_console, guarded, jsonable, out_console

import_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                         help="Write a scenario from what you already run: `import vllm -- <vllm serve flags>`.")


@import_app.command("vllm", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@guarded
def import_vllm_cmd(
    vllm_args: list[str] | None = typer.Argument(None, help="After `--`: the `vllm serve` arguments (the model "
                                                 "first), or the whole `vllm serve ...` command."),
    out: Path = typer.Option(..., "--out", help="Scenario YAML to write."),
    model_config: Path | None = typer.Option(None, "--model-config", help="The model's Hugging Face "
                                             "config.json (else: a model folder's, or a preset's name)."),
    hardware: str | None = typer.Option(None, "--hardware", help="Hardware profile (default: h100-sxm)."),
    rate: float = typer.Option(4.0, "--rate", help="Poisson arrivals per second of the written workload."),
    num_requests: int = typer.Option(2000, "--num-requests", help="Requests of the written workload."),
    trace: Path | None = typer.Option(None, "--trace", help="Replay this request log instead (--rate unused)."),
    trace_format: str = typer.Option("requests", "--trace-format", help=TRACE_FORMAT_HELP),
    acceptance_rate: float | None = typer.Option(None, "--acceptance-rate", help="Per-token acceptance of "
                                                 "speculative decoding (with --speculative-config)."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
) -> None:
    """Write a scenario from a `vllm serve` command line: llmplan import vllm --out s.yaml -- MODEL --flags."""
    from simulator.errors import ScenarioError
    from simulator.importers.vllm_serve import import_vllm

    if not vllm_args:
        raise ScenarioError("vllm serve arguments", None, "none given: put them after `--`, e.g. llmplan "
                            "import vllm --out s.yaml -- meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 128")
    at_least("--rate", rate, 1e-9)
    at_least("--num-requests", num_requests, 1)
    if out.exists() and not force:
        raise ScenarioError("--out", str(out), "already exists; pass --force to replace it")
    if out.exists() and out.is_dir():
        raise ScenarioError("--out", str(out), "is a directory; give the YAML file to write")
    got = import_vllm(vllm_args, model_config=model_config, hardware=hardware, rate_per_s=rate,
                      num_requests=num_requests, trace=trace, trace_format=trace_format,
                      acceptance_rate=acceptance_rate, out=out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(got.text, encoding="utf-8")
    if got.unknown:
        err_console.print("warning: not mapped (listed in the file): " + " ".join(got.unknown), markup=False,
                          highlight=False)
    out_console.print(f"wrote {out}: llmplan simulate {out}", markup=False, highlight=False)


@guarded
def compare_metrics_cmd(
    measured: Path = typer.Argument(..., help="A Prometheus text export of vLLM's /metrics, or a "
                                    "`vllm bench serve` result JSON."),
    prediction: Path = typer.Argument(..., help="A scenario YAML (simulated now) or a `simulate --json` "
                                      "summary (.json)."),
    set_: list[str] | None = typer.Option(None, "--set", help="Override a field of the scenario: key.path=value."),
    since: Path | None = typer.Option(None, "--since", help="The /metrics export taken before the run: "
                                      "compare the difference (counters and histograms accumulate)."),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON on stdout."),
    csv_out: Path | None = typer.Option(None, "--csv", help="Also write the comparison as CSV here."),
) -> None:
    """Set measured TTFT/TPOT/E2E (vLLM /metrics or bench JSON) beside a prediction, with relative errors."""
    from simulator.report.compare_metrics import compare, comparison_table, read_measured, read_prediction

    got = read_measured(measured, since)
    predicted = read_prediction(prediction, set_)
    rows = compare(got, predicted)
    if csv_out is not None:
        import pandas as pd

        from simulator.output import write_csv
        write_csv(pd.DataFrame(rows), csv_out)
    if json_out:
        sys.stdout.write(json.dumps({"measured": got.source, "prediction": str(prediction),
                                     "rows": jsonable(rows)}) + "\n")
        return
    out_console.print(comparison_table(rows, got, str(prediction)))
    for note in got.notes:
        out_console.print(f"[dim]{note}[/]", highlight=False)
    if csv_out is not None:
        out_console.print(f"wrote {csv_out}", markup=False, highlight=False)
