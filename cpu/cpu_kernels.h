// Why this file exists: the CPU's kernel table (ops/kernels.h's DeviceKernels), declared
// once so that each entry can be defined in the file of its family, beside the loops it
// runs (CpuKernels::binary in cpu/elementwise.cpp, CpuKernels::sum in cpu/reduce.cpp, ...).
// The table IS the implementation, as a candle backend implements its storage trait: an op
// reaches a CPU loop in two steps (op -> CpuKernels::x -> the loop), with no layer of
// free functions in between. cpu/cpu_kernels.cpp registers one instance when the library
// loads, so the op layer finds it through kernels_for(kCPU) like any other device's.
//
// Same contract as ops/kernels.h: inputs checked by the op (ops/*.cpp), `dim` already in
// [0, ndim), any strides unless an entry says otherwise; outputs contiguous, allocated on
// the inputs' device through the caching allocator (which lets the test fake device of
// tests/fake_kernels.h run these entries on memory of its own: it derives from this class,
// counts each call and calls the entry here). f64 computes in double; f32, bf16 and f16 in
// float (Note [Compute types], cpu/loops.h). Rows run in parallel when large
// (cpu/parallel.h); sums accumulate in double.
// Internal to the CPU device: not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/attention_mask.h"
#include "ops/kernels.h"

namespace cg::cpu {

class CpuKernels : public DeviceKernels {
 public:
  DeviceType type() const override;  // cpu/cpu_kernels.cpp

  // ---- elementwise (cpu/elementwise.cpp; one element's formula in ops/elementwise_formulas.h) --
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override;
  Tensor unary(UnaryOp op, const Tensor& a, double s) override;
  // out = cond ? a : b with numpy broadcasting of all three; cond is bool, a and b share a
  // floating dtype (where, masked_fill and both their backwards).
  Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha) override;
  void inplace_scalar(UnaryOp op, const Tensor& dst, double s) override;  // dst = op(dst, s)
  // dst += value * a * b (divide = false) or dst += value * a / b (divide = true).
  void addcmul(const Tensor& dst, const Tensor& a, const Tensor& b, double value,
               bool divide) override;

