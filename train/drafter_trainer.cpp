// Why this file exists: the drafter's training loop and checkpoints (drafter_trainer.h).
#include "train/drafter_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include "autograd/grad_mode.h"
#include "core/allocator_stats.h"
#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/json_input.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "nn/checkpoint.h"
#include "nn/safetensors.h"
#include "ops/elementwise.h"
#include "ops/index_ops.h"
#include "ops/shape_ops.h"
#include "train/drafter_checkpoints.h"
#include "train/error_context.h"
#include "train/flop_count.h"
#include "train/stop_signal.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"

namespace cg::train {

namespace {

uint64_t step_seed(uint64_t seed, int64_t step) {
  return seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step) * 0xBF58476D1CE4E5B9ull + 17;
}

}  // namespace

DrafterTrainer::DrafterTrainer(nn::DFlashDrafter& drafter, const TrainConfig& config,
                               DrafterTrainData data)
    : drafter_(drafter),
      config_(config),
      data_(std::move(data)),
      opt_(same_on_every_rank(drafter.parameters(), data_.comm),
           {.beta1 = config.drafter.optim.beta1,
            .beta2 = config.drafter.optim.beta2,
            .eps = config.drafter.optim.eps,
            .weight_decay = config.drafter.optim.weight_decay,
            .grad_clip = config.drafter.optim.grad_clip},
           config.dist.zero1 ? data_.comm : nullptr),
      head_loss_(drafter_head_loss(config.drafter)) {
  CG_CHECK(data_.source != nullptr && !data_.source->sequences().empty(),
           "drafter training: no sequences");
  // A set where no sequence has two loss positions in a row has no anchor: every step
  // would train on nothing at loss 0. Refused instead of trained silently.
  const auto& seqs = data_.source->sequences();
  const bool any_anchor = std::any_of(seqs.begin(), seqs.end(), [](const DrafterSequence& q) {
    return !anchor_candidates(q.loss_mask).empty();
  });
  CG_CHECK(any_anchor, "drafter training: none of the ", seqs.size(), " training sequences of ",
           data_.source->describe(),
           " has two loss positions in a row (loss_mask 1 on a token and the next), so no block "
           "can be anchored and the loss would be 0: give data with answers (assistant turns, "
           "or a loss_mask with 1s)");
  CG_CHECK(!loss_needs_teacher(head_loss_.loss) || data_.source->has_last_hidden(),
           "drafter training: a ", loss_kind_name(head_loss_.loss.kind),
           " loss needs the target's final hidden states");
  const Tensor& head = drafter_.head_weight();
  check_drafter_chunk(head_loss_, head.size(0), head.size(1), head.dtype(), head.device());
  rank_ = data_.comm ? data_.comm->rank() : 0;
  slice_ = rank_slice(config_, rank_, world());  // throws when same_batch cannot be split
  // Under mpirun (even with one rank: the device test of the collectives' path) the
  // gradients go through the buckets; ZeRO-1 reduce-scatters in its step instead.
  if (data_.comm != nullptr && !opt_.sharded()) {
    reducer_ = std::make_unique<GradReducer>(
        opt_.params(), *data_.comm, static_cast<int64_t>(config.dist.bucket_mb * (1 << 20)));
  }
}

std::vector<BlockBatch> DrafterTrainer::step_batches(int64_t step) const {
  const DrafterConfig& d = config_.drafter;
  Generator gen(step_seed(config_.seed, step));
  const auto& seqs = data_.source->sequences();
  std::vector<BlockBatch> out;
  for (int64_t micro = 0; micro < d.optim.grad_accum; ++micro) {
    std::vector<const DrafterSequence*> rows;
    std::vector<std::vector<int64_t>> anchors;
    std::vector<int64_t> source;
    for (int64_t b = 0; b < slice_.rows; ++b) {  // Note [One draw, N slices]
      source.push_back(static_cast<int64_t>(gen.next_u64() % seqs.size()));
      rows.push_back(&seqs[static_cast<size_t>(source.back())]);
      anchors.push_back(sample_anchors(rows.back()->loss_mask, d.max_anchors, gen));
    }
    out.push_back(build_block_batch(rows, anchors, d.max_anchors, d.block_size, d.gamma,
                                    drafter_.config().mask_token_id, ByteTokenizer::kPad,
                                    data_.source->seq_len()));
    out.back().source = std::move(source);
  }
  return out;
}

