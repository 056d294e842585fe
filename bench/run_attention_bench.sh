#!/usr/bin/env bash
# Why this file exists: one command for the GPU attention table of issue 11 -- configures
# a Release CUDA build in build-bench-cuda/, builds attention_bench, runs it and, when
# python3 can import torch, bench/attention_torch.py on the same shapes, in one run.
#   bash bench/run_attention_bench.sh                      # causal 4096 + DFlash 1024 x 24, full and sliding (W 2048)
#   bash bench/run_attention_bench.sh --which dflash --repeats 20
#   bash bench/run_attention_bench.sh --which dflash,sliding --heads 32/8,40/8 --path flash
# Every option goes to both sides (they take the same ones).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_build.sh"
bench_build attention_bench

echo
"$bench_dir/bench/attention_bench" "$@"
echo
bench_torch_twin torch attention_torch.py "$@" || true
