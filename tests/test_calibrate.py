"""``llmplan calibrate`` on the CPU (``--quick``, tiny-llama): a measured profile end to end, loaded
and simulated; interrupted and resumed runs; memory refusal; bad settings; the missing-torch
message. GPU runs are marked ``gpu`` and skip without CUDA."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from simulator import ScenarioError, simulate
from simulator.cost.op_table import file_sha256
from simulator.scenario.profiles import load_profile
from tests.conftest import make_scenario

torch = pytest.importorskip("torch")

from calibrate import kernels  # noqa: E402
from calibrate.grid import GridLimits, build_grid  # noqa: E402
from calibrate.runner import run_calibration  # noqa: E402
from simulator.scenario.models import MODEL_PRESETS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(model="tiny-llama", device="cpu", quick=True, threads=1, max_tokens=16, max_seqs=4, max_context=128,
             noise={"max_drift": 1e6, "max_spread": 1e6, "max_load_per_cpu": None})
"""A tiny grid; its tests are about the run's structure (resume, passes, merging), so the noise
monitor never re-times or refuses here (tests/test_calibration_noise.py tests it)."""


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "LLMPLAN_DEBUG"}
    clean.update(env)
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", *args], cwd=REPO, env=clean,
                          capture_output=True, text=True, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def quick_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``llmplan calibrate --device cpu --model tiny-llama --quick`` as a user on a busy machine runs it:
    with the noise bounds loosened (the guard refused to start at load average 9 on 2 cores; it is tested
    on a simulated load in tests/test_calibration_noise.py). The thread clock keeps the timings true."""
    out = tmp_path_factory.mktemp("cal") / "cpu-quick"
    proc = run_cli("calibrate", "--device", "cpu", "--model", "tiny-llama", "--quick", "--threads", "1",
                   "--max-drift", "1000", "--max-spread", "1000", "--max-load", "1000", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "held-out error" in proc.stdout and "wrote" in proc.stdout
    assert f"llmplan simulate examples/cpu-tiny-llama.yaml --set hardware={out}" in proc.stdout
    return out


def test_quick_calibration_writes_a_complete_measured_profile(quick_profile: Path) -> None:
    assert sorted(p.name for p in quick_profile.iterdir()) == ["ops.csv", "profile.yaml"]
    prof = yaml.safe_load((quick_profile / "profile.yaml").read_text())
    assert prof["source"] == "measured" and prof["cost_model"] == "table"
    assert prof["table_sha256"] == file_sha256(quick_profile / "ops.csv")
    prov = prof["provenance"]
    for key in ("date", "device", "device_memory_bytes", "torch_version", "cpu_model", "torch_threads", "dtype",
                "git_revision", "noise", "timing", "fit_leave_one_out", "command"):
        assert key in prov, key
    assert prov["torch_threads"] == 1 and prov["dtype"] == "fp32" and prov["quick"] is True
    assert "thread_time" in prov["timing"]["clock"]
    assert {"median_rel_spread_p90_p10", "reference_drift", "load_average_before"} <= set(prov["noise"])
    table = pd.read_csv(quick_profile / "ops.csv")
    expected = build_grid(MODEL_PRESETS["tiny-llama"], 1, "fp32", GridLimits(quick=True, max_tokens=256, max_seqs=64,
                                                                               max_context=1024))
    assert len(table) == len(expected)
    assert set(table["op"]) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head", "attn_prefill",
                                "attn_decode", "rmsnorm", "rotary", "silu_mul", "residual_add", "kv_write", "sampling"}
    assert (table["median_s"] > 0).all()
    assert (table["p10_s"] <= table["median_s"]).all() and (table["median_s"] <= table["p90_s"]).all()
    assert (table["repeats"] >= 5).all()
    # Bigger GEMMs take longer (noise cannot reverse a 256x larger problem).
    g = table[table["op"] == "gate_up_proj"].set_index("tokens")["median_s"]
    assert g[256] > 5 * g[1]


def test_measured_profile_loads_simulates_and_reports(quick_profile: Path) -> None:
    sc = make_scenario(hardware=str(quick_profile), num_requests=80)
    r = simulate(sc)
    assert r.system.profile.source == "measured" and r.summary["requests"]["completed"] == 80
    assert r.summary["ttft_s"]["p50"] > 0
    proc = run_cli("profiles", "show", str(quick_profile), COLUMNS="200")
    assert proc.returncode == 0, proc.stderr
    for word in ("measured", "qkv_proj", "attn_decode", "median |err|", "of peak", "target"):
        assert word in proc.stdout, word
    listing = run_cli("profiles", LLMPLAN_PROFILES=str(quick_profile.parent), COLUMNS="250")
    row = next(line for line in listing.stdout.splitlines() if "cpu-quick" in line)
    assert "measured" in row and "median <=" in row and "worst:" in row


