// Why this file exists: the CUDA column of the kernel table (ops/kernels.h). It registers
// when libchunkgrad loads, as cuda_backend.cpp does for memory; every entry it does not
// override yet answers "kernel X is not implemented on cuda yet", so an op on a GPU tensor
// fails with that sentence instead of touching device memory from the host. Filling in the
// CUDA backend (kernels in cuda/*.cu, launched from overrides here) changes this folder
// and its CMake lines only: no op file knows which devices exist.
#include "ops/kernels.h"

namespace cg::cuda {
namespace {

class CudaKernels final : public DeviceKernels {
 public:
  DeviceType type() const override { return DeviceType::cuda; }
  // Note [16-bit logits on the GPU]: the fused head loss keeps a chunk's logits in the
  // inputs' 16-bit dtype there (the row kernel computes in fp32), half the bytes of the
  // CPU's fp32 chunk; the CPU keeps fp32 because it has no fast 16-bit GEMM output.
  DType head_logits_dtype(DType input) const override { return input; }
};

const bool registered = [] {
  static CudaKernels table;
  register_kernels(&table);
  return true;
}();

}  // namespace
}  // namespace cg::cuda
