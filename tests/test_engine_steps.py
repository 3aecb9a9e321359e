"""The engine's own step times (``calibrate --from-observation ... --engine-steps LOG``): vLLM's
iteration lines parsed, ``kernel_scale`` regressed on them, and the whole fit with them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import script_module

from calibrate.engine_steps import EngineSteps, fit_kernel_scale, kernel_times_s, parse_iterations, read_engine_steps
from calibrate.fit import FitSettings, check, run_fit
from simulator import ScenarioError, scenario_from_dict, simulate
from simulator.cost.factory import make_cost_model
from simulator.run.resolve import model_option
from simulator.scenario.profiles import load_profile

BASE = "cpu-amd-epyc-tiny-llama"
SCHEDULER = {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "max_model_len": 1024}
TRUE_STEP_S, TRUE_SCALE, EXECUTE_S = 0.004, 0.6, 0.0015


def line(i: int, cr: int, ct: int, gr: int, ms: float, extra: str = "", gt: int | None = None) -> str:
    """One step as vLLM 0.32's LoggingStatLogger writes it (``gt`` generation tokens, default ``gr``)."""
    return (f"(APIServer pid=7) INFO 12-06 04:09:42 [loggers.py:199] Engine 000: Iteration({i}): {cr} context "
            f"requests, {ct} context tokens, {gr} generation requests, {gr if gt is None else gt} generation "
            f"tokens, iteration elapsed "
            f"time: {ms:.2f} ms{extra}, CPU KV cache usage: 0.2%\n")


def test_iteration_lines_are_parsed_whatever_surrounds_them() -> None:
    text = ("INFO starting\n" + line(0, 2, 300, 0, 40.5) + "noise Iteration(x)\n"
            + line(1, 0, 0, 5, 7.25, " (dummy)") + line(2, 1, 128, 3, 20.0, ", encoder inputs: 1"))
    rows = parse_iterations(text)
    assert rows.tolist() == [[2, 300, 0, 0, 40.5], [0, 0, 5, 5, 7.25], [1, 128, 3, 3, 20.0]]
    assert parse_iterations("no steps here").shape == (0, 5)


def test_a_resumed_requests_recomputation_logged_among_generation_tokens_is_priced_as_a_prompt(
        tmp_path: Path) -> None:
    # vLLM counts a request resumed after preemption as a generation request: 4 decodes and one
    # resume recomputing 300 tokens log as 5 generation requests, 304 generation tokens.
    log = tmp_path / "preempt.log"
    log.write_text(line(0, 0, 0, 5, 30.0, gt=304) + line(1, 0, 0, 5, 5.0) + line(2, 1, 300, 4, 31.0))
    steps = read_engine_steps((str(log),))
    assert steps.generation_tokens is not None and steps.generation_tokens.tolist() == [304, 5, 4]
    cost = make_cost_model(load_profile(BASE), model_option("tiny-llama"), 1)
    k = kernel_times_s(cost, steps, 300.0)
    # the resume costs what a 300-token prompt beside 4 decodes costs, not a fifth decode
    assert k[0] == pytest.approx(k[2], rel=0.02) and k[0] > 3 * k[1]
    # a speculative-decoding engine's extra generation tokens are verifications: one decode each, as logged
    assert kernel_times_s(cost, steps, 300.0, recompute=False)[0] == pytest.approx(k[1])


def test_the_regression_recovers_a_known_scale_and_execute_time_through_outliers() -> None:
    rng = np.random.default_rng(0)
    n = 400
    cr = rng.integers(0, 3, n)
    gr = np.where(np.arange(n) % 10 == 0, 0, rng.integers(1, 17, n))       # every tenth step a prefill alone
    cr[gr == 0] = np.maximum(cr[gr == 0], 1)
    steps = EngineSteps(cr, np.where(cr > 0, rng.integers(32, 1024, n), 0), gr, np.zeros(n), ("x",))
    cost = make_cost_model(load_profile(BASE), model_option("tiny-llama"), 1)
    k = kernel_times_s(cost, steps, 300.0)
    elapsed = (EXECUTE_S + TRUE_SCALE * k) * rng.lognormal(0, 0.03, n)
    elapsed[:12] += 0.2                                        # pauses: a garbage collection, a descheduled thread
    fit = fit_kernel_scale(k, EngineSteps(steps.context_requests, steps.context_tokens, steps.generation_requests,
                                          elapsed, ("x",)))
    assert fit["kernel_scale"] == pytest.approx(TRUE_SCALE, rel=0.02)
    assert fit["execute_s"] == pytest.approx(EXECUTE_S, rel=0.1)
    assert fit["steps"] == n and fit["steps_used"] <= n - 12 and fit["r2"] > 0.95
    assert set(fit["measured_over_fitted"]) == {"decode", "prefill", "mixed"}
    assert all(abs(v["median"] - 1) < 0.03 for v in fit["measured_over_fitted"].values())


