"""Pipeline parallelism with several batches in flight (simulator.engine.pipeline), checked against
theory: a pipeline of equal stages completes one batch per stage time, a lone request still waits for
the whole traversal per token, Little's law; the per-stage split of the cost models; refusals."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_scenario

from simulator import ScenarioError, load_profile, resolve, simulate
from simulator.cost.base import BatchShape
from simulator.cost.factory import make_cost_model
from simulator.run.topology import cost_model
from simulator.scenario.models import MODEL_PRESETS
from simulator.scenario.parallel import Parallelism, stage_layers

STEP_S = 0.01


def _pp(pp: int, **overrides):
    return make_scenario(**{"deployment.pipeline_parallel_size": pp, **overrides})


def _saturated(pp: int, **overrides):
    """Every request at t=0; each batch's admissions limited by the token budget, not the seats."""
    return _pp(pp, **{"num_requests": 3000, "workload.arrival": {"process": "poisson", "rate_per_s": 1e7},
                      "scheduler.max_num_seqs": 256, "scheduler.max_num_batched_tokens": 256,
                      "scheduler.max_model_len": 256, "workload.output_tokens": {"dist": "fixed", "value": 40},
                      **overrides})


@pytest.mark.parametrize("pp", [1, 2, 4])
def test_saturated_pipeline_completes_one_batch_per_stage_time(pp):
    """PP equal stages of STEP_S / PP each (constant cost model, no sends): with a batch always waiting
    for stage 1, batches leave at 1 / stage time = PP / STEP_S per second, PP times one batch in flight."""
    r = simulate(_saturated(pp))
    steps = r.steps
    busy = steps["start_time"].max() - steps["start_time"].min()
    assert (len(steps) - 1) / busy == pytest.approx(pp / STEP_S, rel=0.01)
    assert steps["duration_s"].min() == pytest.approx(STEP_S)     # every batch traverses every stage


@pytest.mark.parametrize("pp", [2, 4])
def test_prefill_bound_throughput_scales_with_stages(pp):
    """One whole prompt fits a batch and each request emits one token: a request per batch, so the
    request throughput is PP / STEP_S with PP batches in flight, against 1 / STEP_S with one stage."""
    over = {"workload.prompt_tokens": {"dist": "fixed", "value": 200},
            "workload.output_tokens": {"dist": "fixed", "value": 1}, "num_requests": 2000}
    one, many = simulate(_saturated(1, **over)), simulate(_saturated(pp, **over))
    assert 2000 / one.sim_time_s == pytest.approx(1 / STEP_S, rel=0.01)
    assert 2000 / many.sim_time_s == pytest.approx(pp / STEP_S, rel=0.01)


def test_lone_request_waits_for_the_whole_traversal():
    """One request alone: every token takes the sum of the stages (constant: STEP_S whatever PP)."""
    sc = _pp(4, num_requests=1, **{"workload.output_tokens": {"dist": "fixed", "value": 30}})
    r = simulate(sc)
    assert r.summary["tpot_s"]["p50"] == pytest.approx(STEP_S)
    assert r.summary["ttft_s"]["p50"] == pytest.approx(STEP_S)


def test_lone_request_roofline_tpot_is_the_sum_of_stages_and_sends():
    """Llama-3-70B on TP4 x PP2 (datasheet roofline): a lone request's TPOT is the mean over its decode
    steps of the stages' times (layers' share + the stage send + overhead + LM head), which add up
    to the one-step time of the whole traversal."""
    prompt, out = 500, 21
    sc = make_scenario(**{"model": "llama-3-70b", "hardware": "h100-sxm-datasheet", "num_requests": 1,
                          "deployment.tensor_parallel_size": 4, "deployment.pipeline_parallel_size": 2,
                          "workload.prompt_tokens": {"dist": "fixed", "value": prompt},
                          "workload.output_tokens": {"dist": "fixed", "value": out},
                          "scheduler.max_num_batched_tokens": 8192, "scheduler.max_model_len": 4096})
    cost = cost_model(sc, resolve(sc))
    steps = [cost.stage_times_s(BatchShape.decode(1, prompt + i)) for i in range(1, out)]
    assert all(len(s) == 2 for s in steps)
    expected = sum(sum(s) for s in steps) / (out - 1)
    assert expected == pytest.approx(cost.step_time_s(BatchShape.decode(1, prompt + 10)), rel=1e-3)
    assert simulate(sc).summary["tpot_s"]["p50"] == pytest.approx(expected, rel=1e-9)


