#!/usr/bin/env python3
# Why this file exists: PyTorch's side of bench/moe_bench.cpp -- the same shapes and rows
# for the Qwen3.5-35B-A3B MoE layer (hidden 2048, 256 experts, top 8, moe_intermediate 512;
# random bf16 weights and logits; T = 4096 and T = 1..16), timed three ways:
#   route          softmax in fp32, topk, renormalise (transformers' Qwen3_5MoeTopKRouter)
#   eager loop     transformers' eager Qwen3_5MoeExperts.forward as written: for each expert
#                  hit, its rows, linear with gate_up, silu(gate) * up, linear with down,
#                  times the routing weight, index_add_ (the loop is reproduced here, so
#                  the row runs whatever transformers version is installed)
#   grouped_mm     torch._grouped_mm over the expert-sorted rows (when this torch has it)
# TFLOP/s use moe_bench.cpp's count (Note [The MoE FLOP count]: 6 T k H I), the decode rows
# the expert weights read (3 H I x 2 bytes per distinct expert hit) too.
import argparse
import statistics

import torch
import torch.nn.functional as F


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


def route(logits, k):
    probs = F.softmax(logits, dim=-1, dtype=torch.float)
    values, indices = torch.topk(probs, k, dim=-1)
    values = values / values.sum(dim=-1, keepdim=True)
    return values.to(logits.dtype), indices


def eager_loop(x, gate_up, down, weights, indices):
    E = gate_up.shape[0]
    out = torch.zeros_like(x)
    mask = F.one_hot(indices, num_classes=E).permute(2, 1, 0)  # [E, k, T]
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for e in hit:
        e = e[0]
        slot, token = torch.where(mask[e])
        gate, up = F.linear(x[token], gate_up[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, down[e])
        y = y * weights[token, slot, None]
        out.index_add_(0, token, y.to(out.dtype))
    return out


def grouped(x, gate_up, down, weights, indices):
    T, k = indices.shape
    E, two_i, _ = gate_up.shape
    I = two_i // 2
    flat = indices.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token = order // k
    offs = torch.cumsum(torch.bincount(flat, minlength=E), 0).to(torch.int32)
    h = torch._grouped_mm(x[token], gate_up.transpose(1, 2), offs=offs)
    act = F.silu(h[:, :I]) * h[:, I:]
    y = torch._grouped_mm(act, down.transpose(1, 2), offs=offs)
    y = y * weights.reshape(-1)[order, None]
    out = torch.zeros_like(x)
    out.index_add_(0, token, y.to(out.dtype))
    return out


def row(name, ms, amount, unit):
    print(f"{name:<34} {ms:10.3f} {amount / (ms * 1e-3) / 1e12:10.2f} {unit}", flush=True)


def bench_tokens(a, gate_up, down, T, decoding):
    dtype = gate_up.dtype
    g = torch.Generator(device="cuda").manual_seed(100 + T)
    x = torch.randn(T, a.hidden, device="cuda", dtype=dtype, generator=g)
    logits = torch.randn(T, a.experts, device="cuda", dtype=dtype, generator=g)
    weights, indices = route(logits, a.top_k)
    flops = 6.0 * T * a.top_k * a.hidden * a.intermediate
    hit = torch.unique(indices).numel()
    nbytes = 3.0 * hit * a.hidden * a.intermediate * gate_up.element_size()
    if not decoding:
        row(f"route T={T}", time_ms(a.repeats, lambda: route(logits, a.top_k)),
            T * a.experts * logits.element_size(), "TB/s of logits read")
    ref = None
    for name, f in (("experts eager loop", eager_loop), ("experts grouped_mm", grouped)):
        label = f"{name} T={T}"
        if f is grouped and not hasattr(torch, "_grouped_mm"):
            print(f"{label:<34} skipped: torch {torch.__version__} has no torch._grouped_mm")
            continue
        try:
            out = f(x, gate_up, down, weights, indices)
            if ref is None:
                ref = out
            else:  # the two must agree (bf16 rounding apart)
                scale = ref.float().abs().max().clamp(min=1e-6)
                err = ((out.float() - ref.float()).abs().max() / scale).item()
                if err > 5e-2:
                    print(f"{label:<34} disagrees with the eager loop: max rel err {err:.3g}")
            ms = time_ms(a.repeats, lambda: f(x, gate_up, down, weights, indices))
            row(label, ms, flops, "TFLOP/s")
            if decoding:
                print(f"{'':<34} {'':>10} {nbytes / (ms * 1e-3) / 1e12:10.2f} TB/s of expert "
                      f"weights ({hit} experts hit)", flush=True)
        except Exception as e:  # one failing row keeps the others
            print(f"{label:<34} failed: {type(e).__name__}: {e}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--decode", default="1,2,4,8,16")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--top-k", dest="top_k", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    p.add_argument("--repeats", type=int, default=10)
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("moe_torch.py: no CUDA device")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    g = torch.Generator(device="cuda").manual_seed(7)
    gate_up = torch.randn(a.experts, 2 * a.intermediate, a.hidden, device="cuda", dtype=dtype,
                          generator=g) * 0.02
    down = torch.randn(a.experts, a.hidden, a.intermediate, device="cuda", dtype=dtype,
                       generator=g) * 0.02
    print(f"PyTorch {torch.__version__} MoE on {torch.cuda.get_device_name(0)}")
    print(f"H={a.hidden} E={a.experts} k={a.top_k} I={a.intermediate} {a.dtype}, median of "
          f"{a.repeats}; TFLOP/s = 6 T k H I / time")
    print(f"{'row':<34} {'ms':>10} {'rate':>10}")
    bench_tokens(a, gate_up, down, a.tokens, False)
    print("\ndecoding")
    for t in a.decode.split(","):
        bench_tokens(a, gate_up, down, int(t), True)


if __name__ == "__main__":
    main()
