# Why this file exists: the PyTorch twin of bench/target_features_bench.cpp -- transformers'
# Qwen3Model at the Qwen3-8B shape with random bf16 weights on the GPU, sdpa attention,
# output_hidden_states (every layer's output; the features a DFlash trainer takes), under
# inference_mode, on the same shapes and token counts; one table in the same format
# (median tokens/s over --steps; torch.cuda.max_memory_allocated, weights included).
#   python3 bench/target_features_torch.py --shapes 2048x4,4096x2 --steps 5
import argparse
import statistics
import time

import torch


def parse_shapes(text):
    out = []
    for item in text.split(","):
        seq, batch = item.split("x")
        out.append((int(seq), int(batch)))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=36)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--mlp", type=int, default=12288)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--shapes", default="2048x1,2048x4,2048x8,4096x1,4096x2,4096x4,4096x8")
    p.add_argument("--capture", default="1,9,17,25,33")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    a = p.parse_args()

    import transformers
    from transformers import Qwen3Config, Qwen3Model

    config = Qwen3Config(
        vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
        intermediate_size=a.mlp, rms_norm_eps=1e-6, max_position_embeddings=40960,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        tie_word_embeddings=False, use_cache=False, attn_implementation="sdpa")
    torch.manual_seed(1)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Qwen3Model(config)
    torch.set_default_dtype(torch.float32)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval().requires_grad_(False)
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated() / 2**30
    print(f"transformers {transformers.__version__} Qwen3Model, torch {torch.__version__}: "
          f"{a.layers} layers, hidden {a.hidden}, {a.heads}/{a.kv_heads} heads x {a.head_dim}, "
          f"MLP {a.mlp}, V {a.vocab} (embedding only), bf16, sdpa "
          f"({model.config._attn_implementation}), output_hidden_states (layers {a.capture} "
          f"+ final norm taken); weights {weights:.2f} GiB")
    capture = [int(x) for x in a.capture.split(",")]
    print(f"{'side':<10} {'seq':>6} {'batch':>6} {'tokens':>8} {'ms':>10} {'tokens/s':>12} "
          f"{'peak GiB':>9}")
    gen = torch.Generator().manual_seed(2)
    for seq, batch in parse_shapes(a.shapes):
        ids = torch.randint(0, a.vocab, (batch, seq), generator=gen)
        torch.cuda.reset_peak_memory_stats()
        times = []
        for step in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = model(input_ids=ids.to("cuda"), output_hidden_states=True, use_cache=False)
                # hidden_states[l + 1] is the output of decoder layer l; the last entry is the
                # final norm's output.
                feats = [out.hidden_states[l + 1] for l in capture] + [out.hidden_states[-1]]
            torch.cuda.synchronize()
            del out, feats
            if step >= a.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
        ms = statistics.median_high(times)
        print(f"{'torch':<10} {seq:>6} {batch:>6} {seq * batch:>8} {ms:>10.1f} "
              f"{seq * batch / (ms / 1e3):>12.0f} {torch.cuda.max_memory_allocated() / 2**30:>9.2f}",
              flush=True)


if __name__ == "__main__":
    main()
