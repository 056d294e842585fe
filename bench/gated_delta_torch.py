#!/usr/bin/env python3
# Why this file exists: PyTorch's side of bench/gated_delta_bench.cpp -- the same shapes and
# rows with transformers' own Gated DeltaNet code (transformers.models.qwen3_5.
# modeling_qwen3_5: torch_chunk_gated_delta_rule, torch_recurrent_gated_delta_rule,
# causal_conv1d_fn), which is what transformers runs on a machine without the optional
# flash-linear-attention / causal-conv1d kernels (the H200 here has neither). Shape: the
# published Qwen3.5-27B text_config fields linear_num_key_heads 16, linear_num_value_heads 48,
# linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4; T 4096,
# B 1 and 4; bf16 q, k, v on cuda, f32 g and beta; a zero initial state, final state out.
# q and k are repeated up to Hv heads before the timing (some transformers versions do it
# inside the function, some expect it done: done first, it is a no-op inside).
# The recurrent row over 4096 tokens is left out (a Python loop of 4096 steps); the decode
# table times it at T = 1 and 16. TFLOP/s use gated_delta_bench.cpp's FLOP counts (Note
# [The chunked FLOP count] there), so the rates compare like for like.
import argparse
import math
import statistics

import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as m


def time_ms(repeats, f):
    f()  # warm-up
    torch.cuda.synchronize()
    times = []
    for _ in range(max(1, repeats)):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def chunked_flops(B, T, Hv, dk, dv):
    C = 64.0
    tri = C * (C + 1) / 2
    chunks = math.ceil(T / C)
    macs = 2 * tri * dk + C**3 / 6 + tri * dv + tri * dk + 3 * C * dk * dv + tri * dv
    return 2 * macs * chunks * B * Hv


def recurrent_flops(B, T, Hv, dk, dv):
    return 7.0 * B * T * Hv * dk * dv


def row(name, ms, amount, unit="TFLOP/s"):
    print(f"{name:<34} {ms:10.3f} {amount / (ms * 1e-3) / 1e12:10.2f} {unit}", flush=True)


def timed_row(name, repeats, f, amount, unit="TFLOP/s"):
    try:
        row(name, time_ms(repeats, f), amount, unit)
    except Exception as e:  # one failing row (memory, a missing function) keeps the others
        print(f"{name:<34} failed: {type(e).__name__}: {e}", flush=True)


def make_inputs(a, B, T, dtype):
    g = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(B, T, a.hk, a.dk, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(B, T, a.hk, a.dk, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(B, T, a.hv, a.dv, device="cuda", dtype=dtype, generator=g)
    gate = -torch.rand(B, T, a.hv, device="cuda", dtype=torch.float32, generator=g)
    beta = torch.rand(B, T, a.hv, device="cuda", dtype=torch.float32, generator=g)
    state = torch.zeros(B, a.hv, a.dk, a.dv, device="cuda", dtype=torch.float32)
    return q, k, v, gate, beta, state


def run_rule(fn, q, k, v, gate, beta, state, hv, **kw):
    if q.shape[2] != hv:
        q = q.repeat_interleave(hv // q.shape[2], dim=2)
        k = k.repeat_interleave(hv // k.shape[2], dim=2)
    return lambda: fn(q, k, v, gate, beta, initial_state=state, output_final_state=True,
                      use_qk_l2norm_in_kernel=True, **kw)


def main():
    p = argparse.ArgumentParser(description="transformers' Gated DeltaNet torch fallbacks on cuda")
    p.add_argument("--batches", default="1,4")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hk", type=int, default=16)
    p.add_argument("--hv", type=int, default=48)
    p.add_argument("--dk", type=int, default=128)
    p.add_argument("--dv", type=int, default=128)
    p.add_argument("--kernel", type=int, default=4)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    p.add_argument("--repeats", type=int, default=10)
    a = p.parse_args()
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    import transformers

    chunk_fn, rec_fn = m.torch_chunk_gated_delta_rule, m.torch_recurrent_gated_delta_rule
    print(f"PyTorch {torch.__version__}, transformers {transformers.__version__} on "
          f"{torch.cuda.get_device_name(0)}: torch_chunk_gated_delta_rule, "
          f"torch_recurrent_gated_delta_rule, causal_conv1d_fn (the torch fallbacks)")
    reps = max(1, min(a.repeats, 5))  # the chunked fallback takes long; fewer runs
    for B in [int(b) for b in a.batches.split(",")]:
        T = a.tokens
        q, k, v, gate, beta, state = make_inputs(a, B, T, dtype)
        print(f"\nB={B} T={T} Hk={a.hk} Hv={a.hv} dk={a.dk} dv={a.dv} {a.dtype}, median of {reps}")
        print(f"{'row':<34} {'ms':>10} {'rate':>10}")
        f = run_rule(chunk_fn, q, k, v, gate, beta, state, a.hv, chunk_size=64)
        timed_row("gated_delta chunked", reps, f, chunked_flops(B, T, a.hv, a.dk, a.dv))
        print(f"{'gated_delta recurrent':<34} {'(left out: a 4096-step Python loop)':>10}")
        C = 2 * a.hk * a.dk + a.hv * a.dv
        x = torch.randn(B, C, T, device="cuda", dtype=dtype)  # the layer's [B, C, T] layout
        w = 0.5 * torch.randn(C, a.kernel, device="cuda", dtype=dtype)
        bytes_moved = 2.0 * x.numel() * x.element_size()
        timed_row(f"causal_conv1d C={C} K={a.kernel}", a.repeats,
                  lambda: m.causal_conv1d_fn(x, w, None, activation="silu"), bytes_moved, "TB/s")
        del q, k, v, gate, beta, state, x
        torch.cuda.empty_cache()
    print(f"\ndecode: B=1 Hk={a.hk} Hv={a.hv} dk={a.dk} dv={a.dv} {a.dtype}, median of {a.repeats}")
    print(f"{'row':<34} {'ms':>10} {'rate':>10}")
    for T in (1, 16):
        q, k, v, gate, beta, state = make_inputs(a, 1, T, dtype)
        f = run_rule(rec_fn, q, k, v, gate, beta, state, a.hv)
        timed_row(f"gated_delta recurrent T={T}", a.repeats, f,
                  recurrent_flops(1, T, a.hv, a.dk, a.dv))


if __name__ == "__main__":
    main()
