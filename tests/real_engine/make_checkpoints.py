"""Writes the tiny random-weight checkpoints the real-engine tests launch vLLM on.

Run with the engine's own Python (it has torch, transformers and tokenizers):
    $VENV/bin/python tests/real_engine/make_checkpoints.py DIR

No hub access: the tokenizer is a byte-level BPE trained here on a few sentences, the weights are
random (seeded). Each checkpoint is written once; a finished one carries a stamp and is reused.

- `tiny-llama`: starts fast (2 layers, hidden 128; KV 2 × 2 layers × 2 KV heads × 64 × 2 B = 1 KiB a
  token in bfloat16). head_dim 64: vLLM's CPU attention has no kernel for head_dim 16
  ("Unsupported CPU attention configuration: head_dim=16").
- `wide-kv-llama`: 8 layers × 8 KV heads × head_dim 128: 2 × 8 × 8 × 128 × 2 B = 32 KiB a token in
  bfloat16, so a 1 GiB KV cache holds 32,768 tokens and refuses a longer --max-model-len.
- `tiny-draft-llama`: a speculative-decoding draft for `tiny-llama` (`--speculative-config` method
  `draft_model`): the same tokenizer and vocabulary, one layer of the same attention shape, so its
  KV is 512 B a token in bfloat16 and the pair's 1.5 KiB. Its MLP is wide (intermediate 65536:
  25.3 M parameters, 0.09 GiB in float32) so that the engine's `Checkpoint size: X GiB` line for
  the drafter reads more than 0.00 at two decimals: the plan's draft weights have a figure to meet.
All are saved in float32 (as many small research checkpoints are), so a launch's `dtype: bfloat16`
halves what config.json's dtype would say: the plan must follow the launch.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

CORPUS = [
    "The operator launches the server and watches every rank's memory.",
    "Out of memory during graph capture means too little was left after the KV cache.",
    "Hello world, this is a tiny model for testing the cockpit against a real engine.",
    "Tokens per second, time to first token, inter-token latency and end-to-end latency.",
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?-_()[]{}'\"/\\",
]

SPECS = {
    "tiny-llama": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=2, max_position_embeddings=4096),
    "wide-kv-llama": dict(hidden_size=1024, intermediate_size=256, num_hidden_layers=8, num_attention_heads=8,
                          num_key_value_heads=8, max_position_embeddings=131072),
    "tiny-draft-llama": dict(hidden_size=128, intermediate_size=65536, num_hidden_layers=1, num_attention_heads=2,
                             num_key_value_heads=2, max_position_embeddings=4096),
}
VOCAB = 512
STAMP = ".cockpit-checkpoint"


def _tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 3, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    # a chat template, so /v1/chat/completions works as it would on a real instruct model
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant: {% endif %}")
    fast.save_pretrained(out)


def write(root: Path, name: str) -> Path:
    out = root / name
    if (out / STAMP).exists():
        return out
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    _tokenizer(out)
    vocab = len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"])
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=max(vocab, VOCAB), bos_token_id=0, eos_token_id=1, pad_token_id=2,
                      tie_word_embeddings=False, torch_dtype="float32", **SPECS[name])
    model = LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    (out / STAMP).write_text("ok\n")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_checkpoints.py DIR", file=sys.stderr)
        return 2
    root = Path(argv[0])
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name in SPECS:
        print(write(root, name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