  // ---- reductions (cpu/reduce.cpp); outputs keep the reduced dim as 1 (callers squeeze) --
  // scale * sum of a over the dims where reduce[d] is true; keepdim keeps them as 1.
  Tensor sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim, double scale) override;
  // sum of a^2 (a contiguous), in blocks of kSumBlock added in order, as a [] compute-dtype
  // tensor.
  Tensor sum_of_squares(const Tensor& a) override;
  // Indices (i64) of the maximum of each row along `dim`: the first one on ties; a NaN
  // counts as the maximum (the first NaN). When `values` is given it receives the maxima
  // (a's dtype). a.shape()[dim] must be > 0.
  Tensor max_along_dim(const Tensor& a, int64_t dim, Tensor* values) override;
  // log(sum(exp(a))) along `dim`, shifted by the row max so 1e4 does not overflow; an
  // all -inf (or empty) row gives -inf.
  Tensor logsumexp_along_dim(const Tensor& a, int64_t dim) override;
  // A tensor of `shape`: zeros, except src[r] at position index[r] along `dim` of each
  // row r. src and index have `shape` with dim as 1 (max's backward).
  Tensor scatter_along_dim(const Tensor& src, const Tensor& index, int64_t dim,
                           const Shape& shape) override;

  // ---- softmax along one dim (cpu/softmax.cpp) --------------------------------------------
  // softmax: exp(a - max) / sum(exp(a - max)); log_softmax (log = true):
  // (a - max) - log(sum(exp(a - max))). Each row is one pass for its max, one for its sum of
  // exponentials (in double), one to write.
  Tensor softmax(const Tensor& a, int64_t dim, bool log) override;
  // The gradient wrt the input from the gradient wrt the output and the output y:
  //   softmax:     y * (g - sum(g * y))
  //   log_softmax: g - exp(y) * sum(g)
  // sums along `dim`, per row.
  Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log) override;

  // ---- lm_head loss rows (cpu/head_loss_rows.cpp; the math per row in head_loss_rows.h) --
  // head_logits_dtype: the table's default (the compute dtype: the CPU has no fast 16-bit
  // GEMM output, so a chunk's logits are fp32 here).
  void head_loss_rows(const HeadRowsArgs& args) override;
  void check_labels(const Tensor& labels, int64_t vocab, int64_t ignore_index) override;
  void row_weights(const Tensor& labels, const Tensor& weights, int64_t ignore_index,
                   bool normalize, const Tensor& out) override;

  // ---- matrix products ----------------------------------------------------------------------
  // Batched: a [..., n, k] @ b [..., k, m] -> [batch..., n, m], batch dims broadcast; each
  // batch (or all of them folded into rows) one cpu::gemm (cpu/matmul.cpp).
  Tensor matmul(const Tensor& a, const Tensor& b) override;
  // cpu::gemm itself (cpu/gemm.h: OpenBLAS calls on deterministic tiles), and its scratch
  // bound for operands known by shape only (cpu/gemm.cpp).
  void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
            double beta) override;
  size_t gemm_scratch_bytes(const GemmDesc& desc) const override;

  // ---- transformer pieces -------------------------------------------------------------------
  // rms_norm (cpu/norm.cpp): y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) per row;
  // x [..., D]; weight [D] or undefined (no scale).
  RmsNormForward rms_norm_forward(const Tensor& x, const Tensor& weight, double eps) override;
  // With gw = grad * w, per row:  dx = rstd * (gw - x * rstd^2 * mean(gw * x)),
  // dweight = sum over rows of grad * x * rstd (accumulated in double). weight may be
  // undefined when only dweight is asked for (it is not read then).
  RmsNormGrads rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                 const Tensor& rstd, bool need_dx, bool need_dweight) override;
  // Rotary embedding (cpu/rotary.cpp), rotate_half convention: pairs (i, i + hd/2).
  // x [..., S, H, hd]; positions: contiguous i64 broadcastable to x.shape[:-2]. Rotates each
  // pair by angle pos * theta^(-2i/hd) (by minus that angle when inverse: the backward).
  Tensor rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse) override;
  // swiglu (cpu/swiglu.cpp): out = silu(gate) * up.
  Tensor swiglu_forward(const Tensor& gate, const Tensor& up) override;
  SwigluGrads swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                              bool need_dgate, bool need_dup) override;
  // Gated DeltaNet (cpu/gated_delta.cpp; the math in ops/kernels.h): the plain recurrence,
  // one token after another, in fp32 (double for f64), one (batch row, value head) per
  // task; the causal depthwise conv1d, one (batch row, time) row of channels per task.
  Tensor gated_delta_rule(const GatedDeltaArgs& args) override;
  Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& history,
                       bool silu) override;
  // Mixture of experts (cpu/moe.cpp; the math and its rounding in Note [MoE rounding],
  // ops/kernels.h): the router's softmax top-k row by row; the experts as transformers'
  // eager loop, built from this table's index_select, gemm, swiglu_forward, binary and
  // index_add.
  MoeRouting moe_route(const Tensor& router_logits, int64_t top_k) override;
  Tensor moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                     const MoeRouting& routing) override;
  // scaled_dot_product_attention (cpu/attention.cpp): q [B, Hq, Sq, hd], k and v
  // [B, Hkv, Sk, hd], any strides, one floating dtype. The backward recomputes the
  // probabilities row by row from `lse` (no [Sq, Sk] buffer).
  AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const ResolvedAttentionMask& mask, double scale) override;
  AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const ResolvedAttentionMask& mask, double scale, bool need_dq,
                                    bool need_dk, bool need_dv) override;

  // ---- indexing (cpu/index.cpp) ---------------------------------------------------------------
  // Gathers are pure data movement (any dtype, copied as raw bits); scatter-adds accumulate
  // in the compute type, and into an fp32 buffer for bf16/f16 so repeated indices round
  // once. Index tensors are i32 or i64 with any strides.
  // out = x with dim `dim` replaced by idx (1-D or 0-d): out[.., j, ..] = x[.., idx[j], ..].
  Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx) override;
  // dst[.., idx[j], ..] += src[.., j, ..], skipping j where idx[j] == skip (-1: none).
  // dst floating (it is updated in place), src of dst's dtype.
  void index_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                 int64_t skip) override;
  // out[i][j][k] = x[i][idx[i][j][k]][k] for dim = 1 (PyTorch gather); out has idx's shape.
  Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx) override;
  // dst[i][idx[i][j][k]][k] += src[i][j][k] for every index of idx (PyTorch scatter_add_).
  void scatter_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src) override;
  // Throws unless every value of idx is in [0, bound), on the host. The message names the
  // op, the bad value, its position in idx and `what` the bound is ("the weight's 10 rows");
  // `noun` names an index in the message ("id", "index").
  void check_indices(const char* op, const char* noun, const Tensor& idx, int64_t bound,
                     const std::string& what) override;

  // ---- optimiser (cpu/adamw.cpp) --------------------------------------------------------------
  void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                  const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                  const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                  const AdamWArgs& args) override;
};

}  // namespace cg::cpu
