# Why this file exists: `chunkgrad regenerate`'s throughput on the GPU needs a Qwen3
# checkpoint and chat-length prompts, and a number to hold it against. This script makes
# a random-weight Qwen3 folder (transformers, bf16) at a chosen shape, pre-tokenized JSONL
# prompts of mixed lengths, and times transformers' own batched greedy generate() on the
# same prompts (left padding, KV cache) as the twin. bench/run_regenerate_bench.sh runs it.
#   python3 bench/regenerate_torch.py --out DIR [--shape 0.6b|8b] [--samples 128]
#       [--max-new-tokens 128] [--batch-size 64] [--skip-torch]
import argparse
import json
import os
import random
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

SHAPES = {
    # Qwen3-0.6B and Qwen3-8B (config.json of the published checkpoints).
    "0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=3072),
    "8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, intermediate_size=12288),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, intermediate_size=128),
}

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--shape", default="0.6b", choices=sorted(SHAPES))
ap.add_argument("--samples", type=int, default=128)
ap.add_argument("--max-new-tokens", type=int, default=128)
ap.add_argument("--batch-size", type=int, default=64)
ap.add_argument("--skip-torch", action="store_true")
a = ap.parse_args()

os.makedirs(a.out, exist_ok=True)
model_dir = os.path.join(a.out, "target")
torch.manual_seed(0)
config = Qwen3Config(vocab_size=151936, max_position_embeddings=40960, rope_theta=1e6,
                     tie_word_embeddings=False, eos_token_id=[151645, 151643],
                     **SHAPES[a.shape])
with torch.device("cuda"):
    model = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()
if not os.path.exists(os.path.join(model_dir, "config.json")):
    model.save_pretrained(model_dir, safe_serialization=True)

# Prompts of 32 .. 1024 tokens, ids below 151643 (no special tokens), a 4-token "response".
rng = random.Random(0)
prompts = []
with open(os.path.join(a.out, "data.jsonl"), "w") as f:
    for i in range(a.samples):
        n = rng.randint(32, 1024)
        ids = [rng.randrange(151643) for _ in range(n)]
        prompts.append(ids)
        f.write(json.dumps({"input_ids": ids + [1, 2, 3, 4], "loss_mask": [0] * n + [1] * 4,
                            "dataset": "synthetic"}) + "\n")

if a.skip_torch:
    raise SystemExit(0)
# The twin: transformers' greedy generate, batches of --batch-size in input order, left
# padding; every row runs max_new_tokens (random weights rarely emit EOS; it is disabled).
new_tokens, start = 0, None
torch.cuda.synchronize()
start = time.time()
with torch.no_grad():
    for b in range(0, len(prompts), a.batch_size):
        batch = prompts[b:b + a.batch_size]
        width = max(len(p) for p in batch)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in batch], device="cuda")
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch],
                            device="cuda")
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=a.max_new_tokens, min_new_tokens=a.max_new_tokens,
                             eos_token_id=None, pad_token_id=0)
        new_tokens += (out.shape[1] - width) * len(batch)
torch.cuda.synchronize()
seconds = time.time() - start
print(f"transformers generate: {new_tokens} new tokens in {seconds:.2f} s: "
      f"{new_tokens / seconds:.1f} new tokens/s (batch {a.batch_size}, bf16, shape {a.shape})")
