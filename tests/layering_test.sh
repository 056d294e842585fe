#!/usr/bin/env bash
# Why this file exists: the layering the project promises -- dependencies point one way
# (core <- autograd <- ops <- nn <- train <- examples) and no op file names a device
# (ops/kernels.h) -- is a property of the sources, so it is checked on the sources: a
# later change that breaks it fails here instead of in a review.
#   bash tests/layering_test.sh <project root>
set -u
root="${1:?usage: layering_test.sh <project root>}"
cd "$root" || exit 1
status=0
fail() { echo "layering: $*"; status=1; }

# core/ and autograd/ include nothing above them.
hits=$(grep -rnE '#include "(ops|nn|train|cuda|examples)/' core autograd || true)
[ -z "$hits" ] || fail "core/ or autograd/ includes a higher layer:"$'\n'"$hits"
hits=$(grep -rnE '#include "(nn|train|cuda|examples)/' ops || true)
[ -z "$hits" ] || fail "ops/ includes a higher layer or a device folder:"$'\n'"$hits"

# Op files (ops/*.cpp, ops/*.h, not the device folders) never include a device's headers
# and never name a device type: they call kernels_for(device). ops/kernels.cpp is the
# registry and may name the types it keeps tables for.
hits=$(grep -nE '#include "ops/cpu/' ops/*.cpp ops/*.h || true)
[ -z "$hits" ] || fail "an op file includes ops/cpu/:"$'\n'"$hits"
hits=$(grep -nE 'DeviceType::|is_cpu\(\)|is_cuda\(\)|cpu::' ops/*.cpp ops/*.h | grep -v '^ops/kernels.cpp:' || true)
[ -z "$hits" ] || fail "an op file names a device:"$'\n'"$hits"

[ $status -eq 0 ] && echo "layering: ok"
exit $status
