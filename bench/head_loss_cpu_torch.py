#!/usr/bin/env python3
# Why this file exists: PyTorch's side of bench/head_loss_cpu_bench.cpp -- the same rows
# (one [T, D] x [D, V] GEMM, and the naive lm_head + cross-entropy forward + backward to
# the hidden states with a frozen head) on the CPU, all cores, same shapes and repeats,
# so that the two tables compare line by line. torch only; no GPU is touched.
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F


def time_median(repeats, f):
    f()  # warm-up, untimed
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--T", type=int, default=6144)
    p.add_argument("--D", type=int, default=1280)
    p.add_argument("--V", type=int, default=62080)
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16", "f64"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="0: every core")
    a = p.parse_args()
    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}[a.dtype]

    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(a.T, a.D, generator=g).to(dtype).requires_grad_()
    head = (torch.randn(a.V, a.D, generator=g) / a.D ** 0.5).to(dtype)  # frozen
    labels = torch.randint(0, a.V, (a.T,), generator=g)

    print(f"PyTorch {torch.__version__} CPU: lm_head + CE, frozen head, T={a.T} D={a.D} V={a.V}, "
          f"{a.dtype}, {threads} threads, median of {a.repeats}")
    print(f"{'row':<14} {'seconds':>10} {'x gemm':>10} {'GFLOP/s':>12}")
    gemm_flops = 2.0 * a.T * a.D * a.V

    def row(name, s, gemm_s, flops):
        print(f"{name:<14} {s:>10.3f} {s / gemm_s:>10.2f} {flops / s * 1e-9:>12.1f}", flush=True)

    def gemm():
        with torch.no_grad():
            hidden @ head.t()

    gemm_s = time_median(a.repeats, gemm)
    row("gemm", gemm_s, gemm_s, gemm_flops)

    def naive():
        hidden.grad = None
        logits = F.linear(hidden, head)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()

    naive_s = time_median(a.repeats, naive)
    row("naive", naive_s, gemm_s, 2 * gemm_flops)
    print("(GFLOP/s counts 2 T D V per GEMM: 1 for gemm, 2 for the loss rows -- logits and dh)")


if __name__ == "__main__":
    main()
