// Why this file exists: the CUDA table's attention entries (CudaKernels::attention_forward
// and attention_backward, cuda/cuda_kernels.h): the table's contracts (ops/kernels.h) on
// top of cuDNN's graph (cuda/cudnn_sdpa.h) and the raw-pointer launchers beside the flash
// and rows kernels (cuda/attention_kernels.h). It picks the path (Note [Which attention
// path runs on cuda] in cuda_attention.h), makes a contiguous copy only of an operand the
// kernels cannot read in place (a non-unit stride in hd; for flash also strides not
// multiples of 8 or data not 16-byte aligned), allocates results and scratch through the
// caching allocator, copies the DFlash anchors (N integers) to the device (as kernel
// parameters: Note [Anchors as kernel parameters], attention_rows.cu) and launches on the
// device's one compute stream, without waiting for it.
#include "cuda/cuda_attention.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/memory_trace.h"
#include "core/views.h"
#include "cuda/attention_kernels.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cudnn_sdpa.h"

namespace cg::cuda {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

AttnMaskKind kind_of(AttentionMask::Kind k) {
  switch (k) {
    case AttentionMask::Kind::none: return AttnMaskKind::none;
    case AttentionMask::Kind::causal: return AttnMaskKind::causal;
    case AttentionMask::Kind::dflash_blocks: return AttnMaskKind::dflash;
    case AttentionMask::Kind::dense: return AttnMaskKind::dense;
  }
  return AttnMaskKind::none;
}

bool use_flash(DType dtype, int64_t hd, const ResolvedAttentionMask& mask, double scale) {
  // The flash kernels take the row max of unscaled scores: a positive scale keeps it the max.
  return flash_attention_supports(dtype, hd, kind_of(mask.kind)) && scale > 0.0;
}

bool pick_flash(AttentionPath path, DType dtype, int64_t hd, const ResolvedAttentionMask& mask,
                double scale) {
  if (path == AttentionPath::rows) return false;
  const bool fits = use_flash(dtype, hd, mask, scale);
  CG_CHECK(fits || path != AttentionPath::flash, kOp,
           ": the flash path on cuda takes bf16/f16, "
           "head_dim 64 or 128, masks none/causal/dflash_blocks and scale > 0; got ",
           dtype_name(dtype), ", head_dim ", hd, ", mask kind ", static_cast<int>(mask.kind));
  return fits;
}

// The cudnn path by rule (before cuDNN is asked about the shape): causal or no mask, bf16 /
// f16, head_dim 64, 128 or 256, scale > 0 (what automatic tries; a forced cudnn call lets cuDNN
// decide the rest). cuDNN's fused kernels return NaN for a negative scale (seen on the H200,
// cuDNN 9.14): like flash, they keep the running max of the unscaled scores.
bool cudnn_by_rule(DType dtype, int64_t hd, const ResolvedAttentionMask& mask, double scale) {
  const bool mask_ok =
      mask.kind == AttentionMask::Kind::none || mask.kind == AttentionMask::Kind::causal;
  // 256: Qwen3.5's full-attention layers (head_dim 256); without cuDNN they would take the
  // rows path (flash is built for 64 and 128). cuDNN is still asked whether it runs the
  // shape, and a refusal falls back as for any other head_dim.
  return mask_ok && (dtype == DType::bf16 || dtype == DType::f16) &&
         (hd == 64 || hd == 128 || hd == 256) && scale > 0.0;
}

void check_supported(const Tensor& q, const char* what) {
  CG_CHECK(q.device().is_cuda(), kOp, ": cuda attention got ", what, " on ", q.device().str());
  const DType dt = q.dtype();
  CG_CHECK(dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16, kOp,
           ": dtype ", dtype_name(dt), " is not supported on cuda (f32, f64, f16, bf16)");
  CG_CHECK(q.shape()[3] <= kAttnRowsMaxHeadDim, kOp, ": head_dim ", q.shape()[3],
           " is not supported on cuda (at most ", kAttnRowsMaxHeadDim,
           "; the flash path takes 64 and 128); run it on the CPU");
}

// t itself when the kernels can read it in place, else a fresh contiguous copy.
Tensor readable(const Tensor& t, bool flash) {
  bool ok = t.shape()[3] <= 1 || t.stride(3) == 1;
  if (flash) {
    for (int d = 0; d < 3; ++d) ok = ok && (t.shape()[d] == 1 || t.stride(d) % 8 == 0);
    ok = ok && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  }
  return ok ? t : raw::clone(t);
}

SdpaOperand sdpa_operand(const Tensor& t) {
  // Strides of size-1 dims are never stepped; give them the natural value cuDNN expects.
  SdpaOperand o;
  o.data = t.data_ptr();
  const int64_t S = t.shape()[2], H = t.shape()[1];
  o.ss = S == 1 ? t.shape()[3] : t.stride(2);
  o.sh = H == 1 ? o.ss * S : t.stride(1);
  o.sb = t.shape()[0] == 1 ? o.sh * H : t.stride(0);
  return o;
}

// The cuDNN problem of readable (flash-aligned) operands; o / dout only for backward.
SdpaProblem sdpa_problem(const Tensor& q, const Tensor& k, const Tensor& v,
                         const ResolvedAttentionMask& mask, const Tensor* o = nullptr,
                         const Tensor* dout = nullptr) {
  SdpaProblem p;
  p.dtype = q.dtype();
  p.B = q.shape()[0];
  p.Hq = q.shape()[1];
  p.Hkv = k.shape()[1];
  p.Sq = q.shape()[2];
  p.Sk = k.shape()[2];
  p.hd = q.shape()[3];
  p.causal = mask.kind == AttentionMask::Kind::causal;
  p.q = sdpa_operand(q);
  p.k = sdpa_operand(k);
  p.v = sdpa_operand(v);
  if (o != nullptr) p.o = sdpa_operand(*o);
  if (dout != nullptr) p.dout = sdpa_operand(*dout);
  return p;
}

// Whether this call runs on cudnn: forced -> yes (cuDNN's error if it cannot); automatic
// -> when the rule fits and cuDNN finalizes a plan (cached per shape), else the caller's
// next choice. `why` gets the reason cudnn was not taken.
bool take_cudnn(AttentionPath path, int device, const SdpaProblem& p,
                const ResolvedAttentionMask& mask, double scale, bool backward,
                std::string* why = nullptr) {
  if (path == AttentionPath::cudnn) {
    CG_CHECK(mask.kind == AttentionMask::Kind::none || mask.kind == AttentionMask::Kind::causal,
             kOp, ": the cudnn path takes masks none and causal; got mask kind ",
             static_cast<int>(mask.kind), " (use flash for the DFlash rule, rows for dense)");
    CG_CHECK(scale > 0.0, kOp, ": the cudnn path takes scale > 0; got ", scale,
             " (use the rows path)");
    return true;
  }
  if (path != AttentionPath::automatic || !cudnn_by_rule(p.dtype, p.hd, mask, scale)) {
    return false;
  }
  if (p.causal && p.Sq > p.Sk) {
    if (why) *why = "causal with Sq > Sk (rows that see no key)";
    return false;
  }
  const std::string no =
      backward ? cudnn_sdpa_backward_support(device, p) : cudnn_sdpa_forward_support(device, p);
  if (why) *why = no;
  return no.empty();
}

// Runs a cudnn call. Automatic: a cuDNN failure at run time (a plan that finalized but
// does not execute) marks the problem unsupported and returns false, so the caller falls
// back to flash; forced: the error propagates.
template <typename F>
bool run_or_fall_back(AttentionPath path, int device, const SdpaProblem& p, bool backward,
                      const F& run) {
  if (path == AttentionPath::cudnn) {
    run();
    return true;
  }
  try {
    run();
    return true;
  } catch (const Error& e) {
    cudnn_sdpa_mark_unsupported(device, p, backward, e.what());
    return false;
  }
}

AttnOperand operand(const Tensor& t) {
  AttnOperand o;
  o.data = t.data_ptr();
  o.sb = t.shape()[0] == 1 ? 0 : t.stride(0);
  o.sh = t.shape()[1] == 1 ? 0 : t.stride(1);
  o.ss = t.shape()[2] == 1 ? 0 : t.stride(2);
  return o;
}

AttnShape shape_of(const Tensor& q, const Tensor& k) {
  return AttnShape{q.shape()[0], q.shape()[1], k.shape()[1],
                   q.shape()[2], k.shape()[2], q.shape()[3]};
}

// The mask in device-readable form; `anchors` keeps the device copy of the DFlash anchors
// alive until the launches are queued (the allocator orders its reuse on the stream).
AttnMaskArgs mask_args(const ResolvedAttentionMask& m, Device device, cudaStream_t stream,
                       Tensor& anchors) {
  AttnMaskArgs a;
  a.kind = kind_of(m.kind);
  if (m.kind == AttentionMask::Kind::dflash_blocks) {
    a.context_len = m.context_len;
    // Flash and rows both take the sliding rule. No two positions are context_len +
    // block_size apart, so a wider window is that window (and 32-bit friendly).
    a.sliding_window = std::min(m.sliding_window, m.context_len + m.block_size);
    a.block_size = m.block_size;
    a.num_blocks = m.num_blocks;
    a.context_batch_stride = m.context_batch_stride;
    const int64_t n = static_cast<int64_t>(m.visible_context.size());
    if (n > 0) {
      anchors = raw::empty({n}, DType::i64, device);
      launch_upload_int64(anchors.data<int64_t>(), m.visible_context.data(), n, stream);
      a.visible_context = static_cast<const int64_t*>(anchors.data_ptr());
    }
    a.anchors_sorted = m.anchors_ascend;
  } else if (m.kind == AttentionMask::Kind::dense) {
    a.allowed = static_cast<const bool*>(m.allowed.data_ptr());
    for (int d = 0; d < 4; ++d) a.allowed_strides[d] = m.allowed_strides[d];
  }
  return a;
}

cudaStream_t enter(const Tensor& q) {
  const int index = q.device().index;
  CG_CUDA_CHECK(cudaSetDevice(index));
  return compute_stream(index);
}

}  // namespace

