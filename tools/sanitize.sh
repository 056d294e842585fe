#!/usr/bin/env bash
# Why this file exists: memory and undefined-behaviour bugs (a read past a buffer, a
# use after free, a signed overflow in a size computation) often give plausible numbers
# instead of a crash. This builds the whole test suite with AddressSanitizer and
# UndefinedBehaviorSanitizer in its own tree, build-asan/ (CPU only: the sanitizers do not
# see into GPU kernels), and runs it through CTest. Any report fails the test that made
# it, and the script exits non-zero. CI runs it after tools/test.sh.
#
# -O1 keeps the build and the run affordable on a 2-core machine; -g1 (line tables only)
# still gives every report file:line stacks and compiles about a third faster than -g;
# -fno-sanitize-recover=undefined turns every UBSan finding into a failure instead of a
# line in a log nobody reads.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh

jobs="${CHUNKGRAD_SANITIZE_JOBS:-$(nproc)}"
flags="-O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCHUNKGRAD_CUDA=OFF \
  "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS_DEBUG="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-asan -j "$jobs"  # the examples too: tests may run them

# Note [Sanitizer options]: detect_leaks=1 reports every leak at exit; the suppressions
# file lists only third-party false positives (see there). halt_on_error makes the first
# report fail the test; print_stacktrace gives UBSan findings a stack.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan_suppressions.txt:print_suppressions=0"
ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1800
