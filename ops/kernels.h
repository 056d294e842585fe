// Why this file exists: the one place where a device meets the op layer. Every op file
// (ops/*.cpp) checks its inputs, records its autograd node and calls an entry of the
// DeviceKernels table of its inputs' device; no op file names a device or includes a
// device's headers. A device is one table: the CPU registers cpu/cpu_kernels.cpp,
// the CUDA backend registers its own from cuda/ (as core/backend.h's DeviceBackend does
// for memory), and tests register a fake one. Entries that are not implemented on a
// device throw "<entry> is not implemented on <device> yet" (the defaults below), so a
// table can grow one entry at a time.
//
// Contract of every entry (what the op layer guarantees before calling):
//   - inputs are defined, on this table's device, of the dtypes the entry lists, with
//     shapes already checked (the op names the user's mistake; an entry never has to);
//   - inputs may have any strides unless the entry says "contiguous";
//   - outputs an entry allocates are contiguous, on the inputs' device, allocated through
//     the caching allocator (so every byte shows in the stats and the trace);
//   - "compute dtype" (compute_dtype_of): f64 for f64 inputs, f32 for f32, bf16 and f16.
//     16-bit values are stored 16-bit and computed in fp32, rounded once on store.
//   - Checks that read tensor data (label and index ranges) are entries too, so a device
//     checks on the device.
// Fill, strided copy and dtype conversion are core/ device primitives (core/backend.h),
// used through core/views.h, because core's factories and copies need them too.
//
// Note [One compute stream]: every entry of a device runs on that device's current stream
// (core/stream_guard.h: the compute stream unless a StreamGuard names a side stream), in
// call order, and returns without waiting for the device unless the entry says it reads a
// result on the host (the checks do). Tensors an entry makes come from the current
// stream's pool of the caching allocator (Note [Streams], core/caching_allocator.h).
//
// Note [Side streams]: a device may run work on side streams beside its compute stream
// (side_streams() > 0), so that one kernel overlaps another (the fused head loss's row
// pass beside the next chunk's GEMMs: Note [Pipelined chunks], ops/fused_head_loop.cpp).
// The caller orders the streams with stream_wait, never with a host wait, and joins every
// side stream back into the compute stream before it returns, so whoever runs next (on the
// compute stream, or the host after synchronize()) sees all of its work. A device whose
// work runs in call order anyway (the host) reports 0 and is never asked to wait.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/attention_mask.h"
#include "ops/loss_config.h"

