# Why this file exists: the transformers twin of bench/qwen3_5_prefill_bench.cpp --
# Qwen3_5ForCausalLM at the Qwen3.5-27B shape (the same fields and defaults; the bench's
# header says where each comes from), random init made straight on the GPU in bf16, sdpa
# attention, under inference_mode, output_hidden_states (the layers a drafter reads + the
# final norm taken), logits of the last position only, on the same shapes. No optional
# kernels: without flash-linear-attention and causal-conv1d transformers runs its PyTorch
# Gated DeltaNet (torch_chunk_gated_delta_rule, a Python loop over 64-token chunks) and
# F.conv1d; the script prints which. One table in the bench's format (median tokens/s over
# --steps; torch.cuda.max_memory_allocated, weights included).
#   python3 bench/qwen3_5_prefill_torch.py --shapes 4096x1 --steps 3
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
    p.add_argument("--layers", type=int, default=64)
    p.add_argument("--full-attention-interval", type=int, default=4)
    p.add_argument("--hidden", type=int, default=5120)
    p.add_argument("--heads", type=int, default=24)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=256)
    p.add_argument("--mlp", type=int, default=17408)
    p.add_argument("--vocab", type=int, default=248320)
    p.add_argument("--linear-key-heads", type=int, default=16)
    p.add_argument("--linear-value-heads", type=int, default=48)
    p.add_argument("--linear-key-dim", type=int, default=128)
    p.add_argument("--linear-value-dim", type=int, default=128)
    p.add_argument("--conv", type=int, default=4)
    p.add_argument("--partial-rotary", type=float, default=0.25)
    p.add_argument("--theta", type=float, default=1e7)
    p.add_argument("--shapes", default="4096x1,4096x2,4096x4")
    p.add_argument("--capture", default="1,16,31,46,61")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--gemm-repeats", type=int, default=10)  # the C++ side's; unused here
    a = p.parse_args()

    import transformers
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    from transformers.utils import is_flash_linear_attention_available

    layer_types = ["full_attention" if (i + 1) % a.full_attention_interval == 0
                   else "linear_attention" for i in range(a.layers)]
    config = Qwen3_5TextConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
        layer_types=layer_types, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim, intermediate_size=a.mlp, linear_num_key_heads=a.linear_key_heads,
        linear_num_value_heads=a.linear_value_heads, linear_key_head_dim=a.linear_key_dim,
        linear_value_head_dim=a.linear_value_dim, linear_conv_kernel_dim=a.conv,
        rms_norm_eps=1e-6, max_position_embeddings=262144, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": a.theta,
                         "partial_rotary_factor": a.partial_rotary},
        use_cache=False, attn_implementation="sdpa")
    torch.manual_seed(1)
    torch.set_default_dtype(torch.bfloat16)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = Qwen3_5ForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval().requires_grad_(False)
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated() / 2**30
    fla = is_flash_linear_attention_available()
    chunk = getattr(m, "torch_chunk_gated_delta_rule", None)
    print(f"transformers {transformers.__version__} Qwen3_5ForCausalLM, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0)}: {a.layers} layers ({layer_types.count('linear_attention')} "
          f"linear + {layer_types.count('full_attention')} full), hidden {a.hidden}, "
          f"{a.heads}/{a.kv_heads} heads x {a.head_dim}, MLP {a.mlp}, V {a.vocab}, DeltaNet "
          f"{a.linear_key_heads} k / {a.linear_value_heads} v heads x {a.linear_key_dim}/"
          f"{a.linear_value_dim}, conv {a.conv}, partial rotary {a.partial_rotary}, theta "
          f"{a.theta:g}; bf16, sdpa ({model.config._attn_implementation}); "
          f"flash-linear-attention: {fla} (DeltaNet: {getattr(chunk, '__module__', '?')}."
          f"{getattr(chunk, '__name__', '?')}); weights {weights:.2f} GiB, made in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
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
                out = model(input_ids=ids.to("cuda"), output_hidden_states=True, use_cache=False,
                            logits_to_keep=1)
                # hidden_states[l + 1] is decoder layer l's output; the last is the final norm's.
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
