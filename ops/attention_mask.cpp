// Why this file exists: building attention masks and checking them against the shapes of
// a call (see attention_mask.h). Everything here is O(N) or O(1); nothing is [Sq, Sk].
#include "ops/attention_mask.h"

#include "core/views.h"

namespace cg {

AttentionMask AttentionMask::none() { return AttentionMask(); }

AttentionMask AttentionMask::causal() {
  AttentionMask m;
  m.kind_ = Kind::causal;
  return m;
}

AttentionMask AttentionMask::dflash_blocks(int64_t context_len, int64_t block_size,
                                           const Tensor& anchors, const Tensor& padded,
                                           int64_t sliding_window) {
  CG_CHECK(context_len >= 0, "AttentionMask::dflash_blocks: context_len must be >= 0, got ",
           context_len);
  CG_CHECK(block_size > 0, "AttentionMask::dflash_blocks: block_size must be > 0, got ",
           block_size);
  CG_CHECK(sliding_window >= 0,
           "AttentionMask::dflash_blocks: sliding_window must be >= 0 (0 = the full rule), got ",
           sliding_window);
  CG_CHECK(anchors.defined(),
           "AttentionMask::dflash_blocks: anchors is an undefined tensor; "
           "pass the N anchor positions as an i64 tensor [N] or [B, N]");
  CG_CHECK(anchors.dtype() == DType::i64, "AttentionMask::dflash_blocks: anchors must be i64, got ",
           dtype_name(anchors.dtype()), " (convert with cg::to(anchors, cg::DType::i64))");
  CG_CHECK(anchors.dim() == 1 || anchors.dim() == 2,
           "AttentionMask::dflash_blocks: anchors must "
           "be [N] or [B, N], got shape ",
           shape_str(anchors.shape()));
  if (padded.defined()) {
    CG_CHECK(padded.dtype() == DType::boolean,
             "AttentionMask::dflash_blocks: padded must be "
             "bool, got ",
             dtype_name(padded.dtype()));
    CG_CHECK(padded.shape() == anchors.shape(), "AttentionMask::dflash_blocks: padded has shape ",
             shape_str(padded.shape()), " but anchors ", shape_str(anchors.shape()),
             "; give one flag per block");
  }
  AttentionMask m;
  m.kind_ = Kind::dflash_blocks;
  m.context_len_ = context_len;
  m.block_size_ = block_size;
  m.sliding_window_ = sliding_window;
  m.anchors_ = anchors;
  m.padded_ = padded;
  return m;
}

AttentionMask AttentionMask::dense(const Tensor& allowed) {
  CG_CHECK(allowed.defined(), "AttentionMask::dense: the mask is an undefined tensor");
  CG_CHECK(allowed.dtype() == DType::boolean,
           "AttentionMask::dense: the mask must be bool "
           "(true = may attend), got ",
           dtype_name(allowed.dtype()), " of shape ", shape_str(allowed.shape()),
           "; an additive float mask is not supported, convert "
           "with cg::to(mask, cg::DType::boolean)");
  AttentionMask m;
  m.kind_ = Kind::dense;
  m.allowed_ = allowed;
  return m;
}

std::string AttentionMask::str() const {
  switch (kind_) {
    case Kind::none: return "none";
    case Kind::causal: return "causal";
    case Kind::dflash_blocks:
      return detail::concat("dflash_blocks(S=", context_len_, ", block_size=", block_size_,
                            ", anchors ", shape_str(anchors_.shape()),
                            sliding_window_ > 0
                                ? detail::concat(", sliding_window=", sliding_window_)
                                : std::string(),
                            padded_.defined() ? ", padded flags)" : ")");
    case Kind::dense: return "dense " + shape_str(allowed_.shape());
  }
  return "?";
}

namespace {

void resolve_dflash(const AttentionMask& mask, ResolvedAttentionMask& r, const char* op) {
  const Tensor& anchors = mask.anchors();
  const int64_t n = anchors.shape().back();
  const int64_t S = mask.context_len(), Bs = mask.block_size();
  CG_CHECK(r.q_len == n * Bs && r.k_len == S + n * Bs, op, ": the dflash_blocks mask (context ", S,
           ", ", n, " blocks of ", Bs, ") needs Sq = N * block_size = ", n * Bs,
           " queries and Sk = S + N * block_size = ", S + n * Bs, " keys, but q has Sq = ", r.q_len,
           " and k has Sk = ", r.k_len,
           "; keys must be the context keys followed by the block keys");
  const bool per_batch = anchors.dim() == 2 && anchors.shape()[0] != 1;
  CG_CHECK(!per_batch || anchors.shape()[0] == r.batch, op, ": anchors have shape ",
           shape_str(anchors.shape()), " but the batch is ", r.batch, "; give [N], [1, N] or [",
           r.batch, ", N]");
  // Exact int64 values: read through the contiguous storage, not through double. The N
  // anchors are rule parameters kept on the host (a small copy when they live elsewhere).
  const Tensor ac = raw::contiguous(raw::to_device(anchors, kCPU));
  const int64_t* ap = ac.data<int64_t>();
  Tensor pc;
  const bool* pp = nullptr;
  if (mask.padded().defined()) {
    pc = raw::contiguous(raw::to_device(mask.padded(), kCPU));
    pp = pc.data<bool>();
  }
  r.context_len = S;
  r.block_size = Bs;
  r.num_blocks = n;
  r.sliding_window = mask.sliding_window();
  r.context_batch_stride = per_batch ? n : 0;
  r.visible_context.resize(ac.numel());
  r.anchors_ascend = true;
  int64_t last = -1;  // the batch row's last unpadded anchor
  for (int64_t i = 0; i < ac.numel(); ++i) {
    CG_CHECK(ap[i] <= S, op, ": anchor ", ap[i], " (block ", i % std::max<int64_t>(n, 1),
             ") is past the context length ", S,
             "; anchors must be in [0, S], or negative to mark a padded block");
    const bool padded = ap[i] < 0 || (pp != nullptr && pp[i]);
    r.visible_context[i] = padded ? -1 : ap[i];
    if (n > 0 && i % n == 0) last = -1;
    if (padded) continue;
    r.anchors_ascend = r.anchors_ascend && ap[i] >= last;
    last = ap[i];
  }
}

void resolve_dense(const AttentionMask& mask, ResolvedAttentionMask& r, Device device,
                   const char* op) {
  const Tensor& m = mask.allowed();
  const Shape target{r.batch, r.heads, r.q_len, r.k_len};
  CG_CHECK(m.device() == device, op, ": the boolean mask is on ", m.device().str(),
           " but q, k and v are on ", device.str(),
           "; the kernel reads it there, move it with "
           "cg::to(mask, ",
           device.str(), ")");
  bool ok = m.dim() <= 4;
  for (int64_t d = 0; ok && d < m.dim(); ++d) {
    const int64_t o = 4 - m.dim() + d;
    ok = m.shape()[d] == target[o] || m.shape()[d] == 1;
  }
  CG_CHECK(ok, op, ": the boolean mask of shape ", shape_str(m.shape()),
           " doesn't broadcast to [B, Hq, Sq, Sk] = ", shape_str(target),
           " (sizes must match or be 1, aligned from the last dim; at most 4 dims)");
  r.allowed = m;
  r.allowed_strides = {0, 0, 0, 0};
  for (int64_t d = 0; d < m.dim(); ++d) {
    const int64_t o = 4 - m.dim() + d;
    r.allowed_strides[o] = (m.shape()[d] == 1 && target[o] != 1) ? 0 : m.strides()[d];
  }
}

}  // namespace

ResolvedAttentionMask resolve_attention_mask(const AttentionMask& mask, int64_t batch,
                                             int64_t heads, int64_t q_len, int64_t k_len,
                                             Device device, const char* op) {
  ResolvedAttentionMask r;
  r.kind = mask.kind();
  r.batch = batch;
  r.heads = heads;
  r.q_len = q_len;
  r.k_len = k_len;
  if (mask.kind() == AttentionMask::Kind::dflash_blocks) resolve_dflash(mask, r, op);
  if (mask.kind() == AttentionMask::Kind::dense) resolve_dense(mask, r, device, op);
  return r;
}

}  // namespace cg