StepDraw DrafterTrainer::step_draw(int64_t step) const {
  StepDraw draw;
  draw.batches = step_batches(step);
  for (const BlockBatch& b : draw.batches) {
    draw.total_weight += b.weight_sum();
    draw.tokens += static_cast<int64_t>(
        std::count_if(b.weights.begin(), b.weights.end(), [](double w) { return w > 0; }));
  }
  if (slice_.begin == 0 && slice_.end == slice_.rows) return draw;  // one rank: all of it
  const DrafterConfig& d = config_.drafter;
  const auto& seqs = data_.source->sequences();
  for (BlockBatch& b : draw.batches) {  // this rank's rows, built as the whole batch was
    std::vector<const DrafterSequence*> rows;
    std::vector<std::vector<int64_t>> anchors;
    std::vector<int64_t> source;
    for (int64_t r = slice_.begin; r < slice_.end; ++r) {
      source.push_back(b.source[static_cast<size_t>(r)]);
      rows.push_back(&seqs[static_cast<size_t>(source.back())]);
      std::vector<int64_t> a;
      for (int64_t k = 0; k < b.num_blocks; ++k) {
        const int64_t anchor = b.anchors[static_cast<size_t>(r * b.num_blocks + k)];
        if (anchor >= 0) a.push_back(anchor);
      }
      anchors.push_back(std::move(a));
    }
    b = build_block_batch(rows, anchors, d.max_anchors, d.block_size, d.gamma,
                          drafter_.config().mask_token_id, ByteTokenizer::kPad, b.seq_len);
    b.source = std::move(source);
  }
  return draw;
}

QueuedStep DrafterTrainer::train_step_queued() {
  const auto t0 = std::chrono::steady_clock::now();
  QueuedStep q;
  q.step = opt_.steps_taken() + 1;
  const DrafterConfig& d = config_.drafter;
  // Note [Prefetching the next step]: the batches of a step are deterministic in (seed,
  // step), so the next step's are drawn now and their samples handed to the source's
  // prefetch() before this step's fetches: a source that reads from disk reads them while
  // this step computes. The next step then takes the batches drawn here.
  debug_fail_if_asked(rank_, q.step);  // the failure test's hook (data_parallel.h)
  StepDraw draw = next_step_ == q.step ? std::move(next_draw_) : step_draw(q.step);
  if (next_step_ != q.step) {  // nothing asked for yet (the first step, or after a resume)
    for (const BlockBatch& b : draw.batches) data_.source->prefetch(b.source);
  }
  next_draw_ = StepDraw();
  next_step_ = -1;
  if (q.step < d.optim.steps) {
    next_draw_ = step_draw(q.step + 1);
    next_step_ = q.step + 1;
    for (const BlockBatch& b : next_draw_.batches) data_.source->prefetch(b.source);
  }
  q.batches = std::move(draw.batches);
  q.tokens = draw.tokens;
  const double total_weight = draw.total_weight;  // the whole step's, on every rank
  const Device device = drafter_.fc->weight.device();
  drafter_.train();
  for (size_t m = 0; m < q.batches.size(); ++m) {
    const BlockBatch& b = q.batches[m];
    // Only the last micro-batch's backward reduces, as it finishes each bucket (grad_reducer.h).
    std::optional<GradReducer::Armed> armed;
    if (reducer_ && m + 1 == q.batches.size()) armed.emplace(*reducer_);
    CategoryGuard inputs(MemoryCategory::input);  // what an out-of-memory error names
    const FeatureBatch f = data_.source->fetch(b.source, device);
    CategoryGuard activations(MemoryCategory::activation);
    DrafterLossInputs in{&b, f.hidden_states, Tensor()};
    if (loss_needs_teacher(head_loss_.loss)) {
      in.teacher_hidden = reshape(f.last_hidden, {b.batch * b.seq_len, f.last_hidden.size(2)});
    }
    HeadLossResult r = drafter_loss(drafter_, in, head_loss_);
    const double share = total_weight > 0 ? b.weight_sum() / total_weight : 0.0;
    // sum_m share_m * mean_m = sum(w l) / sum(w) over the whole step (Note: accumulation).
    (r.loss * share).backward();
    const Tensor part = to_dtype(r.loss.detach(), DType::f32) * share;
    q.loss = q.loss.defined() ? q.loss + part : part;
    q.argmax.push_back(r.argmax);
  }
  if (reducer_) reducer_->finish();  // every gradient is now the sum over the ranks
  if (data_.comm) data_.comm->all_reduce(q.loss, dist::ReduceOp::sum);  // every rank's part
  const int64_t warmup =
      static_cast<int64_t>(d.optim.warmup_ratio * static_cast<double>(d.optim.steps));
  q.lr = warmup_cosine_lr(q.step, d.optim.steps, warmup, d.optim.lr, d.optim.min_lr_ratio);
  opt_.step(q.lr, 1.0);
  q.grad_norm = opt_.last_grad_norm_tensor();
  q.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return q;
}

