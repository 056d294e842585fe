// Why this file exists: the main job end to end -- corpus, target (trained or cached or
// loaded), drafter data from the target's own generations, drafter training (resumable),
// evaluation (per-slot accuracy, expected acceptance length, real speculative decoding
// against target-only greedy decoding, both with a KV cache, checked token for token),
// the memory story of a drafter step under each head-loss path, and the summary
// (printed, and summary.json in the run directory). `chunkgrad train` is this function.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "dist/communicator.h"
#include "train/chat_data.h"
#include "train/train_config.h"

namespace cg::train {

// What a run is asked on its command line, beside its config (not saved with it).
struct PipelineOptions {
  // A drafter checkpoint to resume from instead of the run directory's newest ("": the
  // newest; `chunkgrad train --resume-from`), checked as a resume is (drafter_checkpoints.h).
  std::string resume_from;
  // features.source target: how conversation lines of features.data are tokenized (the
  // program builds it from features.tokenizer, examples/chunkgrad/data_files.h; without it
  // only pre-tokenized lines are read) and what a conversation line says when it is empty.
  ChatEncoder encode;
  std::string no_tokenizer_hint = "give a tokenizer (features.tokenizer)";
  // Note [Chat template check] (chat_template_check.h): as ChatDataOptions' fields.
  std::string template_problem{};
  bool template_problem_is_error = false;
  // The ranks of `mpirun -np N chunkgrad train` (docs/data_parallel.md); nullptr: one
  // process. With more than one rank only rank 0 writes to the run directory, logs and
  // evaluates; the others return an empty summary.
  dist::Communicator* comm = nullptr;
};

// Runs everything; returns the summary (also written to <run_dir>/summary.json).
nlohmann::json run_pipeline(const TrainConfig& config, const PipelineOptions& options = {});

// The summary as the lines printed at the end of a run.
std::string summary_text(const nlohmann::json& summary);

}  // namespace cg::train
