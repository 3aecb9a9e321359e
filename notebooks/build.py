"""Write the analysis notebooks (``notebooks/*.ipynb``) from the cell sources below, without outputs.

The notebooks are generated so that their code stays reviewable as plain Python and so that the
committed files never carry outputs. Edit a notebook here and run

    python notebooks/build.py            # rewrites notebooks/0*.ipynb
    python notebooks/build.py --check    # exit 1 if a committed notebook differs from this file
    python notebooks/build.py --execute runs/notebooks   # run them all (full size) and keep the outputs there

Every number a notebook shows is computed by ``simulator.report.studies`` (tested in
``tests/test_studies.py``); the cells only set parameters, call it and plot.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = '''\
import os
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from simulator import load_scenario, simulate
from simulator.report import studies

SCALE = studies.notebook_scale()   # LLMPLAN_NOTEBOOK_SCALE=small (CI) or full (default)
SMALL = SCALE == "small"
ROOT = studies.find_repo_root()
print(f"scale: {SCALE}; repository: {ROOT}")'''

NB1 = [
    new_markdown_cell("""\
# 1. Latency against throughput, by batching policy

How p50/p99 time to first token (TTFT) and time per output token (TPOT) grow with offered load under
the four batching policies the simulator models: `continuous` (vLLM's iteration-level scheduling),
`chunked_prefill` (Sarathi-Serve, vLLM v1's default), `dynamic` (request-level batching with a
deadline) and `static` (padded request-level batching, FasterTransformer-style).

The system is the reference scenario, `examples/sharegpt-h100.yaml`: Llama 3 8B on one H100 SXM
(`h100-sxm`: measured kernel tables), ShareGPT prompt and output lengths, Poisson arrivals. Load is
expressed as a fraction of the continuous-batching capacity, measured by a saturated simulation.

**Knee** (computed by `studies.knees`): the load at which a metric reaches twice its value at the
lightest load swept, interpolated between sweep points. **Sustainable rate**: the highest load whose
p99 stays within the scenario's SLO. Both are read off one seeded run per point: the tails of a
single run are noisy near saturation; raise `NUM_REQUESTS` or repeat with other seeds for firmer
numbers."""),
    new_code_cell(SETUP),
    new_markdown_cell("Parameters. `small` is what CI runs (a few seconds); `full` is the default."),
    new_code_cell('''\
NUM_REQUESTS = 600 if SMALL else 10_000
LOADS = [0.1, 0.3, 0.5, 0.7, 0.9] if SMALL else [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0]
KNEE_FACTOR = 2.0
POLICIES = {   # label -> scenario overrides (the YAML's own keys)
    "continuous": {"scheduler.policy": "continuous"},
    "chunked_prefill": {"scheduler.policy": "chunked_prefill", "scheduler.max_num_batched_tokens": 2048},
    "dynamic": {"scheduler.policy": "dynamic", "scheduler.max_wait_ms": 50},
    "static": {"scheduler.policy": "static", "scheduler.max_wait_ms": 50},
}
base = load_scenario(ROOT / "examples" / "sharegpt-h100.yaml").with_overrides(
    {"num_requests": NUM_REQUESTS, "warmup_s": 0 if SMALL else 60, "cooldown_s": 0 if SMALL else 60})
capacity = studies.saturation_capacity(base, num_requests=min(NUM_REQUESTS, 2000))
print(f"continuous-batching capacity: {capacity:.2f} req/s; SLO: {base.slo}")'''),
    new_code_cell('''\
sweep = studies.load_sweep(base, [f * capacity for f in LOADS], POLICIES)
sweep["load"] = sweep["rate_per_s"] / capacity
sweep[["policy", "load", "rate_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "throughput_rps"]].round(4)'''),
    new_markdown_cell("""\
## TTFT and TPOT against load

Log scale: request-level batching (`dynamic`, `static`) makes a new request wait for the whole
running batch to finish, so its TTFT is seconds even at light load, while iteration-level batching
admits it at the next step. Chunked prefill trades a little TTFT for a flatter TPOT tail, because a
long prompt no longer stalls the decodes sharing its step."""),
    new_code_cell('''\
fig = make_subplots(rows=2, cols=2, shared_xaxes=True,
                    subplot_titles=["TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99"])
colors = dict(zip(POLICIES, px.colors.qualitative.Plotly))
for i, metric in enumerate(["ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"]):
    for policy, g in sweep.groupby("policy", sort=False):
        fig.add_trace(go.Scatter(x=g["load"], y=g[metric], mode="lines+markers", name=policy,
                                 line=dict(color=colors[policy]), showlegend=i == 0, legendgroup=policy),
                      row=i // 2 + 1, col=i % 2 + 1)
fig.update_yaxes(type="log", title_text="seconds")
fig.update_xaxes(title_text="offered load (fraction of continuous-batching capacity)", row=2)
fig.update_layout(height=650, title="Latency against load, examples/sharegpt-h100.yaml")
fig.show()'''),
    new_markdown_cell("""\
## Throughput: where each policy saturates

Achieved throughput against offered load: on the diagonal the engine keeps up; where a policy's
curve bends away from it, requests queue without bound and its tail latencies above only measure
how long the run lasted."""),
    new_code_cell('''\
fig = px.line(sweep, x="rate_per_s", y="throughput_rps", color="policy", markers=True,
              labels={"rate_per_s": "offered (req/s)", "throughput_rps": "completed (req/s)"},
              title="Achieved against offered throughput")
top = float(sweep["rate_per_s"].max())
fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="offered", line=dict(dash="dot", color="gray")))
fig.show()'''),
    new_markdown_cell("## Where each policy's knee is"),
    new_code_cell('''\
limits = {"ttft_p99_s": base.slo.ttft_p99_ms / 1000, "tpot_p99_s": base.slo.tpot_p99_ms / 1000}
knees = studies.knees(sweep, metrics=["ttft_p99_s", "tpot_p99_s"], factor=KNEE_FACTOR, limits=limits)
for col in [c for c in knees.columns if c.endswith("_rps")]:
    knees[col.replace("_rps", "_load")] = knees[col] / capacity
knees.round(3)'''),
    new_code_cell('''\
fig = go.Figure()
for col, label in [("ttft_p99_s_knee_load", f"p99 TTFT knee ({KNEE_FACTOR:g}x light-load value)"),
                   ("ttft_p99_s_max_load", "highest load within the p99 TTFT SLO"),
                   ("tpot_p99_s_max_load", "highest load within the p99 TPOT SLO")]:
    fig.add_trace(go.Bar(x=knees["policy"], y=knees[col], name=label))
fig.update_layout(barmode="group", yaxis_title="fraction of continuous-batching capacity",
                  title="Knees and sustainable load per policy (NaN: not reached within the sweep)")
fig.show()'''),
    new_markdown_cell("""\
Reading the table: the knee says where a policy's *own* latency starts to climb (a missing knee:
the curve never doubled within the sweep); the sustainable load says where it crosses the SLO, the
same yardstick for every policy (0: the SLO is missed even at the lightest load swept). Request-level
batching (`dynamic`, `static`) starts from a high light-load TTFT, so its knee, relative to that, can
lie beyond the load where it already misses the SLO."""),
]

NB2 = [
    new_markdown_cell("""\
