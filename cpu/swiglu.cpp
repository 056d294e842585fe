// Why this file exists: the CPU swiglu (CpuKernels, cpu/cpu_kernels.h), one strided
// pass forward and one backward, so the MLP keeps neither silu(gate) nor sigmoid(gate):
//   out   = gate * sig(gate) * up
//   dup   = g * gate * sig(gate)
//   dgate = g * up * sig(gate) * (1 + gate * (1 - sig(gate)))
// (the formulas per element are in ops/elementwise_formulas.h, shared with CUDA).
#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/parallel.h"
#include "ops/elementwise_formulas.h"

namespace cg::cpu {

using formulas::swiglu_grads_of;
using formulas::swiglu_of;

Tensor CpuKernels::swiglu_forward(const Tensor& gate, const Tensor& up) {
  Tensor out = raw::empty(gate.shape(), gate.dtype(), gate.device());
  dispatch_floating(gate.dtype(), "swiglu", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pg = static_cast<const T*>(gate.data_ptr());
    const T* pu = static_cast<const T*>(up.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    if (gate.is_contiguous() && up.is_contiguous()) {  // the common case, in parallel
      const int64_t n = gate.numel();
      parallel_range(n, n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          store(po + i, swiglu_of<C>(load(pg + i), load(pu + i)));
        }
      });
      return;
    }
    strided_loop<3>(gate.shape(), {out.strides(), gate.strides(), up.strides()},
                    [&](const std::array<int64_t, 3>& o) {
                      store(po + o[0], swiglu_of<C>(load(pg + o[1]), load(pu + o[2])));
                    });
  });
  return out;
}

SwigluGrads CpuKernels::swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                                        bool need_dgate, bool need_dup) {
  SwigluGrads grads;
  // An unneeded gradient is written to a one-element scratch tensor with stride 0.
  Tensor scratch = raw::empty({1}, gate.dtype(), gate.device());
  const Shape zero_strides(gate.dim(), 0);
  grads.dgate = need_dgate ? raw::empty(gate.shape(), gate.dtype(), gate.device()) : Tensor();
  grads.dup = need_dup ? raw::empty(up.shape(), up.dtype(), up.device()) : Tensor();
  const Tensor& dgate = need_dgate ? grads.dgate : scratch;
  const Tensor& dup = need_dup ? grads.dup : scratch;
  dispatch_floating(gate.dtype(), "swiglu backward", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pg = static_cast<const T*>(grad.data_ptr());
    const T* pa = static_cast<const T*>(gate.data_ptr());
    const T* pu = static_cast<const T*>(up.data_ptr());
    T* pda = static_cast<T*>(dgate.data_ptr());
    T* pdu = static_cast<T*>(dup.data_ptr());
    if (grad.is_contiguous() && gate.is_contiguous() && up.is_contiguous()) {
      const int64_t n = gate.numel();
      const int64_t da = need_dgate ? 1 : 0, du = need_dup ? 1 : 0;
      parallel_range(n, n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          C dg, du_i;
          swiglu_grads_of<C>(load(pg + i), load(pa + i), load(pu + i), dg, du_i);
          if (da) store(pda + i, dg);
          if (du) store(pdu + i, du_i);
        }
      });
      return;
    }
    strided_loop<5>(
        gate.shape(),
        {grad.strides(), gate.strides(), up.strides(), need_dgate ? dgate.strides() : zero_strides,
         need_dup ? dup.strides() : zero_strides},
        [&](const std::array<int64_t, 5>& o) {
          C dg, du_o;
          swiglu_grads_of<C>(load(pg + o[0]), load(pa + o[1]), load(pu + o[2]), dg, du_o);
          store(pda + o[3], dg);
          store(pdu + o[4], du_o);
        });
  });
  return grads;
}

}  // namespace cg::cpu
