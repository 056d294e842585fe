# Why this file exists: what every bench/run_*_bench.sh on the GPU does first, written once:
# configure a Release CUDA build of only the benches, build the named targets, and run a
# PyTorch twin when this python3 can import what it needs. Sourced, never run:
#   source "$(dirname "${BASH_SOURCE[0]}")/bench_build.sh"
#   bench_build attention_bench              # configures + builds in $bench_dir
#   "$bench_dir/bench/attention_bench" "$@"
#   bench_torch_twin "torch" attention_torch.py "$@"
# BUILD_DIR (default build-bench-cuda/), JOBS, CUDA_ARCHS (default 90a, as CMakeLists.txt's:
# the wgmma kernels; with 90 the benches time the mma.sync kernels) and SKIP_BUILD=1 (use the
# build as it is) are read from the environment.
bench_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_dir="${BUILD_DIR:-$bench_root/build-bench-cuda}"
export PATH="/usr/local/cuda/bin:$PATH"

bench_build() {
  if [[ -n "${SKIP_BUILD:-}" ]]; then return 0; fi
  local launcher=() generator=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  if [[ ! -f "$bench_dir/CMakeCache.txt" ]]; then
    cmake -S "$bench_root" -B "$bench_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCHUNKGRAD_CUDA=ON -DCHUNKGRAD_CUDA_ARCHS="${CUDA_ARCHS:-90a}" -DCHUNKGRAD_TESTS=OFF \
      -DCHUNKGRAD_EXAMPLES=OFF -DCHUNKGRAD_BENCH=ON "${launcher[@]}" >/dev/null
  fi
  cmake --build "$bench_dir" -j "${JOBS:-$(nproc)}" --target "$@"
}

# bench_torch_twin MODULES SCRIPT ARGS...: runs bench/SCRIPT with ARGS when python3 can
# import every comma-separated module in MODULES; says it skipped otherwise (returns 1 then).
bench_torch_twin() {
  local modules="$1" script="$2"
  shift 2
  if [[ -z "${SKIP_TORCH:-}" ]] && python3 -c "import ${modules}" 2>/dev/null; then
    python3 "$bench_root/bench/$script" "$@"
  else
    echo "(SKIP_TORCH is set or python3 cannot import ${modules} here: $script is skipped)"
    return 1
  fi
}