const char* cuda_attention_path(DType dtype, int64_t head_dim, const ResolvedAttentionMask& mask,
                                double scale) {
  if (cudnn_by_rule(dtype, head_dim, mask, scale)) return "cudnn";
  return use_flash(dtype, head_dim, mask, scale) ? "flash" : "rows";
}

std::string cuda_attention_path(const Tensor& q, const Tensor& k, const ResolvedAttentionMask& mask,
                                double scale) {
  check_supported(q, "q");
  const char* rule = cuda_attention_path(q.dtype(), q.shape()[3], mask, scale);
  if (std::string(rule) != "cudnn") return rule;
  const Tensor qr = readable(q, true), kr = readable(k, true);
  std::string why;
  const SdpaProblem p = sdpa_problem(qr, kr, kr, mask);
  if (take_cudnn(AttentionPath::automatic, q.device().index, p, mask, scale, false, &why)) {
    return "cudnn";
  }
  return "flash (cudnn not taken: " + why + ")";
}

// Note [Output in q's layout]: the drafter's q is transpose(1, 2) of a [B, Sq, Hq, hd]
// projection, and the op's caller turns the output back into [B, Sq, Hq * hd] for o_proj.
// The flash kernel writes out in that layout -- a transposed view of a [B, Sq, Hq, hd]
// tensor -- so the caller's reshape is a view, not a transposing copy of the whole output
// (0.5 ms a layer at the full-scale drafter's shape). Other layouts of q get a contiguous
// output.
Tensor flash_output_like(const Tensor& q, const AttnShape& s) {
  const bool rows_major =
      s.Hq > 1 && s.Sq > 1 && q.stride(3) == 1 && q.stride(1) == s.hd && q.stride(2) == s.Hq * s.hd;
  if (!rows_major) return raw::empty({s.B, s.Hq, s.Sq, s.hd}, q.dtype(), q.device());
  return raw::transpose(raw::empty({s.B, s.Sq, s.Hq, s.hd}, q.dtype(), q.device()), 1, 2);
}

