#!/usr/bin/env bash
# Why this file exists: the README's main-job command. Installs what is missing, builds
# (incrementally on later runs) and runs the main job on the CPU, passing any arguments
# through to it (try --help). It also builds examples/memory_lesson.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
bash tools/configure.sh
cmake --build build -j "$(nproc)" --target mlp_demo memory_lesson
./build/examples/mlp_demo "$@"