def test_bad_step_logs_are_refused_with_the_flag_that_writes_them(tmp_path: Path) -> None:
    empty = tmp_path / "server.log"
    empty.write_text("INFO no iteration lines\n")
    with pytest.raises(ScenarioError, match="enable-logging-iteration-details") as e:
        read_engine_steps((str(empty),))
    assert "--engine-steps" in str(e.value) and "server.log" in str(e.value)
    with pytest.raises(ScenarioError, match="cannot be read"):
        read_engine_steps((str(tmp_path / "missing.log"),))
    few = tmp_path / "few.log"
    few.write_text("".join(line(i, 0, 0, 4, 7.0) for i in range(5)))
    steps = read_engine_steps((str(few),))
    with pytest.raises(ScenarioError, match="at least 10"):
        fit_kernel_scale(np.full(len(steps), 0.005), steps)
    same = tmp_path / "same.log"
    same.write_text("".join(line(i, 0, 0, 4, 7.0 + 0.01 * i) for i in range(30)))
    steps = read_engine_steps((str(same),))
    with pytest.raises(ScenarioError, match="different batches"):
        fit_kernel_scale(np.full(len(steps), 0.005), steps)
    with pytest.raises(ScenarioError, match="keep kernel_scale in --fit"):
        check(FitSettings(("a.json",), "tiny-llama", parameters=("step_s",), engine_steps=(str(same),)))


def truth(tmp: Path, name: str, requests: list[tuple[float, int, int]]) -> tuple[Path, Path]:
    """A run of an engine with known costs, simulated: its observation (as `vllm bench serve` writes it)
    and its server log (one iteration line per step: the step's time less its CPU overhead, plus a
    constant execute time)."""
    base = load_profile(BASE)
    table = pd.read_csv(base.table)
    for c in ("median_s", "p10_s", "p90_s", "std_s"):
        table[c] *= TRUE_SCALE
    table.to_csv(tmp / "true-ops.csv", index=False)
    hw: dict[str, Any] = base.model_dump(mode="json", exclude_none=True)
    hw.pop("table_sha256")
    hw.update(table=str(tmp / "true-ops.csv"), overhead={**hw["overhead"], "step_s": TRUE_STEP_S, "per_seq_s": 0.0})
    trace = tmp / f"{name}.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 1000 * t, "input_length": p, "output_length": m,
                                         "hash_ids": []}) + "\n" for t, p, m in requests))
    r = simulate(scenario_from_dict({"name": name, "model": "tiny-llama", "hardware": hw, "scheduler": SCHEDULER,
                                     "workload": {"arrival": {"process": "trace", "path": str(trace),
                                                              "format": "mooncake"}}}))
    req = r.requests.sort_values("request_id")
    obs = tmp / f"{name}.json"
    obs.write_text(json.dumps({
        "date": "20261206-040000", "backend": "vllm", "model_id": "tiny", "completed": len(req),
        "input_lens": req["num_prompt_tokens"].tolist(), "output_lens": req["num_output_tokens"].tolist(),
        "ttfts": req["ttft_s"].tolist(),
        "itls": [[float(x.tpot_s)] * (int(x.num_output_tokens) - 1) for x in req.itertuples()],
        "start_times": (100.0 + req["arrival_time"]).tolist(), "errors": [""] * len(req)}))
    st = r.steps
    ctx_reqs = st["num_seqs"] - st["num_decode_tokens"]
    log = tmp / f"{name}.log"
    log.write_text("".join(line(i, int(c), int(p), int(d), 1e3 * (float(s) - TRUE_STEP_S + EXECUTE_S))
                           for i, (c, p, d, s) in enumerate(zip(ctx_reqs, st["num_prefill_tokens"],
                                                                st["num_decode_tokens"], st["duration_s"],
                                                                strict=True))))
    return obs, log


