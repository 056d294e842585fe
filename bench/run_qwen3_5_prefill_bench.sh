#!/usr/bin/env bash
# Why this file exists: one command for issue 21's prefill throughput -- builds
# qwen3_5_prefill_bench in a Release CUDA build (build-bench-cuda/, or BUILD_DIR), runs it and,
# when python3 can import torch and transformers, bench/qwen3_5_prefill_torch.py on the same
# shapes, then prints one table: chunkgrad's tokens/s, its GEMM-bound limit and the ratio
# (Note [GEMM-bound limit] in the bench), transformers' tokens/s (its PyTorch DeltaNet
# fallback: context, not the bar) and both peaks.
#   bash bench/run_qwen3_5_prefill_bench.sh
#   bash bench/run_qwen3_5_prefill_bench.sh --shapes 4096x1 --steps 5
# Every option goes to both sides (they take the same ones). SKIP_BUILD=1 uses the build as
# it is; SKIP_TORCH=1 runs chunkgrad only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_build.sh"
bench_build qwen3_5_prefill_bench

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo
"$bench_dir/bench/qwen3_5_prefill_bench" "$@" | tee "$tmp/chunkgrad.txt"
echo
if bench_torch_twin "torch, transformers" qwen3_5_prefill_torch.py "$@" > "$tmp/torch.txt"; then
  cat "$tmp/torch.txt"
  echo
  # chunkgrad rows: side seq batch tokens ms tokens/s peak gemm_ms limit ratio tflops;
  # torch rows: side seq batch tokens ms tokens/s peak. Matched on (seq, batch).
  awk 'FNR == 1 { file++ }
       file == 1 && $1 == "chunkgrad" { k = $2 "x" $3; cg[k] = $6; cgp[k] = $7; lim[k] = $9;
                                        r[k] = $10; order[n++] = k }
       file == 2 && $1 == "torch" { pt[$2 "x" $3] = $6; ptp[$2 "x" $3] = $7 }
       END {
         printf "%-10s %12s %12s %12s %12s %12s %10s %10s\n", "shape", "chunkgrad",
                "gemm limit", "cg/limit", "torch", "cg/torch", "cg GiB", "torch GiB";
         for (i = 0; i < n; i++) { k = order[i];
           t = (k in pt) ? pt[k] : 0;
           printf "%-10s %12.0f %12.0f %12.3f %12s %12s %10.2f %10s\n", k, cg[k], lim[k], r[k],
                  (t ? sprintf("%.0f", t) : "-"), (t ? sprintf("%.2f", cg[k] / t) : "-"),
                  cgp[k], (t ? sprintf("%.2f", ptp[k]) : "-"); }
       }' "$tmp/chunkgrad.txt" "$tmp/torch.txt"
else
  cat "$tmp/torch.txt"
fi
