// Why this file exists: DFlash inference with a context K/V cache (dflash_block_drafter.h).
#include "train/dflash_block_drafter.h"

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "nn/layers.h"
#include "ops/join_ops.h"
#include "ops/linalg.h"
#include "ops/reduce.h"
#include "ops/shape_ops.h"

namespace cg::train {

DFlashBlockDrafter::DFlashBlockDrafter(const nn::DFlashDrafter& drafter)
    : drafter_(drafter), cache_(drafter.num_layers()) {}

const std::vector<int64_t>& DFlashBlockDrafter::target_layers() const {
  return drafter_.config().target_layers;
}

void DFlashBlockDrafter::reset() {
  cache_.assign(drafter_.num_layers(), {});
  length_ = 0;
}

void DFlashBlockDrafter::append_context(const Tensor& features, int64_t first) {
  NoGradGuard no_grad;
  CG_CHECK(first == length_, "DFlash drafter: append_context at ", first, " but ", length_,
           " positions are cached (append in order)");
  const int64_t width = drafter_.fc->in_features();
  CG_CHECK(features.defined() && features.dim() == 2 && features.size(1) == width,
           "DFlash drafter: features must be [n, ", width, "], got ",
           features.defined() ? shape_str(features.shape()) : "undefined");
  const int64_t n = features.size(0);
  if (n == 0) return;
  const DType dtype = drafter_.fc->weight.dtype();
  const Tensor ctx = drafter_.fuse(reshape(to_dtype(features, dtype), {1, n, width}));
  const Tensor pos = nn::RotaryEmbedding::positions(first, n, features.device());
  for (size_t i = 0; i < cache_.size(); ++i) {
    nn::DrafterLayerCache kv = drafter_.context_keys_values(i, ctx, pos);
    auto& c = cache_[i];
    c.k = c.k.defined() ? cat({c.k, kv.k}, 1) : contiguous(kv.k);
    c.v = c.v.defined() ? cat({c.v, kv.v}, 1) : contiguous(kv.v);
  }
  length_ += n;
}

void DFlashBlockDrafter::truncate_context(int64_t length) {
  CG_CHECK(length >= 0 && length <= length_, "DFlash drafter: truncate_context(", length, ") with ",
           length_, " positions cached");
  if (length == length_) return;
  for (auto& c : cache_) {
    if (!c.k.defined()) continue;
    c.k = contiguous(narrow(c.k, 1, 0, length));
    c.v = contiguous(narrow(c.v, 1, 0, length));
  }
  length_ = length;
}

std::vector<int64_t> DFlashBlockDrafter::propose(int64_t anchor_token, int64_t anchor_position,
                                                 int64_t block_size) {
  NoGradGuard no_grad;
  CG_CHECK(block_size >= 2, "DFlash drafter: block_size must be >= 2, got ", block_size);
  CG_CHECK(anchor_position == length_, "DFlash drafter: anchor_position ", anchor_position,
           " must equal the cached context length ", length_);
  std::vector<int64_t> ids(static_cast<size_t>(block_size), drafter_.config().mask_token_id);
  ids[0] = anchor_token;
  const DType dtype = drafter_.fc->weight.dtype();
  const Tensor x = to_dtype(
      drafter_.embed(from_ints(ids, {1, block_size},
                               {.dtype = DType::i64, .device = drafter_.fc->weight.device()})),
      dtype);
  const Tensor pos = nn::RotaryEmbedding::positions(anchor_position, block_size, x.device());
  const Tensor h = drafter_.forward_cached(x, pos, cache_);
  const Tensor rows = reshape(narrow(h, 1, 1, block_size - 1), {block_size - 1, h.size(2)});
  const Tensor best = argmax(linear(rows, drafter_.head_weight()), -1);
  const std::vector<double> v = best.to_vector();
  return std::vector<int64_t>(v.begin(), v.end());
}

}  // namespace cg::train
