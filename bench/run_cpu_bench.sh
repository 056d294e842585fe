#!/usr/bin/env bash
# Why this file exists: one command for the CPU speed table of issue 7 -- configures a
# Release build in build-bench/ (CUDA off, -march=native), builds the benchmark, runs the
# chunkgrad side and, when python3 can import torch, the PyTorch side on the same shape;
# when a python3 can import numpy, numpy's two GEMMs on the system's BLAS (OpenBLAS on
# Debian) as well: the floor of issue 24's 2-core targets.
#   bash bench/run_cpu_bench.sh                     # T=6144 D=1280 V=62080 (memory_lesson --scale 4)
#   bash bench/run_cpu_bench.sh --T 1024 --V 8192   # any head_loss_cpu_bench option; the
#                                                   # shape options go to both sides
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
jobs="${JOBS:-$(nproc)}"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi

cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCHUNKGRAD_CUDA=OFF \
  -DCHUNKGRAD_NATIVE=ON -DCHUNKGRAD_TESTS=OFF -DCHUNKGRAD_EXAMPLES=OFF -DCHUNKGRAD_BENCH=ON \
  "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$jobs" --target head_loss_cpu_bench

# The options both sides understand (--chunks is chunkgrad's only).
torch_args=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --T|--D|--V|--dtype|--repeats|--threads) torch_args+=("${args[$i]}" "${args[$((i + 1))]}"); i=$((i + 1)) ;;
  esac
done

echo
"$build/bench/head_loss_cpu_bench" "$@"
echo
if python3 -c "import torch" 2>/dev/null; then
  python3 "$root/bench/head_loss_cpu_torch.py" "${torch_args[@]}"
else
  echo "(python3 cannot import torch here: the PyTorch table is skipped)"
fi
numpy_args=()
for ((i = 0; i < ${#torch_args[@]}; i += 2)); do
  case "${torch_args[$i]}" in --threads) ;; *) numpy_args+=("${torch_args[$i]}" "${torch_args[$((i + 1))]}") ;; esac
done
echo
for py in python3 /usr/bin/python3; do
  if "$py" -c "import numpy" 2>/dev/null; then
    "$py" "$root/bench/head_loss_cpu_numpy.py" "${numpy_args[@]}"
    exit 0
  fi
done
echo "(no python3 here imports numpy: the numpy/OpenBLAS rows are skipped)"
