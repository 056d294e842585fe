#!/usr/bin/env bash
# Why this file exists: one place that configures the build tree build/ the same way for
# the main job and the tests. CUDA is built when nvcc is found (CHUNKGRAD_CUDA=ON|OFF
# in the environment overrides that); reconfiguring an existing tree is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
args=(-S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ -n "${CHUNKGRAD_CUDA:-}" ]; then args+=(-DCHUNKGRAD_CUDA="$CHUNKGRAD_CUDA"); fi
if [ -n "${CHUNKGRAD_CUDA_ARCHS:-}" ]; then args+=(-DCHUNKGRAD_CUDA_ARCHS="$CHUNKGRAD_CUDA_ARCHS"); fi
cmake "${args[@]}" >/dev/null
