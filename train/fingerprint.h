// Why this file exists: a run's caches and checkpoints must be keyed by what they were
// made from, not by where it was: editing corpus.txt in place (or the file behind
// target.checkpoint) used to load a target trained on the old text ("target: cache") and
// resume a drafter across the edit. The bytes are fingerprinted instead, with XXH3-128
// (xxHash, libxxhash-dev): fast enough to hash a corpus or a checkpoint on every start
// (tens of GB/s), and 128 bits make an accidental match out of the question. It is not a
// defence against someone forging a collision on purpose, which is not the threat here.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/content_hash.h"  // content_hash, file_content_hash
#include "train/train_config.h"

namespace cg::train {

// What a run's target and drafter were trained on, by content: the corpus bytes and, when
// the target comes from target.checkpoint, its bytes (a missing one is an error naming the
// field: this runs before the run directory is written). Stored with the target cache
// and each drafter checkpoint; a mismatch retrains the target and refuses a resume.
nlohmann::json data_fingerprint(const TrainConfig& config, std::string_view corpus_text);

// The bytes of a checkpoint, as its load reads them (safetensors::open): one file's
// XXH3-128 (as file_content_hash; a folder's model.safetensors the same), or for a sharded
// checkpoint (its *.index.json, or a folder holding one) the hash of the index and of every
// shard it names. `what` names the field in errors.
std::string checkpoint_content_hash(const std::string& path, const std::string& what);

}  // namespace cg::train