def test_a_fit_with_the_engine_steps_takes_kernel_scale_from_them(tmp_path: Path) -> None:
    """Two runs of a known engine: kernel_scale comes from the step log (the search fits step_s only),
    and both come back."""
    rng = np.random.default_rng(3)
    light = [(float(t), int(p), int(m)) for t, p, m in zip(np.cumsum(rng.exponential(0.5, 24)),
                                                          rng.integers(32, 256, 24), rng.integers(8, 40, 24),
                                                          strict=True)]
    heavy = [(0.0, int(p), int(m)) for p, m in zip(rng.integers(32, 256, 24), rng.integers(8, 40, 24), strict=True)]
    (o1, l1), (o2, l2) = truth(tmp_path, "light", light), truth(tmp_path, "heavy", heavy)
    scenario = tmp_path / "served.yaml"
    scenario.write_text(json.dumps({"hardware": BASE, "scheduler": SCHEDULER}))
    doc = run_fit(FitSettings((str(o1), str(o2)), "tiny-llama", scenario=str(scenario),
                              parameters=("step_s", "kernel_scale"), max_evals=40, engine_steps=(str(l1), str(l2))),
                  tmp_path / "fitted", log=lambda m: None)
    steps = doc["engine_steps"]
    assert steps["kernel_scale"] == pytest.approx(TRUE_SCALE, rel=0.05)
    assert steps["execute_s"] == pytest.approx(EXECUTE_S, abs=5e-4)
    assert doc["parameters"]["kernel_scale"] == steps["kernel_scale"]
    assert all(set(e) != {"kernel_scale"} for e in doc["evaluations"])
    assert doc["parameters"]["step_s"] == pytest.approx(TRUE_STEP_S, rel=0.1)
    prov = load_profile(str(tmp_path / "fitted")).provenance
    assert prov["engine_steps"]["logs"] == [str(l1), str(l2)] and "logged step times" in prov["fit"]["method"]


def _step_log_terms() -> Any:
    return script_module("benchmarks/vllm/step_log_terms.py")


def test_the_shape_cache_term_misses_as_a_least_recently_used_cache() -> None:
    """benchmarks/vllm/step_log_terms.py --shape-cache: a count misses the first time, hits while it is
    among the last N distinct counts, and misses again once N others were used after it."""
    misses = _step_log_terms().cache_misses
    counts = np.array([5, 5, 7, 5, 9, 8, 5, 7, 7])
    assert misses(counts, 2).tolist() == [1, 0, 1, 0, 1, 1, 1, 1, 0]
    assert misses(counts, 3).tolist() == [1, 0, 1, 0, 1, 1, 0, 1, 0]
    assert misses(counts, 100).tolist() == [1, 0, 1, 0, 1, 1, 0, 0, 0]


def test_the_shape_cache_regression_recovers_a_known_cost_per_miss(tmp_path: Path) -> None:
    """Step lines made with 4 ms per step, 80 us per prompt token, 0.4 ms per decode and 3 ms per
    cache miss (no cost per prompt): the script's regression gives those back."""
    rng = np.random.default_rng(0)
    module = _step_log_terms()
    decodes = rng.integers(1, 9, 600)
    prompt = np.where(rng.random(600) < 0.3, rng.integers(100, 400, 600), 0)
    miss = module.cache_misses(prompt + decodes, 32)
    ms = 4.0 + 0.08 * prompt + 0.4 * decodes + 3.0 * miss
    lines = [f"Iteration({i}): {int(p > 0)} context requests, {p} context tokens, {d} generation requests, "
             f"{d} generation tokens, iteration elapsed time: {t:.4f} ms"
             for i, (p, d, t) in enumerate(zip(prompt, decodes, ms, strict=True))]
    (tmp_path / "repeat-0").mkdir()
    (tmp_path / "repeat-0" / "rate.steps.log").write_text("\n".join(lines) + "\n")
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(Path(module.__file__)), str(tmp_path), "--shape-cache", "32"],
                         capture_output=True, text=True, check=True).stdout
    row = out.splitlines()[1].split()
    assert row[0] == "rate"
    assert float(row[2]) == pytest.approx(4.0, abs=0.01)        # per step
    assert float(row[4]) == pytest.approx(0.0, abs=0.01)        # per prompt
    assert float(row[6]) == pytest.approx(80.0, abs=0.1)        # per prompt token (us)
    assert float(row[8]) == pytest.approx(0.4, abs=0.001)       # per decode
    assert float(row[10]) == pytest.approx(3.0, abs=0.01)       # per miss
