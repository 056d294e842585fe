#!/usr/bin/env bash
# Why this file exists: the layering the project promises -- dependencies point one way
# (core <- autograd <- ops <- nn <- train <- examples; trace/ reads what core records;
# the device folders cpu/ and cuda/ register their kernel tables into ops/; dist/, the
# communicator, sees core/ (and cuda/'s streams for NCCL) and is used by train/) and no
# device-neutral file (ops/, nn/, train/, examples/) names a device type -- is a property
# of the sources, so it is checked on the
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
forbid core 'trace|autograd|ops|cpu|cuda|nn|train|examples|bench|dist'
forbid trace 'autograd|ops|cpu|cuda|nn|train|examples|bench|dist'
forbid autograd 'trace|ops|cpu|cuda|nn|train|examples|bench|dist'
forbid ops 'trace|cpu|cuda|nn|train|examples|bench|dist'
# The device folders see core and the op layer's table, never each other or the layers
# that use them.
forbid cpu 'trace|cuda|nn|train|examples|bench|dist'
forbid cuda 'trace|cpu|nn|train|examples|bench|dist'
forbid nn 'trace|cpu|cuda|train|examples|bench|dist'
# dist/ (the communicator) sits beside ops/ and nn/: it moves tensors (core/) between
# ranks, its NCCL backend on cuda/'s streams, and train/ uses it.
forbid dist 'trace|autograd|ops|cpu|nn|train|examples|bench'
# Only the NCCL backend may see cuda/ (a build without CUDA compiles the rest of dist/).
hits=$(grep -lE '#include "cuda/' dist/*.cpp dist/*.h 2>/dev/null | grep -v '^dist/nccl_communicator.cpp$' || true)
[ -z "$hits" ] || fail "only dist/nccl_communicator.cpp may include cuda/ headers:"$'\n'"$hits"
forbid train 'cpu|cuda|examples|bench'

# Device-neutral code never names a device type (Note [Device types], core/device.h):
# op files call kernels_for(device), and nn/, train/ and examples/ ask a device's backend
# what it can do (DeviceBackend::capabilities()) and take device names from the table
# (resolve_device, device_names_help). The host is cg::kCPU; only core/device.* spells
# the names, and each device's own folder its type.
device_words='DeviceType::|is_cpu\(\)|is_cuda\(\)|\bcpu::|\bcuda::|cuda_device\(|cuda_available\(|"(cpu|cuda)[":]'
for folder in ops nn train examples; do
  hits=$(grep -rnE "$device_words" "$folder" || true)
  [ -z "$hits" ] || fail "$folder/ names a device type (ask the backend's capabilities instead):"$'\n'"$hits"
done
forbid examples 'cpu|cuda|bench'

[ $status -eq 0 ] && echo "layering: ok"
exit $status