def test_the_documented_scenario_runs_on_a_quick_calibration(quick_profile: Path) -> None:
    """docs/quickstart.md and docs/calibration.md: calibrate --quick, then simulate the CPU example on it."""
    for page in ("docs/quickstart.md", "docs/calibration.md"):
        assert "simulate examples/cpu-tiny-llama.yaml --set hardware=/tmp/cpu" in (REPO / page).read_text()
    proc = run_cli("simulate", "examples/cpu-tiny-llama.yaml", "--set", f"hardware={quick_profile}",
                   "--set", "num_requests=300", "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["requests"]["completed"] == 300 and summary["ttft_s"]["p50"] > 0


def test_interrupted_run_keeps_partial_results_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen: list[int] = []

    def stop_after_five(done: int, total: int, label: str) -> None:
        seen.append(done)
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_calibration(out, on_progress=stop_after_five, **SMALL)
    assert (out / "ops.partial.csv").is_file() and not (out / "profile.yaml").exists()
    assert len(pd.read_csv(out / "ops.partial.csv")) == 5
    with pytest.raises(ScenarioError, match="interrupted calibration"):
        load_profile(str(out))
    with pytest.raises(ScenarioError, match=r"other settings.*max_tokens"):
        run_calibration(out, **{**SMALL, "max_tokens": 32})
    starts: list[tuple[int, int]] = []
    resumed: list[int] = []
    path = run_calibration(out, on_start=lambda d, t: starts.append((d, t)),
                           on_progress=lambda d, t, label: resumed.append(d), **SMALL)
    total = starts[0][1]
    assert starts == [(5, total)] and resumed == list(range(6, total + 1))
    assert len(pd.read_csv(out / "ops.csv")) == total
    assert not (out / "ops.partial.csv").exists()
    assert load_profile(str(path)).source == "measured"


def test_passes_alternate_order_resume_and_merge_into_one_row_per_benchmark(tmp_path: Path) -> None:
    """Two passes over the grid: forward then backward; an interrupted second pass resumes; the
    table has one row per benchmark whose median is the median of its passes and whose repeats
    count every call of both."""
    from dataclasses import replace

    from calibrate.timing import QUICK_TIMING

    out, labels = tmp_path / "run", []
    two = replace(QUICK_TIMING, passes=2)
    n = len(build_grid(MODEL_PRESETS["tiny-llama"], 1, "fp32",
                       GridLimits(quick=True, max_tokens=16, max_seqs=4, max_context=128)))

    def stop(done: int, total: int, label: str) -> None:
        labels.append(label)
        if done == n + 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_calibration(out, on_progress=stop, timing=two, **SMALL)
    partial = pd.read_csv(out / "ops.partial.csv")
    assert len(partial) == n + 2 and sorted(partial["pass"].unique()) == [0, 1]
    assert labels[0].endswith("(pass 1/2)") and labels[n].endswith("(pass 2/2)")
    assert labels[n].split(" (pass")[0] == labels[n - 1].split(" (pass")[0]      # backward: last one first
    run_calibration(out, timing=two, **SMALL)
    table = pd.read_csv(out / "ops.csv")
    assert len(table) == n and (table["repeats"] >= 2 * two.min_repeats).all()
    both = partial.groupby("key")["median_s"].agg(["size", "median"])
    both = both[both["size"] == 2]                    # timed in both passes before the interruption
    assert len(both) == 2
    keyed = table.assign(key=[s.key for s in build_grid(MODEL_PRESETS["tiny-llama"], 1, "fp32", GridLimits(
        quick=True, max_tokens=16, max_seqs=4, max_context=128))]).set_index("key")
    for key, row in both.iterrows():
        assert keyed.loc[key, "median_s"] == pytest.approx(row["median"], rel=1e-5)


def test_a_row_cut_off_mid_write_is_dropped_on_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"

    def stop(done: int, total: int, label: str) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_calibration(out, on_progress=stop, **SMALL)
    partial = out / "ops.partial.csv"
    partial.write_text(partial.read_text() + "qkv_proj,gemm,fp32,8,")        # a crash mid-row
    path = run_calibration(out, **SMALL)
    table = pd.read_csv(path.parent / "ops.csv")
    assert table["median_s"].notna().all() and len(table) == len(set(zip(table["op"], table["tokens"],
                                                                          table["context"], table["batch"],
                                                                          strict=True)))


def test_grid_too_big_for_memory_is_refused_before_allocating(tmp_path: Path) -> None:
    out = tmp_path / "never"
    proc = run_cli("calibrate", "--device", "cpu", "--model", "llama-3-8b", "--quick", "--memory-limit-gib", "0.01",
                   "--out", str(out))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "needs" in proc.stderr and "GiB" in proc.stderr and "--memory-limit-gib 0.01" in proc.stderr
    assert not out.exists()


def test_bad_settings_are_clear_errors(tmp_path: Path) -> None:
    proc = run_cli("calibrate", "--device", "tpu", "--quick", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "--device = 'tpu': unknown device; allowed: auto, cpu, cuda" in proc.stderr
    cases = [(dict(model="gpt-9"), "unknown model preset"),
             (dict(dtype="int4"), "calibration supports fp32, bf16, fp16, fp8"),
             (dict(tp=3), "must divide"),
             (dict(clock="thread", threads=2), "needs --threads 1"),
             (dict(clock="tsc"), "allowed: auto, wall, thread")]
    if not torch.cuda.is_available():
        cases.append((dict(device="cuda"), "no CUDA device"))
    try:
        for kw, msg in cases:
            with pytest.raises(ScenarioError, match=msg):
                run_calibration(tmp_path / "x", **{**SMALL, **kw})
    finally:
        torch.set_num_threads(1)
    assert not (tmp_path / "x").exists()


NO_TORCH = ("import sys, importlib.abc\n"
            "class NoTorch(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
            "sys.meta_path.insert(0, NoTorch())\n")


def test_missing_torch_names_the_extra_to_install(tmp_path: Path) -> None:
    code = (NO_TORCH +
            f"sys.argv = ['llmplan', 'calibrate', '--quick', '--out', {str(tmp_path / 'x')!r}]; "
            "from simulator.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "pip install -e .[calibrate]" in proc.stderr and "Traceback" not in proc.stderr
    # ... while simulating needs no torch at all.
    code = (NO_TORCH + "from simulator import simulate; "
            "from tests.conftest import make_scenario; "
            f"print(simulate(make_scenario(hardware={'cpu-amd-epyc-tiny-llama'!r})).summary['requests']['completed'])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "200"


def test_all_reduce_over_gloo_between_two_cpu_processes() -> None:
    from calibrate.comm import time_all_reduce
    from calibrate.timing import QUICK_TIMING

    times = time_all_reduce([4096, 1 << 20], 2, torch.device("cpu"), "fp32", QUICK_TIMING)
    # Sizes are not compared: on two shared cores, two gloo processes wait on the scheduler more
    # than on the bytes (the README says so); a GPU box gives NCCL numbers worth comparing.
    assert len(times) == 2 and all(len(t) == QUICK_TIMING.min_repeats and (t > 0).all() for t in times)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="times CUDA kernels (bf16); no CUDA device here. "
                    "CI is CPU-only: run `pytest -m gpu` on a GPU machine")
def test_quick_gpu_calibration(tmp_path: Path) -> None:
    path = run_calibration(tmp_path / "gpu", "llama-3-8b", device="cuda", quick=True)
    prof = load_profile(str(path))
    assert prof.source == "measured" and "cuda_version" in prof.provenance
    assert family_ok(pd.read_csv(path.parent / "ops.csv"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="times float8 GEMMs on CUDA; no CUDA device here. "
                    "CI is CPU-only: run `pytest -m gpu` on a GPU machine")
def test_quick_gpu_fp8_gemm_calibration(tmp_path: Path) -> None:
    from calibrate.timing import fp8_supported

    if not fp8_supported(torch.device("cuda")):
        pytest.skip("this GPU has no float8 GEMMs (needs Hopper, Ada or newer)")
    path = run_calibration(tmp_path / "fp8", "llama-3-8b", device="cuda", dtype="fp8", quick=True)
    table = pd.read_csv(path.parent / "ops.csv")
    assert set(table["family"]) == {"gemm"} and set(table["dtype"]) == {"fp8"}
    assert "fp8" in load_profile(str(path)).peak_flops


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="times CUDA kernels; no CUDA device here. "
                    "CI is CPU-only: run `pytest -m gpu` on a GPU machine")
def test_gpu_timer_excludes_launch_gaps_and_sees_big_gemms() -> None:
    """A one-token residual add is a ~2-4 us kernel; launched from Python, one call costs the host
    more than that, so a timer that saw launch gaps would report the host's pace. A 4096^3 bf16
    GEMM must come out as a plausible fraction of a datacenter GPU's dense peak."""
    import time

    from calibrate.grid import BenchSpec
    from calibrate.timing import GPU_TIMING, time_kernel

    dev = torch.device("cuda")
    spec = BenchSpec("residual_add", {"tokens": 1, "width": 4096})
    calls = kernels.build(spec, 64, dev, "bf16")
    t_gpu = float(np.median(time_kernel(calls, dev, GPU_TIMING)))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(2000):
        calls[i % 64]()
    host = (time.perf_counter() - t0) / 2000
    torch.cuda.synchronize()
    print(f"residual_add 1x4096: {t_gpu * 1e6:.2f} us GPU, host launch {host * 1e6:.2f} us/call")
    assert 0 < t_gpu < 20e-6
    gemm = kernels.build(BenchSpec("qkv_proj", {"tokens": 4096, "n": 4096, "k": 4096}), 2, dev, "bf16")
    t = float(np.median(time_kernel(gemm, dev, GPU_TIMING)))
    print(f"bf16 GEMM 4096^3: {2 * 4096**3 / t / 1e12:.0f} TFLOP/s")
    assert 1e13 < 2 * 4096**3 / t < 2.5e15


def family_ok(table: pd.DataFrame) -> bool:
    return {"gemm", "attn_prefill", "attn_decode", "elementwise", "sampling"} <= set(table["family"])


def test_calibration_and_the_reference_engine_refuse_models_beyond_the_dense_shape(tmp_path: Path) -> None:
    """Experts, latent attention and sliding windows are timed by the roofline only: calibrating
    or building the reference engine for such a model is an error naming what it has."""
    from calibrate.engine import LlamaModel

    with pytest.raises(ScenarioError) as info:
        run_calibration(tmp_path / "x", "mixtral-8x7b")
    assert info.value.field == "--model" and "experts" in info.value.message
    with pytest.raises(ScenarioError, match="latent attention"):
        LlamaModel(MODEL_PRESETS["deepseek-v3"])


def test_kv_write_memory_estimate_counts_the_caches_the_kernel_allocates() -> None:
    """The reported failure: ``kv_write``'s estimate counted its token rows (~9 KB) while each input
    set allocates two 4,096-slot caches, so the rotation took 4,096 copies (32 GiB for a 44 M model,
    killed at 19.3 GB) and the memory guard, reading the same estimate, let it through. The estimate
    now counts every tensor the builder keeps, and the guard and the rotation read that one rule."""
    from calibrate.grid import grid_memory_bytes, rotation_copies
    from simulator.scenario.models import ModelSpec

    model = ModelSpec(name="vllm-cpu-44m", num_layers=4, hidden_size=512, num_attention_heads=8,
                      num_key_value_heads=4, intermediate_size=1376, vocab_size=32000, dtype="fp32")
    specs = build_grid(model, 1, "fp32", GridLimits(max_tokens=4096, max_seqs=256, max_context=4096))
    kv = [s for s in specs if s.op == "kv_write"]
    for s in (kv[0], kv[-1]):
        (run,) = kernels.build(s, 1, torch.device("cpu"), "fp32")
        held = {id(t.untyped_storage()): t.untyped_storage().nbytes() for cell in run.__closure__
                if isinstance(t := cell.cell_contents, torch.Tensor)}
        assert sum(held.values()) <= s.bytes_per_copy <= 1.05 * sum(held.values()), s.label
    cache = 32 * 2**20
    worst = max(s.bytes_per_copy * rotation_copies(s, cache, 4096) for s in kv)
    assert worst < 0.2 * 2**30             # was 4,096 copies x 8 MiB = 32 GiB
    need, _ = grid_memory_bytes(specs, cache)
    assert need >= worst


def test_calibrate_model_accepts_a_model_file_as_scenarios_do(tmp_path: Path) -> None:
    """``--model`` takes a preset or a YAML file with an inline spec (or a scenario file's model:)."""
    from simulator.run.resolve import model_option

    spec = MODEL_PRESETS["tiny-llama"].model_dump(mode="json") | {"name": "my-tiny", "num_layers": 3}
    f = tmp_path / "model.yaml"
    f.write_text(yaml.safe_dump(spec))
    assert model_option(str(f)).num_layers == 3 and model_option(str(f)).name == "my-tiny"
    sc = tmp_path / "scenario.yaml"
    sc.write_text(yaml.safe_dump({"model": spec, "hardware": "h100-sxm"}))
    assert model_option(str(sc)).num_layers == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec | {"num_layers": 0}))
    with pytest.raises(ScenarioError, match="num_layers") as info:
        model_option(str(bad))
    assert "--model" in info.value.field
    with pytest.raises(ScenarioError, match="unknown model preset and no such model file"):
        model_option(str(tmp_path / "missing.yaml"))
    out = tmp_path / "prof"
    proc = run_cli("calibrate", "--model", str(bad), "--quick", "--device", "cpu", "--out", str(out))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "num_layers" in proc.stderr
    # The file's model is what the grid is built from.
    from calibrate.runner import _model
    assert _model(str(f)).num_layers == 3
