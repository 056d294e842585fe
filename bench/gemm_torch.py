#!/usr/bin/env python3
# Why this file exists: PyTorch's side of bench/gemm_bench.cpp -- torch.matmul at the same
# shapes, dtype and layout (out [M, N] = x [M, K] @ W^T with W [N, K], or W [K, N] for
# --layout nn), median of --repeats CUDA-event timings after one warm-up, so the two
# tables compare line by line.
import argparse
import statistics

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--M", type=int, default=24576)
    p.add_argument("--shapes", default="5120x5120,5120x17408,5120x248320")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    p.add_argument("--layout", default="nt", choices=["nt", "nn"])
    p.add_argument("--repeats", type=int, default=10)
    a = p.parse_args()
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__} matmul, {torch.cuda.get_device_name(0)}, {a.dtype}, "
          f"M = {a.M}, layout {a.layout}, median of {a.repeats}")
    print(f"{'M':>8} {'K':>8} {'N':>8} {'ms':>10} {'TFLOP/s':>10}")
    for item in a.shapes.split(","):
        K, N = (int(v) for v in item.split("x"))
        x = torch.full((a.M, K), 0.01, dtype=dt, device="cuda")
        w = torch.full((K, N) if a.layout == "nn" else (N, K), 0.02, dtype=dt, device="cuda")
        b = w if a.layout == "nn" else w.t()
        out = torch.matmul(x, b)  # warm-up
        del out
        times = []
        for _ in range(a.repeats):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            out = torch.matmul(x, b)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
            del out
        ms = statistics.median(times)
        print(f"{a.M:>8} {K:>8} {N:>8} {ms:>10.3f} {2.0 * a.M * K * N / (ms * 1e-3) / 1e12:>10.1f}")
        del x, w, b
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
