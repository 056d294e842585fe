#!/usr/bin/env bash
# Why this file exists: one command for the GEMM speed table of issue 11 on a GPU machine --
# configures a Release CUDA build in build-gpu-bench/, builds bench/gemm_bench, runs it and,
# when python3 can import torch, bench/gemm_torch.py on the same shapes; then the lm_head
# loss row kernel (bench/head_rows_bench, its default drafter shape).
#   bash bench/run_gpu_bench.sh                        # bf16, M=24576, the drafter's (K, N)
#   bash bench/run_gpu_bench.sh --layout nn --repeats 20
#   CHUNKGRAD_LT_AUTOTUNE=1 bash bench/run_gpu_bench.sh   # time 8 cuBLASLt candidates per shape
# Options --M --shapes --dtype --layout --repeats go to both sides.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu-bench}"
jobs="${JOBS:-$(nproc)}"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
export PATH="/usr/local/cuda/bin:$PATH"

cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCHUNKGRAD_CUDA=ON \
  -DCHUNKGRAD_CUDA_ARCHS="${CUDA_ARCHS:-90}" -DCHUNKGRAD_TESTS=OFF -DCHUNKGRAD_EXAMPLES=OFF \
  -DCHUNKGRAD_BENCH=ON >/dev/null
cmake --build "$build" -j "$jobs" --target gemm_bench head_rows_bench

echo
"$build/bench/gemm_bench" "$@"
echo
if python3 -c "import torch" 2>/dev/null; then
  python3 "$root/bench/gemm_torch.py" "$@"
else
  echo "(python3 cannot import torch here: the PyTorch table is skipped)"
fi
echo
"$build/bench/head_rows_bench"
