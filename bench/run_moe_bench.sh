#!/usr/bin/env bash
# Why this file exists: one command for issue 21's MoE table -- builds moe_bench (Release
# CUDA, bench/bench_build.sh), runs it and, when python3 can import torch,
# bench/moe_torch.py (transformers' eager loop over experts and torch._grouped_mm) on the
# same shapes.
#   bash bench/run_moe_bench.sh                       # Qwen3.5-35B-A3B layer, T 4096 and 1..16
#   bash bench/run_moe_bench.sh --tokens 8192 --decode 1,4 --repeats 20
# Every option goes to both sides (they take the same ones).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_build.sh"
bench_build moe_bench

echo
"$bench_dir/bench/moe_bench" "$@"
echo
bench_torch_twin "torch" moe_torch.py "$@" || true
