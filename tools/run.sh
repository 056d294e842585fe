#!/usr/bin/env bash
# Why this file exists: the README's main-job command. Installs what is missing, builds
# (incrementally on later runs) and runs the main job on the CPU: `chunkgrad train` with
# the toy config (configs/toy.json): it trains a small target LM on a generated corpus
# (cached in runs/toy/ for the next run), trains a DFlash drafter on the target's own
# generations, measures speculative decoding (tau, speedup, lossless) and prints the
# memory story of a drafter training step. Arguments pass through to `chunkgrad train`
# (try --help). It also builds examples/memory_lesson.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
bash tools/configure.sh
cmake --build build -j "$(nproc)" --target chunkgrad_cli memory_lesson
./build/examples/chunkgrad train --config configs/toy.json "$@"
