// Why this file exists: the drafter's training loop -- batches of the target's own
// sequences, anchors resampled every step, AdamW with warmup + cosine, clipping and
// accumulation -- with checkpoints that make a run resumable. Everything a step draws
// (which sequences, which anchors) comes from a generator seeded by (seed, step), so a
// resumed run takes exactly the steps an uninterrupted one would: resume gives the same
// next-step loss.
//
// Checkpoints: <run_dir>/drafter/step_<N>.safetensors, written to a temporary name and
// renamed, holding "drafter.<param>" and "optim.<state>" tensors and metadata {format,
// step, config, data, target} (data: the content fingerprint of train/fingerprint.h;
// target: what export takes from the target, drafter_export.h). A resume
// with another config or other data is refused by choose_resume_checkpoint() before any
// stage writes (train/drafter_checkpoints.h: which checkpoint a run resumes from, the
// fallback past a damaged one, and how many are kept); a checkpoint whose tensors turn out
// damaged later is refused by load_checkpoint() without changing the drafter or the
// checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "nn/dflash_drafter.h"
#include "ops/head_loss.h"
#include "train/data_parallel.h"
#include "train/drafter_checkpoints.h"
#include "train/drafter_data.h"
#include "train/drafter_model.h"
#include "train/drafter_step.h"
#include "train/feature_source.h"
#include "train/grad_reducer.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/train_config.h"
#include "train/zero1_optimizer.h"

namespace cg::train {

struct DrafterTrainData {
  std::shared_ptr<FeatureSource> source;
  std::string
      data_fingerprint;  // data_fingerprint(...).dump(): saved with each checkpoint ("": none)
  // The ranks of a data-parallel run (docs/data_parallel.md); nullptr: one process.
  dist::Communicator* comm = nullptr;
  // run_target_record(...).dump() (Note [Export uses what training used], drafter_export.h):
  // saved with each checkpoint as metadata "target" ("": none, as for synthetic features).
  std::string target_record{};
};

// The step's blocks as this rank trains them (Note [One draw, N slices], data_parallel.h).
struct StepDraw {
  std::vector<BlockBatch> batches;  // this rank's slice of each micro-batch
  double total_weight = 0;          // sum(w) over the whole step (every rank's slices)
  int64_t tokens = 0;               // label slots (w > 0) of the whole step
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, slot1_accuracy = 0, seconds = 0;
  int64_t tokens = 0;  // weighted slots (labels) this step
};

// Throws unless a finished step's loss and gradient norm are finite, naming the step and
// the likely cause: at step 1 (before any update) the inputs; later the learning rate or
// the inputs. A finite loss with a gradient norm that is not is refused at that step (its
// update may have made the weights non-finite), not a step later at the loss.
void check_step_is_finite(int64_t step, double loss, double grad_norm);

// Note [Steps that do not wait]: a step on a GPU is queued work; reading its loss, grad
// norm or argmax on the host would make the host wait for the device every step (and the
// device then idles while the host prepares the next). train_step_queued() queues the
// step and keeps those values as device tensors; finish() reads them (one wait for all
// of them), and run() finishes the queued steps only every kFinishEvery steps, at
// checkpoints and at the end. Every step is still logged, with its own values.
struct QueuedStep {
  int64_t step = 0, tokens = 0;
  double lr = 0, seconds = 0;  // seconds: the host's time to queue the step
  Tensor loss;                 // [] f32 on the device: sum_m share_m * loss_m
  Tensor grad_norm;            // [] on the device (undefined when nothing had a grad)
  std::vector<Tensor> argmax;  // per micro-batch [B*N*bs] i64
  std::vector<BlockBatch> batches;
};

class DrafterTrainer {
 public:
  DrafterTrainer(nn::DFlashDrafter& drafter, const TrainConfig& config, DrafterTrainData data);