AttnOutput output_of(const Tensor& t) {
  return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)};
}

AttentionForward CudaKernels::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                const ResolvedAttentionMask& mask, double scale) {
  const AttentionPath path = attention_path_;
  check_supported(q, "q");
  const AttnShape s = shape_of(q, k);
  const DType cd = compute_dtype_of(q.dtype());
  AttentionForward result;
  // The flash layout only where cuDNN is not tried first (it writes contiguous rows).
  const bool try_cudnn =
      path == AttentionPath::cudnn ||
      (path == AttentionPath::automatic && cudnn_by_rule(q.dtype(), s.hd, mask, scale));
  result.out = path != AttentionPath::rows && !try_cudnn && use_flash(q.dtype(), s.hd, mask, scale)
                   ? flash_output_like(q, s)
                   : raw::empty({s.B, s.Hq, s.Sq, s.hd}, q.dtype(), q.device());
  result.lse = raw::empty({s.B, s.Hq, s.Sq}, cd, q.device());
  if (s.B * s.Hq * s.Sq == 0) return result;
  if (s.Sk == 0) {  // no keys: every row sees nothing
    raw::fill_(result.out, 0.0);
    raw::fill_(result.lse, -INFINITY);
    return result;
  }
  const cudaStream_t stream = enter(q);
  if (try_cudnn) {
    const Tensor qr = readable(q, true), kr = readable(k, true), vr = readable(v, true);
    const SdpaProblem p = sdpa_problem(qr, kr, vr, mask);
    if (take_cudnn(path, q.device().index, p, mask, scale, false)) {
      const bool ran = run_or_fall_back(path, q.device().index, p, false, [&] {
        cudnn_sdpa_forward(q.device().index, p, static_cast<float>(scale), result.out.data_ptr(),
                           result.lse.data<float>(), stream);
      });
      if (ran) return result;
    }
  }
  const bool flash = pick_flash(path, q.dtype(), s.hd, mask, scale);
  const Tensor qr = readable(q, flash), kr = readable(k, flash), vr = readable(v, flash);
  Tensor anchors;
  const AttnMaskArgs m = mask_args(mask, q.device(), stream, anchors);
  if (flash) {
    launch_flash_attention_forward(q.dtype(), s, operand(qr), operand(kr), operand(vr),
                                   output_of(result.out), result.lse.data<float>(), m, scale,
                                   stream);
  } else {
    launch_attention_rows_forward(q.dtype(), s, operand(qr), operand(kr), operand(vr),
                                  result.out.data_ptr(), result.lse.data_ptr(), m, scale, stream);
  }
  return result;
}