# 2. Real traffic: burstiness and what it costs

Three public traces: the Azure LLM inference traces for conversation and code (Splitwise, ISCA'24;
Azure/AzurePublicDataset, CC-BY) and the Mooncake conversation trace (Mooncake, FAST'25;
kvcache-ai/Mooncake, Apache-2.0). They are read from `../shared/data/llm_traces/` beside the
repository when it exists (see its README), otherwise from the 300-request excerpts in
`tests/data/` (see `tests/data/README.md`); either way keep the attribution.

Each trace is compared with its **Poisson twin**: the same requests, in the same order with the same
lengths, arriving as a Poisson stream of the same mean rate (`studies.poisson_twin`). Both are
replayed against the same deployment, so any difference is the arrival pattern alone. Then the
simulator searches, for each stream, the fewest replicas that hold the p99 SLOs
(the planner's `min_replicas`: doubling, then bisection)."""),
    new_code_cell(SETUP + '''
from pathlib import Path
import pandas as pd
from simulator.workload.traffic import load_trace'''),
    new_code_cell('''\
HEAD = 300 if SMALL else None          # requests per trace (None: the whole trace)
WINDOW_S = 60.0                        # window for rates and peak-to-mean
files = studies.trace_files(ROOT)
traces = {row.trace: studies.head_trace(load_trace(Path(row.path), row.format), HEAD) for row in files.itertuples()}
files.assign(requests=[len(traces[t]) for t in files["trace"]])'''),
    new_markdown_cell("""\
## Burstiness

Inter-arrival CV is 1 for Poisson arrivals. Note that the Mooncake conversation timestamps are
quantised to 3 s slots (about ten requests share each value), so its inter-arrival CV mostly
measures the quantisation; the windowed statistics (peak-to-mean, index of dispersion at windows
of several seconds and more) do not suffer from it."""),
    new_code_cell('''\
burst = []
for name, tr in traces.items():
    twin = studies.poisson_twin(tr, seed=0)
    for stream, t in (("trace", tr), ("poisson twin", twin)):
        b = studies.burstiness(t["arrival_time"], window_s=min(WINDOW_S, t["arrival_time"].iloc[-1] / 4))
        burst.append({"trace": name, "stream": stream, **b})
pd.DataFrame(burst).round(3)'''),
    new_code_cell('''\
fig = go.Figure()
for name, tr in traces.items():
    rs = studies.rate_series(tr["arrival_time"], window_s=min(WINDOW_S, tr["arrival_time"].iloc[-1] / 10))
    fig.add_trace(go.Scatter(x=rs["t_s"], y=rs["rate_per_s"], mode="lines", name=name, line_shape="hv"))
fig.update_layout(title="Arrival rate over time", xaxis_title="seconds from the first request",
                  yaxis_title="requests per second")
fig.show()'''),
    new_code_cell('''\
windows = [3, 10, 30, 60, 120, 300] if not SMALL else [3, 6, 12]
fig = go.Figure()
for name, tr in traces.items():
    span = tr["arrival_time"].iloc[-1]
    w = [x for x in windows if x <= span / 4]
    for stream, t in (("trace", tr), ("poisson twin", studies.poisson_twin(tr, seed=0))):
        dc = studies.dispersion_curve(t["arrival_time"], w)
        fig.add_trace(go.Scatter(x=dc["window_s"], y=dc["dispersion_index"], mode="lines+markers",
                                 name=f"{name} ({stream})", line=dict(dash="dot" if stream != "trace" else None)))
fig.update_xaxes(type="log", title_text="window (s)")
fig.update_yaxes(type="log", title_text="index of dispersion (variance / mean of counts)")
fig.update_layout(title="Burstiness across time scales (1 = Poisson)")
fig.show()'''),
    new_markdown_cell("## Length distributions"),
    new_code_cell('''\
pd.concat({name: studies.length_stats(tr).set_index("what") for name, tr in traces.items()}).round(0)'''),
    new_code_cell('''\
long = pd.concat([pd.DataFrame({"trace": name, "tokens": tr[col], "what": what})
                  for name, tr in traces.items()
                  for col, what in (("num_prompt_tokens", "prompt"), ("max_tokens", "output"))])
fig = px.ecdf(long, x="tokens", color="trace", facet_col="what", log_x=True,
              title="Prompt and output lengths (empirical CDF)")
fig.update_xaxes(matches=None)
fig.show()'''),
    new_markdown_cell("""\
## Replayed against one deployment

The deployment: Llama 3.1 8B (Llama 3 8B's dimensions with its 128k context, so Mooncake's long
prompts fit; dimensions from its `config.json`) on H100 SXM (`h100-sxm`, measured kernels), TP 1, chunked
prefill with a 2048-token budget (vLLM v1's default policy), `least_outstanding` routing over the
replicas. SLOs: p99 TTFT 2 s and p99 TPOT 100 ms for the Azure traces; for Mooncake, whose prompts
reach 126k tokens (a 126k-token prefill alone takes several seconds on one H100), p99 TTFT 30 s
and p99 TPOT 100 ms. Each replica is one GPU, so replicas = GPUs here."""),
    new_code_cell('''\
MODEL = {"name": "llama-3.1-8b", "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_model_len": 131072}
DEPLOYMENT = {"name": "traffic", "seed": 1, "model": MODEL, "hardware": "h100-sxm",
              "deployment": {"replicas": 1, "tensor_parallel_size": 1, "router": "least_outstanding"},
              "scheduler": {"policy": "chunked_prefill", "max_num_batched_tokens": 2048, "max_num_seqs": 256},
              "workload": {"arrival": {"process": "poisson", "rate_per_s": 1.0}, "over_length": "reject"}}
SLOS = {"azure-conv": {"ttft_p99_ms": 2000, "tpot_p99_ms": 100},
        "azure-code": {"ttft_p99_ms": 2000, "tpot_p99_ms": 100},
        "mooncake-conv": {"ttft_p99_ms": 30000, "tpot_p99_ms": 100}}
MAX_REPLICAS = 16 if SMALL else 64
costs = {name: studies.burstiness_cost({**DEPLOYMENT, "slo": SLOS[name]}, tr, seed=0, max_replicas=MAX_REPLICAS)
         for name, tr in traces.items()}
rows = []
for name, c in costs.items():
    same = c["same"].set_index("stream")
    rows.append({"trace": name, "replicas (sized for Poisson)": int(same.loc["trace", "replicas"]),
                 "p99 TTFT trace (s)": same.loc["trace", "ttft_p99_s"],
                 "p99 TTFT Poisson (s)": same.loc["poisson", "ttft_p99_s"],
                 "p99 TTFT ratio": same.loc["trace", "ttft_p99_s"] / same.loc["poisson", "ttft_p99_s"],
                 "replicas needed, trace": c["replicas_needed"]["trace"],
                 "replicas needed, Poisson": c["replicas_needed"]["poisson"]})
summary = pd.DataFrame(rows)
summary["extra GPUs for burstiness"] = summary["replicas needed, trace"] - summary["replicas needed, Poisson"]
summary.round(3)'''),
    new_code_cell('''\
fig = make_subplots(rows=1, cols=2, subplot_titles=["p99 TTFT at the Poisson-sized deployment",
                                                    "replicas (GPUs) to hold the SLOs"])
for stream, col, rep in (("trace", "p99 TTFT trace (s)", "replicas needed, trace"),
                         ("Poisson twin", "p99 TTFT Poisson (s)", "replicas needed, Poisson")):
    fig.add_trace(go.Bar(x=summary["trace"], y=summary[col], name=stream, legendgroup=stream,
                         marker_color="#d62728" if stream == "trace" else "#1f77b4"), row=1, col=1)
    fig.add_trace(go.Bar(x=summary["trace"], y=summary[rep], name=stream, legendgroup=stream, showlegend=False,
                         marker_color="#d62728" if stream == "trace" else "#1f77b4"), row=1, col=2)
fig.update_yaxes(type="log", title_text="seconds", row=1, col=1)
fig.update_yaxes(title_text="replicas", row=1, col=2)
fig.update_layout(barmode="group", title="What burstiness costs")
fig.show()'''),
    new_code_cell('''\
# Every replica count the searches simulated, per trace and stream.
pd.concat({(name, stream): t.set_index("replicas")[["meets_slo", "ttft_p99_s", "tpot_p99_s", "rejected"]]
           for name, c in costs.items() for stream, t in c["searches"].items()}).round(3)'''),
    new_markdown_cell("""\
## Burstiness cost as load rises

At its recorded pace a trace may leave the deployment enough headroom that bursts cost little. The
same comparison with both streams compressed in time (`studies.speedup_sweep`: arrival times
divided by the speedup, same requests) on the replica count the Poisson stream needed shows how
the gap between a bursty trace and smooth traffic opens as utilisation rises."""),
    new_code_cell('''\
SPEEDUPS = [1.0, 2.0] if SMALL else [1.0, 1.25, 1.5, 1.75, 2.0]
speed = pd.concat([studies.speedup_sweep({**DEPLOYMENT, "slo": SLOS[name]}, tr, SPEEDUPS, seed=0,
                                         replicas=int(costs[name]["same"]["replicas"].iloc[0])).assign(trace=name)
                   for name, tr in traces.items()])
fig = px.line(speed, x="speedup", y="ttft_p99_s", color="trace", line_dash="stream", markers=True, log_y=True,
              labels={"speedup": "time compression (x the recorded rate)", "ttft_p99_s": "p99 TTFT (s)"},
              title="p99 TTFT of each trace and its Poisson twin as the same requests arrive faster")
fig.show()
speed.pivot_table(index=["trace", "speedup"], columns="stream", values="ttft_p99_s").round(3)'''),
    new_markdown_cell("""\
Limits: one seeded replay per point (the trace is one sample path; the Poisson twin is one draw of
its stream); the replica search assumes the SLO, once met, stays met with more replicas; requests
longer than the model's context are rejected (none at 128k); Mooncake's `hash_ids` (prefix reuse)
are not used here: prefix caching is another issue, and with it Mooncake's TTFT would be lower."""),
]

