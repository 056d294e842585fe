// Why this file exists: the drafter's forward + loss and slot metrics (drafter_step.h).
#include "train/drafter_step.h"

#include "core/factories.h"
#include "ops/index_ops.h"
#include "ops/shape_ops.h"

namespace cg::train {

LossConfig drafter_loss_config(const LossSpec& spec) {
  LossConfig c;
  c.ignore_index = kIgnoreLabel;
  if (spec.kind == "ce") {
    c.kind = LossKind::cross_entropy;
  } else {
    c.kind = LossKind::forward_kl;
    c.temperature = static_cast<float>(spec.temperature);
    c.hard_ce_weight = spec.kind == "mix" ? static_cast<float>(spec.mix_ce_weight) : 0.0f;
  }
  return c;
}

HeadLossResult drafter_loss(const nn::DFlashDrafter& drafter, const DrafterLossInputs& in,
                            const LossConfig& loss, HeadLossPath path, int64_t chunk_rows) {
  const BlockBatch& b = *in.batch;
  const int64_t B = b.batch, T = b.num_blocks * b.block_size;
  const int64_t H = drafter.config().layers.hidden_size;
  CG_CHECK(in.features.defined() && in.features.dim() == 3 && in.features.size(0) == B &&
               in.features.size(1) == b.seq_len,
           "drafter_loss: features must be [", B, ", ", b.seq_len, ", n*H]");
  const DType dtype = drafter.fc->weight.dtype();
  // Note [Batch tensors on the model's device]: the batch is built on the host; its ids,
  // positions, labels and weights are uploaded to the drafter's device (no wait: Note
  // [Staged uploads], cuda/host_staging.h), and from_ints records their bounds so the
  // device's label/index checks need no read back (Note [Host-known values]). The anchors
  // stay on the host: they are the mask rule's parameters, which the attention reads there.
  const TensorOptions ints{.dtype = DType::i64, .device = drafter.fc->weight.device()};
  const Tensor context = drafter.fuse(to_dtype(in.features, dtype));
  const Tensor x = to_dtype(drafter.embed(from_ints(b.block_ids, {B, T}, ints)), dtype);
  const Tensor positions = from_ints(b.positions, {B, T}, ints);
  std::vector<int64_t> padded(b.padded.begin(), b.padded.end());
  const AttentionMask mask = AttentionMask::dflash_blocks(
      b.seq_len, b.block_size, from_ints(b.anchors, {B, b.num_blocks}),
      to_dtype(from_ints(padded, {B, b.num_blocks}), DType::boolean));
  const Tensor hidden = reshape(drafter.forward(x, positions, mask, context), {B * T, H});
  HeadLossInputs hi;
  hi.hidden = hidden;
  hi.head = drafter.head_weight();
  hi.labels = from_ints(b.labels, {B * T}, ints);
  hi.weights = to_dtype(from_vector(b.weights, {B * T}, {.device = ints.device}), dtype);
  if (loss_needs_teacher(loss)) {
    CG_CHECK(in.teacher_hidden.defined(), "drafter_loss: a ", loss_kind_name(loss.kind),
             " loss needs the target's final hidden states");
    hi.teacher_hidden = to_dtype(index_select(in.teacher_hidden, 0, from_ints(b.teacher_rows, {B * T}, ints)), dtype);
  }
  HeadLossOptions o;
  o.path = path;
  o.loss = loss;
  o.reduction = Reduction::mean;
  o.chunk_rows = chunk_rows;
  o.with_metrics = true;
  return head_loss(hi, o);
}

SlotMetrics::SlotMetrics(int64_t bs)
    : block_size(bs), correct(static_cast<size_t>(bs), 0), total(static_cast<size_t>(bs), 0) {}

void SlotMetrics::add(const BlockBatch& b, const std::vector<int64_t>& argmax) {
  const int64_t bs = b.block_size;
  CG_CHECK(bs == block_size, "SlotMetrics: block size ", bs, " != ", block_size);
  for (int64_t blk = 0; blk < b.batch * b.num_blocks; ++blk) {
    if (b.padded[static_cast<size_t>(blk)]) continue;
    bool prefix = true;
    int64_t accepted = 0;
    for (int64_t k = 1; k < bs; ++k) {
      const size_t i = static_cast<size_t>(blk * bs + k);
      const bool valid = b.weights[i] > 0;
      const bool hit = valid && argmax[i] == b.labels[i];
      if (valid) {
        ++total[static_cast<size_t>(k)];
        correct[static_cast<size_t>(k)] += hit ? 1 : 0;
      }
      prefix = prefix && hit;
      accepted += prefix ? 1 : 0;
    }
    accept_sum += 1.0 + static_cast<double>(accepted);
    ++blocks;
  }
}

std::vector<double> SlotMetrics::accuracy() const {
  std::vector<double> a(static_cast<size_t>(block_size), 1.0);
  for (size_t k = 1; k < a.size(); ++k) {
    a[k] = total[k] > 0 ? static_cast<double>(correct[k]) / static_cast<double>(total[k]) : 0.0;
  }
  return a;
}

double SlotMetrics::expected_acceptance_length() const {
  const std::vector<double> a = accuracy();
  double eal = 1.0, prod = 1.0;
  for (size_t k = 1; k < a.size(); ++k) {
    prod *= a[k];
    eal += prod;
  }
  return eal;
}

double SlotMetrics::mean_acceptance_length() const {
  return blocks > 0 ? accept_sum / static_cast<double>(blocks) : 0.0;
}

}  // namespace cg::train
