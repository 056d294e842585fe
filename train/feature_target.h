// Why this file exists: `chunkgrad features` and a run from offline features both need
// "the target" by folder: a Hugging Face Qwen3 folder (config.json + safetensors) or a
// chunkgrad run directory whose target stage cached its toy target (target/model.safetensors,
// the run's config.json saying its architecture). Both ends fingerprint it the same way,
// so that features written from one target are refused for a run with another.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/qwen3.h"
#include "train/drafter_data.h"
#include "train/feature_files.h"
#include "train/target_forward.h"

namespace cg::train {

struct FeatureTarget {
  std::unique_ptr<nn::Qwen3ForCausalLM> lm;  // frozen, in eval mode, on the asked device
  DType dtype = DType::f32;                  // the parameters' and so the forward's
  std::string path;                          // the folder as given
  std::string kind;                          // "hugging face" or "chunkgrad run"
  std::string fingerprint;                   // XXH3 of the architecture and the weight files
  std::string tokenizer_hash;                // of tokenizer.json; the byte tokenizer's for a run
  // The layers a drafter for it reads by default: a run's drafter layers (its
  // drafter.target_layers, or the public rule with its num_target_features); for a
  // Hugging Face folder the public rule with DrafterConfig's default count.
  std::vector<int64_t> default_layers;
};

// Loads the target in `dir` (throws naming the folder and what is missing) straight into
// `dtype` on `device`: the parameters are allocated there uninitialised (Note
// [Uninitialized parameters], nn/init_mode.h) and the checkpoint's tensors (one file, or the
// shards of model.safetensors.index.json) are read one at a time and converted into
// them. f32 on the CPU is what the goldens compare; bf16 on a GPU is the fast path.
FeatureTarget load_feature_target(const std::string& dir, Device device, DType dtype = DType::f32);

// The hash that stands for chunkgrad's byte tokenizer (train/tokenizer.h) in index.json.
std::string byte_tokenizer_hash();

// Features of one sequence: [S, K*H] (the layers' outputs in `layers` order) and [S, H]
// (after the final norm), from one forward with no padding.
SampleFeatures sample_features(const nn::Qwen3ForCausalLM& lm, const DrafterSequence& sequence,
                               const std::vector<int64_t>& layers);

// Pre-tokenized JSONL, one object a line: "input_ids" (array of ints >= 0, below
// `vocab_size`, at least 2), optional "loss_mask" (0/1, the same length; default all 1).
// Blank lines are skipped; any other bad line is an error naming the file and the line
// (train/chat_data.h read_chat_data, strict, without a tokenizer).
std::vector<DrafterSequence> read_token_jsonl(const std::string& path, int64_t vocab_size);

// Writes the features of `sequences` to `out_dir` (train/feature_files.h) in their order.
// With buckets.batch_tokens > 0 they run in length buckets (train/target_forward.h) over
// windows of consecutive samples of about 4 x batch_tokens tokens, so that the host holds
// one window's features at a time; 0 runs one sample per forward, unpadded.
// `on_sample(i)` after each sample is written (progress). `datasets`: each sample's dataset
// name, recorded in the index (none: not recorded). Returns the index written.
// An `out_dir` holding index.partial.json of an interrupted run with the same target,
// layers, dtype, tokenizer and samples is resumed (Note [Resuming features],
// train/feature_files.h): `*resumed` (when given) is how many samples were already there,
// and on_sample is called for the others only. Another run's partial folder is an error.
// A sample whose stored features hold NaN or inf (the target's forward overflowed) is an
// error naming the sample and the layer, and the set this run began is removed (Note
// [Finite features], feature_target.cpp).
FeatureFileIndex write_feature_files(const FeatureTarget& target,
                                     const std::vector<DrafterSequence>& sequences,
                                     const std::vector<int64_t>& layers, DType dtype,
                                     const std::string& out_dir, uint64_t max_shard_bytes,
                                     const std::function<void(int64_t)>& on_sample = {},
                                     const std::vector<std::string>& datasets = {},
                                     const BucketOptions& buckets = {}, int64_t* resumed = nullptr);

// The identity of the samples a feature run writes, in order (their ids, masks and dataset
// names): what a resumed folder must have been written from.
std::string features_data_fingerprint(const std::vector<DrafterSequence>& sequences,
                                      const std::vector<std::string>& datasets);

}  // namespace cg::train
