"""Build the model vLLM serves in the real-engine check: llmplan's ``tiny-llama`` preset as a Hugging Face
Llama with random weights, and a byte-level BPE tokenizer trained here (no model hub is reachable).

    VENV/bin/python benchmarks/vllm/build_model.py OUT_DIR      (run with the vLLM venv's Python)

The shapes are read from the preset (4 layers, hidden 256, 8 query / 4 KV heads, intermediate 688, vocab
4,096, fp32, context 2,048), so the simulator and the engine run the same model. Seeded: the same folder
every time. The tokenizer only has to turn the client's token ids back into text and count them; its
vocabulary is the model's.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SHAPES = {   # llmplan's tiny-llama (simulator/scenario/models.py); checked against it by validate_vllm.py
    "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
    "intermediate_size": 688, "vocab_size": 4096, "max_position_embeddings": 2048}


def corpus(n_lines: int = 20000) -> list[str]:
    """Seeded pseudo-English text: enough distinct words for a 4,096-entry byte-level BPE."""
    import random

    rng = random.Random(0)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    weights = [12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0, 2.0, 1.9,
               1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1]
    words = ["".join(rng.choices(letters, weights, k=rng.randint(1, 9))) for _ in range(6000)]
    return [" ".join(rng.choices(words, k=rng.randint(5, 30))) for _ in range(n_lines)]


def main(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=SHAPES["vocab_size"], special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.model_max_length = SHAPES["max_position_embeddings"]
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(**SHAPES, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, torch_dtype="float32")
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    (out / "llmplan-build.json").write_text(json.dumps({"shapes": SHAPES, "tokenizer_vocab": tok.get_vocab_size(),
                                                       "parameters": sum(p.numel() for p in model.parameters()),
                                                       "torch": torch.__version__}, indent=1) + "\n")
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()):,} parameters, vocab {tok.get_vocab_size()}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: build_model.py OUT_DIR")
    main(Path(sys.argv[1]))
