#!/usr/bin/env bash
# Why this file exists: one command for issue 21's Gated DeltaNet kernel table --
# configures a Release CUDA build in build-bench-cuda/ (BUILD_DIR overrides), builds
# gated_delta_bench, runs it and, when python3 can import torch and transformers,
# bench/gated_delta_torch.py (transformers' torch fallbacks) on the same shapes.
#   bash bench/run_gated_delta_bench.sh                  # Qwen3.5-27B shape, B = 1 and 4, T 4096
#   bash bench/run_gated_delta_bench.sh --batches 1 --tokens 8192 --repeats 20
# Every option goes to both sides (they take the same ones).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_build.sh"
bench_build gated_delta_bench

echo
"$bench_dir/bench/gated_delta_bench" "$@"
echo
bench_torch_twin "torch, transformers.models.qwen3_5.modeling_qwen3_5" gated_delta_torch.py "$@" || true
