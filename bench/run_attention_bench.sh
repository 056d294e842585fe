#!/usr/bin/env bash
# Why this file exists: one command for the GPU attention table of issue 11 -- configures
# a Release CUDA build in build-bench-cuda/, builds attention_bench, runs it and, when
# python3 can import torch, bench/attention_torch.py on the same shapes, in one run.
#   bash bench/run_attention_bench.sh                      # causal 4096 + DFlash 1024 x 24, full and sliding (W 2048)
#   bash bench/run_attention_bench.sh --which dflash --repeats 20
#   bash bench/run_attention_bench.sh --which dflash,sliding --heads 32/8,40/8 --path flash
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

cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCHUNKGRAD_CUDA=ON \
  -DCHUNKGRAD_CUDA_ARCHS="${CUDA_ARCHS:-90}" -DCHUNKGRAD_TESTS=OFF -DCHUNKGRAD_EXAMPLES=OFF \
  -DCHUNKGRAD_BENCH=ON "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$jobs" --target attention_bench

echo
"$build/bench/attention_bench" "$@"
echo
if python3 -c "import torch" 2>/dev/null; then
  python3 "$root/bench/attention_torch.py" "$@"
else
  echo "(python3 cannot import torch here: the PyTorch table is skipped)"
fi
