// Why this file exists: the CUDA table's gated_delta_rule and causal_conv1d entries
// (CudaKernels, cuda/cuda_kernels.h; contracts in ops/kernels.h). The op layer
// (ops/gated_delta.cpp) has checked shapes, dtypes and devices and made everything
// contiguous; these read the sizes off the tensors, allocate out (and the chunked
// algorithm's f32 scratch) and call the launchers of cuda/gated_delta_kernels.cu.
// gated_delta_rule picks its algorithm by T: the recurrence up to
// kGatedDeltaRecurrentMaxTokens tokens (decoding and verification blocks), the chunked
// algorithm above (prefill).
#include <cmath>

#include "core/memory_trace.h"
#include "core/views.h"
#include "cuda/cuda_kernels.h"
#include "cuda/gated_delta_kernels.h"
#include "cuda/launch_helpers.h"

namespace cg::cuda {

Tensor run_gated_delta_rule(const GatedDeltaArgs& args, GatedDeltaAlgorithm algorithm) {
  const Tensor& q = args.q;
  const Tensor& v = args.v;
  GatedDeltaShape s;
  s.B = q.shape()[0];
  s.T = q.shape()[1];
  s.Hk = q.shape()[2];
  s.dk = q.shape()[3];
  s.Hv = v.shape()[2];
  s.dv = v.shape()[3];
  s.l2norm = args.l2norm_qk;
  s.scale = args.scale;
  Tensor out = raw::empty(v.shape(), v.dtype(), v.device());
  if (s.B == 0 || s.T == 0 || s.Hv == 0) return out;
  const cudaStream_t stream = stream_of(q);
  if (algorithm == GatedDeltaAlgorithm::automatic) {
    algorithm = s.T <= kGatedDeltaRecurrentMaxTokens ? GatedDeltaAlgorithm::recurrent
                                                     : GatedDeltaAlgorithm::chunked;
  }
  if (algorithm == GatedDeltaAlgorithm::recurrent) {
    launch_gated_delta_recurrent(q.dtype(), s, q.data_ptr(), args.k.data_ptr(), v.data_ptr(),
                                 args.g.data<float>(), args.beta.data<float>(),
                                 args.state.data<float>(), out.data_ptr(), stream);
    return out;
  }
  Tensor scratch;
  {
    CategoryGuard temporary(MemoryCategory::temporary);
    scratch = raw::empty({gated_delta_chunked_scratch_floats(s)}, DType::f32, q.device());
  }
  launch_gated_delta_chunked(q.dtype(), s, q.data_ptr(), args.k.data_ptr(), v.data_ptr(),
                             args.g.data<float>(), args.beta.data<float>(),
                             args.state.data<float>(), out.data_ptr(), scratch.data<float>(),
                             stream);
  return out;
}

Tensor CudaKernels::gated_delta_rule(const GatedDeltaArgs& args) {
  return run_gated_delta_rule(args, GatedDeltaAlgorithm::automatic);
}

Tensor CudaKernels::causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& history,
                                  bool silu) {
  // The contract promises x contiguous only; a weight or history view costs one copy here.
  const Tensor w = raw::contiguous(weight);
  const Tensor h = history.defined() ? raw::contiguous(history) : Tensor();
  Tensor out = raw::empty(x.shape(), x.dtype(), x.device());
  launch_causal_conv1d(x.dtype(), x.data_ptr(), w.data_ptr(), h.defined() ? h.data_ptr() : nullptr,
                       out.data_ptr(), x.shape()[0], x.shape()[1], x.shape()[2], w.shape()[1], silu,
                       stream_of(x));
  return out;
}

}  // namespace cg::cuda
