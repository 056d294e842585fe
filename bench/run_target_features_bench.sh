#!/usr/bin/env bash
# Why this file exists: one command for issue 20's online-features throughput -- configures
# a Release CUDA build in build-bench-cuda/, builds target_features_bench, runs it and, when
# python3 can import torch and transformers, bench/target_features_torch.py on the same
# shapes, then prints chunkgrad's tokens/s over transformers' for each shape.
#   bash bench/run_target_features_bench.sh
#   bash bench/run_target_features_bench.sh --shapes 4096x2 --steps 10
# Every option goes to both sides (they take the same ones).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_build.sh"
bench_build target_features_bench

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo
"$bench_dir/bench/target_features_bench" "$@" | tee "$tmp/chunkgrad.txt"
echo
if bench_torch_twin "torch, transformers" target_features_torch.py "$@" > "$tmp/torch.txt"; then
  cat "$tmp/torch.txt"
  echo
  # Rows are "side seq batch tokens ms tokens/s peak": match on (seq, batch).
  awk 'FNR == 1 { file++ }
       file == 1 && $1 == "chunkgrad" { cg[$2 "x" $3] = $6; order[n++] = $2 "x" $3 }
       file == 2 && $1 == "torch" { pt[$2 "x" $3] = $6 }
       END {
         printf "%-10s %12s %12s %8s\n", "shape", "chunkgrad", "torch", "ratio";
         for (i = 0; i < n; i++) { k = order[i];
           if (k in pt) printf "%-10s %12.0f %12.0f %8.3f\n", k, cg[k], pt[k], cg[k] / pt[k]; }
       }' "$tmp/chunkgrad.txt" "$tmp/torch.txt"
else
  cat "$tmp/torch.txt"
fi