namespace cg {

// ---- what the entries compute ----------------------------------------------------------

// Elementwise binary ops; out = op(a, b) with numpy broadcasting.
enum class BinaryOp {
  add,            // a + b
  sub,            // a - b
  mul,            // a * b
  relu_backward,  // b > 0 ? a : 0  (a = gradient, b = relu's output)
  div,            // a / b
  pow,            // a ^ b
  xlogy,          // a == 0 ? 0 : a * log(b)  (pow's exponent gradient: out * log(base))
  // Backward of a unary op: a = the gradient, b = what the op saved (y = its output,
  // x = its input). Formulas in ops/elementwise_formulas.h.
  sqrt_backward,       // a * 0.5 / y
  rsqrt_backward,      // a * -0.5 * y^3
  tanh_backward,       // a * (1 - y^2)
  sigmoid_backward,    // a * y * (1 - y)
  silu_backward,       // a * s * (1 + x (1 - s)),  s = sigmoid(x)
  gelu_backward,       // a * (Phi(x) + x phi(x))
  gelu_tanh_backward,  // a * d/dx of gelu's tanh approximation
};
// Elementwise unary ops with one scalar parameter s.
enum class UnaryOp {
  neg,         // -a
  scale,       // a * s
  add_scalar,  // a + s
  relu,        // max(a, 0)
  exp,         // e^a
  log,         // ln a
  sqrt,        // a^(1/2)
  rsqrt,       // a^(-1/2)
  pow,         // a^s
  tanh,        // tanh a
  sigmoid,     // 1 / (1 + e^-a)
  silu,        // a * sigmoid(a)
  gelu,        // 0.5 a (1 + erf(a / sqrt 2))
  gelu_tanh,   // 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
};
// In-place updates of dst (src broadcast to dst's shape).
enum class InplaceOp {
  add,   // dst += alpha * src
  mul,   // dst *= src
  copy,  // dst = src
};

inline DType compute_dtype_of(DType storage) {
  return storage == DType::f64 ? DType::f64 : DType::f32;
}

// ---- argument and result structs ---------------------------------------------------------

struct RmsNormForward {
  Tensor out;   // like x, contiguous
  Tensor rstd;  // [rows] compute dtype
};
struct RmsNormGrads {
  Tensor dx;       // like x (when asked)
  Tensor dweight;  // [D] in x's dtype (when asked)
};
struct SwigluGrads {
  Tensor dgate, dup;  // each only when asked
};
struct AttentionForward {
  Tensor out;  // [B, Hq, Sq, hd], q's dtype
  Tensor lse;  // [B, Hq, Sq] compute dtype; -inf on a row that sees no key
};
struct AttentionGrads {
  Tensor dq, dk, dv;  // contiguous, the inputs' shapes and dtype; undefined when not asked
};

// One gated delta rule (Gated DeltaNet's recurrence, ops/gated_delta.h) over T tokens:
// for each batch row b and value head h (key head kh = h / (Hv / Hk)), with S the state
// [dk, dv] in fp32, per token t:
//   qn = l2norm(q) * scale, kn = l2norm(k)   (l2norm only when l2norm_qk; fp32, eps 1e-6)
//   S  = exp(g_t) S;  S += kn (beta_t (v_t - S^T kn))^T;  out_t = S^T qn
struct GatedDeltaArgs {
  Tensor q, k;   // [B, T, Hk, dk] floating, contiguous
  Tensor v;      // [B, T, Hv, dv] q's dtype, contiguous; Hv a multiple of Hk
  Tensor g;      // [B, T, Hv] f32 contiguous: log decay per token (<= 0)
  Tensor beta;   // [B, T, Hv] f32 contiguous
  Tensor state;  // [B, Hv, dk, dv] f32 contiguous: the initial state, overwritten with the final
  bool l2norm_qk = true;
  double scale = 1.0;  // q's scale after the norm (dk^-0.5 in Qwen3.5)
};

// Note [MoE rounding]: a mixture-of-experts layer (Qwen3.5-MoE, ops/moe.h) as two entries.
// moe_route(router_logits [N, E], top_k):
//   probs = softmax(logits) over the E experts, in fp32 (f64 for f64 logits);
//   the top_k largest probs per row, descending, ties to the lower expert index;
//   weights = those probs / their sum, in fp32 (always renormalised, as transformers'
//   qwen3_5_moe router does). weights [N, k] f32 (f64 for f64 logits), indices [N, k] i32.
// moe_experts(x [N, H], gate_up [E, 2I, H], down [E, H, I], routing):
//   out[n] = sum over slots s of w[n, s] * down[e] @ (silu(gate_up[e][:I] @ x[n]) *
//                                                     (gate_up[e][I:] @ x[n])),  e = idx[n, s]
//   with the gate rows first in gate_up (not interleaved). out [N, H] in x's dtype.
// Where 16-bit values round (f32/f64 inputs round nowhere but in their own arithmetic):
//   - every device rounds w to x's dtype before using it (transformers casts the router's
//     weights to the model dtype);
//   - the CPU follows transformers' eager loop: experts ascending, each expert's rows
//     gathered, gate_up GEMM (rounded to x's dtype), silu(gate) * up (fp32, rounded once),
//     down GEMM (rounded), times w (rounded), added into a zero [N, H] buffer of x's dtype
//     (rounded after each add): a token's k contributions add in x's dtype, in ascending
//     expert order;
//   - another device may sum a token's k weighted contributions (each down GEMM row rounded
//     to x's dtype, times w rounded to x's dtype) in fp32, rounding once on store (the CUDA
//     one does): compare it with the CPU at the 16-bit tolerance, and in f32/f64 up to
//     summation order.
// Rows with an index outside [0, E) never reach an entry (the op checks them).
struct MoeRouting {
  Tensor weights;  // [N, k] f32 (f64 for f64 logits), each row renormalised to sum 1
  Tensor indices;  // [N, k] i32, distinct experts per row, in descending weight order
};

// A gemm's operands by shape only (to size buffers before any exist): out [m, n] =
// a [m, k] @ b [k, n]; `dense` = the operand already has a unit stride in one dim.
struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;
  DType a = DType::f32, b = DType::f32, out = DType::f32;
  bool a_dense = true, b_dense = true, out_dense = true;
};

