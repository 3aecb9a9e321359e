"""Build the model vLLM serves in the real-engine check: llmplan's ``tiny-llama`` preset as a Hugging Face
Llama with random weights, and a byte-level BPE tokenizer trained here (no model hub is reachable).

    VENV/bin/python benchmarks/vllm/build_model.py OUT_DIR [--model FILE]   (run with the vLLM venv's Python)

The shapes are the preset's (4 layers, hidden 256, 8 query / 4 KV heads, intermediate 688, vocab 4,096,
fp32, context 2,048), so the simulator and the engine run the same model. ``--model FILE`` builds another
dense Llama instead, from an llmplan model file (the YAML a scenario's ``model:`` takes inline; read here with
PyYAML alone, as llmplan is not installed in the vLLM venv): ``num_layers``, ``hidden_size``,
``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``, ``vocab_size``, ``max_model_len``,
and ``name``/``dtype: fp32`` (anything else is refused, naming the key). Seeded: the same folder every time.
The tokenizer only has to turn the client's token ids back into text and count them; its vocabulary is the
model's (at most 4,096 entries are trained on the seeded corpus; a larger model vocabulary keeps its extra
ids untrained, so send token ids below 4,096).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SHAPES = {   # llmplan's tiny-llama (simulator/scenario/models.py); checked against it by tests/test_vllm_build_model.py
    "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
    "intermediate_size": 688, "vocab_size": 4096, "max_position_embeddings": 2048}
MODEL_FILE_KEYS = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size",
                   "num_attention_heads": "num_attention_heads", "num_key_value_heads": "num_key_value_heads",
                   "intermediate_size": "intermediate_size", "vocab_size": "vocab_size",
                   "max_model_len": "max_position_embeddings"}
TOKENIZER_VOCAB = 4096


def shapes_from(path: Path) -> dict[str, int]:
    """A dense Llama's shapes from an llmplan model file; a key this script cannot build is refused by name."""
    import yaml

    try:
        spec = yaml.safe_load(path.read_text())
    except OSError as err:
        sys.exit(f"--model {path}: cannot read it ({err.strerror or err})")
    except yaml.YAMLError as err:
        sys.exit(f"--model {path}: not valid YAML ({str(err).splitlines()[0]})")
    if not isinstance(spec, dict):
        sys.exit(f"--model {path}: expected a mapping of model fields, got {type(spec).__name__}")
    out = {}
    for key, value in spec.items():
        if key == "name":
            continue
        if key == "dtype":
            if value != "fp32":
                sys.exit(f"--model {path}: dtype = {value!r}: this script builds fp32 models only")
            continue
        if key not in MODEL_FILE_KEYS:
            sys.exit(f"--model {path}: {key} = {value!r}: not a dense-Llama field this script builds "
                     f"(allowed: name, dtype, {', '.join(MODEL_FILE_KEYS)})")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            sys.exit(f"--model {path}: {key} = {value!r}: must be a positive integer")
        out[MODEL_FILE_KEYS[key]] = value
    missing = [k for k, hf in MODEL_FILE_KEYS.items() if hf not in out]
    if missing:
        sys.exit(f"--model {path}: missing {', '.join(missing)}")
    if out["num_attention_heads"] % out["num_key_value_heads"] or out["hidden_size"] % out["num_attention_heads"]:
        sys.exit(f"--model {path}: num_attention_heads = {out['num_attention_heads']} must divide hidden_size = "
                 f"{out['hidden_size']} and be a multiple of num_key_value_heads = {out['num_key_value_heads']}")
    return out


def corpus(n_lines: int = 20000) -> list[str]:
    """Seeded pseudo-English text: enough distinct words for a 4,096-entry byte-level BPE."""
    import random

    rng = random.Random(0)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    weights = [12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0, 2.0, 1.9,
               1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1]
    words = ["".join(rng.choices(letters, weights, k=rng.randint(1, 9))) for _ in range(6000)]
    return [" ".join(rng.choices(words, k=rng.randint(5, 30))) for _ in range(n_lines)]


def main(out: Path, shapes: dict[str, int]) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(shapes["vocab_size"], TOKENIZER_VOCAB), special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.model_max_length = shapes["max_position_embeddings"]
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(**shapes, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, torch_dtype="float32")
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    (out / "llmplan-build.json").write_text(json.dumps({"shapes": shapes, "tokenizer_vocab": tok.get_vocab_size(),
                                                       "parameters": sum(p.numel() for p in model.parameters()),
                                                       "torch": torch.__version__}, indent=1) + "\n")
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()):,} parameters, vocab {tok.get_vocab_size()}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[1] == "--model":
        main(Path(args[0]), shapes_from(Path(args[2])))
    elif len(args) == 1:
        main(Path(args[0]), SHAPES)
    else:
        sys.exit("usage: build_model.py OUT_DIR [--model FILE]")