def test_littles_law_and_conservation_with_batches_in_flight():
    """An open Poisson load on PP = 2: every request completes, and the time-average number in system
    (arrivals minus completions, sampled on a fine grid) equals throughput x mean sojourn time."""
    sc = _pp(2, num_requests=4000, warmup_s=0, **{"workload.arrival": {"process": "poisson", "rate_per_s": 60},
                                                  "workload.output_tokens": {"dist": "geometric", "mean": 20},
                                                  "scheduler.max_num_seqs": 16})
    r = simulate(sc)
    req = r.requests
    assert r.summary["requests"]["completed"] == len(req) == 4000
    arrive, finish = np.sort(req["arrival_time"].to_numpy()), np.sort(req["finish_time"].to_numpy())
    assert (req["finish_time"] >= req["first_token_time"]).all()
    assert (req["first_token_time"] > req["arrival_time"]).all()
    grid = np.linspace(0.0, finish[-1], 200_001)
    in_system = np.searchsorted(arrive, grid, side="right") - np.searchsorted(finish, grid, side="right")
    lam = len(req) / finish[-1]
    assert float(in_system.mean()) == pytest.approx(lam * float(req["e2e_s"].mean()), rel=0.01)


def test_micro_batches_share_max_num_seqs():
    """vLLM's limit is the engine's: the batches in flight together never hold more than max_num_seqs
    (with fixed outputs and a burst, the first batch takes every seat and the second none)."""
    sc = _pp(2, num_requests=40, **{"workload.arrival": {"process": "poisson", "rate_per_s": 1e7},
                                    "scheduler.max_num_seqs": 8})
    r = simulate(sc)
    steps = r.steps
    assert steps["num_seqs"].max() <= 8
    ends = (steps["start_time"] + steps["duration_s"]).to_numpy()
    starts = steps["start_time"].to_numpy()
    seqs = steps["num_seqs"].to_numpy()
    for t in starts:                    # requests in the batches in flight at each planning instant
        assert seqs[(starts <= t) & (ends > t)].sum() <= 8


# -- the cost models' split -------------------------------------------------------------------------
def test_stage_layers_follow_vllm():
    """vLLM's get_pp_indices: the remainder goes to the stages before the last, from the last but one."""
    assert stage_layers(80, 2) == [40, 40]
    assert stage_layers(80, 3) == [27, 27, 26]
    assert stage_layers(5, 4) == [1, 1, 2, 1]
    assert stage_layers(7, 4) == [2, 2, 2, 1]


@pytest.mark.parametrize("hardware", ["h100-sxm-datasheet", "h100-sxm"])
def test_stage_times_add_up_to_the_step(hardware):
    """Roofline and kernel table: the stages add up to the step (a traversal); equal layer counts
    differ only by the first stage's send and overhead and the last's LM head; one stage is the step."""
    profile, model = load_profile(hardware), MODEL_PRESETS["llama-3-70b"]
    staged = make_cost_model(profile, model, 4, parallel=Parallelism(4, 2))
    single = make_cost_model(profile, model, 4, parallel=Parallelism(4, 1))
    for shape in (BatchShape.decode(1, 1000), BatchShape.decode(64, 64_000), BatchShape([2000], [0], 10, 5000, 11)):
        stages = staged.stage_times_s(shape)
        assert len(stages) == 2 and min(stages) > 0
        assert sum(stages) == pytest.approx(staged.step_time_s(shape), rel=1e-12)
        # the split adds only the stage send to the whole model on one TP group
        assert 0 < staged.step_time_s(shape) - single.step_time_s(shape) < 0.05 * single.step_time_s(shape)
        assert single.stage_times_s(shape) == [single.step_time_s(shape)]


def test_constant_cost_model_splits_steps_evenly():
    profile = load_profile({"cost_model": "constant", "step_time_s": 0.02, "prefill_time_per_token_s": 1e-4})
    cost = make_cost_model(profile, MODEL_PRESETS["tiny-llama"], 1, parallel=Parallelism(1, 4))
    assert cost.stage_times_s(BatchShape.prefill(100)) == pytest.approx([0.0075] * 4)


def test_kernel_table_llama_70b_tp4_pp2_runs_on_h100():
    sc = make_scenario(**{"model": "llama-3-70b", "hardware": "h100-sxm", "num_requests": 50,
                          "deployment.tensor_parallel_size": 4, "deployment.pipeline_parallel_size": 2,
                          "scheduler.max_num_batched_tokens": 8192, "scheduler.max_model_len": 4096})
    r = simulate(sc)
    assert r.summary["requests"]["completed"] == 50
    assert r.summary["deployment"]["num_gpus"] == 8


