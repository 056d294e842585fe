#!/usr/bin/env bash
# Why this file exists: one command for issue 21's Gated DeltaNet kernel table --
# configures a Release CUDA build in build-bench-cuda/ (BUILD_DIR overrides), builds
# gated_delta_bench, runs it and, when python3 can import torch and transformers,
# bench/gated_delta_torch.py (transformers' torch fallbacks) on the same shapes.
#   bash bench/run_gated_delta_bench.sh                  # Qwen3.5-27B shape, B = 1 and 4, T 4096
#   bash bench/run_gated_delta_bench.sh --batches 1 --tokens 8192 --repeats 20
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
cmake --build "$build" -j "$jobs" --target gated_delta_bench

echo
"$build/bench/gated_delta_bench" "$@"
echo
if python3 -c "import torch, transformers.models.qwen3_5.modeling_qwen3_5" 2>/dev/null; then
  python3 "$root/bench/gated_delta_torch.py" "$@"
else
  echo "(python3 cannot import torch and transformers' qwen3_5 here: the PyTorch table is skipped)"
fi
