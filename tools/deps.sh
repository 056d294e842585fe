#!/usr/bin/env bash
# Why this file exists: the README's two commands must work on a fresh Debian/Ubuntu
# machine. This installs whatever build dependency is missing (Debian packages only, no
# downloads of anything else), running apt-get update once, as root (or through sudo).
# Open MPI (openmpi-bin: mpirun; libopenmpi-dev: mpi.h, libmpi) builds dist/'s MPI
# backend, with which `mpirun -np N` runs data-parallel and CI tests it with 2 ranks.
set -euo pipefail

packages=(cmake g++ ninja-build libeigen3-dev libopenblas-dev libopenblas-pthread-dev nlohmann-json3-dev libcli11-dev libgtest-dev libxxhash-dev
  libpcre2-dev libutf8proc-dev openmpi-bin libopenmpi-dev)
# CI also renders the memory report in a real browser (tests/trace_report_chromium_test.sh,
# which skips where chromium is missing) and checks the formatting (tools/format.sh --check);
# a developer's machine is left without them.
if [ "${CI:-}" = "true" ]; then packages+=(chromium clang-format); fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "chunkgrad: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi
