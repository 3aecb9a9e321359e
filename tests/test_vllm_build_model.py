"""benchmarks/vllm/build_model.py: the shapes of the model vLLM serves in the real-engine check, from the
preset or from an llmplan model file (the script runs in the vLLM venv; only its shape reading is tested)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import script_module

from simulator.scenario.models import MODEL_PRESETS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vllm" / "build_model.py"


def _module() -> Any:
    return script_module("benchmarks/vllm/build_model.py")


def _file(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_built_model_is_the_simulated_one(tmp_path: Path) -> None:
    m = _module()
    preset = MODEL_PRESETS["tiny-llama"].model_dump()
    as_file = {k: preset[k] for k in ("name", "dtype", *m.MODEL_FILE_KEYS)}
    assert m.shapes_from(_file(tmp_path, as_file)) == m.SHAPES      # the preset's shapes, both ways
    other = {**as_file, "name": "small-llama", "num_layers": 6, "hidden_size": 512, "intermediate_size": 1376}
    got = m.shapes_from(_file(tmp_path, other))
    assert got["num_hidden_layers"] == 6 and got["hidden_size"] == 512 and got["intermediate_size"] == 1376


@pytest.mark.parametrize(("change", "message"), [
    ({"num_experts": 8}, "num_experts = 8: not a dense-Llama field this script builds"),
    ({"dtype": "bf16"}, "dtype = 'bf16': this script builds fp32 models only"),
    ({"hidden_size": 0}, "hidden_size = 0: must be a positive integer"),
    ({"num_key_value_heads": 3}, "num_attention_heads = 8 must divide hidden_size = 256 and be a multiple of "
                                 "num_key_value_heads = 3"),
    ({"vocab_size": None}, "vocab_size = None: must be a positive integer"),
])
def test_a_model_file_it_cannot_build_is_refused_by_field(tmp_path: Path, change: dict[str, Any],
                                                          message: str) -> None:
    m = _module()
    preset = MODEL_PRESETS["tiny-llama"].model_dump()
    spec = {**{k: preset[k] for k in ("name", "dtype", *m.MODEL_FILE_KEYS)}, **change}
    with pytest.raises(SystemExit, match=message.replace("(", r"\(")):
        m.shapes_from(_file(tmp_path, spec))


def test_a_model_file_without_a_shape_names_it(tmp_path: Path) -> None:
    m = _module()
    preset = MODEL_PRESETS["tiny-llama"].model_dump()
    spec = {k: preset[k] for k in m.MODEL_FILE_KEYS if k != "max_model_len"}
    with pytest.raises(SystemExit, match="missing max_model_len"):
        m.shapes_from(_file(tmp_path, spec))


def test_a_model_file_that_cannot_be_read_is_refused_in_one_line(tmp_path: Path) -> None:
    m = _module()
    with pytest.raises(SystemExit, match=r"--model .*missing.yaml: cannot read it \(No such file or directory\)"):
        m.shapes_from(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_layers: [1,\n")
    with pytest.raises(SystemExit, match=r"--model .*bad.yaml: not valid YAML"):
        m.shapes_from(bad)
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    with pytest.raises(SystemExit, match="expected a mapping of model fields, got list"):
        m.shapes_from(listed)
