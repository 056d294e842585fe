#!/usr/bin/env bash
# Why this file exists: the bit-identical check for the CPU elementwise formulas. Builds
# the CPU-only library of two source trees, builds tools/formula_hash.cpp (from THIS tree)
# against each, runs both and compares their hash listings line by line: identical
# listings mean every op, dtype and variant gave the same bytes.
#
#   tools/formula_hash.sh OLD_TREE [NEW_TREE]
#
# NEW_TREE defaults to this checkout. Each tree's library is built in
# <tree>/build-formula-hash (CPU-only, Release, ccache when installed) unless
# OLD_BUILD / NEW_BUILD name an already built CPU-only Release folder. Exits 0 when the
# listings match, 1 with the differing lines when they do not.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
old_tree="$(cd "${1:?usage: tools/formula_hash.sh OLD_TREE [NEW_TREE]}" && pwd)"
new_tree="$(cd "${2:-$here}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

# build_and_hash TREE BUILD_DIR LABEL: the library of TREE, the program against it, its listing.
build_and_hash() {
  local tree="$1" build="$2" label="$3"
  if [[ ! -f "$build/build.ninja" ]]; then
    cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHUNKGRAD_CUDA=OFF \
      "${launcher[@]}" >/dev/null
  fi
  nice -n 5 ninja -C "$build" -j2 chunkgrad >/dev/null
  local flags=(-std=c++20 -O2 -DEIGEN_DONT_PARALLELIZE -I"$tree")
  "${CXX:-c++}" "${flags[@]}" "$here/tools/formula_hash.cpp" -o "$work/formula_hash_$label" \
    -L"$build" -lchunkgrad -Wl,-rpath,"$build" -pthread
  "$work/formula_hash_$label" > "$work/$label.txt"
}

build_and_hash "$old_tree" "${OLD_BUILD:-$old_tree/build-formula-hash}" old
build_and_hash "$new_tree" "${NEW_BUILD:-$new_tree/build-formula-hash}" new

lines=$(wc -l < "$work/new.txt")
if diff "$work/old.txt" "$work/new.txt" > "$work/diff.txt"; then
  echo "formula_hash: identical: $lines op/dtype/variant hashes match ($old_tree vs $new_tree)"
  exit 0
fi
echo "formula_hash: DIFFERENT results ($old_tree vs $new_tree):"
cat "$work/diff.txt"
exit 1