NB3 = [
    new_markdown_cell("""\
# 3. Speculative decoding: TPOT against acceptance rate and k

Each decode step proposes `k` tokens per request (here with a Llama 3.2 1B draft model) and the
target verifies `k + 1` positions in one pass. With per-token acceptance probability alpha a step
emits `(1 - alpha^(k+1)) / (1 - alpha)` tokens on average, at the price of the draft's `k` decode
steps and a wider verification pass. This notebook sweeps alpha and `k` on the reference scenario
at light load (1 req/s, where decoding is memory-bound and speculation helps most) and reports, for
each `k`, the break-even acceptance rate (`studies.break_even_acceptance`).

Prefix caching has its own notebook, `05_prefix_caching.ipynb`."""),
    new_code_cell(SETUP),
    new_code_cell('''\
NUM_REQUESTS = 150 if SMALL else 1000
RATE_PER_S = 1.0
ALPHAS = [0.3, 0.8] if SMALL else [0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9]
KS = [2, 4] if SMALL else [1, 2, 4, 8]
DRAFT = "llama-3.2-1b"
base = load_scenario(ROOT / "examples" / "sharegpt-h100.yaml").with_overrides(
    {"num_requests": NUM_REQUESTS, "warmup_s": 0, "cooldown_s": 0, "workload.arrival.rate_per_s": RATE_PER_S})
sweep = studies.speculative_sweep(base, ALPHAS, KS, method="draft", draft_model=DRAFT)
sweep[["k", "acceptance_rate", "tpot_p50_s", "tpot_p99_s", "ttft_p99_s", "tokens_per_step",
       "expected_tokens_per_step", "tpot_p50_speedup"]].round(4)'''),
    new_code_cell('''\
baseline = sweep[sweep["k"] == 0].iloc[0]
spec = sweep[sweep["k"] > 0]
fig = make_subplots(rows=1, cols=2, subplot_titles=["p50 TPOT", "p99 TPOT"])
for i, metric in enumerate(["tpot_p50_s", "tpot_p99_s"]):
    for k, g in spec.groupby("k"):
        fig.add_trace(go.Scatter(x=g["acceptance_rate"], y=g[metric] * 1000, mode="lines+markers", name=f"k={k}",
                                 legendgroup=str(k), showlegend=i == 0), row=1, col=i + 1)
    fig.add_hline(y=baseline[metric] * 1000, line_dash="dash", annotation_text="no speculation", row=1, col=i + 1)
fig.update_xaxes(title_text="acceptance rate alpha")
fig.update_yaxes(title_text="ms per output token")
fig.update_layout(title=f"Speculative decoding with a {DRAFT} draft, {RATE_PER_S:g} req/s")
fig.show()'''),
    new_markdown_cell("""\
The simulator draws acceptances per request and step; the tokens each step emits should follow the
closed form (points on the diagonal). A gap would be a bug, not a modelling choice."""),
    new_code_cell('''\
fig = px.scatter(spec, x="expected_tokens_per_step", y="tokens_per_step", color=spec["k"].astype(str),
                 hover_data=["acceptance_rate"], labels={"color": "k"},
                 title="Tokens per decode step: simulated against (1 - alpha^(k+1)) / (1 - alpha)")
top = float(spec["expected_tokens_per_step"].max())
fig.add_trace(go.Scatter(x=[1, top], y=[1, top], mode="lines", name="y = x", line=dict(dash="dot")))
fig.show()'''),
    new_code_cell('''\
studies.break_even_acceptance(sweep).round(3)'''),
    new_markdown_cell("""\
Limits (see the README's speculative-decoding section): one acceptance rate for every token and
request (real acceptance varies by position, prompt and temperature), continuous batching only, and
the draft's cost from the same roofline profile as the target."""),
]

