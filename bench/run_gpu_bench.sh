#!/usr/bin/env bash
# Why this file exists: one command for the GEMM speed table of issue 11 on a GPU machine --
# configures a Release CUDA build in build-bench-cuda/, builds bench/gemm_bench, runs it and,
# when python3 can import torch, bench/gemm_torch.py on the same shapes; then the lm_head
# loss row kernel (bench/head_rows_bench, its default drafter shape).
#   bash bench/run_gpu_bench.sh                        # bf16, M=24576, the drafter's (K, N)
#   bash bench/run_gpu_bench.sh --layout nn --repeats 20
#   CHUNKGRAD_LT_AUTOTUNE=1 bash bench/run_gpu_bench.sh   # time 8 cuBLASLt candidates per shape
# Options --M --shapes --dtype --layout --repeats go to both sides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_build.sh"
bench_build gemm_bench head_rows_bench

echo
"$bench_dir/bench/gemm_bench" "$@"
echo
bench_torch_twin torch gemm_torch.py "$@" || true
echo
"$bench_dir/bench/head_rows_bench"
