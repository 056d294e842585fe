#!/usr/bin/env bash
# Why this file exists: one place that configures the build tree build/ the same way for
# the main job and the tests. CUDA is built when nvcc is found (CHUNKGRAD_CUDA=ON|OFF
# in the environment overrides that); reconfiguring an existing tree is incremental.
# CHUNKGRAD_BUILD_DIR picks another build folder (tests/configure_sh_test.sh uses it).
#
# Note [CUDA detection on every run]: the CUDA setting is passed to CMake explicitly on
# every run, from the environment or else from detection. Left out, CMake's cache keeps
# whatever the first configure chose: a tree configured once with CHUNKGRAD_CUDA=OFF (or
# before nvcc was installed) would stay CPU-only on a machine with nvcc, against what the
# README promises.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if [ -n "${CHUNKGRAD_CUDA:-}" ]; then
  cuda="$CHUNKGRAD_CUDA"
elif command -v nvcc >/dev/null 2>&1; then
  cuda=ON
else
  cuda=OFF
fi
args=(-S . -B "${CHUNKGRAD_BUILD_DIR:-build}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHUNKGRAD_CUDA="$cuda")
if [ -n "${CHUNKGRAD_CUDA_ARCHS:-}" ]; then args+=(-DCHUNKGRAD_CUDA_ARCHS="$CHUNKGRAD_CUDA_ARCHS"); fi
cmake "${args[@]}" >/dev/null
