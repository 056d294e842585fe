#!/usr/bin/env bash
# Why this file exists: the README's test command. Installs what is missing, configures
# and builds everything (the CUDA backend too when nvcc is present: on a machine without
# a GPU its tests skip), then runs every test through CTest. Exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
bash tools/configure.sh
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