NB4 = [
    new_markdown_cell("""\
# 4. Calibration review

How good are the kernel tables behind the `table` cost model? Three views:

1. **Measured against fitted**: every measured point of a table profile, predicted from the
   *other* points the way the cost model interpolates (leave-one-out, `studies.fit_points`), per op.
2. **Roofline efficiency**: the FLOP/s (GEMMs, prefill attention) or bytes/s (the rest) each
   measurement implies, as a fraction of the profile's peak. For an imported GPU profile the peaks
   are the vendor's (from the datasheet profile of the same GPU); for a measured profile they are
   the best the calibration run itself achieved (GEMM FLOP/s, residual-add streaming bandwidth), so
   there 1.0 means "as fast as this machine went", not a vendor figure.
3. **Datasheet against imported against measured** for the same device (`studies.crosscheck`, the
   table `benchmarks/crosscheck_profiles.py` prints).

Profiles: `cpu-amd-epyc-tiny-llama` (measured here by `llmplan calibrate` on a shared 2-core CPU),
`h100-sxm-vidur` (imported from Vidur's measured H100 tables, MIT), the default `h100-sxm` (NVIDIA
AIConfigurator's kernel tables on a compact grid, Apache-2.0) and, when the optional
`aiconfigurator-core` package is installed, AIConfigurator's whole H100 grid (converted into a
temporary folder, never into the repository). None is our own H100 measurement (no GPU was
available): set `MEASURED_H100` to yours (`llmplan calibrate --device cuda --model llama-3-8b
--out hwprofiles/my-h100`) to add it to the comparison."""),
    new_code_cell(SETUP + '''
import tempfile
from pathlib import Path
import pandas as pd
from simulator import ScenarioError, load_profile
from simulator.report.profile_report import family_report, op_report'''),
    new_code_cell('''\
MEASURED = "cpu-amd-epyc-tiny-llama"
IMPORTED = "h100-sxm-vidur"
MEASURED_H100 = None                   # e.g. "my-h100": a profile you measured on an H100 SXM
USE_AICONFIGURATOR = not SMALL         # converting its database takes a few seconds
points = {name: studies.fit_points(name) for name in (MEASURED, IMPORTED)}
pd.concat({name: family_report(load_profile(name)) for name in (MEASURED, IMPORTED)}).round(3)'''),
    new_markdown_cell("## Measured against fitted, per op"),
    new_code_cell('''\
for name, fp in points.items():
    ok = fp.dropna(subset=["rel_error"])
    fig = px.scatter(ok, x="measured_s", y="predicted_s", color="op", facet_col="family", facet_col_wrap=3,
                     log_x=True, log_y=True, hover_data=["tokens", "n", "k", "batch", "context", "rel_error"],
                     title=f"{name}: each point predicted from the others (leave-one-out)", height=600)
    lo, hi = ok["measured_s"].min(), ok["measured_s"].max()
    for xaxis, yaxis in sorted({(t.xaxis, t.yaxis) for t in fig.data}):   # y = x in every panel with points
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="gray", dash="dot"),
                                 showlegend=False, xaxis=xaxis, yaxis=yaxis))
    fig.update_xaxes(matches=None)
    fig.update_yaxes(matches=None)
    fig.show()'''),
    new_code_cell('''\
pd.concat({name: op_report(load_profile(name)).set_index("op")
           [["family", "points", "median_abs_error", "p90_abs_error", "max_abs_error", "efficiency"]]
           for name in points}).round(3)'''),
    new_markdown_cell("""\
## Roofline efficiency

For the GEMMs: achieved FLOP/s over the profile's peak, against the number of token rows. Small
batches stream weights and are bandwidth-bound (low FLOP/s); the curve rises towards the compute
roof. The datasheet roofline assumes `T / (T + 64)` of its efficiency for `T` tokens."""),
    new_code_cell('''\
gemm = pd.concat([fp[fp["family"] == "gemm"].assign(profile=name) for name, fp in points.items()])
gemm["shape"] = gemm["op"] + " " + gemm["n"].astype(int).astype(str) + "x" + gemm["k"].astype(int).astype(str)
fig = px.line(gemm.sort_values("tokens"), x="tokens", y="efficiency", color="shape", facet_col="profile",
              log_x=True, markers=True, title="GEMM efficiency (achieved FLOP/s / peak) against tokens", height=500)
fig.update_layout(showlegend=not SMALL)
fig.show()'''),
    new_code_cell('''\
rest = pd.concat([fp[~fp["family"].isin(["gemm", "attn_prefill"])].assign(profile=name) for name, fp in points.items()])
fig = px.box(rest, x="op", y="efficiency", color="profile", points="outliers",
             title="Bandwidth efficiency (achieved bytes/s / peak) of the memory-bound ops")
fig.show()'''),
    new_markdown_cell("""\
## Datasheet against imported against measured, same device

H100 SXM with llama-3-8b's shapes (TP 1): the datasheet roofline (`h100-sxm-datasheet`, vendor
peaks with assumed efficiencies) against the imported tables (the default `h100-sxm`, Vidur,
AIConfigurator's whole grid) and, if given, your measured profile. Source
`scaled ...` means the table had no row at this shape (llama-3-8b's MLP widths are not in Vidur's
tables) and the nearest measured shape was scaled by the roofline ratio; `roofline` means the
table has no rows for that op and falls back to the datasheet."""),
    new_code_cell('''\
h100 = {"default (measured kernels)": "h100-sxm", "vidur (imported)": IMPORTED}
tmp = tempfile.TemporaryDirectory()
if USE_AICONFIGURATOR:
    try:
        from calibrate.importers import import_aiconfigurator
        h100["aiconfigurator, whole grid"] = str(import_aiconfigurator("h100_sxm", Path(tmp.name) / "aic"))
    except (ImportError, ScenarioError) as exc:
        print(f"AIConfigurator column left out: {exc}")
if MEASURED_H100:
    h100["measured"] = MEASURED_H100
cc = studies.crosscheck("llama-3-8b", "h100-sxm-datasheet", h100)
cc.pivot_table(index=["op", "shape"], columns="profile", values="time_us", sort=False).round(1)'''),
    new_code_cell('''\
def ratio_figure(cc, title):
    ds = cc[cc["profile"] == "datasheet"].set_index(["op", "shape"])["time_us"]
    other = cc[cc["profile"] != "datasheet"].copy()
    other["vs datasheet"] = other["time_us"].to_numpy() / ds.loc[list(zip(other["op"], other["shape"]))].to_numpy()
    other["case"] = other["op"] + " " + other["shape"]
    fig = px.bar(other, x="case", y="vs datasheet", color="profile", barmode="group", hover_data=["time_us", "source"],
                 log_y=True, title=title)
    fig.add_hline(y=1.0, line_dash="dot")
    return fig

ratio_figure(cc, "H100 SXM, llama-3-8b: op time relative to the datasheet roofline").show()'''),
    new_markdown_cell("""\
The one device with a measured table here is the CPU, which has no vendor datasheet profile in
this repository: the same comparison, with a roofline built from the CPU profile's own peaks (the
best GEMM FLOP/s and streaming bandwidth it measured) and the default assumed efficiencies in the
"datasheet" column, against the measured table. It shows how far a roofline with *right* peaks
still is from real kernels: single-row GEMMs faster than the assumed `T / (T + 64)` ramp allows,
decode attention and elementwise ops far slower than streaming bandwidth. Shapes stay inside the
CPU grid (tiny-llama, up to 1024 tokens)."""),
    new_code_cell('''\
CPU_CASES = [("qkv_proj", 1, 0), ("qkv_proj", 64, 0), ("qkv_proj", 1024, 0), ("o_proj", 64, 0),
             ("gate_up_proj", 64, 0), ("gate_up_proj", 1024, 0), ("down_proj", 1024, 0), ("lm_head", 16, 0),
             ("attn_prefill", 512, 0), ("attn_decode", 16, 512), ("rmsnorm", 1024, 0), ("silu_mul", 1024, 0)]
cpu = studies.crosscheck("tiny-llama", MEASURED, {"measured": MEASURED}, cases=CPU_CASES)
ratio_figure(cpu, f"{MEASURED}: measured op time relative to its own roofline").show()
cpu.pivot_table(index=["op", "shape"], columns="profile", values="time_us", sort=False).round(1)'''),
    new_markdown_cell("""\
Limits: the CPU profile was measured on a shared, loaded 2-core machine (its fit errors include
that noise; see the README's calibration section); Vidur's copy has no attention tables, so its
attention falls back to the datasheet roofline; the GPU tables are imported, none was measured
for this work."""),
]

