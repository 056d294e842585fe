// Why this file exists: the offline feature stage (issue 19) keeps the target's features
// on disk, so that a drafter trains without the target in memory and the same features
// serve many runs. This file is the format (docs/feature_files.md): a folder with
// `index.json` and `features-NNNNN.safetensors` shards holding, per sample i (global
// index),
//   i.input_ids      [S] int32
//   i.loss_mask      [S] uint8 (0/1; Note [U8 as bytes], nn/safetensors.h)
//   i.hidden_states  [S, K*H]   the K target layers in the index's order, concatenated
//   i.last_hidden    [S, H]     after the target's final norm (the KL teacher's input)
// in bf16 (default) or f32. The writer is here; the reader is train/offline_features.h.
//
//   FeatureFileWriter w(out_dir, header, max_shard_bytes, identity);  // or resumes (below)
//   for (i = w.num_samples(); ...) w.add(sequence, hidden_states, last_hidden);
//   w.finish();                                     // the last shard, then index.json
//
// Note [Resuming features]: `chunkgrad features` over a large set runs for hours; an
// interrupted run must not start over. While it writes, the folder holds
// index.partial.json: index.json's fields for the shards finished so far (each written
// whole before it is listed) plus the run's identity (data_fingerprint: the samples' tokens,
// masks and datasets in order; num_inputs). A writer opened on such a folder with the same
// layers, hidden size, dtype, target and tokenizer fingerprints and identity keeps every
// listed shard that is still whole (its size, its header, each sample's input_ids) up to the
// first that is not, removes any other features-*.safetensors (the shard being written when
// the run stopped) and carries on from the next sample; any difference is one error naming
// the field. finish() writes index.json, then removes index.partial.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "nn/safetensors.h"
#include "train/dflash_batch.h"

namespace cg::train {

constexpr int64_t kFeatureFormatVersion = 1;

// index.json, in memory.
struct FeatureFileIndex {
  struct Shard {
    std::string file;  // "features-00000.safetensors", in the folder
    int64_t first = 0, count = 0;
    uint64_t bytes = 0;  // the file's size
    // XXH3-128 hex of the file's header, which records every tensor's own checksum (Note
    // [Shard header hashes]); "" in indexes written before it was recorded.
    std::string header_xxh3;
  };
  int64_t num_samples = 0;
  std::vector<Shard> shards;
  std::vector<int64_t> layer_ids;  // K entries: decoder layer l's output (HF hidden_states[l+1])
  int64_t hidden_size = 0;         // H
  DType dtype = DType::bf16;       // of hidden_states and last_hidden
  int64_t max_seq_len = 0;         // the longest sample
  std::string target;              // where the target was read from (a folder)
  std::string target_fingerprint;  // train/feature_target.h
  std::string tokenizer_hash;
  // The dataset of each sample (train/chat_data.h): names, and per sample an index into
  // them. Both empty when no sample was named (and in index files written before).
  std::vector<std::string> dataset_names;
  std::vector<int32_t> sample_datasets;  // num_samples entries, or none

  int64_t num_layers() const { return static_cast<int64_t>(layer_ids.size()); }  // K
  nlohmann::json to_json() const;
  // Parses and checks index.json's text; errors name `path` and the field. `partial`:
  // index.partial.json's (Note [Resuming features]), which may list no shard yet.
  static FeatureFileIndex from_json(const std::string& text, const std::string& path,
                                    bool partial = false);
};

// Bytes of one sample of S tokens on disk (tensor data; the header adds a few hundred).
uint64_t feature_sample_bytes(int64_t seq_len, int64_t num_layers, int64_t hidden_size,
                              DType dtype);

// The tensor names of sample i.
std::string feature_tensor_name(int64_t sample, const char* field);

// Note [Shard header hashes]: index.json records, for each shard, the XXH3-128 of the
// shard's safetensors header (its 8-byte length and JSON), and the reader checks it when it
// opens the folder. The header holds each tensor's own checksum (Note [Tensor checksums] in
// nn/safetensors.h), so the index's hash covers the shard's bytes without reading them: a
// shard copied in from another feature set of the same shapes -- same size, a header and
// tensors that agree with each other -- is refused, where it used to be read as this set's.
// And since data-parallel ranks compare the index's bytes (Note [Ranks started alike] in
// train/data_parallel.h), ranks that read two separately written folders whose shards
// differ are refused too, not only ranks whose indexes differ.
std::string shard_header_hash(const std::string& path);

// What else an interrupted folder must agree with to be resumed (Note [Resuming features]).
struct FeatureRunIdentity {
  std::string data_fingerprint;  // of the samples to write, in order ("" in tests: any)
  int64_t num_inputs = 0;        // how many samples the run writes in all
};

class FeatureFileWriter {
 public:
  // `header`: every field but the shards, num_samples and max_seq_len (filled here). The
  // folder is made; it must not hold an index.json already (a second write would mix two
  // sets of features). When it holds index.partial.json the writer resumes it (Note
  // [Resuming features]): num_samples() says how many samples are already written.
  FeatureFileWriter(std::string dir, FeatureFileIndex header,
                    uint64_t max_shard_bytes = uint64_t{1} << 30, FeatureRunIdentity identity = {});
  int64_t num_samples() const { return index_.num_samples; }  // written so far (resumed included)
  int64_t resumed_samples() const { return resumed_; }
  // One sample: hidden_states [S, K*H], last_hidden [S, H] (any device and float dtype:
  // stored in the header's dtype), S = sequence.ids.size(). `dataset`: the sample's
  // dataset name; the index records names when any sample has one.
  void add(const DrafterSequence& sequence, const Tensor& hidden_states, const Tensor& last_hidden,
           const std::string& dataset = "");
  // Writes the last shard, then index.json (atomically: a folder without index.json is
  // not a feature set). Returns the index.
  const FeatureFileIndex& finish();
  // Ends a run that cannot be finished or resumed (its target's output is not finite,
  // Note [Finite features], feature_target.cpp): a set this writer began is removed whole
  // (its shards and index.partial.json); a resumed one is left as it stands (its listed
  // shards are whole). Nothing can be added after. Returns whether the set was removed.
  bool discard();

 private:
  void flush_shard();
  void resume(const std::string& partial_path);  // Note [Resuming features]
  void write_partial_index() const;

  std::string dir_;
  FeatureFileIndex index_;
  uint64_t max_shard_bytes_;
  safetensors::NamedTensors pending_;
  std::set<std::string> pending_u8_;
  uint64_t pending_bytes_ = 0;
  int64_t pending_first_ = 0;
  bool finished_ = false;
  std::vector<std::string> datasets_;  // per sample, "" when not named
  FeatureRunIdentity identity_;
  int64_t resumed_ = 0;
};

// index.partial.json's name in a feature folder (Note [Resuming features]).
constexpr const char* kPartialFeatureIndex = "index.partial.json";

// Whether a file named `name` belongs to a feature set: index.json, index.partial.json,
// features-NNNNN.safetensors, or one of their temporaries (<name>.tmp, core/atomic_file.h).
// `chunkgrad features --fresh` removes these and nothing else.
bool is_feature_set_file(const std::string& name);

}  // namespace cg::train
