"""The reference serving engine (``calibrate/engine.py``) and ``llmplan validate`` on the CPU.

The engine must generate exactly the tokens asked, greedily and consistently with a cache-free
recomputation; its scheduler must take the simulator's decisions step for step (same policy
classes, same knobs, preemption included); a small ``validate`` run must complete and write its
table. No accuracy assertion beyond a loose factor: CI machines are noisy (the README's
"Fidelity" section has the measured errors). GPU variants are marked ``gpu``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibrate.engine import LlamaModel, ServingEngine  # noqa: E402
from calibrate.validate import (  # noqa: E402
    BURST_RATE_PER_S,
    ValidateSettings,
    build_scenario,
    format_table,
    run_validation,
    workload_of,
)
from simulator import simulate  # noqa: E402
from simulator.run.resolve import resolve  # noqa: E402
from simulator.scenario.models import ModelSpec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROFILE = "cpu-amd-epyc-tiny-llama"
MICRO = ModelSpec(name="micro-llama", num_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, vocab_size=256, max_model_len=512, dtype="fp32")


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def settings(**kw) -> ValidateSettings:
    base = dict(profile=PROFILE, clock="thread", repeats=1, num_requests=12, capacity_requests=8, loads=(0.5,),
                max_num_seqs=4, max_num_batched_tokens=256, max_model_len=256, prompt_mean=24.0, prompt_max=64,
                output_mean=6.0, output_max=16)
    base.update(kw)
    return ValidateSettings(**base)


def engine_and_workload(s: ValidateSettings, rate: float, n: int, model: LlamaModel | None = None, **overrides):
    sc = build_scenario(s, PROFILE, rate, n, s.seed)
    if overrides:
        sc = sc.with_overrides(overrides)
    m = model or LlamaModel(MICRO, seed=1)
    eng = ServingEngine(sc, m, resolve(sc).kv_plan.num_gpu_blocks, clock=s.clock)
    return sc, eng, workload_of(sc)


def test_engine_generates_exactly_the_tokens_asked_greedily() -> None:
    s = settings()
    _sc, eng, wl = engine_and_workload(s, 50.0, 10)
    run = eng.run(wl)
    assert [len(o) for o in run.outputs] == wl.max_tokens.tolist()
    assert all(0 <= t < MICRO.vocab_size for o in run.outputs for t in o)
    assert [len(t) for t in run.token_times] == wl.max_tokens.tolist()
    for times, first, fin in zip(run.token_times, run.table.first_token_time, run.table.finish_time, strict=True):
        assert times[0] == first and times[-1] == fin and np.all(np.diff(times) > 0)
    again = engine_and_workload(s, 50.0, 10, model=eng.model)[1].run(wl)
    assert again.outputs == run.outputs          # greedy: the same tokens every time


def test_batched_cached_decoding_matches_recomputation() -> None:
    """Each generated token is the argmax of a cache-free forward pass over the whole prefix: the KV
    cache, rotary positions, GQA and batching change nothing (up to fp32 rounding)."""
    s = settings()
    _sc, eng, wl = engine_and_workload(s, 200.0, 6)
    run = eng.run(wl)
    rng = np.random.default_rng(eng.seed)   # the engine's prompt tokens (same seed, same draws)
    prompts = [rng.integers(0, MICRO.vocab_size, int(p)).tolist() for p in wl.num_prompt_tokens]
    m = eng.model
    for rid in range(3):
        seq = prompts[rid] + run.outputs[rid]
        for i, tok in enumerate(run.outputs[rid]):
            n = len(prompts[rid]) + i
            logits = m.forward(torch.as_tensor(seq[:n]), [(m.new_cache(n), 0, n)], [n - 1], return_logits=True)[0]
            assert torch.isfinite(logits).all()
            assert float(logits.max() - logits[tok]) <= 1e-4 * float(logits.abs().max())


@pytest.mark.parametrize("policy,extra", [("continuous", {}),
                                          ("chunked_prefill", {"scheduler.long_prefill_token_threshold": 16}),
                                          ("continuous", {"scheduler.num_gpu_blocks_override": 20,
                                                          "scheduler.block_size": 4}),
                                          ("chunked_prefill", {"scheduler.num_gpu_blocks_override": 20,
                                                               "scheduler.block_size": 4})])
def test_engine_takes_the_simulators_decisions(policy: str, extra: dict) -> None:
    """Hand-built queue: every request arrives at once; the engine's step plans (decodes, prefill
    chunks) equal the simulator's step log, step for step, preemptions included."""
    s = settings(policy=policy, max_num_seqs=3, max_num_batched_tokens=64, max_model_len=64, prompt_max=40,
                 output_max=12)
    sc, eng, wl = engine_and_workload(s, BURST_RATE_PER_S, 8, **extra)
    run = eng.run(wl)
    sim = simulate(sc, fast_forward=False)
    steps = sim.steps
    got = [(st.num_decode, sum(st.prefill_tokens)) for st in run.steps]
    want = list(zip(steps["num_decode_tokens"].astype(int), steps["num_prefill_tokens"].astype(int), strict=True))
    assert got == want
    assert (sim.requests["num_preemptions"].to_numpy() == run.table.num_preemptions).all()
    if "scheduler.num_gpu_blocks_override" in extra:
        assert run.table.num_preemptions.sum() > 0      # the small cache really forced recomputes
    assert [len(o) for o in run.outputs] == wl.max_tokens.tolist()