NB5 = [
    new_markdown_cell("""\
# 5. Prefix caching: hit rate and TTFT

What vLLM's automatic prefix caching (`scheduler.enable_prefix_caching`, README "Prefix caching")
buys, in two settings:

1. **The Mooncake conversation trace's `hash_ids`** (Mooncake, FAST'25; kvcache-ai/Mooncake,
   Apache-2.0): which 512-token prompt blocks real requests share. Replayed against one deployment
   with caching off and on, for a range of KV cache sizes (`scheduler.num_gpu_blocks_override`,
   blocks of 16 tokens per replica). Read from `../shared/data/llm_traces/` beside the repository
   when it exists (the whole trace), otherwise from the 300-request excerpt in `tests/data/`; CI
   (`small`) always uses the excerpt.
2. **A synthetic chat workload with shared system prompts** (`workload.prefix`): the share of
   requests that start with one of 4 system prompts of 2,048 tokens, caching off and on.

Every number comes from `studies.prefix_cache_sweep` (tested in `tests/test_studies.py` against the
closed-form hit rate of a shared prefix)."""),
    new_code_cell(SETUP + """
from pathlib import Path
from simulator import scenario_from_dict"""),
    new_markdown_cell("""\
## Mooncake `hash_ids` against cache size

Deployment: Llama 3.1 8B dimensions (128k context, as in notebook 2) on H100 SXM (`h100-sxm`,
measured kernels), 4 replicas (notebook 2's answer for this trace at a 30 s p99 TTFT),
`least_outstanding` routing, `continuous` batching (the policy prefix caching is modelled with;
its token budget covers the longest prompt). The cache is per replica and hits are per replica
(no cache-aware routing). An H100 holds about 28,100 blocks for this model (450k tokens, the
default); larger sizes are hypothetical (as if the KV had more memory, e.g. an offload tier
that is as fast as HBM, which no real tier is). A cache must hold one 131,072-token request, hence
at least 8,192 blocks."""),
    new_code_cell("""\
MODEL = {"name": "llama-3.1-8b", "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_model_len": 131072}
REPLICAS = 4
BLOCKS = [8192, 28116, 281160] if SMALL else [8192, 16384, 28116, 65536, 140000, 281160, 1_000_000]
files = studies.trace_files(ROOT).set_index("trace")
full = not SMALL and bool(files.loc["mooncake-conv", "full"])
path = Path(files.loc["mooncake-conv", "path"]) if full else ROOT / "tests" / "data" / "mooncake_conversation_excerpt.jsonl"
mooncake = scenario_from_dict({
    "name": "mooncake-prefix", "seed": 1, "model": MODEL, "hardware": "h100-sxm",
    "deployment": {"replicas": REPLICAS, "tensor_parallel_size": 1, "router": "least_outstanding"},
    "scheduler": {"policy": "continuous", "max_num_batched_tokens": 131072, "max_num_seqs": 256, "block_size": 16},
    "workload": {"arrival": {"process": "trace", "path": str(path), "format": "mooncake"}, "over_length": "reject"}})
print(f"trace: {path}")
sizes = studies.prefix_cache_sweep(mooncake, {n: {"scheduler.num_gpu_blocks_override": n} for n in BLOCKS})
sizes["cache_tokens"] = sizes["num_gpu_blocks"] * 16
sizes[["num_gpu_blocks", "cache_tokens", "enable_prefix_caching", "hit_rate", "evictions", "ttft_mean_s",
       "ttft_p50_s", "ttft_p99_s", "ttft_mean_saving", "preemptions", "rejected"]].round(4)"""),
    new_code_cell("""\
on = sizes[sizes["enable_prefix_caching"]]
fig = make_subplots(rows=1, cols=3, subplot_titles=["hit rate (caching on)", "mean TTFT", "p99 TTFT"])
fig.add_trace(go.Scatter(x=on["cache_tokens"], y=on["hit_rate"], mode="lines+markers", name="hit rate",
                         showlegend=False), row=1, col=1)
for enabled, g in sizes.groupby("enable_prefix_caching"):
    name, color = ("caching on", "#2ca02c") if enabled else ("caching off", "#7f7f7f")
    for col, metric in ((2, "ttft_mean_s"), (3, "ttft_p99_s")):
        fig.add_trace(go.Scatter(x=g["cache_tokens"], y=g[metric], mode="lines+markers", name=name,
                                 line=dict(color=color), legendgroup=name, showlegend=col == 2), row=1, col=col)
for col in (1, 2, 3):
    fig.add_vline(x=28116 * 16, line_dash="dot", row=1, col=col)
fig.update_xaxes(type="log", title_text="KV cache per replica (tokens; dotted: one H100)")
fig.update_yaxes(title_text="seconds", row=1, col=2)
fig.update_yaxes(title_text="seconds", row=1, col=3)
fig.update_layout(title=f"Mooncake conversation trace, {REPLICAS} x H100, prefix cache size", height=450)
fig.show()"""),
    new_markdown_cell("""\
Reading it: reuse in this trace spans far more tokens than one GPU's cache holds, so the hit rate
rises with the cache well past the size of an H100 (the point of Mooncake's CPU/SSD KV store,
which the simulator does not model). With caching off the cache size matters only through
preemptions (a cache smaller than the running batch needs); with caching on, the smallest caches
also get hits from preempted requests finding their own blocks again, so the hit rate need not
rise monotonically there."""),
    new_markdown_cell("""\
## Shared system prompts (synthetic)

`examples/chat-prefix-h100.yaml` without its multi-turn sessions: Llama 3 8B on one H100, prompts
of about 2,600 tokens (lognormal, 2,100-5,000) of which a fraction `share` start with one of 4
system prompts of 2,048 tokens, 4 requests/s. The hit rate should be about share x 2,048 / mean
prompt (about 2,900 tokens once the lognormal is clipped to 2,100-5,000), less the first request
of each system prompt and the prefixed requests that find their prompt evicted."""),
    new_code_cell("""\
NUM_REQUESTS = 400 if SMALL else 5000
SHARES = [0.0, 0.5, 0.9] if SMALL else [0.0, 0.25, 0.5, 0.75, 0.9, 1.0]
chat = load_scenario(ROOT / "examples" / "chat-prefix-h100.yaml").with_overrides(
    {"workload.sessions": None, "workload.arrival.rate_per_s": 4.0, "num_requests": NUM_REQUESTS,
     "warmup_s": 0 if SMALL else 60})
shares = studies.prefix_cache_sweep(chat, {s: {"workload.prefix.share": s} for s in SHARES})
shares = shares.rename(columns={"variant": "share"})
shares[["share", "enable_prefix_caching", "hit_rate", "ttft_mean_s", "ttft_p99_s", "tpot_p99_s",
        "ttft_mean_saving", "ttft_p99_saving"]].round(4)"""),
    new_code_cell("""\
fig = make_subplots(rows=1, cols=2, subplot_titles=["mean TTFT", "p99 TTFT"])
for enabled, g in shares.groupby("enable_prefix_caching"):
    name, color = ("caching on", "#2ca02c") if enabled else ("caching off", "#7f7f7f")
    for col, metric in ((1, "ttft_mean_s"), (2, "ttft_p99_s")):
        fig.add_trace(go.Bar(x=g["share"].astype(str), y=g[metric] * 1000, name=name, marker_color=color,
                             legendgroup=name, showlegend=col == 1), row=1, col=col)
fig.update_xaxes(title_text="share of requests with a shared 2,048-token system prompt")
fig.update_yaxes(title_text="ms")
fig.update_layout(barmode="group", title="TTFT with prefix caching off and on, shared system prompts")
fig.show()"""),
    new_markdown_cell("""\
Limits (README "Prefix caching"): one physical copy per block id, hits per replica (no
cross-replica or offloaded cache, no cache-aware routing), Mooncake sharing known at its 512-token
granularity only, prefix caching modelled with `continuous` batching only, one seeded run per
point."""),
]