AttentionGrads CudaKernels::attention_backward(const Tensor& grad_out, const Tensor& q,
                                               const Tensor& k, const Tensor& v, const Tensor& out,
                                               const Tensor& lse, const ResolvedAttentionMask& mask,
                                               double scale, bool need_dq, bool need_dk,
                                               bool need_dv) {
  const AttentionPath path = attention_path_;
  check_supported(q, "q");
  const AttnShape s = shape_of(q, k);
  const DType cd = compute_dtype_of(q.dtype());
  AttentionGrads grads;
  if (need_dq) grads.dq = raw::empty(q.shape(), q.dtype(), q.device());
  if (need_dk) grads.dk = raw::empty(k.shape(), k.dtype(), k.device());
  if (need_dv) grads.dv = raw::empty(v.shape(), v.dtype(), v.device());
  if (!need_dq && !need_dk && !need_dv) return grads;
  if (s.B * s.Hq * s.Sq == 0 || s.Sk == 0 || s.hd == 0) {  // nothing attends: all zero
    for (const Tensor* t : {&grads.dq, &grads.dk, &grads.dv}) {
      if (t->defined()) raw::fill_(*t, 0.0);
    }
    return grads;
  }
  const cudaStream_t stream = enter(q);
  const Tensor lr = raw::contiguous(raw::to_dtype(lse, cd));
  if (path == AttentionPath::cudnn ||
      (path == AttentionPath::automatic && cudnn_by_rule(q.dtype(), s.hd, mask, scale))) {
    const Tensor qr = readable(q, true), kr = readable(k, true), vr = readable(v, true);
    Tensor gr = readable(grad_out, true), orr = readable(out, true);
    if (gr.strides() != orr.strides()) {  // cuDNN reads dO and O alike: one layout for both
      gr = raw::contiguous(gr);
      orr = raw::contiguous(orr);
    }
    const SdpaProblem p = sdpa_problem(qr, kr, vr, mask, &orr, &gr);
    if (take_cudnn(path, q.device().index, p, mask, scale, true)) {
      // cuDNN writes all three; a gradient not asked for goes to scratch.
      const Tensor dq = need_dq ? grads.dq : raw::empty(q.shape(), q.dtype(), q.device());
      const Tensor dk = need_dk ? grads.dk : raw::empty(k.shape(), k.dtype(), k.device());
      const Tensor dv = need_dv ? grads.dv : raw::empty(v.shape(), v.dtype(), v.device());
      const bool ran = run_or_fall_back(path, q.device().index, p, true, [&] {
        cudnn_sdpa_backward(q.device().index, p, static_cast<float>(scale), lr.data<float>(),
                            dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), stream);
      });
      if (ran) return grads;
    }
  }
  const bool flash = pick_flash(path, q.dtype(), s.hd, mask, scale);
  const Tensor qr = readable(q, flash), kr = readable(k, flash), vr = readable(v, flash);
  const Tensor gr = readable(grad_out, flash), orr = readable(out, false);
  Tensor anchors;
  const AttnMaskArgs m = mask_args(mask, q.device(), stream, anchors);
  // delta = rowsum(dO * O), [B, Hq, Sq] in the compute dtype: both paths read it.
  const Tensor delta = raw::empty({s.B, s.Hq, s.Sq}, cd, q.device());
  launch_attention_delta(q.dtype(), s, operand(gr), operand(orr), delta.data_ptr(), stream);
  void* dq = need_dq ? grads.dq.data_ptr() : nullptr;
  void* dk = need_dk ? grads.dk.data_ptr() : nullptr;
  void* dv = need_dv ? grads.dv.data_ptr() : nullptr;
  if (flash) {
    // Partial dk/dv of split DFlash context tiles (Note [Context key parts]) and the fp32
    // dq of a dq taken in the dk/dv pass (Note [Fused dq]).
    Tensor parts_scratch;
    const size_t scratch_bytes =
        flash_attention_backward_scratch_bytes(s, m, dq != nullptr, dk != nullptr || dv != nullptr);
    if (scratch_bytes > 0) {
      CategoryGuard temporary(MemoryCategory::temporary);
      parts_scratch =
          raw::empty({static_cast<int64_t>(scratch_bytes / sizeof(float))}, DType::f32, q.device());
      // For tests: CHUNKGRAD_FLASH_SCRATCH_NAN=1 (read at each call) starts the scratch as
      // NaN, so that a part the backward reads before writing shows in its result (Note [dq
      // first writers], cuda/attention_flash_dkdv.cu).
      const char* nan_fill = std::getenv("CHUNKGRAD_FLASH_SCRATCH_NAN");
      if (nan_fill != nullptr && std::string(nan_fill) == "1") {
        CG_CUDA_CHECK(cudaMemsetAsync(parts_scratch.data_ptr(), 0xFF, scratch_bytes, stream));
      }
    }
    launch_flash_attention_backward(
        q.dtype(), s, operand(qr), operand(kr), operand(vr), operand(gr), lr.data<float>(),
        delta.data<float>(), m, scale, dq, dk, dv,
        scratch_bytes > 0 ? parts_scratch.data<float>() : nullptr, stream);
  } else {
    launch_attention_rows_backward(q.dtype(), s, operand(qr), operand(kr), operand(vr), operand(gr),
                                   lr.data_ptr(), delta.data_ptr(), m, scale, dq, dk, dv, stream);
  }
  return grads;
}

}  // namespace cg::cuda
