// Why this file exists: what the main job's stages share across the two files they live
// in (train/pipeline_setup.cpp: the run directory, the corpus or the feature files, the
// resume check; train/pipeline.cpp: the target, the drafter's data, training, evaluation,
// memory and the summary): the state they hand each other and the helpers they print
// with. Internal to those two files.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/dflash_drafter.h"
#include "train/dflash_batch.h"
#include "train/drafter_checkpoints.h"
#include "train/drafter_step.h"
#include "train/drafter_trainer.h"
#include "train/generate.h"
#include "train/memory_report.h"
#include "train/offline_features.h"
#include "train/pipeline.h"
#include "train/progress.h"
#include "train/run_lock.h"
#include "train/speculative_decoding.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"

namespace cg::train::pipeline_stages {

// What the stages hand each other, filled in stage by stage.
struct RunState {
  RunState(const TrainConfig& c, Device d) : config(c), device(d) {}
  const TrainConfig& config;
  const Device device;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ByteTokenizer tok;
  std::unique_ptr<RunLock> lock;  // held to the end (run_lock.h)
  MetricsLog log;

  std::string text;  // the corpus (stage 1)
  std::vector<int64_t> tokens;
  std::vector<std::string> train_prompts, eval_prompts, accuracy_prompts;
  std::string data_fingerprint;  // of the corpus and target.checkpoint (fingerprint.h)
  ResumeChoice resume;           // the checked drafter checkpoint (path "" for none)

  TargetResult target;  // stage 2
  // features.source offline (Note [Offline runs], offline_run.h) or target
  // (target_features.h): the training samples and the held-out ones, opened and checked
  // before any stage writes; the target is not trained and generates nothing.
  bool offline = false;
  std::shared_ptr<FeatureSource> offline_train, offline_held;

  std::vector<DrafterSequence> train_seqs;  // stage 3
  std::unique_ptr<nn::DFlashDrafter> drafter;
  DrafterTrainData data;
  double data_seconds = 0;

  int64_t first_step = 0, final_step = 0;  // stage 4
  double train_tokens_per_s = 0, drafter_seconds = 0;

  int64_t eval_block = 0;  // stage 5
  std::vector<std::vector<int64_t>> eval_prompt_ids;
  SpeculativeReport spec;
  SlotMetrics slots;
  std::string eval_skipped;  // what the evaluation could not do, in words ("": nothing)
  double eval_seconds = 0;

  std::vector<MemoryReport> memory;  // stage 6

  const nn::Qwen3ForCausalLM& lm() const { return *target.lm; }
  const std::vector<int64_t>& target_layers() const { return drafter->config().target_layers; }
};

double seconds_since(std::chrono::steady_clock::time_point t0);
// A stage's time as people read it: "12.3 s", "3:05" from a minute on.
std::string seconds_text(double seconds);
// A stage line on stderr (only with progress on).
void say(const TrainConfig& c, const std::string& line);
// A warning goes to stderr with or without progress (--no-progress drops stage lines only).
void warn(const std::string& line);
// A progress bar for a stage without a loss (generation, decoding), fed by generate_all's
// or evaluate_speculative's callback.
// When the checkpoints a resume or --fresh replaces are removed: "when this run saves its
// first checkpoint", or with drafter.checkpoint_every -1 when its training completes.
std::string replaced_checkpoints_go(const TrainConfig& config);

// stop_message: when not empty, a stop signal ends the stage after the prompt it is on,
// with an Interrupted of that message (the stage has no step boundary to wait for).
GenerateProgress progress_bar(const std::string& phase, size_t total, const TrainConfig& c,
                              const std::string& stop_message = "");
// Text for the summary: printable ASCII and newlines as they are, other bytes as \xNN.
std::string printable(const std::string& text);

// The stages before the target (pipeline_setup.cpp), in the order run_pipeline calls them.
void warn_about_config(const TrainConfig& c);
void lock_run_directory(RunState& s);
// After the lock: the checkpoint temporaries a cut-off save left, removed with a note.
void remove_stale_temporaries(const TrainConfig& config);
void read_corpus(RunState& s);
void open_offline_features(RunState& s);
void open_target_features(RunState& s, const PipelineOptions& options);
void check_resume(RunState& s, const PipelineOptions& options);
void prepare_run_directory(RunState& s);

}  // namespace cg::train::pipeline_stages