# -- refusals ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "match"), [
    ({"scheduler.policy": "dynamic"}, r"deployment\.pipeline_parallel_size = 2: not modelled with scheduler\.policy "
                                      r"'dynamic'.*pipeline parallelism: continuous, chunked_prefill"),
    ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 0.5}},
     r"deployment\.pipeline_parallel_size = 2: is not modelled together with speculative_config"),
    ({"client.timeout_s": 5.0}, r"deployment\.pipeline_parallel_size = 2: is not modelled together with "
                                r"client\.timeout_s"),
    ({"scheduler.preemption_mode": "swap"}, r"deployment\.pipeline_parallel_size = 2: .*preemption_mode: swap"),
])
def test_unsupported_combinations_name_the_field_value_and_what_is_allowed(overrides, match):
    with pytest.raises(ScenarioError, match=match):
        resolve(_pp(2, **overrides))


def test_table_cost_model_still_refuses_pipelines():
    with pytest.raises(ScenarioError, match=r"pipeline_parallel_size = 2: not modelled with cost model 'table'.*"
                                            r"cost models with pipeline parallelism: constant, roofline, kernel_table"):
        resolve(make_scenario(**{"model": "llama-3-8b", "hardware": "h100-sxm-vidur",
                                 "deployment.tensor_parallel_size": 1, "deployment.pipeline_parallel_size": 2}))


def test_planner_capacity_estimate_follows_the_pipeline():
    """The planner's analytic estimate for TP4 x PP2 (micro-batches in flight) is within 15% of the
    simulated saturation throughput, as the one-stage estimate is of its own."""
    from simulator.planner.capacity import capacity_bound, saturation_rps
    for pp in (1, 2):
        sc = make_scenario(**{"model": "llama-3-70b", "hardware": "h100-sxm-datasheet",
                              "deployment.tensor_parallel_size": 4, "deployment.pipeline_parallel_size": pp,
                              "scheduler.max_num_seqs": 256, "scheduler.max_num_batched_tokens": 8192,
                              "scheduler.max_model_len": 8192,
                              "workload.prompt_tokens": {"dist": "fixed", "value": 1000},
                              "workload.output_tokens": {"dist": "fixed", "value": 200}})
        assert capacity_bound(sc).max_rps_per_replica == pytest.approx(saturation_rps(sc, 2000), rel=0.15)


@pytest.mark.parametrize("overrides", [
    {"deployment.replicas": 3, "deployment.router": "least_outstanding_tokens"},
    {"deployment.replicas": 2, "deployment.router": "round_robin"},
    {"scheduler.policy": "chunked_prefill", "scheduler.enable_prefix_caching": True,
     "scheduler.max_num_batched_tokens": 64, "workload.prefix": {"prefix_tokens": 24, "num_prefixes": 2}},
    {"workload.arrival": {"process": "closed_loop", "concurrency": 12}, "deployment.replicas": 2},
    {"scheduler.num_gpu_blocks_override": 8, "scheduler.max_model_len": 128},
])
def test_pipelines_with_routers_closed_loops_prefix_caching_and_preemption_finish_every_request(overrides):
    """Conservation across the features a pipelined replica combines with: every request finishes,
    each one's tokens come after its arrival, and the step log never holds more than max_num_seqs."""
    sc = _pp(2, num_requests=400, **{"workload.arrival": {"process": "poisson", "rate_per_s": 40.0}, **overrides})
    r = simulate(sc)
    req = r.requests
    assert r.summary["requests"]["completed"] == len(req) == 400
    assert (req["first_token_time"] > req["arrival_time"]).all()
    assert (req["finish_time"] >= req["first_token_time"]).all()
    assert r.steps["num_seqs"].max() <= 8
    if "scheduler.num_gpu_blocks_override" in overrides:    # the slots preempt within one shared KV cache
        assert req["num_preemptions"].sum() > 0


def test_a_vllm_serve_command_with_pipeline_stages_imports_onto_the_measured_tables():
    """`vllm serve ... -tp 4 -pp 2` on the default measured profile, and the scenario resolves."""
    from simulator import scenario_from_dict
    from simulator.importers.vllm_serve import import_vllm
    got = import_vllm(["vllm", "serve", "meta-llama/Meta-Llama-3-70B-Instruct", "-tp", "4", "-pp", "2"])
    assert got.scenario["hardware"] == "h100-sxm"
    assert got.scenario["deployment"]["pipeline_parallel_size"] == 2
    system = resolve(scenario_from_dict(got.scenario))
    assert system.profile.cost_model == "kernel_table"
