#!/usr/bin/env python3
# Why this file exists: PyTorch's side of bench/attention_bench.cpp -- the same two shapes
# on the GPU, so the tables compare line by line:
#   causal   F.scaled_dot_product_attention(is_causal=True, enable_gqa=True), bf16,
#            head_dim 128, GQA 40/8, 4096 tokens (PyTorch picks its fastest backend)
#   dflash   torch.nn.attention.flex_attention (compiled) with a block mask of the DFlash
#            rule: 1024 blocks x 24 query slots over 4096 context keys (Sk = 4096 + 24576);
#            block b sees context keys j < anchor_b = 4 * (1 + (389 b mod 1024)) and its
#            own 24 keys, nothing else (the same anchors as attention_bench.cpp)
# Rows: fwd, bwd (from the same forward's graph) and fwd+bwd; medians over --repeats of
# CUDA-event timings after warm-up; TFLOP/s count the visible pairs only (4 hd flops per
# pair forward, 2.5x backward), as attention_bench.cpp does.
import argparse
import statistics

import torch
import torch.nn.functional as F


def time_ms(repeats, f, setup=None):
    for _ in range(2):  # warm-up (and compilation)
        args = setup() if setup else None
        f(args)
    torch.cuda.synchronize()
    times = []
    for _ in range(max(1, repeats)):
        args = setup() if setup else None
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f(args)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def row(name, ms, flops):
    print(f"{name:<26} {ms:10.3f} {flops / (ms * 1e-3) / 1e12:10.1f}")


def bench(name, attn, B, Hq, Hkv, Sq, Sk, hd, dtype, pairs, repeats, note):
    g = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(B, Hq, Sq, hd, device="cuda", dtype=dtype, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, Sk, hd, device="cuda", dtype=dtype, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, Sk, hd, device="cuda", dtype=dtype, generator=g).requires_grad_()
    do = torch.randn(B, Hq, Sq, hd, device="cuda", dtype=dtype, generator=g)
    fwd_flops = 4.0 * hd * pairs * B * Hq
    print(f"\n{name}: B={B} Hq={Hq} Hkv={Hkv} Sq={Sq} Sk={Sk} hd={hd} {dtype}, {note}, "
          f"{100.0 * pairs / (Sq * Sk):.1f}% of the [Sq, Sk] pairs visible, median of {repeats}")
    print(f"{'row':<26} {'ms':>10} {'TFLOP/s':>10}")

    def fwd(_):
        with torch.no_grad():
            attn(q, k, v)

    row(f"{name} fwd", time_ms(repeats, fwd), fwd_flops)

    def make_graph():
        for t in (q, k, v):
            t.grad = None
        return attn(q, k, v)

    def bwd(out):
        out.backward(do)

    row(f"{name} bwd", time_ms(repeats, bwd, setup=make_graph), 2.5 * fwd_flops)

    def both(_):
        for t in (q, k, v):
            t.grad = None
        attn(q, k, v).backward(do)

    row(f"{name} fwd+bwd", time_ms(repeats, both), 3.5 * fwd_flops)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--which", default="causal,dflash")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--hq", type=int, default=40)
    p.add_argument("--hkv", type=int, default=8)
    p.add_argument("--hd", type=int, default=128)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--blocks", type=int, default=1024)
    p.add_argument("--block-size", type=int, default=24)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--path", default="", help="ignored (attention_bench's path choice)")
    a = p.parse_args()
    dtype = torch.bfloat16
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}")

    if "causal" in a.which:
        S = a.tokens

        def sdpa(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        bench("causal", sdpa, a.batch, a.hq, a.hkv, S, S, a.hd, dtype, S * (S + 1) / 2,
              a.repeats, "F.scaled_dot_product_attention")

    if "dflash" in a.which:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        S, N, Bs = a.context, a.blocks, a.block_size
        anchors_list = [min(S, 4 * (1 + (389 * b) % 1024)) for b in range(N)]
        anchors = torch.tensor(anchors_list, device="cuda", dtype=torch.int64)
        pairs = sum(Bs * (x + Bs) for x in anchors_list)

        def dflash_rule(b, h, q_idx, kv_idx):
            block = q_idx // Bs
            in_context = kv_idx < S
            sees_context = in_context & (kv_idx < anchors[block])
            own_block = (~in_context) & ((kv_idx - S) // Bs == block)
            return sees_context | own_block

        Sq, Sk = N * Bs, S + N * Bs
        block_mask = create_block_mask(dflash_rule, B=None, H=None, Q_LEN=Sq, KV_LEN=Sk,
                                       device="cuda")
        compiled = torch.compile(flex_attention)

        def flex(q, k, v):
            return compiled(q, k, v, block_mask=block_mask, enable_gqa=True)

        bench("dflash", flex, a.batch, a.hq, a.hkv, Sq, Sk, a.hd, dtype, pairs, a.repeats,
              "flex_attention (compiled) with the DFlash block mask")
    print("\n(TFLOP/s: 4 hd flops per visible (query, key) pair forward, 2.5x that backward)")


if __name__ == "__main__":
    main()
