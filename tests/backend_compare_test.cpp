// Why this file exists: one harness that checks every kernel-table entry (ops/kernels.h) of
// a device against the CPU table, after ggml's test-backend-ops: each case runs an op on
// the CPU and on the device from the same inputs -- odd shapes, non-contiguous views,
// every dtype the entry takes -- and compares the outputs and, through backward, the
// input gradients, within per-dtype tolerances.
//
// Which device: cuda:0 when a GPU is there (the CUDA table); otherwise a fake device
// (tests/fake_kernels.h) whose table runs the CPU kernels on memory of its own, counting
// calls. The fake proves the harness itself on any machine: that each case reaches the
// entries it names, that op files run device-neutrally, and (KernelTable.EveryEntryIsCovered)
// that the cases together call every entry of the table. No case names a device.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/factories.h"
#include "core/views.h"
#include "fake_kernels.h"
#include "ops/gated_delta.h"
#include "ops/head_loss.h"
#include "ops/kernels.h"
#include "ops/loss.h"
#include "ops/moe.h"
#include "ops/ops.h"
#include "ops/optim.h"

namespace cg {
namespace {

// ---- inputs -------------------------------------------------------------------------------

struct InputSpec {
  enum Kind { floating, index, boolean } kind = floating;
  Shape shape;
  bool transposed = false;  // a transposed view of a contiguous tensor (last two dims)
  bool grad = true;         // floating inputs: a leaf that requires grad
  int64_t bound = 0;        // index: values in [0, bound); a -1 bound adds ignore rows (-100)
  double low = -1.0, high = 1.0;
};

InputSpec f(Shape shape, bool transposed = false) {
  return {InputSpec::floating, shape, transposed};
}
InputSpec positive(Shape shape) {
  InputSpec s{InputSpec::floating, shape};
  s.low = 0.5;
  s.high = 2.0;
  return s;
}
InputSpec constant(Shape shape) {
  InputSpec s{InputSpec::floating, shape};
  s.grad = false;
  return s;
}
InputSpec weights(Shape shape) {  // positive constants
  InputSpec s = positive(shape);
  s.grad = false;
  return s;
}
InputSpec idx(Shape shape, int64_t bound) { return {InputSpec::index, shape, false, false, bound}; }
InputSpec mask(Shape shape) { return {InputSpec::boolean, shape, false, false}; }

// The same values on every device: drawn on the CPU from a seed, then moved.
Tensor make_input(const InputSpec& s, DType dtype, Device device, uint64_t seed) {
  Generator gen(seed);
  Shape base_shape = s.shape;
  if (s.transposed) std::swap(base_shape[base_shape.size() - 1], base_shape[base_shape.size() - 2]);
  Tensor base;
  if (s.kind == InputSpec::index) {
    std::vector<int64_t> v(static_cast<size_t>(shape_numel(base_shape)));
    const int64_t bound = std::abs(s.bound);
    for (auto& x : v) {
      x = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(bound));
      if (s.bound < 0 && gen.uniform() < 0.2) x = -100;  // ignore_index rows
    }
    base = from_ints(v, base_shape);
  } else if (s.kind == InputSpec::boolean) {
    std::vector<double> v(static_cast<size_t>(shape_numel(base_shape)));
    for (auto& x : v) x = gen.uniform() < 0.6 ? 1.0 : 0.0;
    base = from_vector(v, base_shape, {.dtype = DType::boolean});
  } else {
    base = rand(base_shape, {.dtype = DType::f64}, &gen, s.low, s.high);
    base = raw::to_dtype(base, dtype);
  }
  base = raw::to_device(base, device);
  Tensor t = s.transposed ? raw::transpose(base, -1, -2) : base;
  if (s.kind == InputSpec::floating && s.grad) t.requires_grad_();
  return t;
}

// ---- cases --------------------------------------------------------------------------------

using Run = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Case {
  std::string name;
  std::vector<std::string> entries;  // the table entries this case reaches
  std::vector<DType> dtypes;
  std::vector<InputSpec> inputs;
  Run run;
  // The entries compute in fp32 whatever the storage dtype (AdamW: fp32 masters and
  // moments), so an f64 case compares at fp32's tolerance: the CPU and the GPU may round
  // the fp32 steps differently (seen on the H200: 6e-8 apart).
  bool fp32_math = false;
};

const std::vector<DType> kAllFloat = {DType::f32, DType::f64, DType::bf16, DType::f16};
const std::vector<DType> kF32F64 = {DType::f32, DType::f64};

// chunk_rows 5: several chunks and a ragged last one; 0: sized from a small budget.
HeadLossResult head(const std::vector<Tensor>& in, HeadLossPath path, LossKind kind, bool metrics,
                    int64_t chunk_rows = 5) {
  HeadLossOptions o;
  o.path = path;
  o.loss.kind = kind;
  if (kind != LossKind::cross_entropy) o.loss.hard_ce_weight = 0.3f;
  o.chunk_rows = chunk_rows;
  o.chunk_budget_bytes = 3000;
  o.with_metrics = metrics;
  o.loss.softcap = 20.0f;
  o.pipelined = true;  // the fused cases run the pipelined loop where a side stream exists
  HeadLossInputs hi{in[0], in[1], in[2], in[3], Tensor(), Tensor()};
  if (kind != LossKind::cross_entropy) hi.teacher_hidden = in[4];
  return head_loss(hi, o);
}

// Note [Argmax of 16-bit logits]: the fused path computes a chunk's logits in the device's
// head_logits_dtype (ops/kernels.h): f32 on the CPU, the inputs' 16-bit dtype on a GPU. Two
// logits a few f32 ulps apart can round to one bf16 value, and then the first of them is
// the argmax on the GPU while the CPU sees the larger: a tie, not a bug. The naive and
// chunked paths round the logits alike on every device, so their argmax is compared.
bool argmax_may_tie(HeadLossPath path, const Tensor& hidden) {
  return path == HeadLossPath::fused && is_half(hidden.dtype());
}

// rms_norm and rotary at the sizes of a training step and in every layout their CUDA
// kernels tell apart (Note [Row groups] in cuda/row_groups.cuh): qk-norm's D 128 over more
// rows than one wave of groups holds (grid-stride), hidden widths that take a block per
// row, row starts a view strides apart (16-byte packs), unaligned ones and a strided last
// dim (the general path). An output transposed before the loss hands its backward a
// strided gradient.
const std::vector<DType> kF32Bf16 = {DType::f32, DType::bf16};

void add_row_kernel_cases(std::vector<Case>& c) {
  c.push_back(
      {"rms_norm_narrow_rows",
       {"rms_norm_forward", "rms_norm_backward"},
       kF32Bf16,
       {f({70000, 128}), f({128}), f({350, 200, 256}), f({128}), f({70000, 128}, true), f({128})},
       [](auto& x) {
         const Tensor q = narrow(x[2], 2, 0, 128);  // rows 256 apart, packs
         return std::vector<Tensor>{rms_norm(x[0], x[1], 1e-6),
                                    transpose(rms_norm(q, x[3], 1e-6), 0, 1),
                                    transpose(rms_norm(x[4], x[5], 1e-6), 0, 1)};
       }});
  c.push_back(
      {"rms_norm_wide_rows",
       {"rms_norm_forward", "rms_norm_backward"},
       kF32Bf16,
       {f({1100, 5120}), f({5120}), f({3, 500, 1544}), f({1536}), f({1500, 1536}, true), f({1536})},
       [](auto& x) {
         const Tensor packed = narrow(x[2], 2, 8, 1536);  // 16-byte aligned rows
         const Tensor unaligned = narrow(x[2], 2, 1, 1536);
         return std::vector<Tensor>{
             rms_norm(x[0], x[1], 1e-6), transpose(rms_norm(packed, x[3], 1e-6), 0, 1),
             rms_norm(unaligned, Tensor(), 1e-6), rms_norm(x[4], x[5], 1e-6)};
       }});
  // Widths between: a few lanes per row, a warp with 2 and 4 packs a lane, a block, a row
  // too long for registers, and widths that are no multiple of a pack.
  c.push_back({"rms_norm_widths",
               {"rms_norm_forward", "rms_norm_backward"},
               kAllFloat,
               {f({257, 1024}), f({1024}), f({257, 256}), f({33, 1001}), f({65, 24}), f({24}),
                f({3, 20000})},
               [](auto& x) {
                 return std::vector<Tensor>{
                     rms_norm(x[0], x[1], 1e-6), rms_norm(x[2], Tensor(), 1e-6),
                     rms_norm(x[3], Tensor(), 1e-6), rms_norm(x[4], x[5], 1e-6),
                     rms_norm(x[6], Tensor(), 1e-6)};
               }});
  c.push_back({"rotary_many_rows",
               {"rotary"},
               kF32Bf16,
               {f({2, 1024, 36, 128}), idx({1024}, 100000), f({2, 512, 40, 128}),
                idx({512}, 100000), f({2, 512, 36, 128}, true)},
               [](auto& x) {
                 const Tensor heads = narrow(x[2], 2, 0, 36);  // rows of q in a wider projection
                 return std::vector<Tensor>{apply_rotary(x[0], x[1], 1e6),
                                            transpose(apply_rotary(heads, x[3], 1e7), 1, 2),
                                            apply_rotary(x[4], x[3], 1e6)};
               }});
  c.push_back(
      {"rotary_head_dims",  // past the frequency table (hd 600), [B, S] positions
       {"rotary"},
       kAllFloat,
       {f({3, 5, 2, 600}), idx({5}, 100000), f({2, 3, 4, 256}), idx({2, 3}, 5000)},
       [](auto& x) {
         return std::vector<Tensor>{apply_rotary(x[0], x[1], 1e4), apply_rotary(x[2], x[3], 1e6)};
       }});
}

std::vector<Case> all_cases() {
  std::vector<Case> c;
  c.push_back({"binary_broadcast",
               {"binary", "sum"},
               kAllFloat,
               {f({3, 5, 7}), f({5, 1}, false)},
               [](auto& x) {
                 return std::vector<Tensor>{add(x[0], x[1]), sub(x[0], x[1]), mul(x[0], x[1])};
               }});
  c.push_back({"binary_div_pow",
               {"binary", "unary"},
               kF32F64,
               {f({4, 9}, true), positive({4, 9})},
               [](auto& x) {
                 return std::vector<Tensor>{div(x[0], x[1]), pow(x[1], x[0])};
               }});
  c.push_back({"unary_math", {"unary", "binary"}, kAllFloat, {positive({6, 11})}, [](auto& x) {
                 return std::vector<Tensor>{exp(x[0]),
                                            log(x[0]),
                                            sqrt(x[0]),
                                            rsqrt(x[0]),
                                            pow(x[0], 2.5),
                                            scale(x[0], -1.5),
                                            add_scalar(x[0], 0.25),
                                            neg(x[0])};
               }});
  c.push_back(
      {"unary_activations", {"unary", "binary"}, kAllFloat, {f({5, 13}, true)}, [](auto& x) {
         return std::vector<Tensor>{relu(x[0]), tanh(x[0]), sigmoid(x[0]),
                                    silu(x[0]), gelu(x[0]), gelu(x[0], GeluApproximation::tanh)};
       }});
  c.push_back({"where_masked_fill",
               {"where", "sum"},
               kAllFloat,
               {mask({4, 1, 6}), f({4, 3, 6}), f({3, 6})},
               [](auto& x) {
                 return std::vector<Tensor>{where(x[0], x[1], x[2]), masked_fill(x[1], x[0], -2.0)};
               }});
  c.push_back({"inplace",
               {"inplace", "inplace_scalar", "addcmul"},
               kAllFloat,
               {constant({4, 7}), constant({7}), weights({4, 7})},
               [](auto& x) {
                 Tensor d = raw::clone(x[0]);
                 add_(d, x[1], 0.5);
                 mul_(d, x[2]);
                 mul_(d, 1.25);
                 add_scalar_(d, -0.5);
                 addcmul_(d, x[2], x[1], 0.3);
                 addcdiv_(d, x[1], x[2], 0.7);
                 Tensor e = raw::clone(x[2]);
                 copy_(e, x[1]);
                 return std::vector<Tensor>{d, e};
               }});
  c.push_back({"reductions",
               {"sum", "max_along_dim", "logsumexp_along_dim", "scatter_along_dim"},
               kAllFloat,
               {f({5, 6, 7}, true)},
               [](auto& x) {
                 return std::vector<Tensor>{sum(x[0], {0, 2}),   mean(x[0], {1}, true),
                                            max(x[0], 1).values, argmax(x[0], 2),
                                            logsumexp(x[0], 0),  max(x[0])};
               }});
  c.push_back(
      {"softmax", {"softmax", "softmax_backward"}, kAllFloat, {f({3, 4, 9}, true)}, [](auto& x) {
         return std::vector<Tensor>{softmax(x[0], -1), log_softmax(x[0], 1)};
       }});
  c.push_back({"cross_entropy",
               {"head_logits_dtype", "head_loss_rows", "check_labels", "row_weights"},
               kAllFloat,
               {f({13, 37}), idx({13}, -37), weights({13})},
               [](auto& x) {
                 CrossEntropyOptions o;
                 o.weights = x[2];
                 o.label_smoothing = 0.1f;
                 o.z_loss = 1e-3f;
                 Tensor a = cross_entropy(x[0], x[1], o);
                 o.reduction = Reduction::none;
                 Tensor b = cross_entropy(x[0], x[1], o);
                 return std::vector<Tensor>{a, b};
               }});
  c.push_back({"kl_div",
               {"head_loss_rows", "row_weights"},
               kAllFloat,
               {f({11, 29}), constant({11, 29})},
               [](auto& x) {
                 KlDivOptions o;
                 o.temperature = 2.0f;
                 Tensor a = kl_div(x[0], x[1], o);
                 o.reverse = true;
                 return std::vector<Tensor>{a, kl_div(x[0], x[1], o)};
               }});
  c.push_back(
      {"matmul_batched", {"matmul"}, kAllFloat, {f({2, 3, 5, 7}, true), f({3, 7, 4})}, [](auto& x) {
         return std::vector<Tensor>{matmul(x[0], x[1])};
       }});
  for (HeadLossPath path : {HeadLossPath::naive, HeadLossPath::chunked, HeadLossPath::fused}) {
    const std::string p = head_loss_path_name(path);
    const std::string product = path == HeadLossPath::fused ? "gemm" : "matmul";
    // The fused cases run the pipelined loop where the device has a side stream.
    std::vector<std::string> streams;
    if (path == HeadLossPath::fused) streams = {"side_streams", "stream_wait"};
    auto with_streams = [&](std::vector<std::string> e) {
      e.insert(e.end(), streams.begin(), streams.end());
      return e;
    };
    c.push_back({"head_loss_ce_" + p,
                 with_streams({product, "head_loss_rows", "check_labels", "row_weights"}),
                 kAllFloat,
                 {f({17, 8}), f({23, 8}), idx({17}, -23), weights({17})},
                 [path](auto& x) {
                   HeadLossResult r = head(x, path, LossKind::cross_entropy, true);
                   if (argmax_may_tie(path, x[0]))
                     return std::vector<Tensor>{r.loss, r.per_token, r.lse};
                   return std::vector<Tensor>{r.loss, r.per_token, r.lse, r.argmax};
                 }});
    c.push_back({"head_loss_kl_frozen_" + p,
                 with_streams({product, "head_loss_rows"}),
                 kAllFloat,
                 {f({14, 8}), constant({23, 8}), idx({14}, 23), weights({14}), constant({14, 8})},
                 [path](auto& x) {
                   HeadLossResult r = head(x, path, LossKind::forward_kl, true);
                   if (argmax_may_tie(path, x[0])) return std::vector<Tensor>{r.loss, r.per_token};
                   return std::vector<Tensor>{r.loss, r.per_token, r.teacher_argmax};
                 }});
  }
  c.push_back({"head_loss_fused_trainable_budget",
               {"gemm", "gemm_scratch_bytes", "head_loss_rows"},
               kAllFloat,
               {f({19, 8}, true), f({23, 8}), idx({19}, -23), weights({19})},
               [](auto& x) {
                 HeadLossResult r = head(x, HeadLossPath::fused, LossKind::cross_entropy, false, 0);
                 return std::vector<Tensor>{r.loss, r.per_token};
               }});
  c.push_back({"rms_norm",
               {"rms_norm_forward", "rms_norm_backward"},
               kAllFloat,
               {f({3, 5, 16}), f({16})},
               [](auto& x) { return std::vector<Tensor>{rms_norm(x[0], x[1], 1e-5)}; }});
  c.push_back({"rotary", {"rotary"}, kAllFloat, {f({2, 5, 3, 8}), idx({5}, 1000)}, [](auto& x) {
                 return std::vector<Tensor>{apply_rotary(x[0], x[1], 1e4)};
               }});
  c.push_back({"swiglu",
               {"swiglu_forward", "swiglu_backward"},
               kAllFloat,
               {f({6, 10}, true), f({6, 10})},
               [](auto& x) { return std::vector<Tensor>{swiglu(x[0], x[1])}; }});
  c.push_back({"attention_causal_gqa",
               {"attention_forward", "attention_backward"},
               kAllFloat,
               {f({2, 4, 7, 8}), f({2, 2, 7, 8}), f({2, 2, 7, 8})},
               [](auto& x) {
                 return std::vector<Tensor>{
                     scaled_dot_product_attention(x[0], x[1], x[2], AttentionMask::causal())};
               }});
  c.push_back({"attention_dflash",
               {"attention_forward", "attention_backward"},
               kF32F64,
               {f({1, 2, 6, 4}), f({1, 2, 11, 4}), f({1, 2, 11, 4})},
               [](auto& x) {
                 const Tensor anchors = from_ints({2, 4}, {2});
                 const AttentionMask m = AttentionMask::dflash_blocks(5, 3, anchors);
                 return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2], m)};
               }});
  c.push_back({"attention_dflash_sliding",  // window 2 < block 3; anchors at 0 and the end
               {"attention_forward", "attention_backward"},
               kF32F64,
               {f({1, 4, 6, 4}), f({1, 2, 11, 4}), f({1, 2, 11, 4})},
               [](auto& x) {
                 const Tensor anchors = from_ints({0, 5}, {2});
                 const AttentionMask m = AttentionMask::dflash_blocks(5, 3, anchors, Tensor(), 2);
                 return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2], m)};
               }});
  // Gated DeltaNet (frozen-target ops: constant inputs, no backward). 4 value heads over 2
  // key heads, a nonzero initial state, log decays g in [-1, 0), beta in [0, 1); the conv
  // with a history, HF's [C, 1, K] weight and without SiLU.
  InputSpec log_decay = constant({2, 5, 4});
  log_decay.low = -1.0;
  log_decay.high = 0.0;
  InputSpec gate = constant({2, 5, 4});
  gate.low = 0.0;
  c.push_back({"gated_delta_rule",
               {"gated_delta_rule"},
               kAllFloat,
               {constant({2, 5, 2, 6}), constant({2, 5, 2, 6}), constant({2, 5, 4, 3}), log_decay,
                gate, constant({2, 4, 6, 3})},
               [](auto& x) {
                 const Tensor state = to_dtype(x[5], DType::f32);
                 GatedDeltaResult a =
                     gated_delta_rule(x[0], x[1], x[2], x[3], x[4], {.state = state, .scale = 0.4});
                 GatedDeltaResult b = gated_delta_rule(x[0], x[1], x[2], x[3], x[4],
                                                       {.l2norm_qk = false, .scale = 0.3});
                 return std::vector<Tensor>{a.out, a.final_state, b.out, b.final_state};
               },
               /*fp32_math=*/true});
  c.push_back({"causal_conv1d",
               {"causal_conv1d"},
               kAllFloat,
               {constant({2, 6, 5}), constant({5, 4}), constant({2, 3, 5})},
               [](auto& x) {
                 const Tensor hf_weight = unsqueeze(x[1], 1);  // [C, 1, K]
                 return std::vector<Tensor>{causal_conv1d(x[0], x[1], x[2]),
                                            causal_conv1d(x[0], hf_weight, Tensor(), false)};
               }});
  // Mixture of experts (frozen-target ops: constant inputs, no backward). 7 tokens over 6
  // experts, top 2: routing from the device's own moe_route, and a fixed routing with an
  // expert that no token chose; the weights, indices and the experts' sum all compared.
  c.push_back({"moe",
               {"moe_route", "moe_experts", "check_indices"},
               kAllFloat,
               {constant({7, 6}), constant({7, 5}), constant({6, 8, 5}), constant({6, 5, 4})},
               [](auto& x) {
                 const MoeRouting r = moe_route(x[0], 2);
                 const Tensor fixed_idx = raw::to_device(
                     from_ints({0, 2, 2, 0, 5, 4, 1, 0, 2, 5, 4, 0, 0, 1}, {7, 2}), x[0].device());
                 const MoeRouting fixed{raw::to_device(full({7, 2}, 0.5), x[0].device()),
                                        to_dtype(fixed_idx, DType::i32)};
                 return std::vector<Tensor>{r.weights, r.indices, moe_experts(x[1], x[2], x[3], r),
                                            moe_experts(x[1], x[2], x[3], fixed)};
               }});
  c.push_back({"indexing",
               {"index_select", "index_add", "gather", "scatter_add", "check_indices"},
               kAllFloat,
               {f({6, 5}, true), idx({4}, 6), idx({6, 3}, 5), f({6, 3})},
               [](auto& x) {
                 return std::vector<Tensor>{index_select(x[0], 0, x[1]), gather(x[0], 1, x[2]),
                                            scatter_add(x[0], 1, x[2], x[3])};
               }});
  c.push_back({"embedding",
               {"index_select", "index_add", "check_indices"},
               kAllFloat,
               {f({9, 4}), idx({2, 5}, 9)},
               [](auto& x) { return std::vector<Tensor>{embedding(x[0], x[1], 3)}; }});
  // Moments, master and weight after two steps (a 16-bit or f64 parameter keeps an fp32
  // master); the gradient is a transposed view of another dtype, scaled on the device.
  InputSpec grad_view = constant({5, 3});
  grad_view.transposed = true;
  c.push_back({"adamw",
               {"adamw_step"},
               kAllFloat,
               {constant({5, 3}), grad_view, constant({5, 3}), weights({5, 3})},
               [](auto& x) {
                 const Tensor p = raw::contiguous(x[0]);
                 const bool master = p.dtype() != DType::f32;
                 const Tensor w = master ? raw::contiguous(raw::to_dtype(p, DType::f32)) : Tensor();
                 const Tensor m = raw::contiguous(raw::to_dtype(x[2], DType::f32));
                 const Tensor v = raw::contiguous(raw::to_dtype(x[3], DType::f32));
                 const Tensor s = full({1}, 0.5, {.device = p.device()});
                 for (int64_t step = 1; step <= 2; ++step) {
                   adamw_step({p}, {w}, {x[1]}, {m}, {v}, s,
                              {.lr = 0.1,
                               .beta1 = 0.8,
                               .beta2 = 0.9,
                               .eps = 1e-3,
                               .weight_decay = 0.1,
                               .step = step});
                 }
                 return std::vector<Tensor>{p, m, v, master ? w : p};
               },
               /*fp32_math=*/true});
  // The global gradient norm: a short gradient, a transposed view (made contiguous first)
  // and one long enough for many pieces of the device's blocks, scaled on the device.
  c.push_back({"grad_norm",
               {"sum_of_squares"},
               kAllFloat,
               {constant({5, 3}), grad_view, constant({3, 40000})},
               [](auto& x) {
                 const Tensor s = full({1}, 0.5, {.device = x[0].device()});
                 return std::vector<Tensor>{global_grad_norm({x[0], x[1], x[2]}),
                                            global_grad_norm({x[2]}, s)};
               },
               /*fp32_math=*/true});
  // Sizes and layouts the cases above do not reach: long sums cut into pieces and added in
  // order, long softmax rows, a vocabulary wide enough for the 16-byte row packs and one
  // that is odd (no packs), rms_norm without a weight over strided rows, contiguous swiglu
  // (the flat kernels, with a tail), i32 indices.
  c.push_back({"reductions_long",
               {"sum"},
               kAllFloat,
               {f({2, 9000}), f({3, 700}, true), f({130, 1030})},
               [](auto& x) {
                 return std::vector<Tensor>{sum(x[0], {1}), sum(x[0]), mean(x[1], {0}, true),
                                            sum(x[1], {1}), sum(x[2], {0})};
               }});
  c.push_back({"softmax_long_rows",
               {"softmax", "softmax_backward"},
               kAllFloat,
               {f({2, 3000})},
               [](auto& x) {
                 return std::vector<Tensor>{softmax(x[0], -1), log_softmax(x[0], -1)};
               }});
  c.push_back(
      {"cross_entropy_wide_vocab",
       {"head_loss_rows", "check_labels", "row_weights"},
       kAllFloat,
       {f({3, 16384}), idx({3}, 16384), f({2, 20001}), idx({2}, 20001)},
       [](auto& x) {
         CrossEntropyOptions o;
         o.label_smoothing = 0.05f;
         return std::vector<Tensor>{cross_entropy(x[0], x[1], o), cross_entropy(x[2], x[3])};
       }});
  c.push_back({"kl_div_wide_vocab",
               {"head_loss_rows", "row_weights"},
               kAllFloat,
               {f({2, 16384}), constant({2, 16384})},
               [](auto& x) {
                 KlDivOptions o;
                 Tensor a = kl_div(x[0], x[1], o);
                 o.reverse = true;
                 o.temperature = 1.5f;
                 return std::vector<Tensor>{a, kl_div(x[0], x[1], o)};
               }});
  c.push_back({"rms_norm_strided_no_weight",
               {"rms_norm_forward", "rms_norm_backward"},
               kAllFloat,
               {f({4, 24, 3}, true)},
               [](auto& x) { return std::vector<Tensor>{rms_norm(x[0], Tensor(), 1e-6)}; }});
  c.push_back({"swiglu_contiguous",
               {"swiglu_forward", "swiglu_backward", "unary"},
               kAllFloat,
               {f({4, 37}), f({4, 37})},
               [](auto& x) {
                 return std::vector<Tensor>{swiglu(x[0], x[1]), silu(x[0])};
               }});
  c.push_back({"indexing_i32",
               {"index_select", "index_add", "gather", "check_indices"},
               kAllFloat,
               {f({7, 5}, true), idx({9}, 7), idx({7, 4}, 5)},
               [](auto& x) {
                 const Tensor i1 = to_dtype(x[1], DType::i32), i2 = to_dtype(x[2], DType::i32);
                 return std::vector<Tensor>{index_select(x[0], 0, i1), gather(x[0], 1, i2)};
               }});
  add_row_kernel_cases(c);
  return c;
}

