// Why this file exists: what the head-loss comparison tests share -- a tensor read back as
// doubles, the relative error they bound, and one problem run through the fused loop
// pipelined or on one stream (Note [Pipelined chunks], ops/fused_head_loop.cpp) -- so that
// the fake-device test (head_loss_pipelined_test.cpp) and the GPU ones (cuda_head_loss_*)
// compare the same things the same way.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/factories.h"
#include "core/views.h"
#include "ops/head_loss.h"

namespace cg::head_loss_test {

inline std::vector<double> host(const Tensor& t) {
  const Tensor c = raw::contiguous(raw::to_device(raw::to_dtype(t, DType::f64), kCPU));
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// max |a - b| / max |b|
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

// h [T, D] (requires grad), W [V, D] (trains when asked), labels [T] with ignored rows,
// teacher hidden [T, D]: made on the host in f32 from a seed, then `dtype` on `device`.
struct LoopProblem {
  Tensor h, w, labels, teacher;
};

inline LoopProblem make_loop_problem(Device device, DType dtype, int64_t T, int64_t D, int64_t V,
                                     bool trainable) {
  Generator gen(11);
  auto put = [&](const Tensor& t) { return raw::to_device(raw::to_dtype(t, dtype), device); };
  LoopProblem p;
  p.h = put(randn({T, D}, {}, &gen)).requires_grad_();
  p.w = put(randn({V, D}, {}, &gen, 0.0, 2.0 / std::sqrt(static_cast<double>(D))));
  if (trainable) p.w.requires_grad_();
  std::vector<int64_t> y(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    y[i] = i % 7 == 3 ? -100 : static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(V));
  p.labels = raw::to_device(from_ints(y, {T}), device);
  p.teacher = put(randn({T, D}, {}, &gen));
  return p;
}

struct LoopOutcome {
  std::vector<double> loss, per_token, lse, argmax, dh, dw;
};

// Forward and backward of the fused path with `chunk` rows per chunk; a teacher kind gets
// 0.1 CE mixed in.
inline LoopOutcome run_loop(const LoopProblem& p, LossKind kind, int64_t chunk, bool pipelined,
                            bool recompute) {
  p.h.set_grad(Tensor());
  if (p.w.requires_grad()) p.w.set_grad(Tensor());
  HeadLossOptions o;
  o.loss.kind = kind;
  if (kind != LossKind::cross_entropy) o.loss.hard_ce_weight = 0.1f;
  o.chunk_rows = chunk;
  o.pipelined = pipelined;
  o.recompute_in_backward = recompute;
  HeadLossInputs in{p.h, p.w, p.labels, Tensor(), Tensor(), Tensor()};
  if (kind != LossKind::cross_entropy) in.teacher_hidden = p.teacher;
  HeadLossResult r = head_loss(in, o);
  EXPECT_EQ(r.chunk_rows, chunk);
  r.loss.backward();
  LoopOutcome out{host(r.loss),   host(r.per_token), host(r.lse),
                  host(r.argmax), host(p.h.grad()),  {}};
  if (p.w.requires_grad()) out.dw = host(p.w.grad());
  return out;
}

}  // namespace cg::head_loss_test
