"""``llmplan import vllm``: Hugging Face config.json files of each family (tests/data/hf_configs, see
tests/data/README.md) and ``vllm serve`` command lines read into scenarios that load and simulate."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from simulator import load_scenario, simulate
from simulator.cli import app
from simulator.errors import ScenarioError
from simulator.importers.hf_config import read_hf_config
from simulator.importers.vllm_serve import FLAGS, import_vllm, match_preset, parse_flags
from simulator.scenario.models import MODEL_PRESETS

CONFIGS = Path(__file__).resolve().parent / "data" / "hf_configs"

#: Files transcribing a preset's own repository: the import must give the preset's dimensions exactly.
SAME_AS_PRESET = {"llama-3.1-8b-instruct": "llama-3.1-8b", "mixtral-8x7b-instruct-v0.1": "mixtral-8x7b",
                  "qwen3-30b-a3b": "qwen3-30b-a3b", "deepseek-v3": "deepseek-v3", "gpt-oss-120b": "gpt-oss-120b"}
#: The others: total and active parameters as published (billions), to 1%.
PUBLISHED = {"qwen2.5-7b-instruct": (7.61, 7.61), "qwen3-8b": (8.19, 8.19), "mistral-7b-instruct-v0.3": (7.25, 7.25),
             "qwen1.5-moe-a2.7b": (14.3, 2.7)}
#: vllm serve flags that make each model fit and run (the checkpoint's quantization is read from its config).
SERVE_FLAGS = {"deepseek-v3": ["-tp", "8", "--enable-expert-parallel"], "gpt-oss-120b": ["-tp", "2"],
               "mixtral-8x7b-instruct-v0.1": ["-tp", "2"], "qwen3-30b-a3b": ["-tp", "2"]}
HARDWARE = {"deepseek-v3": "h200-datasheet"}


def test_every_family_has_a_config_file() -> None:
    assert {p.stem for p in CONFIGS.glob("*.json")} == set(SAME_AS_PRESET) | set(PUBLISHED)


@pytest.mark.parametrize("stem", sorted(SAME_AS_PRESET))
def test_a_config_of_a_preset_reads_to_the_preset(stem: str) -> None:
    got = read_hf_config(CONFIGS / f"{stem}.json")
    preset = MODEL_PRESETS[SAME_AS_PRESET[stem]]
    assert got.spec.model_dump(exclude={"name"}) == preset.model_dump(exclude={"name"})


@pytest.mark.parametrize("stem", sorted(PUBLISHED))
def test_a_config_reads_to_the_published_size(stem: str) -> None:
    spec = read_hf_config(CONFIGS / f"{stem}.json").spec
    total, active = PUBLISHED[stem]
    assert spec.num_params / 1e9 == pytest.approx(total, rel=0.01)
    assert spec.num_active_params / 1e9 == pytest.approx(active, rel=0.01)


def test_family_specific_fields() -> None:
    qwen2 = read_hf_config(CONFIGS / "qwen2.5-7b-instruct.json")
    assert qwen2.spec.attention_bias and qwen2.spec.sliding_window == 0   # use_sliding_window: false
    moe = read_hf_config(CONFIGS / "qwen1.5-moe-a2.7b.json")
    assert (moe.spec.num_experts, moe.spec.num_experts_per_tok, moe.spec.num_shared_experts) == (60, 4, 4)
    assert read_hf_config(CONFIGS / "deepseek-v3.json").quantization == "fp8"
    assert read_hf_config(CONFIGS / "gpt-oss-120b.json").quantization == "mxfp4"
    assert read_hf_config(CONFIGS / "mistral-7b-instruct-v0.3.json").spec.sliding_window == 0   # v0.3: none


@pytest.mark.parametrize("stem", sorted(SAME_AS_PRESET | PUBLISHED))
def test_import_with_model_config_writes_a_scenario_that_simulates(stem: str, tmp_path: Path) -> None:
    out = tmp_path / "s.yaml"
    got = import_vllm(["my-org/served-model", "--max-num-seqs", "64", *SERVE_FLAGS.get(stem, [])],
                      model_config=CONFIGS / f"{stem}.json", hardware=HARDWARE.get(stem), out=out)
    out.write_text(got.text)
    sc = load_scenario(out, {"num_requests": 30})
    assert sc.scheduler.max_num_seqs == 64 and not isinstance(sc.model, str)
    spec = read_hf_config(CONFIGS / f"{stem}.json").spec
    assert sc.model.model_dump(exclude={"name"}) == spec.model_dump(exclude={"name"})
    assert simulate(sc).summary["requests"]["completed"] == 30


def test_flags_map_onto_the_scenario(tmp_path: Path) -> None:
    got = import_vllm(["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs=96",
                       "--max-num-batched-tokens", "4096", "--max-model-len", "16k", "--enable-prefix-caching",
                       "--block-size", "32", "--gpu-memory-utilization", "0.85", "--tensor-parallel-size", "2",
                       "--kv-cache-dtype", "fp8_e4m3", "--quantization", "fp8", "--enforce-eager",
                       "--scheduling-policy", "priority"], out=tmp_path / "s.yaml")
    sc = got.scenario
    assert sc["model"] == "llama-3.1-8b" and sc["engine"] == {"preset": "vllm-v1", "cuda_graph": False}
    assert sc["scheduler"] == {"max_num_seqs": 96, "max_num_batched_tokens": 4096, "max_model_len": 16000,
                               "enable_prefix_caching": True, "block_size": 32, "gpu_memory_utilization": 0.85,
                               "scheduling_policy": "priority"}
    assert sc["deployment"] == {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8_e4m3", "quantization": "fp8"}
    assert got.unknown == [] and got.ignored == []


def test_chunked_prefill_switches() -> None:
    on = import_vllm(["llama-3-8b", "--enable-chunked-prefill"]).scenario["scheduler"]
    assert on == {"policy": "chunked_prefill"}
    off = import_vllm(["llama-3.1-8b", "--no-enable-chunked-prefill"]).scenario["scheduler"]
    assert off == {"policy": "continuous", "max_num_batched_tokens": 131072}   # vLLM: max(max_model_len, 2048)
    assert import_vllm(["llama-3-8b", "--enable-chunked-prefill=false"]).scenario["scheduler"]["policy"] == \
        "continuous"


def test_unknown_and_ignored_flags_are_listed_in_the_file(tmp_path: Path) -> None:
    got = import_vllm(["llama-3-8b", "--port", "8000", "--host", "0.0.0.0", "--frobnicate", "7",
                       "--new-switch"], out=tmp_path / "s.yaml")
    assert got.ignored == ["--host", "--port"]
    assert got.unknown == ["--frobnicate", "--new-switch"]
    lines = got.text.splitlines()
    assert "# ignored (no effect on serving performance): --host --port" in lines
    assert any(line.startswith("# NOT MAPPED") and "--frobnicate --new-switch" in line for line in lines)
    assert yaml.safe_load(got.text)["model"] == "llama-3-8b"   # comments only; still a scenario


@pytest.mark.parametrize(("args", "message"), [
    (["--max-num-seqs", "many"], "--max-num-seqs = 'many': not valid: expected an integer"),
    (["--max-num-seqs", "0"], "--max-num-seqs = 0: "),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization = 1.5"),
    (["--kv-cache-dtype", "int2"], "--kv-cache-dtype = 'int2': allowed: auto"),
    (["--quantization", "squeezellm"], "--quantization = 'squeezellm': not a method this import maps"),
    (["-tp", "3"], "--tensor-parallel-size = 3: must divide num_attention_heads=32"),
    (["--speculative-config", "{oops"], "--speculative-config = '{oops': not valid"),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'], "--acceptance-rate = None"),
    (["--speculative-config", '{"method": "eagle", "num_speculative_tokens": 3}'], "EAGLE heads are not"),
    (["--max-num-seqs"], "--max-num-seqs = None: needs a value"),
    (["--no-enforce-eager=maybe"], "--no-enforce-eager = 'maybe': a switch takes true or false"),   # internal before
])
def test_bad_flag_values_are_one_line_errors(args: list[str], message: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        import_vllm(["meta-llama/Llama-3.1-8B", *args])
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_speculative_config() -> None:
    ngram = import_vllm(["llama-3.1-8b", "--speculative-config",
                         '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'],
                        acceptance_rate=0.6).scenario["speculative_config"]
    assert ngram == {"method": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 0.6}
    draft = import_vllm(["meta-llama/Llama-3.1-70B-Instruct", "-tp", "4", "--speculative-config",
                         '{"model": "meta-llama/Llama-3.1-8B-Instruct", "num_speculative_tokens": 5}'],
                        acceptance_rate=0.7).scenario["speculative_config"]
    assert draft["method"] == "draft" and draft["draft_model"] == "llama-3.1-8b"


def test_model_resolution(tmp_path: Path) -> None:
    assert match_preset("Qwen/Qwen2.5-7B-Instruct") == "qwen2.5-7b" and match_preset("mixtral-8x7b") == "mixtral-8x7b"
    assert match_preset("mistralai/Mistral-7B-Instruct-v0.3") is None    # no window, another vocab: not the preset
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    shutil.copy(CONFIGS / "qwen3-8b.json", folder / "config.json")
    got = import_vllm([str(folder)])
    assert got.scenario["model"]["name"] == "Qwen3-8B" and got.scenario["model"]["head_dim"] == 128
    with pytest.raises(ScenarioError, match="model = 'someone/unknown-model': not a preset and not a folder"):
        import_vllm(["someone/unknown-model"])
    for blank in ("", "  "):     # read as the working folder before ("model = '/cwd': no such file")
        with pytest.raises(ScenarioError, match=r"model = '.*': give the model as vllm serve's first argument"):
            import_vllm([blank])
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "falcon"}')
    with pytest.raises(ScenarioError, match="model_type = 'falcon': not a family this import reads"):
        import_vllm(["x"], model_config=bad)


def test_parse_flags_keeps_every_token() -> None:
    model, flags, stray = parse_flags(["m", "--a", "1", "--b", "--c=2", "extra", "-tp", "2"])
    assert (model, flags, stray) == ("m", {"a": "1", "b": True, "c": "2", "tensor-parallel-size": "2"}, ["extra"])
    assert all(f.field for f in FLAGS.values())


def test_cli_writes_the_file_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "imported.yaml"
    runner = CliRunner()
    args = ["import", "vllm", "--out", str(out), "--", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "128",
            "--unknown-flag", "1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "--unknown-flag" in res.output and load_scenario(out).scheduler.max_num_seqs == 128
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "already exists; pass --force" in again.output
    bad = runner.invoke(app, ["import", "vllm", "--out", str(tmp_path / "b.yaml"), "--", "llama-3-8b",
                              "--block-size", "x"])
    assert bad.exit_code == 2 and "error: --block-size = 'x'" in bad.output


def test_import_with_a_request_log_replays_it(tmp_path: Path) -> None:
    log = Path(__file__).resolve().parent / "data" / "requests_log.jsonl"
    out = tmp_path / "s.yaml"
    got = import_vllm(["llama-3.1-8b", "--enable-prefix-caching"], trace=log, trace_format="requests", out=out)
    out.write_text(got.text)
    assert "num_requests" not in got.scenario
    assert simulate(load_scenario(out)).summary["requests"]["completed"] == 30


def test_nvfp4_checkpoints_and_flags_read_as_nvfp4(tmp_path: Path) -> None:
    cfg = json.loads((CONFIGS / "qwen2.5-7b-instruct.json").read_text())
    for qc in ({"quant_method": "modelopt", "quant_algo": "NVFP4"},
               {"quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"format": "nvfp4-pack-quantized", "targets": ["Linear"]}}}):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**cfg, "quantization_config": qc}))
        assert read_hf_config(path).quantization == "nvfp4"
    path.write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}))
    assert read_hf_config(path).quantization == "fp8"
    got = import_vllm(["my-org/m", "--quantization", "modelopt_fp4"], model_config=CONFIGS / "qwen2.5-7b-instruct.json",
                      hardware="b200")
    assert yaml.safe_load(got.text)["deployment"]["quantization"] == "nvfp4"


def test_data_and_expert_parallel_flags_map_as_vllm_applies_them(tmp_path: Path) -> None:
    """EP = TP x DP with --enable-expert-parallel (DEP), EP 1 without it; a dense model's DP ranks are
    replicas."""
    dep = import_vllm(["Qwen/Qwen3-30B-A3B", "-tp", "2", "--data-parallel-size", "2", "--enable-expert-parallel"],
                      hardware="h200", out=tmp_path / "a.yaml")
    assert dep.scenario["hardware"] == "h200"
    assert dep.scenario["deployment"] == {"tensor_parallel_size": 2, "data_parallel_size": 2, "expert_parallel_size": 4}
    ep = import_vllm(["Qwen/Qwen3-30B-A3B", "-tp", "4", "--enable-expert-parallel"], out=tmp_path / "b.yaml")
    assert ep.scenario["deployment"] == {"tensor_parallel_size": 4, "expert_parallel_size": 4}
    assert ep.scenario["hardware"] == "h100-sxm"          # the measured tables time expert parallelism
    dense = import_vllm(["meta-llama/Llama-3.1-8B", "-dp", "4"], out=tmp_path / "c.yaml")
    assert dense.scenario["deployment"] == {"replicas": 4}
    widths = import_vllm(["Qwen/Qwen3-30B-A3B", "-dp", "2"], hardware="h200", out=tmp_path / "d.yaml")
    assert widths.scenario["deployment"] == {"data_parallel_size": 2}      # experts' widths split TP x DP ways
    (tmp_path / "a.yaml").write_text(dep.text)
    result = simulate(load_scenario(tmp_path / "a.yaml", {"num_requests": 40, "warmup_s": 0}))
    assert result.summary["num_gpus"] == 4 and result.summary["deployment"]["data_parallel_size"] == 2


@pytest.mark.parametrize(("args", "message"), [
    (["Qwen/Qwen3-30B-A3B", "-dp", "0", "--enable-expert-parallel"], "--data-parallel-size = 0: not valid"),
    (["meta-llama/Llama-3.1-8B", "-tp", "2", "--enable-expert-parallel"],
     "--enable-expert-parallel = 2: llama-3.1-8b is a dense model"),
    (["mistralai/Mixtral-8x7B-v0.1", "-tp", "2", "-dp", "8", "--enable-expert-parallel"],
     "--enable-expert-parallel = 16: must divide num_experts=8"),
])
def test_bad_parallel_flags_name_the_flag_and_what_is_allowed(args: list[str], message: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        import_vllm(args, hardware="h200")
    assert message in str(exc.value) and "\n" not in str(exc.value)
