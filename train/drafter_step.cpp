// Why this file exists: the drafter's forward + loss and slot metrics (drafter_step.h).
#include "train/drafter_step.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "core/allocator_stats.h"
#include "core/factories.h"
#include "core/views.h"
#include "ops/index_ops.h"
#include "ops/shape_ops.h"
#include "train/tokenizer.h"

namespace cg::train {

LossConfig drafter_loss_config(const LossSpec& spec) {
  LossConfig c;
  c.ignore_index = kIgnoreLabel;
  c.kind = spec.loss_kind();
  // One case per kind and no default: this file builds with -Werror=switch, so a kind
  // added to LossKind does not compile until it says how the drafter trains with it.
  switch (c.kind) {
    case LossKind::cross_entropy:  // the target's tokens are the labels
      break;
    case LossKind::forward_kl:  // the teacher: the target's distribution at the same position
    case LossKind::reverse_kl:
    case LossKind::soft_cross_entropy:
      c.temperature = static_cast<float>(spec.temperature);
      c.hard_ce_weight = static_cast<float>(spec.hard_ce_weight());
      break;
  }
  return c;
}

DrafterHeadLoss drafter_head_loss(const DrafterConfig& d) {
  DrafterHeadLoss h;
  h.loss = drafter_loss_config(d.loss);
  h.path = parse_head_loss_path(d.head_loss_path);
  h.chunk_rows = d.head_loss_chunk_rows;
  h.chunk_budget_bytes = static_cast<size_t>(d.head_loss_chunk_budget_mb * (1 << 20));
  return h;
}

DrafterHeadLoss drafter_eval_head_loss(const DrafterConfig& d) {
  DrafterHeadLoss h = drafter_head_loss(d);
  h.loss = LossConfig{};
  h.loss.ignore_index = kIgnoreLabel;
  h.path = HeadLossPath::fused;
  return h;
}

size_t drafter_head_loss_bytes(const DrafterHeadLoss& h, int64_t vocab, int64_t hidden, DType dtype,
                               Device device, int64_t rows) {
  // (shapes, dtypes and strides only, as check_drafter_chunk's)
  HeadLossInputs in;
  const Tensor one_row = empty({1, hidden}, {.dtype = dtype, .device = device});
  in.hidden = raw::expand(one_row, {rows, hidden});
  in.head = raw::expand(one_row, {vocab, hidden});
  if (loss_needs_teacher(h.loss)) in.teacher_hidden = in.hidden;
  HeadLossOptions o;
  o.loss = h.loss;
  o.path = h.path;
  o.chunk_rows = h.chunk_rows;
  o.chunk_budget_bytes = h.chunk_budget_bytes;
  const int64_t chunk =
      h.path == HeadLossPath::naive ? rows : std::min(rows, head_loss_chunk_rows(in, o));
  return head_loss_chunk_bytes(in, o, chunk);
}

void check_drafter_chunk(const DrafterHeadLoss& h, int64_t vocab, int64_t hidden, DType dtype,
                         Device device) {
  if (h.chunk_rows > 0) return;
  // head_loss_chunk_bytes reads shapes, dtypes and strides: one row of hidden states, and
  // the head as that row expanded (a [V, D] view of D elements).
  HeadLossInputs in;
  in.hidden = empty({1, hidden}, {.dtype = dtype, .device = device});
  in.head = raw::expand(in.hidden, {vocab, hidden});
  if (loss_needs_teacher(h.loss)) in.teacher_hidden = in.hidden;
  HeadLossOptions o;
  o.loss = h.loss;
  const size_t one_row = head_loss_chunk_bytes(in, o, 1);
  // (the budget in bytes, as it is used: 0.0001 MiB is 104 bytes, printed as 9.9e-05 MiB)
  CG_CHECK(h.chunk_budget_bytes >= one_row,
           "train config: drafter.head_loss_chunk_budget_mb: ", h.chunk_budget_bytes,
           " bytes cannot hold one row of a chunk at V=", vocab, " (", format_bytes(one_row),
           " of logits and GEMM scratch); raise it, or set "
           "drafter.head_loss_chunk_rows");
}

HeadLossResult drafter_loss(const nn::DFlashDrafter& drafter, const DrafterLossInputs& in,
                            const DrafterHeadLoss& h) {
  const LossConfig& loss = h.loss;
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
  const AttentionMask mask =
      AttentionMask::dflash_blocks(b.seq_len, b.block_size, from_ints(b.anchors, {B, b.num_blocks}),
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
    hi.teacher_hidden = to_dtype(
        index_select(in.teacher_hidden, 0, from_ints(b.teacher_rows, {B * T}, ints)), dtype);
  }
  HeadLossOptions o;
  o.path = h.path;
  o.loss = loss;
  o.reduction = Reduction::mean;
  o.chunk_rows = h.chunk_rows;
  o.chunk_budget_bytes = h.chunk_budget_bytes;
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

void SlotMetrics::write_to(nlohmann::json& summary) const {
  if (blocks == 0) {
    summary["per_slot_accuracy"] = nullptr;
    summary["expected_acceptance_length"] = nullptr;
    summary["measured_acceptance_length"] = nullptr;
    return;
  }
  summary["per_slot_accuracy"] = accuracy();
  summary["expected_acceptance_length"] = expected_acceptance_length();
  summary["measured_acceptance_length"] = mean_acceptance_length();
}

// Per-slot accuracy with every candidate anchor of each held-out sequence (up to 256).
SlotMetrics held_out_slot_metrics(const nn::DFlashDrafter& drafter, FeatureSource& source,
                                  const DrafterConfig& d) {
  NoGradGuard no_grad;
  const std::vector<DrafterSequence>& seqs = source.sequences();
  const Device device = drafter.fc->weight.device();
  const int64_t block_size = d.block_size;
  SlotMetrics m(block_size);
  const DrafterHeadLoss ce = drafter_eval_head_loss(d);
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::vector<int64_t> anchors = anchor_candidates(seqs[i].loss_mask);
    if (anchors.empty()) continue;
    if (anchors.size() > 256) {     // 256 spread over the sequence, not its first 256 positions
      std::vector<int64_t> spread;  // (a long sample's sliding windows cut only further in)
      for (size_t k = 0; k < 256; ++k) spread.push_back(anchors[k * anchors.size() / 256]);
      anchors = std::move(spread);
    }
    const FeatureBatch f = source.fetch({static_cast<int64_t>(i)}, device);
    // Note [Evaluation in training's blocks]: the anchors in forwards of at most a training
    // micro-batch's blocks (max_anchors x batch_size). A block sees the context before its
    // anchor and itself, never another block, so the grouping changes no prediction; but
    // one forward of all 256 held a batch 16 times a step's (max_anchors 16, batch 1), and
    // an outside tester's --memory-limit-mb that held 30 training steps ran out of memory
    // in the evaluation after them.
    const size_t group =
        static_cast<size_t>(std::max<int64_t>(1, d.max_anchors * d.optim.batch_size));
    for (size_t at = 0; at < anchors.size(); at += group) {
      const std::vector<int64_t> part(
          anchors.begin() + static_cast<std::ptrdiff_t>(at),
          anchors.begin() + static_cast<std::ptrdiff_t>(std::min(anchors.size(), at + group)));
      BlockBatch b =
          build_block_batch({&seqs[i]}, {part}, static_cast<int64_t>(part.size()), block_size, 0.0,
                            drafter.config().mask_token_id, ByteTokenizer::kPad, source.seq_len());
      HeadLossResult r = drafter_loss(drafter, {&b, f.hidden_states, Tensor()}, ce);
      const std::vector<double> am = r.argmax.to_vector();
      m.add(b, std::vector<int64_t>(am.begin(), am.end()));
    }
  }
  return m;
}

}  // namespace cg::train