// One chunk of lm_head loss rows (cpu/head_loss_rows.h has the math per row).
// One AdamW update (entry adamw_step). Defaults are PyTorch's.
struct AdamWArgs {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;
};

struct HeadRowsArgs {
  Tensor logits;   // [C, V] contiguous, dtype head_logits_dtype(); softcapped in place,
                   // then overwritten with grad_scale[i] * d loss_i / d logits_i
                   // when want_grad
  Tensor teacher;  // [C, V] like logits, or undefined; softcapped in place
  Tensor labels;   // [C] i64 contiguous, or undefined; values already checked
  LossConfig config;
  bool want_grad = false;
  Tensor grad_scale;  // [C] compute dtype contiguous, or undefined (scale 1)
  // Per-row outputs, each [C] contiguous and optional (undefined = not wanted):
  Tensor loss, lse, entropy;      // compute dtype
  Tensor argmax, teacher_argmax;  // i64
};

// ---- the table ---------------------------------------------------------------------------

class DeviceKernels {
 public:
  virtual ~DeviceKernels() = default;
  virtual DeviceType type() const = 0;

  // -- elementwise (a, b: one floating dtype; cond: bool) --
  virtual Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
  virtual Tensor unary(UnaryOp op, const Tensor& a, double s);
  virtual Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
  // dst (no broadcast dims) updated in place; src broadcast to dst, dst's dtype.
  virtual void inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha);
  virtual void inplace_scalar(UnaryOp op, const Tensor& dst, double s);  // dst = op(dst, s)
  // dst += value * a * b (divide false) or value * a / b (divide true).
  virtual void addcmul(const Tensor& dst, const Tensor& a, const Tensor& b, double value,
                       bool divide);

  // -- reductions (dim in [0, ndim); reduced dims kept as 1) --
  // scale * sum of a over the dims where reduce[d]; keepdim keeps them as 1.
  virtual Tensor sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim, double scale);
  // sum of a[i]^2 over every element (a contiguous, floating), accumulated in double in a
  // fixed order, as a [] tensor of a's compute dtype (f32; f64 for f64): one read of a
  // gradient for the global norm, no cast or square temporaries.
  virtual Tensor sum_of_squares(const Tensor& a);
  // i64 argmax along dim (first on ties, NaN wins); `values` receives the maxima if given.
  virtual Tensor max_along_dim(const Tensor& a, int64_t dim, Tensor* values);
  virtual Tensor logsumexp_along_dim(const Tensor& a, int64_t dim);
  // zeros of `shape` except src at index along dim (max's backward).
  virtual Tensor scatter_along_dim(const Tensor& src, const Tensor& index, int64_t dim,
                                   const Shape& shape);

  // -- softmax along dim (log = log_softmax) and its backward from the output y --
  virtual Tensor softmax(const Tensor& a, int64_t dim, bool log);
  virtual Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log);

  // -- lm_head loss rows --
  // The dtype this device wants a chunk's logits in, for inputs of `input` dtype (the CPU
  // wants its compute dtype; a GPU keeps 16-bit logits and computes in fp32).
  virtual DType head_logits_dtype(DType input) const;
  virtual void head_loss_rows(const HeadRowsArgs& args);
  // Throws naming the first row whose label is neither ignore_index nor in [0, V).
  virtual void check_labels(const Tensor& labels, int64_t vocab, int64_t ignore_index);
  // out [N] (floating, contiguous) = weights[i] (1 when undefined), 0 where labels[i] ==
  // ignore_index; labels and weights [N] may each be undefined. normalize: then divided by
  // their sum (all 0 when the sum is 0), the weights of a mean.
  virtual void row_weights(const Tensor& labels, const Tensor& weights, int64_t ignore_index,
                           bool normalize, const Tensor& out);

  // -- matrix products --
  // a [..., n, k] @ b [..., k, m], batch dims broadcast; one floating dtype.
  virtual Tensor matmul(const Tensor& a, const Tensor& b);
  // out [M, N] = alpha * a [M, K] @ b [K, N] + beta * out. 2-D operands, each with a unit
  // stride in one dim (transposed views pass as they are); floating dtypes, mixed allowed
  // (compute in f64 only when all are f64). beta == 0: out is not read.
  virtual void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta);
  // Upper bound of the allocator bytes gemm takes for such operands (workspace, tiles).
  virtual size_t gemm_scratch_bytes(const GemmDesc& desc) const;

  // -- streams (Note [Side streams]) --
  // How many side streams, ids 1 .. n, the device runs beside its compute stream (0: one
  // queue, in call order, as on the host; callers then make no StreamGuard).
  virtual int side_streams() const;
  // Work queued on `waiter` of `device` from now on starts after all the work queued on
  // `producer` so far. The host does not wait. Nothing to do for a device with one queue.
  virtual void stream_wait(Device device, StreamId waiter, StreamId producer);

  // -- transformer pieces --
  virtual RmsNormForward rms_norm_forward(const Tensor& x, const Tensor& weight, double eps);
  virtual RmsNormGrads rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                         const Tensor& rstd, bool need_dx, bool need_dweight);
  // x [..., S, H, hd]; positions i64 contiguous, broadcastable to x.shape[:-2].
  virtual Tensor rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse);
  virtual Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
  virtual SwigluGrads swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                                      bool need_dgate, bool need_dup);
  // Note GatedDeltaArgs; returns out [B, T, Hv, dv] in v's dtype. A device may pick its
  // algorithm by T (chunked for prefill, recurrent for a few tokens).
  virtual Tensor gated_delta_rule(const GatedDeltaArgs& args);
  // Causal depthwise conv1d over time: x [B, T, C] contiguous, weight [C, K] (x's dtype),
  // history [B, K-1, C] (x's dtype; the K-1 inputs before x[:, 0]) or undefined (zeros):
  //   out[b, t, c] = act(sum_j weight[c, j] * xx[b, t + j, c]),  xx = cat(history, x) on T
  // act = SiLU when silu, else identity; fp32 accumulation, out [B, T, C] in x's dtype.
  virtual Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& history,
                               bool silu);
  // Note [MoE rounding]. moe_route: router_logits [N, E] floating, contiguous, 1 <= top_k <=
  // E. moe_experts: x [N, H], gate_up [E, 2I, H], down [E, H, I] of one floating dtype, all
  // contiguous; routing as moe_route returns it (weights [N, k] f32 or f64, indices [N, k]
  // i32, contiguous, values in [0, E)).
  virtual MoeRouting moe_route(const Tensor& router_logits, int64_t top_k);
  virtual Tensor moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                             const MoeRouting& routing);
  virtual AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const ResolvedAttentionMask& mask, double scale);
  virtual AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q,
                                            const Tensor& k, const Tensor& v, const Tensor& out,
                                            const Tensor& lse, const ResolvedAttentionMask& mask,
                                            double scale, bool need_dq, bool need_dk, bool need_dv);

  // -- indexing (idx i32 or i64, values already checked) --
  virtual Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx);
  // dst[.., idx[j], ..] += src[.., j, ..], skipping j where idx[j] == skip (-1: none).
  virtual void index_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                         int64_t skip);
  virtual Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx);
  virtual void scatter_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src);
  // Throws unless every value of idx is in [0, bound); the message names `op`, the bad
  // value, its position and `what` the bound is. `noun` names one index ("id").
  virtual void check_indices(const char* op, const char* noun, const Tensor& idx, int64_t bound,
                             const std::string& what);

  // -- optimiser --
  // For each i: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr * (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + wd * w),
  // in fp32 on masters[i] (fp32) when defined, then params[i] = cast(master); else on params[i] (fp32) directly.
  // grads[i]: params[i]'s shape, any float dtype; grad_scale: undefined or a 1-element fp32 tensor on the device that multiplies every grad (clipping / accumulation), so no host sync.
  // params, masters, exp_avgs (fp32) and exp_avg_sqs (fp32) contiguous; grads any strides.
  virtual void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                          const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                          const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                          const AdamWArgs& args);

 protected:
  [[noreturn]] void missing(const char* entry) const;
};

// Every entry's name, in declaration order (the comparison harness checks it covers each).
const std::vector<std::string>& kernel_entry_names();

// Registration: a device's table registers itself once (a static object of its own
// translation unit); tests may swap a table and put the old one back.
void register_kernels(DeviceKernels* table);
// The table registered for `type` (nullptr when none); a test's swap returns the old one.
DeviceKernels* find_kernels(DeviceType type);
DeviceKernels* replace_kernels(DeviceType type, DeviceKernels* table);
// The table of `device`; throws "<op> is not implemented on <device> yet" when none.
DeviceKernels& kernels_for(Device device, const char* op);

}  // namespace cg