def test_refuses_policies_it_does_not_run() -> None:
    from simulator import ScenarioError

    s = settings()
    sc = build_scenario(s, PROFILE, 1.0, 4, 0).with_overrides({"scheduler.policy": "static"})
    with pytest.raises(ScenarioError, match=r"scheduler\.policy"):
        ServingEngine(sc, LlamaModel(MICRO), 100)


def test_quick_validate_writes_its_table(tmp_path: Path) -> None:
    """End to end with no profile given: calibrates (quick grid sized to the engine's knobs), fits
    the overhead, runs the engine and the simulator, writes everything. The calibration's noise guard
    is loosened (as ``calibrate --max-load`` does): it refused to start on a busy CI machine, and the
    guard has tests of its own on a simulated load (tests/test_calibration_noise.py); every clock here is
    the thread clock, which time-slicing does not stretch."""
    s = settings(model="tiny-llama", profile=None, max_num_batched_tokens=96, max_model_len=96, prompt_max=48,
                 noise={"max_drift": 1e6, "max_spread": 1e6, "max_load_per_cpu": None})
    doc = run_validation(s, tmp_path, log=lambda m: None)
    assert (tmp_path / "calibration" / "ops.csv").exists()
    for name in ("validation.csv", "validation.json", "requests_load0.5.csv", "predicted_load0.5.csv",
                 "tokens_load0.5.csv", "profile/profile.yaml"):
        assert (tmp_path / name).exists(), name
    assert json.loads((tmp_path / "validation.json").read_text())["capacity"]["measured_rps"] > 0
    oh = doc["overhead"]
    # The engine's CPU overhead is found and the fitted step model follows its steps: over seeds 0-7
    # kernels were 66-85% of step time and the median per-step residual 3-8.5%; on a busy CI machine
    # the calibrated kernels read 97% of the engine's steps (the calibration and the engine run at
    # different moments of the machine's load, so the share is bounded for its order, not its value).
    assert oh["steps"] > 0 and 0.4 < oh["kernel_share"] < 1.1, oh
    assert oh["step_s"] + oh["per_seq_s"] + oh["per_token_s"] > 0 and oh["residual_median_abs_rel"] < 0.25, oh
    # Tolerances from this test's own noise: over seeds 0-23 on the shared 2-core machine (load
    # average 2.4), predicted/measured ranged 0.65-1.27 for the p50s, 0.57-1.22 for the p99s,
    # 0.99-1.13 for throughput and 0.82-1.24 for capacity (12 requests: a p99 is one request).
    rows = {r["metric"]: r for r in doc["rows"]}
    bounds = {"ttft_p50": (0.5, 1.6), "tpot_p50": (0.5, 1.6), "e2e_p50": (0.5, 1.6), "ttft_p99": (0.4, 1.7),
              "e2e_p99": (0.4, 1.7), "throughput_rps": (0.85, 1.25)}
    for metric, (lo, hi) in bounds.items():
        r = rows[metric]
        assert r["measured"] > 0 and lo < r["predicted"] / r["measured"] < hi, r
    assert 0.65 < doc["capacity"]["predicted_rps"] / doc["capacity"]["measured_rps"] < 1.5
    assert "| 50% | ttft_p99 |" in format_table(doc)


def test_validate_cli_rejects_bad_loads(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LLMPLAN_DEBUG"}
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "validate", "--loads", "0.2,x", "--out",
                           str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--loads" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="runs the reference engine in bf16 on CUDA; no CUDA device "
                    "here. CI is CPU-only: run `pytest -m gpu` on a GPU machine")
def test_engine_on_gpu_bf16() -> None:
    s = settings(device="cuda")
    sc = build_scenario(s, PROFILE, 50.0, 6, 0)
    m = LlamaModel(MICRO, device="cuda", dtype="bf16")
    run = ServingEngine(sc, m, resolve(sc).kv_plan.num_gpu_blocks, clock="wall").run(workload_of(sc))
    assert [len(o) for o in run.outputs] == workload_of(sc).max_tokens.tolist()
