// Why this file exists: the features of a Hugging Face target computed step by step
// (target_features.h).
#include "train/target_features.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/factories.h"
#include "nn/dflash_drafter.h"
#include "ops/elementwise.h"
#include "ops/join_ops.h"
#include "ops/shape_ops.h"
#include "train/dflash_batch.h"
#include "train/drafter_data.h"
#include "train/fingerprint.h"

namespace cg::train {

TargetFeatureSource::TargetFeatureSource(const nn::Qwen3ForCausalLM& lm,
                                         std::vector<DrafterSequence> sequences,
                                         std::vector<int64_t> layers, std::string name)
    : lm_(lm),
      sequences_(std::move(sequences)),
      layers_(std::move(layers)),
      name_(std::move(name)) {
  CG_CHECK(!sequences_.empty(), "target features: ", name_, ": no samples");
  for (const int64_t l : layers_) {
    CG_CHECK(l >= 0 && l < lm_.config().num_layers, "target features: layer ", l,
             " is not a layer of the target (0 .. ", lm_.config().num_layers - 1, ")");
  }
  for (const DrafterSequence& s : sequences_)
    seq_len_ = std::max(seq_len_, static_cast<int64_t>(s.ids.size()));
}

int64_t TargetFeatureSource::hidden_size() const { return lm_.config().hidden_size; }

DType TargetFeatureSource::dtype() const { return lm_.model->norm->weight.dtype(); }

std::string TargetFeatureSource::describe() const {
  return "target " + name_ + " (" + std::to_string(sequences_.size()) +
         " samples, computed each step)";
}

FeatureBatch TargetFeatureSource::fetch(const std::vector<int64_t>& ids, Device device) {
  NoGradGuard no_grad;
  std::vector<DrafterSequence> batch;
  batch.reserve(ids.size());
  for (const int64_t i : ids) {
    CG_CHECK(i >= 0 && i < static_cast<int64_t>(sequences_.size()), "target features: sample ", i,
             " of ", sequences_.size());
    batch.push_back(sequences_[static_cast<size_t>(i)]);
  }
  // Any id of the vocabulary pads: causal attention keeps it out of the real positions.
  TargetFeatures f = compute_target_features(lm_, batch, layers_, true, /*pad_id=*/0);
  // Zeros past each sample's end, as an offline folder hands them out: [B, S_batch, 1].
  const int64_t B = static_cast<int64_t>(batch.size()), S = f.seq_len;
  bool ragged = false;
  std::vector<double> keep(static_cast<size_t>(B * S), 0.0);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t n = static_cast<int64_t>(batch[static_cast<size_t>(r)].ids.size());
    ragged = ragged || n < S;
    std::fill_n(keep.begin() + r * S, n, 1.0);
  }
  if (ragged) {
    const Tensor mask =
        from_vector(keep, {B, S, 1}, {.dtype = f.features.dtype(), .device = f.features.device()});
    f.features = f.features * mask;
    f.final_hidden = f.final_hidden * mask;
  }
  const int64_t extra = seq_len_ - S;
  FeatureBatch out;
  out.hidden_states = extra > 0 ? pad(f.features, {0, 0, 0, extra}) : f.features;
  out.last_hidden = extra > 0 ? pad(f.final_hidden, {0, 0, 0, extra}) : f.final_hidden;
  out.hidden_states = to_device(out.hidden_states, device);
  out.last_hidden = to_device(out.last_hidden, device);
  return out;
}

TargetRun open_target_run(const TrainConfig& config, Device device,
                          const ChatDataOptions& data_options) {
  TargetRun r;
  // In the drafter's dtype: bf16 weights (and features) for a bf16 drafter, the fast path
  // on a GPU (train/target_forward.h); f32 for an f32 one, as the goldens compare.
  r.target = load_feature_target(config.features.target, device,
                                 config.drafter.dtype == "bf16" ? DType::bf16 : DType::f32);
  CG_CHECK(r.target.kind == "hugging face", "features.target ", config.features.target,
           " is a chunkgrad run directory; features.source target takes a Hugging Face Qwen3 "
           "folder (for a run's toy target use features.source online)");
  const nn::Qwen3Config& arch = r.target.lm->config();
  // The byte tokenizer's MASK id means nothing in a real vocabulary: the drafter's block
  // slots would be fed an ordinary token's embedding.
  CG_CHECK(config.drafter.mask_token_id >= 0 && config.drafter.mask_token_id < arch.vocab_size,
           "train config: drafter.mask_token_id is ", config.drafter.mask_token_id,
           "; a Hugging Face target needs the MASK id set, an id of its vocabulary (0 .. ",
           arch.vocab_size - 1,
           ") that the tokenizer never produces (Qwen3: 151669, the published drafters' id)");
  const std::vector<int64_t> layers =
      config.drafter.target_layers.empty()
          ? nn::dflash_target_layers(arch.num_layers, config.drafter.num_target_features)
          : config.drafter.target_layers;
  ChatDataOptions options = data_options;
  options.vocab_size = arch.vocab_size;
  ChatData data;
  try {
    data = read_chat_data(config.features.data, options);
  } catch (const Error& e) { CG_FAIL("features.data: ", e.message()); }
  for (const DataFileReport& f : data.files) {
    if (f.bad_lines > 0) std::fprintf(stderr, "warning: features.data: %s\n", f.describe().c_str());
  }
  if (!data.template_warning.empty())  // Note [Chat template check]
    std::fprintf(stderr, "warning: features.data: %s\n", data.template_warning.c_str());
  std::vector<DrafterSequence> all = data.sequences();
  // As for offline features (train/offline_features.h): block slots read the MASK in
  // place of their token, so a MASK the data holds makes a real token and a masked slot
  // look the same.
  const auto [sample, at] = find_token(all, config.drafter.mask_token_id);
  CG_CHECK(sample < 0, "features.data: sample ", sample, " holds drafter.mask_token_id ",
           config.drafter.mask_token_id, " at token ", at,
           ": the MASK must be an id the tokenizer never produces (Qwen3: 151669); set "
           "drafter.mask_token_id to one");
  int64_t longest = 0;
  for (const DrafterSequence& s : all)
    longest = std::max(longest, static_cast<int64_t>(s.ids.size()));
  warn_past_context(arch.max_position_embeddings, longest, "features.data's longest sample");
  std::string prints = r.target.fingerprint;
  for (const std::string& file : config.features.data) {
    prints += '\n';  // (not "\n" + hash: GCC 12 warns -Wrestrict on that temporary)
    prints += file_content_hash(file, "features.data");
  }
  const std::string tok = config.features.tokenizer.empty()
                              ? config.features.target + "/tokenizer.json"
                              : config.features.tokenizer;
  if (std::filesystem::exists(tok))
    prints += "\ntokenizer " + file_content_hash(tok, "the tokenizer");
  const int64_t n = static_cast<int64_t>(all.size());
  const int64_t held = std::min<int64_t>(config.eval.accuracy_sequences, n / 4);
  std::vector<DrafterSequence> held_seqs(all.end() - held, all.end());
  all.resize(static_cast<size_t>(n - held));
  r.train = std::make_shared<TargetFeatureSource>(*r.target.lm, std::move(all), layers,
                                                  config.features.target);
  if (held > 0) {
    r.held = std::make_shared<TargetFeatureSource>(*r.target.lm, std::move(held_seqs), layers,
                                                   config.features.target + " (held out)");
  }
  r.data_fingerprint = nlohmann::json{{"target_features_xxh3", content_hash(prints)},
                                      {"target", r.target.fingerprint}}
                           .dump();
  return r;
}

}  // namespace cg::train
