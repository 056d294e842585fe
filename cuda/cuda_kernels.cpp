// Why this file exists: the CUDA table (cuda/cuda_kernels.h) registers itself here when
// libchunkgrad loads, as cuda_backend.cpp does for memory; its entries are defined in the
// files of their families (the header lists them).
#include "cuda/cuda_kernels.h"

namespace cg::cuda {
namespace {

const bool registered = [] {
  static CudaKernels table;
  register_kernels(&table);
  return true;
}();

}  // namespace
}  // namespace cg::cuda
