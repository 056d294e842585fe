// Why this file exists: the CPU's mixture-of-experts kernels (CpuKernels::moe_route and
// CpuKernels::moe_experts, cpu/cpu_kernels.h): the reference every other device is checked
// against, written as transformers' eager Qwen3.5-MoE code reads so that the f32 goldens
// stay tight and the bf16 ones round where transformers rounds (Note [MoE rounding],
// ops/kernels.h).
//
// moe_route, per token row: fp32 (double for f64) softmax over the experts, k rounds of
// "largest remaining, lower index on ties", the chosen probabilities divided by their sum.
// moe_experts, transformers' loop: for each expert that some token chose, ascending, its
// rows of x gathered (index_select), one GEMM on the expert's gate_up slice (a transposed
// view, read in place), silu(gate) * up (swiglu_forward, the gate half first), one GEMM on
// down, times the routing weight rounded to x's dtype, added into a zero buffer of x's
// dtype (index_add). Each piece is this table's own entry, so its threads and rounding are
// the ones every other op gets.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/parallel.h"

namespace cg::cpu {

namespace {

// The top k of probs[0..E) into (value, index) pairs, descending, lower index on ties.
template <typename C>
void top_k_of_row(const C* probs, int64_t E, int64_t k, C* values, int32_t* indices,
                  std::vector<char>& taken) {
  taken.assign(static_cast<size_t>(E), 0);
  for (int64_t s = 0; s < k; ++s) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      if (taken[e]) continue;
      if (best < 0 || probs[e] > probs[best]) best = e;  // strict: the first maximum stays
    }
    taken[best] = 1;
    values[s] = probs[best];
    indices[s] = static_cast<int32_t>(best);
  }
}

}  // namespace

MoeRouting CpuKernels::moe_route(const Tensor& logits, int64_t top_k) {
  const int64_t N = logits.size(0), E = logits.size(1);
  const DType weight_dtype = compute_dtype_of(logits.dtype());
  MoeRouting r{raw::empty({N, top_k}, weight_dtype, logits.device()),
               raw::empty({N, top_k}, DType::i32, logits.device())};
  dispatch_floating(logits.dtype(), "moe_route", [&]<typename Elem>() {
    using C = compute_t<Elem>;
    const Elem* pl = logits.data<Elem>();
    C* pw = r.weights.data<C>();
    int32_t* pi = r.indices.data<int32_t>();
    parallel_range(N, N * E, [&](int64_t begin, int64_t end) {
      std::vector<C> probs(static_cast<size_t>(E));
      std::vector<char> taken;
      for (int64_t n = begin; n < end; ++n) {
        const Elem* row = pl + n * E;
        C max = load(row);
        for (int64_t e = 1; e < E; ++e) max = std::max(max, load(row + e));
        C sum = 0;
        for (int64_t e = 0; e < E; ++e) {
          probs[e] = std::exp(load(row + e) - max);
          sum += probs[e];
        }
        for (int64_t e = 0; e < E; ++e) probs[e] /= sum;
        C* w = pw + n * top_k;
        top_k_of_row(probs.data(), E, top_k, w, pi + n * top_k, taken);
        C chosen = 0;
        for (int64_t s = 0; s < top_k; ++s) chosen += w[s];
        for (int64_t s = 0; s < top_k; ++s) w[s] /= chosen;
      }
    });
  });
  return r;
}

Tensor CpuKernels::moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                               const MoeRouting& routing) {
  const int64_t N = x.size(0), H = x.size(1), E = gate_up.size(0), I = gate_up.size(1) / 2;
  const int64_t k = routing.indices.size(1);
  // Each expert's (token, slot) pairs, slot-major as transformers' torch.where over the
  // expert's [k, N] mask (the order changes nothing: a token meets an expert at most once).
  std::vector<std::vector<std::pair<int32_t, int64_t>>> rows(static_cast<size_t>(E));
  const int32_t* pi = routing.indices.data<int32_t>();
  for (int64_t s = 0; s < k; ++s)
    for (int64_t n = 0; n < N; ++n)
      rows[pi[n * k + s]].push_back({static_cast<int32_t>(n), n * k + s});

  Tensor out = raw::empty({N, H}, x.dtype(), x.device());
  raw::fill_(out, 0.0);
  for (int64_t e = 0; e < E; ++e) {
    const auto& hit = rows[e];
    if (hit.empty()) continue;
    const int64_t R = static_cast<int64_t>(hit.size());
    Tensor tokens = raw::empty({R}, DType::i32, x.device());
    Tensor weight = raw::empty({R, 1}, x.dtype(), x.device());  // the routing weight, rounded
    for (int64_t j = 0; j < R; ++j) {
      tokens.data<int32_t>()[j] = hit[j].first;
      raw::store_element(
          static_cast<char*>(weight.data_ptr()) + j * element_size(x.dtype()), x.dtype(),
          raw::load_element(static_cast<const char*>(routing.weights.data_ptr()) +
                                hit[j].second * element_size(routing.weights.dtype()),
                            routing.weights.dtype()));
    }
    const Tensor xs = CpuKernels::index_select(x, 0, tokens);  // [R, H]
    const Tensor gate_up_e = raw::transpose(raw::squeeze(raw::narrow(gate_up, 0, e, 1), 0), 0, 1);
    Tensor gu = raw::empty({R, 2 * I}, x.dtype(), x.device());
    CpuKernels::gemm(xs, gate_up_e, gu, 1.0, 0.0);  // [R, 2I]
    const Tensor act =
        CpuKernels::swiglu_forward(raw::narrow(gu, 1, 0, I), raw::narrow(gu, 1, I, I));
    const Tensor down_e = raw::transpose(raw::squeeze(raw::narrow(down, 0, e, 1), 0), 0, 1);
    Tensor y = raw::empty({R, H}, x.dtype(), x.device());
    CpuKernels::gemm(act, down_e, y, 1.0, 0.0);  // [R, H]
    CpuKernels::index_add(out, 0, tokens, CpuKernels::binary(BinaryOp::mul, y, weight), -1);
  }
  return out;
}

}  // namespace cg::cpu
