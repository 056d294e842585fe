// Why this file exists: the leaf modules a transformer block is made of besides Linear
// (linear.h) -- Embedding, RMSNorm, rotary position embedding. Each owns its parameters
// under the Hugging Face names and forwards to one op, inside its trace scope.
#pragma once

#include <cstdint>

#include "nn/linear.h"

namespace cg::nn {

// out[..., :] = weight[ids[...], :].  weight [num, dim] initialised N(0, 1) as PyTorch's
// nn.Embedding; ids i64 or i32 of any shape.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, InitOptions init = {});
  Tensor forward(const Tensor& ids) const;
  int64_t num_embeddings() const { return weight.size(0); }
  int64_t embedding_dim() const { return weight.size(1); }

  Tensor weight;
};

// y = x / sqrt(mean(x^2, last dim) + eps) * weight.  weight [dim], initialised to ones.
// zero_centred (Qwen3.5): y = x / sqrt(...) * (1 + weight) with weight initialised to zeros,
// computed in fp32 and rounded once to x's dtype (Note [Zero-centred RMSNorm], layers.cpp).
class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps = 1e-6, InitOptions init = {}, bool zero_centred = false);
  Tensor forward(const Tensor& x) const;
  double eps() const { return eps_; }
  bool zero_centred() const { return zero_centred_; }

  Tensor weight;

 private:
  double eps_;
  bool zero_centred_;
};

// Rotary position embedding (Qwen3 / HF rotate_half convention) with base theta over
// head_dim (for partial rotary, the rotated dims only: Attention narrows each head to them). No parameters and no cached table: apply_rotary builds cos/sin for exactly
// the positions it is given, which for DFlash are arbitrary (context keys at 0..S-1,
// block tokens at anchor+k).
class RotaryEmbedding : public Module {
 public:
  RotaryEmbedding(int64_t head_dim, double theta);
  // x [..., S, H, head_dim]; positions i64 [S] or broadcastable to x.shape[:-2].
  Tensor forward(const Tensor& x, const Tensor& positions) const;
  // The angles' frequencies theta^(-2i/head_dim), i < head_dim/2, as f64 [head_dim/2]
  // (HF's inv_freq), for references and tests.
  Tensor inv_freq() const;
  // i64 [length]: start, start+1, ... (the usual positions).
  static Tensor positions(int64_t start, int64_t length, Device device = {});
  int64_t head_dim() const { return head_dim_; }
  double theta() const { return theta_; }

 private:
  int64_t head_dim_;
  double theta_;
};

}  // namespace cg::nn
