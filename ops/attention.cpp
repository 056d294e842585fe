// Why this file exists: scaled_dot_product_attention's entry point (declared in
// ops/attention.h): the input checks and the backward node; the kernels are the device's
// attention entries (ops/kernels.h).
#include "ops/attention.h"

#include <cmath>

#include "autograd/function.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Saves q, k, v, out and lse (see attention.h); the dense mask too when there is one.
// The resolved mask keeps the DFlash anchors as host integers; its dense tensor is
// moved into the saved tensors so saved_bytes counts it and release_saved frees it.
struct ScaledDotProductAttentionBackward : Node {
  size_t q = SIZE_MAX, k = SIZE_MAX, v = SIZE_MAX, out = SIZE_MAX, lse = SIZE_MAX;
  size_t allowed = SIZE_MAX;
  ResolvedAttentionMask mask;
  double scale = 1.0;

  std::string name() const override { return "ScaledDotProductAttentionBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    ResolvedAttentionMask m = mask;
    if (allowed != SIZE_MAX) m.allowed = saved(allowed);
    const Tensor& sq = saved(q);
    const AttentionGrads g =
        kernels_for(sq.device(), kOp)
            .attention_backward(grads[0], sq, saved(k), saved(v), saved(out), saved(lse), m, scale,
                                needs_input_grad(0), needs_input_grad(1), needs_input_grad(2));
    return {g.dq, g.dk, g.dv};
  }
};

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v) {
  check_defined(kOp, q, "q");
  check_defined(kOp, k, "k");
  check_defined(kOp, v, "v");
  CG_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, kOp,
           ": q, k and v must be 4-D: q [B, "
           "Hq, Sq, hd], k and v [B, Hkv, Sk, hd]; got q ",
           shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()),
           " (for [B, S, H, hd] tensors pass cg::transpose(x, 1, 2))");
  check_same_device(kOp, q, k);
  check_same_device(kOp, q, v);
  CG_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), kOp,
           ": q, k and v must share a "
           "dtype, got q ",
           dtype_name(q.dtype()), ", k ", dtype_name(k.dtype()), ", v ", dtype_name(v.dtype()),
           "; convert with cg::to(t, dtype)");
  check_floating(kOp, q);
  CG_CHECK(k.shape() == v.shape(), kOp,
           ": k and v must have the same shape [B, Hkv, Sk, hd], "
           "got k ",
           shape_str(k.shape()), " and v ", shape_str(v.shape()));
  CG_CHECK(q.shape()[0] == k.shape()[0], kOp, ": batch sizes differ: q ", shape_str(q.shape()),
           " has B = ", q.shape()[0], ", k ", shape_str(k.shape()), " has B = ", k.shape()[0]);
  CG_CHECK(q.shape()[3] == k.shape()[3], kOp, ": head dims differ: q ", shape_str(q.shape()),
           " has hd = ", q.shape()[3], ", k and v ", shape_str(k.shape()),
           " have hd = ", k.shape()[3], "; q, k and v share the last dim");
  const int64_t hq = q.shape()[1], hkv = k.shape()[1];
  CG_CHECK(hkv > 0 && hq % hkv == 0, kOp, ": q has ", hq, " heads and k, v have ", hkv,
           "; grouped-query attention needs Hq to be a multiple of Hkv (q ", shape_str(q.shape()),
           ", k ", shape_str(k.shape()), ")");
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionMask& mask, std::optional<double> scale) {
  check_inputs(q, k, v);
  const int64_t hd = q.shape()[3];
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(hd, 1)));
  CG_CHECK(std::isfinite(s), kOp, ": scale must be finite, got ", s);
  ResolvedAttentionMask resolved = resolve_attention_mask(
      mask, q.shape()[0], q.shape()[1], q.shape()[2], k.shape()[2], q.device(), kOp);

  AttentionForward fwd = kernels_for(q.device(), kOp).attention_forward(q, k, v, resolved, s);
  if (auto node = make_node<ScaledDotProductAttentionBackward>({&q, &k, &v})) {
    node->q = node->save(q);
    node->k = node->save(k);
    node->v = node->save(v);
    node->out = node->save(fwd.out);
    node->lse = node->save(fwd.lse);
    if (resolved.allowed.defined()) {
      node->allowed = node->save(resolved.allowed);
      resolved.allowed = Tensor();
    }
    node->mask = std::move(resolved);
    node->scale = s;
    set_history(node, fwd.out);
  }
  return fwd.out;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& allowed, std::optional<double> scale) {
  return scaled_dot_product_attention(q, k, v, AttentionMask::dense(allowed), scale);
}

}  // namespace cg
