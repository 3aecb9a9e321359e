"""Write the vLLM measurement samples in tests/data (run from the repository root:
``python tests/data/make_vllm_samples.py``): a ``/metrics`` export, a ``vllm bench serve`` result
JSON and the ``simulate --json`` summary of the same run.

Their numbers are a simulated run of examples/chat-h100.yaml (400 requests, no warm-up), laid out as
vLLM writes them: the metric names, labels, HELP lines and bucket bounds of vLLM's v1 Prometheus
logger, the keys of ``vllm bench serve --save-result``. They are not measurements of a real server;
they let the tests check the reading and the comparison against a run whose true values are known.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simulator import load_scenario, simulate
from simulator.cli.support import jsonable
from simulator.metrics import itl_samples

HERE = Path(__file__).resolve().parent
LABELS = 'engine="0",model_name="meta-llama/Meta-Llama-3-8B-Instruct"'
# vLLM's bucket bounds (vllm/v1/metrics/loggers.py).
TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
        80.0, 160.0, 640.0, 2560.0]
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
           960.0, 1920.0, 7680.0]


def _histogram(name: str, help_text: str, bounds: list[float], values: np.ndarray,
               weights: np.ndarray | None = None) -> list[str]:
    w = np.ones(len(values)) if weights is None else weights.astype(float)
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for b in bounds:
        lines.append(f'{name}_bucket{{{LABELS},le="{b}"}} {float(w[values <= b].sum())}')
    lines.append(f'{name}_bucket{{{LABELS},le="+Inf"}} {float(w.sum())}')
    lines.append(f"{name}_count{{{LABELS}}} {float(w.sum())}")
    lines.append(f"{name}_sum{{{LABELS}}} {float((values * w).sum())!r}")
    return lines


def main() -> None:
    result = simulate(load_scenario(Path("examples/chat-h100.yaml"), {"num_requests": 400, "warmup_s": 0}))
    req = result.requests[result.requests["status"] == "finished_length_capped"]
    summary = jsonable(result.summary)
    (HERE / "chat_h100_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    itl_values, itl_weights = itl_samples(result.steps)
    tpot = req["tpot_s"].dropna().to_numpy()
    out = ["# HELP python_gc_objects_collected_total Objects collected during gc",
           "# TYPE python_gc_objects_collected_total counter",
           'python_gc_objects_collected_total{generation="0"} 12034.0',
           "# HELP vllm:num_requests_running Number of requests in model execution batches.",
           "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{LABELS}}} 0.0",
           "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
           "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{LABELS}}} 0.0",
           "# HELP vllm:request_success_total Count of successfully processed requests.",
           "# TYPE vllm:request_success_total counter"]
    # Every simulated request ends at its drawn output length: an end-of-sequence token, "stop".
    out += [f'vllm:request_success_total{{{LABELS},finished_reason="stop"}} {float(len(req))}',
            f'vllm:request_success_total{{{LABELS},finished_reason="length"}} 0.0',
            f'vllm:request_success_total{{{LABELS},finished_reason="abort"}} 0.0',
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{LABELS}}} {float(req['num_prompt_tokens'].sum())}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{LABELS}}} {float(req['num_output_tokens'].sum())}"]
    out += _histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT,
                      req["ttft_s"].to_numpy())
    out += _histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds. "
                      "DEPRECATED: Use vllm:inter_token_latency_seconds instead.", ITL, itl_values, itl_weights)
    out += _histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL,
                      itl_values, itl_weights)
    out += _histogram("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds "
                      "per request.", ITL, tpot)
    out += _histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", LATENCY,
                      req["e2e_s"].to_numpy())
    out += _histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                      LATENCY, req["queue_delay_s"].to_numpy())
    (HERE / "vllm_metrics.prom").write_text("\n".join(out) + "\n")

    def ms(values: np.ndarray, key: str) -> dict[str, float]:
        return {f"mean_{key}_ms": float(np.mean(values) * 1000), f"median_{key}_ms": float(np.median(values) * 1000),
                f"std_{key}_ms": float(np.std(values) * 1000), f"p90_{key}_ms": float(np.percentile(values, 90) * 1000),
                f"p99_{key}_ms": float(np.percentile(values, 99) * 1000)}

    span = float(req["finish_time"].max() - result.requests["arrival_time"].min())
    bench = {"date": "20250304-090000", "backend": "vllm", "model_id": "meta-llama/Meta-Llama-3-8B-Instruct",
             "tokenizer_id": "meta-llama/Meta-Llama-3-8B-Instruct", "num_prompts": 400, "request_rate": 8.0,
             "burstiness": 1.0, "max_concurrency": None, "duration": span, "completed": int(len(req)),
             "total_input_tokens": int(req["num_prompt_tokens"].sum()),
             "total_output_tokens": int(req["num_output_tokens"].sum()),
             "request_throughput": len(req) / span, "request_goodput": None,
             "output_throughput": float(req["num_output_tokens"].sum()) / span,
             "total_token_throughput": float(req["num_prompt_tokens"].sum() + req["num_output_tokens"].sum()) / span,
             **ms(req["ttft_s"].to_numpy(), "ttft"), **ms(tpot, "tpot"),
             **ms(np.repeat(itl_values, itl_weights.astype(int)), "itl"), **ms(req["e2e_s"].to_numpy(), "e2el")}
    (HERE / "vllm_bench_result.json").write_text(json.dumps(bench, indent=2) + "\n")


if __name__ == "__main__":
    main()
