// Why this file exists: the public DFlash recipes train the drafter on the target's own
// responses, not the data set's: `chunkgrad regenerate` has the target answer each
// sample's prompt again (batched_decode.h) and writes the result as pre-tokenized JSONL
// that `chunkgrad features` and training read. A regeneration of a large data set runs for
// hours, so the output is written line by line and a rerun continues where it stopped
// (Note [Regenerate resume]).
//
//   auto samples = cg::train::read_regenerate_inputs("data.jsonl", vocab);
//   cg::train::RegenerateOptions opt{.max_new_tokens = 2048, .eos_ids = {151645, 151643}};
//   auto stats = cg::train::regenerate(lm, samples, opt, "out.jsonl", options_record);
//
// One output line: {"input_ids": prompt + response, "loss_mask": the prompt's mask as
// given (earlier turns keep theirs) then 1 on every response token (the final EOS too),
// "dataset": ..., "source_line": the input's line number}.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/qwen3.h"
#include "train/batched_decode.h"
#include "train/chat_data.h"

namespace cg::train {

struct RegenerateSample {
  std::vector<int64_t> ids;        // the whole input sample
  std::vector<uint8_t> loss_mask;  // ids.size() entries
  int64_t prompt_length = 0;       // everything before the last run of loss_mask = 1
  std::string dataset;             // "" when the line names none
  int64_t source_line = 0;         // 1-based line of the input file
  std::vector<int64_t> prompt() const { return {ids.begin(), ids.begin() + prompt_length}; }
};

// The input step (the one place to switch to chat data, train/chat_data.h): pre-tokenized
// JSONL, one object a line with "input_ids", "loss_mask" and an optional "dataset"; the
// prompt is everything before the last run of loss_mask = 1 (the last assistant
// response). Errors name the file and line: ids outside [0, vocab_size), a mask of
// another length or with values other than 0/1, no 1 in the mask (no response to
// replace), a response that starts at the first token (no prompt).
std::vector<RegenerateSample> read_regenerate_inputs(const std::string& path, int64_t vocab_size);
// The same from samples read by train/chat_data.h (conversations rendered with the Qwen3
// template: the prompt then ends with `<|im_start|>assistant\n` and the empty think block,
// as a serving engine renders it with thinking off). Errors name the sample's file:line.
std::vector<RegenerateSample> regenerate_inputs(const ChatData& data);

// The output line of `sample` with `response` in place of its last response (no newline).
std::string regenerated_line(const RegenerateSample& sample, const std::vector<int64_t>& response);

// The EOS ids a Hugging Face folder names: generation_config.json's eos_token_id, else
// config.json's (an int or a list); empty when neither names one.
std::vector<int64_t> eos_ids_of_folder(const std::string& dir);

struct RegenerateOptions {
  int64_t max_new_tokens = 512;
  int64_t batch_size = 64;
  std::vector<int64_t> eos_ids;
  double temperature = 0.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool progress = true;  // a progress bar on stderr
};

// The seed of one sample's draws: --seed mixed with its source line (Note [Sample seeds]).
uint64_t sample_seed(uint64_t seed, int64_t source_line);

// Note [Regenerate resume]: what a rerun finds in `out_path` (and `options_record` in
// out_path + ".options.json"). Returns how many leading samples are already written.
// A torn last line (no newline: the run was killed while writing it) is cut off and
// redone; a complete line that is not the corresponding sample's regeneration (another
// source_line, another prompt), or options that differ, refuse with the line or field.
int64_t resume_output(const std::string& out_path, const std::vector<RegenerateSample>& samples,
                      const nlohmann::json& options_record);

struct RegenerateStats {
  int64_t skipped = 0;  // samples already in the output (resume)
  int64_t written = 0;  // samples written by this run
  int64_t new_tokens = 0, eos_stops = 0;
  double seconds = 0.0;
  DecodeStats decode;
};

// Regenerates samples[resume_output(...)..] and appends their lines to out_path in input
// order, flushed one by one.
RegenerateStats regenerate(const nn::Qwen3ForCausalLM& lm,
                           const std::vector<RegenerateSample>& samples,
                           const RegenerateOptions& options, const std::string& out_path,
                           const nlohmann::json& options_record);

}  // namespace cg::train
