#!/usr/bin/env python3
# Why this file exists: the floor of issue 24's 2-core targets. It times, with numpy on
# the system's BLAS (Debian's python3-numpy on libopenblas0-pthread: every core, OpenBLAS's
# own threads), the two GEMMs of lm_head + cross-entropy with a frozen head:
#   logits = h W^T      [T, D] x [D, V]
#   dh     = dlogits W  [T, V] x [V, D]
# and their sum, the row bench/head_loss_cpu_bench.cpp's naive and fused rows are
# compared with; wall-clock and process CPU seconds, as that bench prints them. run_cpu_bench.sh runs it with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
# unset (OpenBLAS then picks its kernels and blocking from the CPU itself).
import argparse
import os
import statistics
import time

import numpy as np


def time_median(repeats, f):
    """Medians of wall-clock and process CPU seconds (one warm-up run first)."""
    f()
    wall, cpu = [], []
    for _ in range(max(1, repeats)):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def blas_name():
    # The BLAS the loader mapped into this process (numpy 1.24 cannot say it otherwise).
    for line in open("/proc/self/maps"):
        if "blas" in line:
            return line.split()[-1]
    return "BLAS unknown"


def main():
    p = argparse.ArgumentParser(description="numpy/OpenBLAS floor of the CPU head-loss bench")
    p.add_argument("--T", type=int, default=6144)
    p.add_argument("--D", type=int, default=1280)
    p.add_argument("--V", type=int, default=62080)
    p.add_argument("--dtype", default="f32", choices=["f32", "f64", "bf16", "f16"])
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    if a.dtype in ("bf16", "f16"):
        print(f"(numpy's BLAS has no {a.dtype} GEMM: the numpy rows are skipped)")
        return
    dtype = np.float32 if a.dtype == "f32" else np.float64
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((a.T, a.D), dtype=dtype)
    head = (rng.standard_normal((a.V, a.D), dtype=dtype) / np.sqrt(a.D)).astype(dtype)
    dlogits = rng.standard_normal((a.T, a.V), dtype=dtype)
    logits = np.empty((a.T, a.V), dtype=dtype)
    dh = np.empty((a.T, a.D), dtype=dtype)

    print(f"numpy {np.__version__} ({blas_name()}): T={a.T} D={a.D} V={a.V}, {a.dtype}, "
          f"{os.cpu_count()} cores, median of {a.repeats}")
    print(f"{'row':<14} {'seconds':>10} {'GFLOP/s':>12} {'cpu s':>10}")
    flops = 2.0 * a.T * a.D * a.V
    g1 = time_median(a.repeats, lambda: np.matmul(hidden, head.T, out=logits))
    g2 = time_median(a.repeats, lambda: np.matmul(dlogits, head, out=dh))
    both = (g1[0] + g2[0], g1[1] + g2[1])
    for name, (s, c), f in (("gemm h W^T", g1, flops), ("gemm dl W", g2, flops),
                            ("both gemms", both, 2 * flops)):
        print(f"{name:<14} {s:>10.3f} {f / s * 1e-9:>12.1f} {c:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