// ---- comparison ---------------------------------------------------------------------------

struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance_of(DType d) {
  switch (d) {
    case DType::f64: return {1e-10, 1e-10};
    case DType::f32: return {2e-5, 2e-5};
    case DType::f16: return {4e-3, 4e-3};
    default: return {3e-2, 3e-2};  // bf16
  }
}

void expect_close(const Tensor& cpu, const Tensor& dev, DType dtype, const std::string& what) {
  ASSERT_EQ(cpu.defined(), dev.defined()) << what;
  if (!cpu.defined()) return;
  ASSERT_EQ(cpu.shape(), dev.shape()) << what;
  ASSERT_EQ(cpu.dtype(), dev.dtype()) << what;
  const std::vector<double> a = cpu.to_vector();
  const std::vector<double> b = raw::to_device(dev, kCPU).to_vector();
  const Tolerance tol = tolerance_of(dtype);
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_LE(std::abs(a[i] - b[i]), tol.atol + tol.rtol * std::abs(a[i]))
        << what << " element " << i << ": cpu " << a[i] << ", device " << b[i];
  }
}

struct RunResult {
  std::vector<Tensor> outputs, grads;
};

RunResult run_case(const Case& c, DType dtype, Device device, uint64_t seed) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    in.push_back(make_input(c.inputs[i], dtype, device, seed + i));
  RunResult r;
  r.outputs = c.run(in);
  // A random upstream gradient for every differentiable output, then one backward.
  Tensor total;
  for (size_t k = 0; k < r.outputs.size(); ++k) {
    const Tensor& o = r.outputs[k];
    if (!o.requires_grad()) continue;
    Generator gen(seed * 31 + k);
    Tensor g = raw::to_device(
        raw::to_dtype(rand(o.shape(), {.dtype = DType::f64}, &gen, -1, 1), o.dtype()), device);
    Tensor term = sum(mul(o, g));
    total = total.defined() ? add(total, to_dtype(term, total.dtype())) : term;
  }
  if (total.defined()) total.backward();
  for (size_t i = 0; i < in.size(); ++i)
    r.grads.push_back(in[i].requires_grad() ? in[i].grad() : Tensor());
  return r;
}