NB6 = [
    new_markdown_cell("""\
# 6. Quarterly capacity worksheet

The planner (README "Capacity planning") on `examples/plan-fy27.yaml`: a Llama 3 8B chat service
in three regions over four quarters, three hardware candidates, p99 SLOs on client-perceived TTFT
and TPOT, 20% headroom and N+1 regional failover. For every quarter and region it finds, by
simulation, the cheapest candidate and replica count that meet the SLOs. The charts are the ones a
capacity review asks for: GPUs per region per quarter, cost per quarter, and which SLO binds each
cell (the one the next smaller fleet fails worst).

At `small` (CI) the plan is shrunk through its own fields: the first two candidates, the first and
last quarters, 1,000 requests per verification run instead of 3,000 (noisier tails; every count
is still judged over all its arrivals, on 3 seeds (8 where the decision is noisy), and must be stable and below its
saturation throughput)."""),
    new_code_cell(SETUP + """
import tempfile
from pathlib import Path
import pandas as pd
import yaml
from simulator.planner import load_plan, plan, write_worksheets"""),
    new_code_cell("""\
PLAN = ROOT / "examples" / "plan-fy27.yaml"
WORKERS = 1 if SMALL else None          # None: one process per CPU
data = yaml.safe_load(PLAN.read_text())
if SMALL:
    forecast = pd.read_csv(PLAN.parent / data["forecast"])
    keep = [forecast["quarter"].iloc[0], forecast["quarter"].iloc[-1]]
    data.update(candidates=data["candidates"][:2], forecast=forecast[forecast["quarter"].isin(keep)].to_dict("records"),
                simulation={**data["simulation"], "num_requests": 1000})
loaded = load_plan(data, base_dir=PLAN.parent)
print(f"{len(loaded.quarters)} quarters x {len(loaded.regions)} regions x {len(loaded.candidate_scenarios)} candidates; "
      f"{loaded.config.simulation.num_requests} requests per run")
loaded.forecast"""),
    new_code_cell("""\
result = plan(loaded, workers=WORKERS)
print(f"planned in {result.wall_s:.0f} s")
ws = result.worksheet
ws[["quarter", "region", "status", "peak_rps", "design_rps", "candidate", "replicas", "gpus", "analytic_estimate_replicas",
    "ttft_p99_ms", "tpot_p99_ms", "slo_attainment", "stable", "utilization", "provisioning", "gpu_hours",
    "cost_per_quarter", "binding_constraint", "minus_one_check"]].round(3)"""),
    new_code_cell("""\
with tempfile.TemporaryDirectory(prefix="llmplan-worksheet-") as tmp:   # what `llmplan plan --out` writes
    paths = write_worksheets(result, Path(tmp) / "worksheet.csv")
    for key, p in paths.items():
        print(f"{key}: {p.name}, {len(pd.read_csv(p))} rows")
    print(paths["worksheet"].read_text().splitlines()[0])
result.totals.round(0)"""),
    new_markdown_cell("## GPUs per region and cost per quarter"),
    new_code_cell("""\
fig = make_subplots(rows=1, cols=2, subplot_titles=["GPUs per region", "cost per quarter (USD)"])
for region, g in ws.groupby("region", sort=False):
    fig.add_trace(go.Bar(x=g["quarter"], y=g["gpus"], name=region, legendgroup=region,
                         text=g["candidate"], hovertemplate="%{x} " + region + ": %{y} GPUs (%{text})"), row=1, col=1)
    fig.add_trace(go.Bar(x=g["quarter"], y=g["cost_per_quarter"], name=region, legendgroup=region, showlegend=False),
                  row=1, col=2)
fig.update_layout(barmode="stack", title=f"{loaded.config.name}: fleet per quarter (stacked by region)", height=450)
fig.show()"""),
    new_markdown_cell("""\
## What binds each cell

`binding_constraint` is the SLO that one replica fewer fails by the largest factor
(`minus_one_check` says how); `slo_worst_ratio` is how close the chosen fleet runs to its tightest
SLO (1 = exactly at it)."""),
    new_code_cell("""\
cells = ws.assign(label=ws["gpus"].astype("Int64").astype(str) + " x " + ws["candidate"].astype(str))
fig = px.scatter(cells, x="quarter", y="region", color="binding_constraint", text="label",
                 hover_data=["minus_one_check", "slo_worst_ratio", "worst_case"],
                 title="Binding constraint per quarter and region (label: GPUs x candidate)")
fig.update_traces(marker=dict(size=60, symbol="square", opacity=0.5), textposition="middle center")
fig.update_layout(height=350 + 40 * len(loaded.regions))
fig.show()"""),
    new_code_cell("""\
# Every candidate of every cell: the cost ordering behind each choice (empty cost: infeasible).
cand = result.candidates.assign(cell=result.candidates["quarter"] + " " + result.candidates["region"])
fig = px.bar(cand, x="cell", y="cost_per_quarter", color="candidate", barmode="group",
             hover_data=["gpus", "provisioning", "gpu_hours", "status", "binding_constraint"],
             title="Cost per quarter of each candidate's fleet as provisioned (the planner picks the least)")
fig.show()"""),
    new_markdown_cell("""\
Limits (README "Capacity planning"): one seeded run per replica count (a borderline cell can move
by one replica with another seed), steady Poisson peaks for the peak fleet, GPU-hours from the
regions' diurnal shapes by an hour-level fluid model of the autoscaler (not a simulated day),
hardware profiles from imported kernel tables with an assumed engine overhead and assumed prices."""),
]

