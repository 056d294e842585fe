// Why this file exists: embedding's entry point, checks and backward node (declared in
// ops/embedding.h). It is index_select along dim 0 of the weight, on the device's
// indexing entries (ops/kernels.h), with embedding's own messages and padding rule.
#include "ops/embedding.h"

#include "autograd/function.h"
#include "core/views.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

// grad [N, D] rows scatter-added into a zero [V, D]; the padding row gets none.
struct EmbeddingBackward : Node {
  explicit EmbeddingBackward(int64_t padding_row) : padding_row(padding_row) {}
  int64_t padding_row;  // -1: none
  size_t ids = SIZE_MAX;
  std::string name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    const TensorMeta& w = input_meta[0];
    const Tensor flat_ids = raw::reshape(saved(ids), {-1});
    const Tensor rows = raw::reshape(grads[0], {flat_ids.numel(), w.shape[1]});
    Tensor dw = raw::empty(w.shape, grads[0].dtype(), w.device);
    raw::fill_(dw, 0.0);
    kernels_for(w.device, "embedding backward").index_add(dw, 0, flat_ids, rows, padding_row);
    return {dw};
  }
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<int64_t> padding_idx) {
  check_defined("embedding", weight, "weight");
  check_defined("embedding", ids, "ids");
  check_index_dtype("embedding", ids, "ids");
  check_same_device("embedding", weight, ids);
  CG_CHECK(weight.dim() == 2, "embedding: weight has shape ", shape_str(weight.shape()),
           "; it must be [V, D] (one row per token id)");
  const int64_t V = weight.shape()[0], D = weight.shape()[1];
  int64_t padding_row = -1;
  if (padding_idx) {
    CG_CHECK(*padding_idx >= -V && *padding_idx < V, "embedding: padding_idx ", *padding_idx,
             " is out of range for a weight of ", V, " rows; it must be in [", -V, ", ", V, ")");
    padding_row = *padding_idx < 0 ? *padding_idx + V : *padding_idx;
  }
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  DeviceKernels& k = kernels_for(weight.device(), "embedding");
  k.check_indices("embedding", "id", ids, V, "a weight of V = " + std::to_string(V) + " rows");
  Tensor out = raw::view(k.index_select(weight, 0, raw::reshape(ids, {-1})), out_shape);
  if (auto node = make_node<EmbeddingBackward>({&weight}, padding_row)) {
    node->ids = node->save(ids);
    set_history(node, out);
  }
  return out;
}

}  // namespace cg
