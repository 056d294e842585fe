#!/usr/bin/env bash
# Why this file exists: one command that formats every C++ and CUDA source the project
# tracks with .clang-format, and the check CI runs (--check: lists the files that differ
# and exits non-zero, changing nothing). Formatting changes go in commits of their own.
#   bash tools/format.sh           # rewrite the files in place
#   bash tools/format.sh --check   # CI: fail when any file is not formatted
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null 2>&1 || {
  echo "format.sh: clang-format is not installed (Debian: apt-get install clang-format)" >&2
  exit 2
}
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    if ! clang-format --style=file "$f" | cmp -s - "$f"; then bad+=("$f"); fi
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format.sh: ${#bad[@]} file(s) differ from .clang-format ($(clang-format --version | head -1)):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    echo "run: bash tools/format.sh   (and commit the result on its own)" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted"
elif [ $# -eq 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 clang-format -i --style=file
else
  echo "usage: tools/format.sh [--check]" >&2
  exit 2
fi
