// Why this file exists: the two ops of a Gated DeltaNet layer (Qwen3.5 / Qwen3.6's linear
// attention) that are not plain GEMMs or element-wise maps: the gated delta rule, a
// recurrence over time with an fp32 state per value head, and the causal depthwise conv1d
// in front of it. Both run a frozen target (prefill for features, cached decoding for
// speculative verification): they record no autograd graph and refuse inputs that need a
// gradient (the drafter never contains these layers).
//
//   auto r = cg::gated_delta_rule(q, k, v, g, beta, {.state = {}, .scale = 1 / sqrt(dk)});
//   r.out;          // [B, T, Hv, dv]
//   r.final_state;  // [B, Hv, dk, dv] f32: hand it back as .state to go on after T tokens
#pragma once

#include "core/tensor.h"

namespace cg {

struct GatedDeltaOptions {
  Tensor state{};         // [B, Hv, dk, dv] f32, the state before token 0; undefined: zeros
  bool l2norm_qk = true;  // L2-normalise q and k (fp32, eps 1e-6) inside the op
  double scale = 1.0;     // q's scale after the norm
};
struct GatedDeltaResult {
  Tensor out;          // [B, T, Hv, dv], v's dtype
  Tensor final_state;  // [B, Hv, dk, dv] f32 (a new tensor; options.state is not modified)
};

// q, k [B, T, Hk, dk]; v [B, T, Hv, dv] (one floating dtype, Hv % Hk == 0: value head h
// reads key head h / (Hv / Hk), transformers' repeat_interleave); g, beta [B, T, Hv] (any
// floating dtype, used in fp32). The math per token: DeviceKernels::gated_delta_rule
// (ops/kernels.h).
GatedDeltaResult gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& g, const Tensor& beta,
                                  const GatedDeltaOptions& options = {});

// x [B, T, C]; weight [C, K] or HF's conv1d weight [C, 1, K]; history [B, K-1, C] (the
// inputs before x[:, 0]) or undefined (zeros). out = act(causal depthwise conv), [B, T, C].
Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& history = {},
                     bool silu = true);

}  // namespace cg