NB7 = [
    new_markdown_cell("""\
# 5. Fidelity: the simulator against a real engine

`llmplan validate` serves the same requests on the torch reference engine (`calibrate/engine.py`:
a Llama-architecture decoder whose continuous batching takes every decision through the
simulator's own policy classes, real kernels per step) and in the simulator with a profile whose
engine overhead is fitted on separate runs, and compares TTFT, TPOT and E2E percentiles per load.
This notebook reads the committed results (`benchmarks/results/fidelity-*/validation.json`:
`fidelity-thread` on the thread-CPU clock, `fidelity-wall` on the wall clock of the 2-core machine
with nothing else running, `fidelity-wall-shared` on its wall clock while other jobs ran), tables and plots predicted against measured with the targets (|error| <= 10% on
p50s and throughput, <= 15% on p90s/p99s), and, when torch is installed, runs a tiny validation
itself. Every reshaping is `simulator.report.validation_report` (tested in `tests/test_validation_report.py`)."""),
    new_code_cell(SETUP + '''
import pandas as pd
from simulator.report.validation_report import (error_matrix, load_validation, provenance, scatter_points,
                                         targets_summary, validation_folders, validation_table)

RESULTS = ROOT / "benchmarks" / "results"
runs = {p.name.removeprefix("fidelity-"): load_validation(p) for p in sorted(validation_folders(RESULTS))}
pd.DataFrame({name: {**provenance(doc), **targets_summary(doc)} for name, doc in runs.items()})'''),
    new_markdown_cell("""\
Relative error (predicted / measured - 1) per load and metric, against the median of the engine's
runs; the README's tables come from the same files."""),
    new_code_cell('''\
for name, doc in runs.items():
    print(name)
    display(error_matrix(doc).style.format("{:+.1%}"))'''),
    new_code_cell('''\
def error_figure(doc, title):
    """Error per metric at each load, bars = the engine's noise, bands = the targets."""
    t = validation_table(doc)
    t = t[t["metric"] != "capacity"].assign(load_label=lambda d: (d["load"] * 100).round().astype(int).astype(str) + "%")
    fig = px.scatter(t, x="metric", y="error", color="load_label", error_y="noise", symbol="status",
                     title=title, labels={"load_label": "load", "error": "predicted / measured - 1"})
    fig.add_hrect(y0=-0.15, y1=0.15, fillcolor="green", opacity=0.08, line_width=0)
    fig.add_hrect(y0=-0.10, y1=0.10, fillcolor="green", opacity=0.12, line_width=0)
    fig.add_hline(y=0, line_dash="dot")
    fig.update_yaxes(tickformat="+.0%")
    return fig

for name, doc in runs.items():
    error_figure(doc, f"{name}: error per metric and load (shaded: ±10%, ±15%)").show()'''),
    new_code_cell('''\
def scatter_figure(doc, title):
    pts = scatter_points(doc).assign(load=lambda d: (d["load"] * 100).round().astype(int).astype(str) + "%")
    lo, hi = min(pts["measured_ms"].min(), pts["predicted_ms"].min()) / 1.3, max(pts["measured_ms"].max(), pts["predicted_ms"].max()) * 1.3
    fig = px.scatter(pts, x="measured_ms", y="predicted_ms", color="metric", symbol="load", error_x="noise_ms",
                     log_x=True, log_y=True, title=title)
    for band, op in ((0.15, 0.08), (0.10, 0.12)):
        fig.add_trace(go.Scatter(x=[lo, hi, hi, lo], y=[lo * (1 + band), hi * (1 + band), hi * (1 - band), lo * (1 - band)],
                                 fill="toself", fillcolor=f"rgba(0,128,0,{op})", line_width=0, name=f"±{band:.0%}"))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(dash="dash", color="black"), name="y = x"))
    return fig

for name, doc in runs.items():
    scatter_figure(doc, f"{name}: predicted vs measured (ms)").show()'''),
    new_markdown_cell("""\
Capacity (saturated throughput) and the fitted engine overhead of each run. On the wall clock of
the shared machine other engineers' jobs took the CPU from 60% load on: its errors and noise
measure that contention, not the model (README, "Fidelity")."""),
    new_code_cell('''\
pd.DataFrame({name: {"measured req/s": doc["capacity"]["measured_rps"], "predicted req/s": doc["capacity"]["predicted_rps"],
                     "error": f"{doc['capacity']['error']:+.1%}", "noise": f"±{doc['capacity']['noise']:.1%}",
                     "overhead": provenance(doc).get("overhead"), "kernel share": doc["overhead"].get("kernel_share")}
              for name, doc in runs.items()})'''),
    new_markdown_cell("""\
**A run of your own.** When torch is installed (`pip install -e '.[calibrate]'`), the cell below
runs `calibrate.validate` at a tiny size on the thread clock with the committed CPU profile (one
load, one engine run: about 10 s on a shared 2-core CPU at `small`; two loads and two runs at
`full`). It has no noise estimate at one run and 40 requests, so read it as a smoke check of the
pipeline, not as the fidelity figures above. Without torch it says so, and the committed results
stand."""),
    new_code_cell('''\
import importlib.util, tempfile
from pathlib import Path
if importlib.util.find_spec("torch") is None:
    print("torch is not installed: showing the committed results only (pip install -e '.[calibrate]' to run one)")
else:
    from calibrate.validate import ValidateSettings, run_validation
    settings = ValidateSettings(loads=(0.5,) if SMALL else (0.3, 0.7), repeats=1 if SMALL else 2,
                                num_requests=40 if SMALL else 60, capacity_requests=16 if SMALL else 32,
                                profile="cpu-amd-epyc-tiny-llama", clock="thread")
    mine = run_validation(settings, Path(tempfile.mkdtemp()) / "fidelity-notebook", log=lambda msg: None)
    print(f"{mine['wall_s']:.1f} s; capacity measured {mine['capacity']['measured_rps']:.1f} req/s, "
          f"predicted {mine['capacity']['predicted_rps']:.1f} ({mine['capacity']['error']:+.1%})")
    display(error_matrix(mine).style.format("{:+.1%}"))
    error_figure(mine, "this run: error per metric (shaded: ±10%, ±15%)").show()'''),
    new_markdown_cell("""\
Limits: the reference engine is eager torch on one CPU thread (no paged attention kernel, CUDA
graphs or scheduling overlap), only `continuous` and `chunked_prefill` run, and no GPU validation
has been run (README, "Fidelity", for the error budget and what the wall-clock figures mean)."""),
]