void compare_case(const Case& c, Device device) {
  for (DType dtype : c.dtypes) {
    SCOPED_TRACE(c.name + " " + dtype_name(dtype));
    const uint64_t seed = std::hash<std::string>{}(c.name) % 100000;
    const RunResult cpu = run_case(c, dtype, kCPU, seed);
    const RunResult dev = run_case(c, dtype, device, seed);
    ASSERT_EQ(cpu.outputs.size(), dev.outputs.size());
    const DType tol = c.fp32_math && dtype == DType::f64 ? DType::f32 : dtype;
    for (size_t k = 0; k < cpu.outputs.size(); ++k) {
      expect_close(cpu.outputs[k], dev.outputs[k], tol, "output " + std::to_string(k));
    }
    for (size_t i = 0; i < cpu.grads.size(); ++i) {
      expect_close(cpu.grads[i], dev.grads[i], tol, "gradient of input " + std::to_string(i));
    }
  }
}

// ---- the tests ----------------------------------------------------------------------------

class KernelTable : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_available() && find_kernels(DeviceType::cuda) != nullptr) {
      device_ = cuda_device(0);
      return;
    }
    fake_ = std::make_unique<FakeKernelDevice>();
    device_ = fake_->device();
  }
  void TearDown() override { fake_.reset(); }
  Device device_;
  std::unique_ptr<FakeKernelDevice> fake_;
};

