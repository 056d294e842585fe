#!/usr/bin/env python3
# Why this file exists: PyTorch's side of bench/attention_bench.cpp -- the same two shapes
# on the GPU, so the tables compare line by line:
#   causal   F.scaled_dot_product_attention(is_causal=True, enable_gqa=True), bf16,
#            head_dim 128, GQA 40/8, 4096 tokens (PyTorch picks its fastest backend)
#   dflash   torch.nn.attention.flex_attention (compiled) with a block mask of the DFlash
#            rule: 1024 blocks x 24 query slots over 4096 context keys (Sk = 4096 + 24576);
#            block b sees context keys j < anchor_b = 4 * (1 + (389 b mod 1024)) and its
#            own 24 keys, nothing else (the same anchors as attention_bench.cpp)
#   sliding  the same blocks under the sliding rule of window --window (2048): slot k at
#            position anchor_b + k sees the keys at positions anchor_b + k - (W - 1) ..
#            anchor_b + k (context keys and its block's slots up to k)
# --heads 32/8,40/8 gives the dflash and sliding tables at each head count.
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
    p.add_argument("--which", default="causal,dflash,sliding")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--hq", type=int, default=40)
    p.add_argument("--hkv", type=int, default=8)
    p.add_argument("--hd", type=int, default=128)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--blocks", type=int, default=1024)
    p.add_argument("--block-size", type=int, default=24)
    p.add_argument("--window", type=int, default=2048)
    p.add_argument("--anchors", default="shuffled", choices=["shuffled", "sorted"])
    p.add_argument("--heads", default="", help="HQ/HKV,... for dflash and sliding")
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

    if "dflash" in a.which or "sliding" in a.which:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        S, N, Bs, W = a.context, a.blocks, a.block_size, a.window
        anchors_list = [min(S, 4 * (1 + (389 * b) % 1024)) for b in range(N)]
        if a.anchors == "sorted":
            anchors_list.sort()
        anchors = torch.tensor(anchors_list, device="cuda", dtype=torch.int64)

        def dflash_rule(b, h, q_idx, kv_idx):
            block = q_idx // Bs
            in_context = kv_idx < S
            sees_context = in_context & (kv_idx < anchors[block])
            own_block = (~in_context) & ((kv_idx - S) // Bs == block)
            return sees_context | own_block

        def sliding_rule(b, h, q_idx, kv_idx):
            anchor = anchors[q_idx // Bs]
            query_pos = anchor + q_idx % Bs
            key_pos = torch.where(kv_idx < S, kv_idx, anchor + (kv_idx - S) % Bs)
            near = (key_pos <= query_pos) & (query_pos - key_pos < W)
            return dflash_rule(b, h, q_idx, kv_idx) & near

        def sliding_pairs():  # visible pairs slot by slot (attention_bench's visible_pairs)
            n = 0
            for x in anchors_list:
                for k in range(Bs):
                    n += max(0, x - max(0, x + k - (W - 1))) + k + 1 - max(0, k - (W - 1))
            return n

        Sq, Sk = N * Bs, S + N * Bs
        compiled = torch.compile(flex_attention)
        heads = [tuple(int(x) for x in h.split("/")) for h in a.heads.split(",") if h]
        rules = [("dflash", dflash_rule, sum(Bs * (x + Bs) for x in anchors_list)),
                 ("sliding", sliding_rule, sliding_pairs())]
        for hq, hkv in heads or [(a.hq, a.hkv)]:
            for name, rule, pairs in rules:
                if name not in a.which:
                    continue
                block_mask = create_block_mask(rule, B=None, H=None, Q_LEN=Sq, KV_LEN=Sk,
                                               device="cuda")

                def flex(q, k, v, block_mask=block_mask):
                    return compiled(q, k, v, block_mask=block_mask, enable_gqa=True)

                bench(name, flex, a.batch, hq, hkv, Sq, Sk, a.hd, dtype, pairs, a.repeats,
                      f"flex_attention (compiled) with the {name} block mask")
    print("\n(TFLOP/s: 4 hd flops per visible (query, key) pair forward, 2.5x that backward)")


if __name__ == "__main__":
    main()
