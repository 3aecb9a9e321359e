"""The plans that size published deployments (examples/published, README "Checks against published
deployments") load, validate and encode the published figures they cite. No simulation runs here;
``python benchmarks/published_checks.py`` runs them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.planner import load_plan
from simulator.planner.run import cell_scenario
from simulator.run.resolve import resolve
from simulator.workload.lengths import make_length

FOLDER = Path(__file__).resolve().parents[1] / "examples" / "published"
SOURCES = yaml.safe_load((FOLDER / "sources.yaml").read_text())["deployments"]


def test_every_plan_in_the_folder_is_a_listed_deployment():
    plans = {p.name for p in FOLDER.glob("*.yaml") if "candidates" in (yaml.safe_load(p.read_text()) or {})}
    listed = [e["plan"] for e in SOURCES]
    assert len(listed) >= 2 and len(set(listed)) == len(listed)
    assert plans == set(listed)


@pytest.mark.parametrize("entry", SOURCES, ids=[e["plan"] for e in SOURCES])
def test_plan_loads_and_encodes_the_published_deployment(entry):
    loaded = load_plan(FOLDER / entry["plan"])          # validates scenario, candidates, memory fit
    cfg = loaded.config
    assert entry["result_url"].startswith("https://") and entry["config_url"].startswith("https://")
    # Traffic: the published rate, and the mean output length that converts it to the published tokens/s.
    (row,) = loaded.forecast.to_dict("records")
    assert row["peak_rps"] == pytest.approx(entry["samples_per_s"], rel=1e-9)
    assert row["avg_output_tokens"] == pytest.approx(entry["tokens_per_s"] / entry["samples_per_s"], abs=0.01)
    # SLO: MLPerf llama2-70b Server's constraints; nothing added on top.
    assert (cfg.slo.ttft_p99_ms, cfg.slo.tpot_p99_ms, cfg.slo.e2e_p99_ms) == (2000, 200, None)
    assert cfg.headroom == 0 and cfg.failover == "none" and len(cfg.regions) == 1
    # The one candidate is the published system: hardware, TP, FP8 weights, batch limit.
    (cand,) = cfg.candidates
    sc = loaded.candidate_scenarios[cand.name]
    assert sc.deployment.tensor_parallel_size == entry["tensor_parallel_size"]
    assert entry["replicas"] * entry["tensor_parallel_size"] == entry["gpus"]
    assert sc.deployment.quantization == "fp8"
    assert sc.scheduler.max_num_seqs == entry["max_num_seqs"]
    system = resolve(sc)
    assert system.profile.name in entry["hardware"].lower().replace("-80gb", "").replace("-141gb", "")
    assert system.model.name == "llama-2-70b"


@pytest.mark.parametrize("entry", SOURCES, ids=[e["plan"] for e in SOURCES])
def test_drawn_output_mean_is_the_published_tokens_per_sample(entry):
    """Truncation by resampling lowers a distribution's mean; the output lengths the planner draws
    must still average the published tokens per sample, or the rate-to-tokens conversion is off."""
    loaded = load_plan(FOLDER / entry["plan"])
    cfg = loaded.config
    (row,) = loaded.forecast.to_dict("records")
    sc = cell_scenario(loaded.candidate_scenarios[cfg.candidates[0].name], row, row["peak_rps"], cfg, 0)
    drawn = make_length(sc.workload.output_tokens, sc, "output_tokens").sample(200_000, np.random.default_rng(1))
    assert drawn.mean() == pytest.approx(entry["tokens_per_s"] / entry["samples_per_s"], rel=0.01)
    assert drawn.max() + sc.workload.prompt_tokens.max <= resolve(sc).max_model_len


@pytest.mark.parametrize("entry", SOURCES, ids=[e["plan"] for e in SOURCES])
def test_offline_runs_are_the_same_system_and_dataset(entry):
    """Each listed Offline run is the same system (its GPUs split into replicas of the Server's TP)
    on the same dataset (tokens per sample within 2% of the Server run's)."""
    off = entry.get("offline")
    if off is None:
        pytest.skip("no Offline run listed")
    assert off["result_url"].startswith("https://") and "/Offline/" in off["result_url"]
    assert off["replicas"] * entry["tensor_parallel_size"] == entry["gpus"]
    per_sample = off["tokens_per_s"] / off["samples_per_s"]
    assert per_sample == pytest.approx(entry["tokens_per_s"] / entry["samples_per_s"], rel=0.02)
    assert off["max_num_seqs"] >= 1


@pytest.mark.parametrize("entry", SOURCES, ids=[e["plan"] for e in SOURCES])
def test_the_engine_preset_variant_keeps_the_published_settings(entry):
    """``published_checks.py --engine-presets``: the deployment's preset fills the scheduler fields the
    base scenario assumed, while the published settings (batch limit, TP, precision) stay."""
    import sys

    sys.path.insert(0, str(FOLDER.parents[1] / "benchmarks"))
    from published_checks import with_engine_preset

    from simulator.scenario.engines import preset_scheduler

    path = FOLDER / entry["plan"]
    raw = with_engine_preset(yaml.safe_load(path.read_text()), path, entry["engine"])
    loaded = load_plan(raw, base_dir=path.parent)
    sc = loaded.candidate_scenarios[loaded.config.candidates[0].name]
    assert sc.engine is not None and sc.engine.preset == entry["engine"]
    assert sc.scheduler.max_num_seqs == entry["max_num_seqs"]
    assert sc.deployment.tensor_parallel_size == entry["tensor_parallel_size"]
    assert sc.scheduler.block_size == preset_scheduler(entry["engine"], None, None)["block_size"]