void check_step_is_finite(int64_t step, double loss, double grad_norm) {
  // Step 1's loss comes before any update: a NaN there is in the inputs, not the rate.
  CG_CHECK(std::isfinite(loss), "the drafter loss is ", loss, " at step ", step,
           step <= 1
               ? ", before any update: the inputs hold a NaN or inf (the features or the "
                 "teacher's hidden states: check the feature files or the target)"
               : "; lower drafter.optim.lr or raise drafter.optim.warmup_ratio (or the inputs "
                 "hold a NaN or inf: check the feature files or the target)");
  // A finite loss with a gradient that is not: the backward overflowed, and this step's
  // update may have made the weights non-finite (not where only the f32 sum of squares
  // overflowed and clipping scaled the gradients by 0). Stopping here (before a checkpoint
  // holds them) names the step where it began; the next step's loss, the first sign
  // before, blamed the learning rate a step late (an outside tester's finding).
  CG_CHECK(std::isfinite(grad_norm), "the drafter's gradient norm is ", grad_norm, " at step ",
           step, " while its loss is ", loss,
           ": the backward overflowed, and this step's update may have made the weights "
           "non-finite; ",
           step <= 1 ? "before any update, so the inputs hold a NaN or inf that the loss does not "
                       "see, or values large enough to overflow (check the feature files or the "
                       "target)"
                     : "the inputs may hold a NaN or inf that the loss does not see (check the "
                       "feature files or the target), or the weights grew: lower drafter.optim.lr "
                       "or raise drafter.optim.warmup_ratio");
}

StepRecord DrafterTrainer::finish(const QueuedStep& q) const {
  StepRecord rec;
  rec.step = q.step;
  rec.lr = q.lr;
  rec.tokens = q.tokens;
  rec.seconds = q.seconds;
  rec.loss = q.loss.defined() ? q.loss.item() : 0.0;
  rec.grad_norm = q.grad_norm.defined() ? q.grad_norm.item() : 0.0;
  SlotMetrics slots(config_.drafter.block_size);
  for (size_t i = 0; i < q.batches.size(); ++i) {
    const std::vector<double> am = q.argmax[i].to_vector();
    slots.add(q.batches[i], std::vector<int64_t>(am.begin(), am.end()));
  }
  // Slot 1 over every rank's blocks: this rank's counts summed over the ranks.
  std::vector<double> slot1 = {0.0, 0.0};
  if (slots.correct.size() > 1)
    slot1 = {static_cast<double>(slots.correct[1]), static_cast<double>(slots.total[1])};
  sum_over_ranks(data_.comm, slot1);
  rec.slot1_accuracy = slot1[1] > 0 ? slot1[0] / slot1[1] : 0.0;
  check_step_is_finite(rec.step, rec.loss, rec.grad_norm);
  return rec;
}

