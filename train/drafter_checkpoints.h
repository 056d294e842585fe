// Why this file exists: the drafter's checkpoints on disk, and what a run decides about
// them before it writes anything. Checkpoints are <run_dir>/drafter/step_<N>.safetensors
// (drafter_trainer.h says what they hold). A run resumes from the newest one, or from one
// the user names (`chunkgrad train --resume-from PATH`), after checking that it was
// trained with a resumable config and the same data, and that its tensors fit this
// drafter and are finite. A newest checkpoint that is damaged (unreadable, truncated,
// damaged metadata, NaN/inf) is skipped for the one before it, and the run says so in
// one line; a named one is never replaced by another. A checkpoint trained with another
// config or other data is not damage: that is refused, as before.
//
// Note [Resume and the schedule]: the learning rate of step s is warmup_cosine_lr(s,
// drafter.optim.steps, ...) of the config the run has now. A resume with another
// drafter.optim.steps recomputes the whole schedule (warmup and cosine) for the new
// total: step s runs at the LR a run of the new length would use at step s. The LR can
// thus jump at the resume (raising 100 steps to 200 at step 100 moves from the cosine's
// end back to its middle); the run says so in one line, with both LRs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/safetensors.h"
#include "train/train_config.h"

namespace cg::train {

// run_dir/drafter/step_<N>.safetensors with N, newest (largest N) first.
std::vector<std::pair<int64_t, std::string>> drafter_checkpoint_files(const std::string& run_dir);

// The newest run_dir/drafter/step_<N>.safetensors ("" when none).
std::string latest_drafter_checkpoint(const std::string& run_dir);

// The checkpoint a run resumes from, and what it found on the way.
struct ResumeChoice {
  std::string path;                  // "" = start at step 0
  int64_t step = 0;                  // the checkpoint's step
  int64_t saved_steps = 0;           // drafter.optim.steps of the run that saved it
  std::vector<std::string> skipped;  // one line per newer checkpoint skipped as damaged
};

// Removes the `step_*.safetensors.tmp` files of run_dir/drafter and returns their paths:
// a save cut off by a kill (or, before Note [Saving together], by another rank ending the
// job) leaves its temporary, which nothing else ever removes. Call it holding the run's
// lock (run_lock.h): no save of another run can be under way then.
std::vector<std::string> remove_checkpoint_temporaries(const std::string& run_dir);

// The whole resume decision, reading only (call it before any stage writes, so that a
// refusal's "the run directory is unchanged" holds): `named` ("" = the newest of run_dir),
// its header (format, config, data fingerprint: the JSON text, "" to skip), its tensors
// against this config's drafter, and each tensor finite. Throws the refusal naming the
// checkpoint and the first difference or the damage. Without `named`, a damaged newest
// checkpoint is skipped for the previous one (ResumeChoice::skipped); when none is left,
// the newest one's damage is the refusal. Returns no path when config.resume is false.
ResumeChoice choose_resume_checkpoint(const TrainConfig& config,
                                      const std::string& data_fingerprint,
                                      const std::string& named = "");

// The newest checkpoint's header only, as choose_resume_checkpoint checks it (no
// fallback, no tensors): "" when config.resume is false or there is none.
std::string checked_resume_checkpoint(const TrainConfig& config,
                                      const std::string& data_fingerprint);

// The one line said when a resume changes drafter.optim.steps (Note [Resume and the
// schedule]); "" when the steps are the same.
std::string schedule_change_line(const OptimConfig& now, int64_t saved_steps, int64_t step);

// ---- for DrafterTrainer::load_checkpoint ----

// What a refusal leaves as it was, said at its end.
constexpr const char* kRunDirUnchanged = "the run directory is unchanged";
constexpr const char* kCheckpointsUnchanged = "the checkpoints are unchanged";

// Reads a drafter checkpoint's metadata and checks it against this run (config and data);
// returns its step. Throws the refusal, ending with `left`.
int64_t checked_checkpoint_metadata(const safetensors::Reader& reader, const std::string& path,
                                    const TrainConfig& config, const std::string& data_fingerprint,
                                    const char* left);
// A tensor of a checkpoint, read and checked to be finite.
Tensor finite_checkpoint_tensor(const safetensors::Reader& reader, const std::string& name);
[[noreturn]] void refuse_resume(const std::string& path, const std::string& why, const char* left);

}  // namespace cg::train