  // The blocks of step `step` (deterministic in seed and step), every rank's rows.
  std::vector<BlockBatch> step_batches(int64_t step) const;
  // The blocks of step `step` this rank trains, and the step's totals.
  StepDraw step_draw(int64_t step) const;
  StepRecord train_step();         // the next step, finished (reads its values on the host)
  QueuedStep train_step_queued();  // the next step, its values left on the device
  StepRecord finish(const QueuedStep& q) const;
  static constexpr int64_t kFinishEvery = 10;  // Note [Steps that do not wait]
  int64_t step() const { return opt_.steps_taken(); }

  // Latest checkpoint in the run directory ("" when none).
  std::string latest_checkpoint() const;
  // The checkpoints of run_dir after `step` (all of them: -1) belong to a run this one
  // replaces (--fresh: -1; a resume from an older or the previous, undamaged checkpoint:
  // its step). They stay until this run saves its first checkpoint, and go then: a stale
  // later step_<N> would otherwise be the "newest checkpoint" the next resume loads.
  void replace_checkpoints_after(int64_t step) { replace_after_ = step; }
  // After a training that completed without saving (drafter.checkpoint_every -1): the
  // checkpoints replace_checkpoints_after named go now, since run_dir's config.json is
  // this run's and export would take the newest of them for it (an outside tester's
  // finding). Rank 0 removes; returns how many went (0 where this run saved, which
  // removed them already).
  int64_t drop_replaced_checkpoints();
  // With drafter.checkpoint_every -1, after training from first_step: when the run directory
  // holds a checkpoint older than the last step trained (a resumed run's), the line that
  // says which steps went unsaved and which step `chunkgrad export` would take; else "".
  std::string unsaved_steps_note(int64_t first_step) const;
  // Writes step_<N>.safetensors (atomically), then removes what replace_checkpoints_after
  // named and all but the newest drafter.keep_checkpoints (0: keeps all). With several
  // ranks every rank calls it and returns when rank 0's save is done (Note [Saving
  // together]).
  //
  // Note [Saving together]: rank 0 alone writes, but a rank that went on at once could
  // end the job under it: after a stop every rank leaves with 130, and a rank that leaves
  // first made mpirun end rank 0 in the middle of the write (no checkpoint, the run lock
  // left, and "run the same command to resume" a lie). So after every save rank 0
  // broadcasts its outcome ("" or its error), which the other ranks wait for; a failed
  // save is an EveryRankError with rank 0's reason on every rank.
  void save_checkpoint();
  // Loads a checkpoint (params, optimiser state, step); throws naming the file and the
  // problem, without changing the drafter when the file is unreadable or does not match.
  void load_checkpoint(const std::string& path);

  // Runs to drafter.optim.steps with the progress bar and metrics log; returns tokens/s.
  // A SIGINT/SIGTERM (train/stop_signal.h) ends it after the current step with a
  // checkpoint and throws Interrupted.
  double run(MetricsLog* log);

 private:
  nn::DFlashDrafter& drafter_;
  const TrainConfig& config_;
  DrafterTrainData data_;
  TrainerAdamW opt_;           // AdamW, or ShardedAdamW with dist.zero1 under mpirun
  DrafterHeadLoss head_loss_;  // loss, path and chunk (Note [The drafter's chunk])
  std::optional<int64_t> replace_after_;
  int rank_ = 0;                          // this process's rank (0 without MPI)
  RankSlice slice_;                       // its rows of each micro-batch
  std::unique_ptr<GradReducer> reducer_;  // world size > 1: the gradient buckets
  bool is_rank0() const { return rank_ == 0; }
  int world() const { return data_.comm ? data_.comm->world_size() : 1; }
  void remove_checkpoint(const std::string& path, const char* why) const;
  void write_checkpoint(const std::vector<std::pair<std::string, Tensor>>& optim_state);
  // step_batches(step + 1), drawn when step `step` was queued so that its ids could be
  // prefetched (Note [Prefetching the next step]); empty before the first step.
  int64_t next_step_ = -1;
  StepDraw next_draw_;
};

}  // namespace cg::train