StepRecord DrafterTrainer::train_step() { return finish(train_step_queued()); }

std::string DrafterTrainer::latest_checkpoint() const {
  return latest_drafter_checkpoint(config_.run_dir);
}

void DrafterTrainer::remove_checkpoint(const std::string& path, const char* why) const {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  CG_CHECK(!ec, "cannot remove the checkpoint ", path, " (", why, "): ", ec.message());
}

void DrafterTrainer::save_checkpoint() {
  // Note [World-size-free checkpoints], data_parallel.h: ZeRO-1's state is gathered by
  // every rank (a collective), then rank 0 alone writes.
  const auto optim_state = opt_.state();
  if (world() == 1) {
    write_checkpoint(optim_state);
    return;
  }
  std::string failure;  // Note [Saving together]
  if (is_rank0()) {
    try {
      debug_delay_save_if_asked();  // the stop test's hook (data_parallel.h)
      write_checkpoint(optim_state);
    } catch (const Error& e) { failure = e.message(); } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  failure = broadcast_text(data_.comm, failure, 0);
  if (!failure.empty()) throw dist::EveryRankError(failure, __FILE__, __LINE__);
}

void DrafterTrainer::write_checkpoint(
    const std::vector<std::pair<std::string, Tensor>>& optim_state) {
  const std::filesystem::path dir = std::filesystem::path(config_.run_dir) / "drafter";
  std::filesystem::create_directories(dir);
  safetensors::NamedTensors tensors;
  for (auto& [n, t] : drafter_.named_parameters()) tensors.emplace_back("drafter." + n, t.detach());
  for (auto& [n, t] : optim_state) tensors.emplace_back("optim." + n, t);
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld.safetensors", static_cast<long long>(step()));
  const std::filesystem::path final_path = dir / name;
  // save_file writes next to the target and renames (core/atomic_file.h).
  std::map<std::string, std::string> metadata{{"format", "chunkgrad-dflash-drafter-1"},
                                              {"step", std::to_string(step())},
                                              {"config", config_.to_json().dump()},
                                              {"data", data_.data_fingerprint}};
  if (!data_.target_record.empty()) metadata["target"] = data_.target_record;
  safetensors::save_file(tensors, final_path.string(), metadata);
  // This run's checkpoint exists: the ones it replaces may go (replace_checkpoints_after),
  // then all but the newest drafter.keep_checkpoints.
  const int64_t keep = config_.drafter.keep_checkpoints;
  int64_t kept = 0;
  for (const auto& [s, p] : drafter_checkpoint_files(config_.run_dir)) {  // newest first
    if (s == step()) {
      ++kept;
    } else if (replace_after_ && s > *replace_after_) {
      remove_checkpoint(p, "a checkpoint of the run this one replaces");
    } else if (keep > 0 && kept >= keep) {
      remove_checkpoint(p, "drafter.keep_checkpoints");
    } else {
      ++kept;
    }
  }
  replace_after_.reset();
}

std::string DrafterTrainer::unsaved_steps_note(int64_t first_step) const {
  const int64_t last = step();
  if (config_.drafter.checkpoint_every >= 0 || last <= first_step) return "";
  int64_t newest = -1;
  std::string newest_path;
  for (const auto& [s, p] : drafter_checkpoint_files(config_.run_dir)) {
    if (s > newest) {
      newest = s;
      newest_path = p;
    }
  }
  if (newest < 0 || newest >= last) return "";
  // (an outside tester resumed a run with checkpoint_every -1 and exported: the export took
  // the step it had resumed from, silently)
  return "drafter steps " + std::to_string(first_step + 1) + ".." + std::to_string(last) +
         " were not saved (drafter.checkpoint_every -1); the newest checkpoint, which "
         "`chunkgrad export` takes, is still step " +
         std::to_string(newest) + " (" + newest_path + ")";
}

int64_t DrafterTrainer::drop_replaced_checkpoints() {
  if (!replace_after_ || config_.drafter.checkpoint_every >= 0) return 0;
  int64_t removed = 0;
  if (is_rank0()) {
    for (const auto& [s, p] : drafter_checkpoint_files(config_.run_dir)) {
      if (s > *replace_after_) {
        remove_checkpoint(p, "a checkpoint of the run this one replaced");
        ++removed;
      }
    }
  }
  replace_after_.reset();
  return removed;
}

void DrafterTrainer::load_checkpoint(const std::string& path) {
  // choose_resume_checkpoint ran before any stage wrote; what can still fail here (the
  // tensors themselves) leaves the drafter and the checkpoints as they were.
  auto fail = [&](const std::string& why) { refuse_resume(path, why, kCheckpointsUnchanged); };
  std::unique_ptr<safetensors::Reader> reader;
  try {
    reader = safetensors::open(path);
  } catch (const Error& e) { fail(std::string("is unreadable: ") + e.message()); }
  const int64_t step = checked_checkpoint_metadata(*reader, path, config_, data_.data_fingerprint,
                                                   kCheckpointsUnchanged);
  // Read everything first; change nothing until every tensor is known to be good.
  std::vector<std::pair<std::string, Tensor>> params, optim;
  try {
    for (auto& [n, t] : drafter_.named_parameters())
      params.emplace_back(n, finite_checkpoint_tensor(*reader, "drafter." + n));
    for (auto& [n, t] : opt_.state())
      optim.emplace_back(n, finite_checkpoint_tensor(*reader, "optim." + n));
  } catch (const Error& e) { fail(std::string("is damaged: ") + e.message()); }
  nn::StateDict state(params.begin(), params.end());
  try {
    drafter_.load_state_dict(state);
  } catch (const Error& e) { fail(std::string("does not fit this drafter: ") + e.message()); }
  opt_.load_state(optim, step);
}

namespace {

// The allocator's peak on the device the drafter trains on (the host's for the CPU).
int64_t device_peak_bytes(Device device) {
  const Device where = backend_for(device).capabilities().own_memory ? device : kCPU;
  return static_cast<int64_t>(allocator_for(where).stats().allocated_bytes.peak);
}

std::string step_detail(const StepThroughput& t, int64_t peak) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.0f ms  %.0f pos/s  MFU %.1f%%  peak %.2f GiB", t.ms,
                t.positions_per_s, 100 * t.mfu, static_cast<double>(peak) / (1 << 30));
  return buf;
}

}  // namespace