// An entry a real device lacks yet ("kernel X is not implemented on cuda yet") skips its
// cases with the list printed; on the fake device every entry exists, so nothing skips,
// and each case must really reach the entries it names (EveryEntryIsCovered checks that
// the names cover the table; the call counts are checked here, in the same run of each
// case, which is most of both tests' time).
TEST_F(KernelTable, EveryCaseMatchesTheCpu) {
  std::vector<std::string> missing;
  for (const Case& c : all_cases()) {
    if (fake_) fake_->reset_calls();
    try {
      compare_case(c, device_);
    } catch (const Error& e) {
      if (fake_ || std::string(e.what()).find("is not implemented on") == std::string::npos) throw;
      missing.push_back(c.name + " (" + std::string(e.what()).substr(0, 60) + ")");
    }
    for (const std::string& e : fake_ ? c.entries : std::vector<std::string>{}) {
      EXPECT_GT(fake_->calls(e), 0) << c.name << " names " << e << " but never called it";
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += "\n  " + m;
    GTEST_SKIP() << missing.size() << " cases need entries " << device_.str()
                 << " lacks yet:" << list;
  }
}

TEST_F(KernelTable, EveryEntryIsCovered) {
  // The cases name their entries; together they must name every entry of the table (and
  // on the fake device EveryCaseMatchesTheCpu checks that each case reaches what it names).
  std::set<std::string> named;
  for (const Case& c : all_cases()) named.insert(c.entries.begin(), c.entries.end());
  for (const std::string& e : kernel_entry_names())
    EXPECT_TRUE(named.count(e)) << e << " has no case";
}

TEST_F(KernelTable, DataChecksRunOnTheDevice) {
  // A bad label or index fails with the same message on the device as on the CPU.
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) { return std::string(e.what()).substr(0, 60); }
    return std::string("no error");
  };
  for (Device d : {kCPU, device_}) {
    const Tensor logits = raw::to_device(zeros({3, 5}), d);
    const Tensor labels = raw::to_device(from_ints({1, 7, 2}, {3}), d);
    const std::string m = message([&] { cross_entropy(logits, labels); });
    if (!fake_ && m.find("is not implemented on") != std::string::npos) GTEST_SKIP() << m;
    EXPECT_NE(m.find("label 7"), std::string::npos) << m;
    const Tensor w = raw::to_device(zeros({4, 2}), d);
    const Tensor ids = raw::to_device(from_ints({0, 4}, {2}), d);
    EXPECT_NE(message([&] { embedding(w, ids); }).find("embedding"), std::string::npos);
  }
}

TEST_F(KernelTable, MissingEntriesSayWhichAndWhere) {
  struct Empty final : DeviceKernels {
    DeviceType type() const override { return DeviceType::cuda; }
  } empty;
  try {
    empty.softmax(Tensor(), 0, false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel softmax is not implemented on cuda"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cg