NOTEBOOKS = {
    "01_latency_vs_throughput.ipynb": NB1,
    "02_real_traffic.ipynb": NB2,
    "03_speculative_decoding.ipynb": NB3,
    "04_calibration_review.ipynb": NB4,
    "05_prefix_caching.ipynb": NB5,
    "06_quarterly_worksheet.ipynb": NB6,
    "07_fidelity.ipynb": NB7,
}


def build(cells: list) -> nbformat.NotebookNode:
    nb = new_notebook(cells=cells)
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"
    return nb


def execute(out: Path) -> int:
    """Run each committed notebook in a fresh kernel from this folder; write it, outputs included,
    to ``out``. A cell that raises stops that notebook (its partial copy is still written)."""
    import os
    import time

    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    root = str(HERE.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in NOTEBOOKS:
        nb = nbformat.read(HERE / name, as_version=4)
        t0 = time.perf_counter()
        try:
            NotebookClient(nb, timeout=None, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
            status = "ok"
        except CellExecutionError as exc:
            failed += 1
            status = f"FAILED: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        nbformat.write(nb, out / name)
        print(f"{name}: {status} in {time.perf_counter() - t0:.0f} s -> {out / name}")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a committed notebook is out of date")
    ap.add_argument("--execute", metavar="DIR", help="run every notebook (size from $LLMPLAN_NOTEBOOK_SCALE, "
                    "full by default) and write the executed copies, with outputs, into DIR")
    args = ap.parse_args()
    if args.execute:
        return execute(Path(args.execute))
    stale = []
    for name, cells in NOTEBOOKS.items():
        text = nbformat.writes(build(cells)) + "\n"
        path = HERE / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date (run python notebooks/build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
