#!/usr/bin/env python3
# Why this file exists: the issue-20 recipe runs end to end at the Qwen3-8B shape on the
# H200, where there is no network and no real checkpoint: this writes a Hugging Face Qwen3
# folder with random bf16 weights (config.json, generation_config.json, sharded
# model-*.safetensors + index) and a pre-tokenized JSONL of "conversations" (random ids as
# the prompt, loss_mask 0; a short random response, loss_mask 1) for it.
#
#   python3 bench/make_random_qwen3.py OUT_DIR [--shape 8b|tiny] [--samples N] [--seed S]
#
# Weights are drawn on the GPU when there is one (N(0, 0.02), norms 1), written shard by
# shard, so host memory stays near one shard.
import argparse, json, os, random

import torch
from safetensors.torch import save_file

SHAPES = {
    "8b": dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128),
    "tiny": dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="8b", choices=sorted(SHAPES))
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--response-len", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    s = SHAPES[a.shape]
    os.makedirs(a.out, exist_ok=True)
    config = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
        "attention_dropout": 0.0, "hidden_act": "silu", "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False,
        "bos_token_id": 151643 % s["vocab_size"], "eos_token_id": 151645 % s["vocab_size"], **s,
    }
    json.dump(config, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    json.dump({"eos_token_id": [config["eos_token_id"]], "do_sample": False},
              open(os.path.join(a.out, "generation_config.json"), "w"), indent=2)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(a.seed)
    H, I, V, L = s["hidden_size"], s["intermediate_size"], s["vocab_size"], s["num_hidden_layers"]
    q, kv = s["num_attention_heads"] * s["head_dim"], s["num_key_value_heads"] * s["head_dim"]

    def rnd(*shape):
        return (torch.randn(*shape, generator=g, device=dev) * 0.02).to(torch.bfloat16).cpu()

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    shards, weight_map = [], {}
    shards.append({"model.embed_tokens.weight": rnd(V, H)})
    for i in range(L):
        p = f"model.layers.{i}."
        shards.append({
            p + "input_layernorm.weight": ones(H), p + "post_attention_layernorm.weight": ones(H),
            p + "self_attn.q_proj.weight": rnd(q, H), p + "self_attn.k_proj.weight": rnd(kv, H),
            p + "self_attn.v_proj.weight": rnd(kv, H), p + "self_attn.o_proj.weight": rnd(H, q),
            p + "self_attn.q_norm.weight": ones(s["head_dim"]),
            p + "self_attn.k_norm.weight": ones(s["head_dim"]),
            p + "mlp.gate_proj.weight": rnd(I, H), p + "mlp.up_proj.weight": rnd(I, H),
            p + "mlp.down_proj.weight": rnd(H, I),
        })
    shards.append({"model.norm.weight": ones(H), "lm_head.weight": rnd(V, H)})
    total = 0
    for n, tensors in enumerate(shards):
        name = f"model-{n + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, os.path.join(a.out, name), metadata={"format": "pt"})
        for k, t in tensors.items():
            weight_map[k] = name
            total += t.numel() * 2
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)
    rng = random.Random(a.seed)
    top = min(V, 151643)  # ordinary tokens only
    with open(os.path.join(a.out, "samples.jsonl"), "w") as f:
        for _ in range(a.samples):
            ids = [rng.randrange(top) for _ in range(a.prompt_len + a.response_len)]
            mask = [0] * a.prompt_len + [1] * a.response_len
            f.write(json.dumps({"input_ids": ids, "loss_mask": mask, "dataset": "random"}) + "\n")
    print(f"{a.out}: {a.shape} Qwen3, {total / 2**30:.2f} GiB bf16 in {len(shards)} shards, "
          f"{a.samples} samples of {a.prompt_len}+{a.response_len} tokens")


if __name__ == "__main__":
    main()
