"""``llmplan models``, ``profiles`` (``profiles show NAME``) and ``import-profile``: the model presets, the
hardware profiles and their fit quality, and profiles converted from someone else's measurements."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from simulator.cli.support import check_profile_out, guarded, out_console, percent
from simulator.errors import ScenarioError

if TYPE_CHECKING:
    from simulator.scenario.profiles import HardwareProfile


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
    if p.source == "fitted":
        _show_fit(p)
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
        table.add_row(r["op"], r["family"], str(r["points"]), percent(r["median_abs_error"]),
                      percent(r["p90_abs_error"]), percent(r["max_abs_error"]), best, percent(r["efficiency"]))
    out_console.print(table)
    ftable = Table(title=f"per family (target: median <= {TARGET_MEDIAN:.0%}, p90 <= {TARGET_P90:.0%})",
                   title_justify="left")
    for col in ("family", "points", "median |err|", "p90 |err|", "max |err|", "target"):
        ftable.add_column(col, justify="left" if col == "family" else "right")
    for r in fam.to_dict("records"):
        ftable.add_row(r["family"], str(r["points"]), percent(r["median_abs_error"]), percent(r["p90_abs_error"]),
                       percent(r["max_abs_error"]), "met" if r["meets_target"] else "[red]missed[/]")
    out_console.print(ftable)


def _show_fit(p: HardwareProfile) -> None:
    """A fitted profile's fit (``llmplan calibrate --from-observation``): what it rests on, each fitted cost
    with its range over the ``--leave-one-out`` refits, the errors on held-out and left-out runs, and the
    fit's warnings."""
    prov = p.provenance
    out_console.print(f"  basis: {escape(p.basis())}", highlight=False)
    raw = prov.get("leave_one_out")
    loo: dict = raw if isinstance(raw, dict) else {}
    ranges = loo.get("costs") or {}

    def fmt(name: str, v: float) -> str:
        return f"{v * 1e3:.4g} ms" if name.endswith("_s") else f"{v:.4g}"

    for name, spec in (prov.get("parameters") or {}).items():
        if not isinstance(spec, dict) or not isinstance(spec.get("value"), (int, float)):
            continue
        r = ranges.get(name)
        spread = ""
        if isinstance(r, dict) and {"min", "max", "jackknife_se_log"} <= set(r):
            spread = (f" (leaving out one run: {fmt(name, r['min'])} to {fmt(name, r['max'])}, s.e. "
                      f"{100 * r['jackknife_se_log']:.0f}%)")
        out_console.print(f"  {name} = {fmt(name, spec['value'])}{spread}: {escape(str(spec.get('meaning', '')))}",
                          highlight=False)
    for label, key, src in (("held-out runs", "holdout_error_median_abs", prov),
                            ("each fitted run left out", "left_out_error_median_abs", loo)):
        errs = src.get(key) or {}
        text = ", ".join(f"{k.replace('_', ' ')} {100 * v:.0f}%"
                         for k in ("ttft_p50", "tpot_p50", "e2e_p50", "ttft_p99", "tpot_p99", "throughput")
                         if isinstance(v := errs.get(k), (int, float)) and math.isfinite(v))
        if text:
            out_console.print(f"  median |error|, {label}: {text}", highlight=False)
    for w in loo.get("warnings") or []:
        out_console.print(f"  [yellow]warning:[/] {escape(str(w))}", highlight=False)
    out_console.print("  kernel times below: the base profile's, scaled by kernel_scale", highlight=False)


#: The import-profile options that only some sources read: option -> those sources.
_IMPORT_OPTIONS = {"gpu": ("vidur",), "data": ("vidur", "default"), "system": ("aiconfigurator", "default"),
                   "framework": ("aiconfigurator",), "wheel": ("aiconfigurator", "default"),
                   "compact": ("aiconfigurator",)}


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
    vidur_data = data or Path(__file__).resolve().parents[3] / "shared" / "data" / "llm_traces" / "vidur_profiling"
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
