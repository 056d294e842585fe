#!/usr/bin/env bash
# Why this file exists: tools/configure.sh promises that CUDA is built when nvcc is found,
# also in a build folder configured CUDA-off before (Note [CUDA detection on every run]).
# Part 1 checks the decision with stubs (a fake cmake that records its arguments, a fake
# nvcc), so it runs everywhere; part 2 configures a real folder twice and reads its
# CMakeCache.txt, where a real nvcc exists (CI: /usr/local/cuda/bin).
#   usage: configure_sh_test.sh <project root>
set -euo pipefail
root="$(cd "$1" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- part 1: the decision, with stubs ----
mkdir -p "$tmp/stubs" "$tmp/stubs_no_nvcc"
printf '#!/usr/bin/env bash\necho "$@" >> "$CG_TEST_CMAKE_LOG"\n' > "$tmp/stubs/cmake"
printf '#!/usr/bin/env bash\nexit 0\n' > "$tmp/stubs/nvcc"
cp "$tmp/stubs/cmake" "$tmp/stubs_no_nvcc/cmake"
chmod +x "$tmp/stubs/cmake" "$tmp/stubs/nvcc" "$tmp/stubs_no_nvcc/cmake"
export CG_TEST_CMAKE_LOG="$tmp/cmake.log"

# configure_args <PATH> [VAR=value...]: the arguments configure.sh gives cmake.
configure_args() {
  local path="$1"
  shift
  : > "$CG_TEST_CMAKE_LOG"
  env -u CHUNKGRAD_CUDA PATH="$path" CHUNKGRAD_BUILD_DIR="$tmp/stub_build" "$@" \
    bash "$root/tools/configure.sh"
  cat "$CG_TEST_CMAKE_LOG"
}
with_nvcc="$tmp/stubs:$PATH"
args="$(configure_args "$with_nvcc" CHUNKGRAD_CUDA=OFF)"
[[ "$args" == *"-DCHUNKGRAD_CUDA=OFF"* ]] || fail "CHUNKGRAD_CUDA=OFF not passed on: $args"
args="$(configure_args "$with_nvcc")"
[[ "$args" == *"-DCHUNKGRAD_CUDA=ON"* ]] || fail "nvcc on PATH but CUDA not switched on: $args"
args="$(configure_args "$with_nvcc" CHUNKGRAD_CUDA=ON)"
[[ "$args" == *"-DCHUNKGRAD_CUDA=ON"* ]] || fail "CHUNKGRAD_CUDA=ON not passed on: $args"
no_nvcc="$tmp/stubs_no_nvcc:/usr/bin:/bin"
if [ ! -x /usr/local/cuda/bin/nvcc ] && ! PATH="$no_nvcc" command -v nvcc >/dev/null 2>&1; then
  args="$(configure_args "$no_nvcc")"
  [[ "$args" == *"-DCHUNKGRAD_CUDA=OFF"* ]] || fail "no nvcc but CUDA not switched off: $args"
fi
echo "part 1 (stubs): ok"

# ---- part 2: a real build folder, configured CUDA-off, then again with nvcc present ----
real_path="$PATH"
if [ -x /usr/local/cuda/bin/nvcc ]; then real_path="/usr/local/cuda/bin:$PATH"; fi
if ! PATH="$real_path" command -v nvcc >/dev/null 2>&1; then
  echo "part 2 skipped: no nvcc on this machine"
  exit 0
fi
env -u CHUNKGRAD_CUDA CHUNKGRAD_CUDA=OFF CHUNKGRAD_BUILD_DIR="$tmp/real" bash "$root/tools/configure.sh"
grep -q '^CHUNKGRAD_CUDA:BOOL=OFF' "$tmp/real/CMakeCache.txt" || fail "first configure is not CUDA-off"
env -u CHUNKGRAD_CUDA PATH="$real_path" CHUNKGRAD_BUILD_DIR="$tmp/real" bash "$root/tools/configure.sh"
grep -q '^CHUNKGRAD_CUDA:BOOL=ON' "$tmp/real/CMakeCache.txt" ||
  fail "a folder configured CUDA-off stayed CUDA-off with nvcc on PATH: $(grep '^CHUNKGRAD_CUDA:' "$tmp/real/CMakeCache.txt")"
echo "part 2 (real configure): ok"
