#!/usr/bin/env bash
# Why this file exists: the layering the project promises -- dependencies point one way
# (core <- autograd <- ops <- nn <- train <- examples; trace/ reads what core records;
# the device folders cpu/ and cuda/ register their kernel tables into ops/) and no op file
# names a device (ops/kernels.h) -- is a property of the sources, so it is checked on the
# sources: a later change that breaks it fails here instead of in a review.
#   bash tests/layering_test.sh <project root>
set -u
root="${1:?usage: layering_test.sh <project root>}"
cd "$root" || exit 1
status=0
fail() { echo "layering: $*"; status=1; }

# forbid FOLDER 'a|b|c': FOLDER's sources include nothing from the folders a, b, c.
forbid() {
  local folder="$1" above="$2" hits
  hits=$(grep -rnE "#include \"($above)/" "$folder" || true)
  [ -z "$hits" ] || fail "$folder/ includes a folder it must not ($above):"$'\n'"$hits"
}
forbid core 'trace|autograd|ops|cpu|cuda|nn|train|examples|bench'
forbid trace 'autograd|ops|cpu|cuda|nn|train|examples|bench'
forbid autograd 'trace|ops|cpu|cuda|nn|train|examples|bench'
forbid ops 'trace|cpu|cuda|nn|train|examples|bench'
# The device folders see core and the op layer's table, never each other or the layers
# that use them.
forbid cpu 'trace|cuda|nn|train|examples|bench'
forbid cuda 'trace|cpu|nn|train|examples|bench'
forbid nn 'trace|cpu|cuda|train|examples|bench'
forbid train 'cpu|cuda|examples|bench'

# Op files (ops/*.cpp, ops/*.h) never name a device type: they call kernels_for(device).
# ops/kernels.cpp is the registry and may name the types it keeps tables for.
hits=$(grep -nE 'DeviceType::|is_cpu\(\)|is_cuda\(\)|cpu::' ops/*.cpp ops/*.h | grep -v '^ops/kernels.cpp:' || true)
[ -z "$hits" ] || fail "an op file names a device:"$'\n'"$hits"

[ $status -eq 0 ] && echo "layering: ok"
exit $status
