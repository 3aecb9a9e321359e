"""Shared fixtures: tiny scenarios and hand-built schedulers (CPU only, no torch)."""
from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from simulator import scenario_from_dict
from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.request import RequestTable
from simulator.engine.scheduler import Scheduler
from simulator.scenario.config import SchedulerConfig
from simulator.workload.traffic import Workload


@pytest.fixture(autouse=True, scope="session")
def _table_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Checked op tables cached in the session's temporary folder, not the user's (simulator.cost.op_rows);
    the processes tests start inherit it."""
    before = os.environ.get("LLMPLAN_CACHE_DIR")
    os.environ["LLMPLAN_CACHE_DIR"] = str(tmp_path_factory.mktemp("llmplan-cache"))
    yield
    if before is None:
        os.environ.pop("LLMPLAN_CACHE_DIR", None)
    else:
        os.environ["LLMPLAN_CACHE_DIR"] = before


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``pure_python`` patch the engine's Python functions and count the calls; the
    compiled engine calls its own functions directly, so they run only in the pure-Python engine
    (``tests/test_native.py`` runs them there when this process runs the compiled one)."""
    from simulator.native import engine_build

    build = engine_build()
    if build.startswith("pure Python"):
        return
    skip = pytest.mark.skip(reason=f"patches the engine's Python code; this process runs the {build} engine "
                                   "(test_native.py runs it in the pure-Python engine)")
    for item in items:
        if item.get_closest_marker("pure_python") is not None:
            item.add_marker(skip)


CONSTANT_HW = {"cost_model": "constant", "step_time_s": 0.01, "prefill_time_per_token_s": 0.0}


ROOT = Path(__file__).resolve().parents[1]


def script_module(path: str) -> ModuleType:
    """A script of the repository (``path`` from its root, e.g. ``benchmarks/validate_vllm.py``) imported
    as a module named after its file, registered in ``sys.modules`` (dataclasses look their module up
    there), without running its ``main``."""
    file = ROOT / path
    spec = importlib.util.spec_from_file_location(file.stem, file)
    assert spec is not None and spec.loader is not None, file
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def assert_same_run_to_1e9(a: Any, b: Any) -> None:
    """Two results are the same run up to float rounding: request instants within 1e-9 s, request
    fates and replicas equal, the same steps with the same batch, KV and queue columns."""
    cols = ["first_scheduled_time", "first_token_time", "finish_time"]
    np.testing.assert_allclose(a.requests[cols].to_numpy(), b.requests[cols].to_numpy(),
                               rtol=0, atol=1e-9, equal_nan=True)
    for col in ("status", "num_preemptions", "replica", "num_output_tokens"):
        assert (a.requests[col] == b.requests[col]).all(), col
    assert len(a.steps) == len(b.steps)
    for col in ("replica", "num_seqs", "kv_blocks_used", "num_prefill_tokens", "num_waiting", "num_preempted"):
        assert (a.steps[col].to_numpy() == b.steps[col].to_numpy()).all(), col


def make_scenario(**overrides: Any):
    """A small valid scenario (constant cost model, tiny-llama) with dotted-key overrides."""
    base = {
        "name": "test", "seed": 1, "num_requests": 200, "model": "tiny-llama", "hardware": dict(CONSTANT_HW),
        "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 2048, "block_size": 16},
        "workload": {"arrival": {"process": "poisson", "rate_per_s": 5.0},
                     "prompt_tokens": {"dist": "fixed", "value": 32},
                     "output_tokens": {"dist": "fixed", "value": 10}},
    }
    sc = scenario_from_dict(base)
    return sc.with_overrides(overrides) if overrides else sc


@pytest.fixture
def scenario():
    return make_scenario


def make_scheduler(prompts: list[int], outputs: list[int], *, num_gpu_blocks: int = 1000, block_size: int = 4,
                   max_num_seqs: int = 4, max_num_batched_tokens: int = 64, policy: str = "continuous",
                   **config: Any) -> Scheduler:
    """A scheduler (of ``policy``) over requests with the given prompt/output lengths, all arrived
    at t=0 and already in the waiting queue in id order; ``config``: more SchedulerConfig fields."""
    from simulator.engine.policies import POLICIES

    n = len(prompts)
    wl = Workload(np.zeros(n), np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64),
                  np.zeros(n, dtype=bool))
    table = RequestTable(wl)
    cfg = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                          block_size=block_size, policy=policy, **config)
    sched = POLICIES[policy](cfg, KVCacheManager(num_gpu_blocks, block_size), table)
    for rid in range(n):
        sched.add_request(rid)
    return sched


@pytest.fixture
def scheduler_factory():
    return make_scheduler
