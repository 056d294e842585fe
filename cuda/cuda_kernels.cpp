// Why this file exists: the CUDA table (cuda/cuda_kernels.h) registers itself here when
// libchunkgrad loads, as cuda_backend.cpp does for memory; its entries are defined in the
// files of their families (the header lists them), the two stream entries here.
#include "cuda/cuda_kernels.h"

#include "cuda/compute_stream.h"

namespace cg::cuda {

int CudaKernels::side_streams() const { return static_cast<int>(kMaxSideStreams); }

void CudaKernels::stream_wait(Device device, StreamId waiter, StreamId producer) {
  cuda::stream_wait(device.index, waiter, producer);
}
namespace {

const bool registered = [] {
  static CudaKernels table;
  register_kernels(&table);
  return true;
}();

}  // namespace
}  // namespace cg::cuda
