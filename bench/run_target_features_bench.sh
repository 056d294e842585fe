#!/usr/bin/env bash
# Why this file exists: one command for issue 20's online-features throughput -- configures
# a Release CUDA build in build-bench-cuda/, builds target_features_bench, runs it and, when
# python3 can import torch and transformers, bench/target_features_torch.py on the same
# shapes, then prints chunkgrad's tokens/s over transformers' for each shape.
#   bash bench/run_target_features_bench.sh
#   bash bench/run_target_features_bench.sh --shapes 4096x2 --steps 10
# Every option goes to both sides (they take the same ones).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench-cuda}"
jobs="${JOBS:-$(nproc)}"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
export PATH="/usr/local/cuda/bin:$PATH"

if [[ -z "${SKIP_BUILD:-}" ]]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCHUNKGRAD_CUDA=ON \
    -DCHUNKGRAD_CUDA_ARCHS="${CUDA_ARCHS:-90}" -DCHUNKGRAD_TESTS=OFF -DCHUNKGRAD_EXAMPLES=OFF \
    -DCHUNKGRAD_BENCH=ON "${launcher[@]}" >/dev/null
  cmake --build "$build" -j "$jobs" --target target_features_bench
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo
"$build/bench/target_features_bench" "$@" | tee "$tmp/chunkgrad.txt"
echo
if python3 -c "import torch, transformers" 2>/dev/null; then
  python3 "$root/bench/target_features_torch.py" "$@" | tee "$tmp/torch.txt"
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
  echo "(python3 cannot import torch and transformers here: the PyTorch table is skipped)"
fi