double DrafterTrainer::run(MetricsLog* log) {
  const DrafterConfig& d = config_.drafter;
  ProgressBar bar("drafter", d.optim.steps, config_.progress, step());
  // Note [Step time]: a GPU step is queued work (Note [Steps that do not wait]); its time
  // is known only when the host waits, so every step of a finished group is logged with
  // the group's wall time / its steps (a checkpoint's save falls in no group).
  const DrafterStepShape shape = drafter_step_shape(drafter_.config(), d, data_.source->seq_len());
  const double flops = drafter_step_flops(shape).total();
  if (config_.progress) {
    std::fprintf(stderr,
                 "chunkgrad train: drafter step: %.4g TFLOP (every GEMM and attention, forward "
                 "and backward; MFU = FLOPs / step time / %.1f TFLOP/s, H200 dense bf16)%s\n",
                 flops / 1e12, kH200DenseBf16Flops / 1e12,
                 drafter_.config().activation_checkpointing == nn::ActivationCheckpointing::layers
                     ? "; activation checkpointing: each layer recomputed in the backward (not "
                       "counted)"
                     : "");
  }
  if (config_.progress && opt_.sharded()) {  // ZeRO-1: the state each rank holds
    std::fprintf(stderr,
                 "chunkgrad train: ZeRO-1: optimizer state %.2f MiB per rank over %d ranks "
                 "(%.2f MiB unsharded)\n",
                 static_cast<double>(opt_.sharded()->state_bytes()) / (1 << 20), world(),
                 static_cast<double>(opt_.sharded()->unsharded_state_bytes()) / (1 << 20));
  }
  const Device device = drafter_.fc->weight.device();
  std::vector<QueuedStep> queued;  // Note [Steps that do not wait]
  auto group_start = std::chrono::steady_clock::now();
  std::vector<StepRecord> done;
  auto log_done = [&] {
    if (done.empty()) return;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - group_start).count();
    const StepThroughput t =
        step_throughput(shape, flops, seconds / static_cast<double>(done.size()));
    const int64_t peak = device_peak_bytes(device);
    bar.set_detail(step_detail(t, peak));
    for (const StepRecord& r : done) {
      bar.update(r.step, r.loss, r.tokens);
      if (log) {
        nlohmann::json line = {{"phase", "drafter"},
                               {"step", r.step},
                               {"loss", r.loss},
                               {"lr", r.lr},
                               {"grad_norm", r.grad_norm},
                               {"slot1_accuracy", r.slot1_accuracy},
                               {"label_tokens", r.tokens},
                               {"seconds", r.seconds},
                               {"ms", t.ms},
                               {"context_tokens_per_s", t.context_tokens_per_s},
                               {"positions_per_s", t.positions_per_s},
                               {"mfu", t.mfu},
                               {"peak_allocated_bytes", peak}};
        // ZeRO-1: the optimizer state this rank (and every rank) holds.
        if (opt_.sharded()) line["optimizer_state_bytes"] = opt_.sharded()->state_bytes();
        log->write(line);
      }
    }
    done.clear();
  };
  auto finish_queued = [&] {
    try {
      for (const QueuedStep& q : queued) done.push_back(finish(q));  // waits for the device
    } catch (const Error&) {
      // A loss that is not finite: the steps of the group before it are logged first (the
      // curve up to a blow-up is what shows its cause; an outside tester's finding).
      queued.clear();
      log_done();
      throw;
    }
    queued.clear();
    log_done();
  };
  while (step() < d.optim.steps) {
    if (queued.empty()) group_start = std::chrono::steady_clock::now();
    // An error says which step it came from (error_context.h): an out-of-memory named no
    // phase. (A step read back later, in finish(), names its own step.)
    try {
      queued.push_back(train_step_queued());
    } catch (const Error&) {
      rethrow_with_context("at drafter step " + std::to_string(step() + 1) + ": ");
    }
    const int64_t s = queued.back().step;
    // Note [Stopping together], train/stop_signal.h: any rank's signal stops every rank.
    const bool stop = any_rank(data_.comm, stop_agreed());
    if (data_.comm && config_.dist.check_every > 0 && s % config_.dist.check_every == 0)
      check_parameters_agree(*data_.comm, opt_.params(), s);
    // checkpoint_every -1: no checkpoints at all (a benchmark; a full-scale one is 24 GB).
    const bool save =
        d.checkpoint_every >= 0 &&
        (stop || (d.checkpoint_every > 0 && s % d.checkpoint_every == 0) || s == d.optim.steps);
    // A stop logs every step it finished, saved or not (with checkpoint_every -1 the steps
    // since the last group of kFinishEvery were dropped from metrics.jsonl).
    if (save || stop || static_cast<int64_t>(queued.size()) >= kFinishEvery) finish_queued();
    if (save) {
      try {
        save_checkpoint();
      } catch (const Error&) {
        rethrow_with_context("saving the checkpoint of drafter step " + std::to_string(s) + ": ");
      }
    }
    if (stop) {
      bar.finish();  // ends the progress line before the message
      throw Interrupted("drafter", s, save);
    }
  }
  finish_queued();
  bar.finish();
  return bar.tokens_per_second();
}

}  // namespace cg::train
