// Why this file exists: the target of the feature stage, by folder (feature_target.h).
#include "train/feature_target.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/factories.h"
#include "core/json_input.h"
#include "core/views.h"
#include "nn/checkpoint.h"
#include "nn/dflash_drafter.h"
#include "nn/init_mode.h"
#include "ops/shape_ops.h"
#include "train/chat_data.h"
#include "train/fingerprint.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"
#include "train/train_config.h"

namespace cg::train {

namespace fs = std::filesystem;

std::string byte_tokenizer_hash() {
  return content_hash(
      "chunkgrad ByteTokenizer: bytes 0-255, bos " + std::to_string(ByteTokenizer::kBos) +
      ", eos " + std::to_string(ByteTokenizer::kEos) + ", pad " +
      std::to_string(ByteTokenizer::kPad) + ", mask " + std::to_string(ByteTokenizer::kMask));
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CG_CHECK(in.is_open(), "target: cannot read ", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

FeatureTarget load_feature_target(const std::string& dir, Device device, DType dtype) {
  CG_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "--target ", dir,
           ": a target runs in f32, bf16 or f16, not ", dtype_name(dtype));
  FeatureTarget t;
  t.path = dir;
  t.dtype = dtype;
  const fs::path config_path = fs::path(dir) / "config.json";
  CG_CHECK(fs::is_directory(dir), "--target ", dir, " is not a folder");
  CG_CHECK(fs::exists(config_path), "--target ", dir,
           ": no config.json (expected a Hugging Face Qwen3 / Qwen3.5 / Qwen3.5-MoE folder or a "
           "chunkgrad run directory)");
  const nlohmann::json config =
      parse_untrusted_json(read_text(config_path.string()), config_path.string());
  nn::Qwen3Config arch;
  std::vector<std::string> weights;  // the files the weights are read from
  std::string load_from;
  if (config.is_object() && config.contains("target") && config.contains("drafter")) {
    t.kind = "chunkgrad run";
    const TrainConfig run = TrainConfig::from_file(config_path.string());
    arch = target_architecture(run.target);
    load_from = run.target.checkpoint.empty()
                    ? (fs::path(dir) / "target" / "model.safetensors").string()
                    : run.target.checkpoint;
    CG_CHECK(fs::exists(load_from), "--target ", dir, ": the run has no cached target (", load_from,
             " is missing; run `chunkgrad train` in it first)");
    weights.push_back(load_from);
    t.tokenizer_hash = byte_tokenizer_hash();
    t.default_layers =
        run.drafter.target_layers.empty()
            ? nn::dflash_target_layers(arch.num_layers, run.drafter.num_target_features)
            : run.drafter.target_layers;
  } else {
    t.kind = "hugging face";
    try {  // the folder in the message: the file's fields are named, not where it is
      arch = nn::Qwen3Config::from_hf_file(config_path.string());
    } catch (const Error& e) { CG_FAIL("--target ", dir, ": ", e.message()); }
    // A wrapper's own sizes that disagree with its text_config: ignored, as transformers
    // ignores them, but said once (an outside tester's edit went unnoticed).
    const std::string ignored = nn::Qwen3Config::ignored_wrapper_fields(config);
    if (!ignored.empty())
      std::fprintf(stderr, "warning: --target %s: %s\n", dir.c_str(), ignored.c_str());
    load_from = dir;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".safetensors") weights.push_back(e.path().string());
    }
    std::sort(weights.begin(), weights.end());
    CG_CHECK(!weights.empty(), "--target ", dir, ": no .safetensors files beside config.json");
    try {  // a target too shallow for the rule has no default: --layers must say
      t.default_layers =
          nn::dflash_target_layers(arch.num_layers, DrafterConfig().num_target_features);
    } catch (const Error&) { t.default_layers.clear(); }
    const fs::path tok = fs::path(dir) / "tokenizer.json";
    t.tokenizer_hash =
        fs::exists(tok) ? file_content_hash(tok.string(), "the tokenizer") : byte_tokenizer_hash();
  }
  std::string prints = arch.str();
  for (const std::string& w : weights)
    prints += "\n" + fs::path(w).filename().string() + " " + file_content_hash(w, "the target");
  t.fingerprint = content_hash(prints);
  // Note [Uninitialized parameters]: every parameter is filled by the strict load below.
  {
    nn::SkipParameterInit no_init;
    t.lm = std::make_unique<nn::Qwen3ForCausalLM>(
        arch, nn::InitOptions{.dtype = dtype, .device = device});
  }
  try {
    // Note [Hugging Face target names] (nn/checkpoint.h): one name map for every loader.
    nn::load_checkpoint(*t.lm, load_from, nn::hf_target_load_options(arch));
  } catch (const Error& e) { CG_FAIL("--target ", dir, ": ", e.message()); }
  t.lm->eval();
  t.lm->freeze();
  return t;
}

SampleFeatures sample_features(const nn::Qwen3ForCausalLM& lm, const DrafterSequence& sequence,
                               const std::vector<int64_t>& layers) {
  const LengthBucket one{{0}, static_cast<int64_t>(sequence.ids.size())};
  return bucket_features(lm, {sequence}, one, layers, lm.model->norm->weight.dtype()).at(0);
}

std::vector<DrafterSequence> read_token_jsonl(const std::string& path, int64_t vocab_size) {
  try {  // the strict reader of train/chat_data.h, which reads these lines too
    return read_chat_data({path}, {.encode = {}, .vocab_size = vocab_size, .strict = true})
        .sequences();
  } catch (const Error& e) { CG_FAIL("--data ", e.message()); }
}

std::string features_data_fingerprint(const std::vector<DrafterSequence>& sequences,
                                      const std::vector<std::string>& datasets) {
  // A hash per sample, then one of them all: no copy of the whole data set in memory.
  std::string per_sample;
  per_sample.reserve(sequences.size() * 33);
  for (size_t i = 0; i < sequences.size(); ++i) {
    const DrafterSequence& s = sequences[i];
    std::string bytes = std::to_string(s.ids.size()) + ":" +
                        (i < datasets.size() ? datasets[i] : std::string()) + ":";
    for (int64_t id : s.ids) bytes.append(reinterpret_cast<const char*>(&id), sizeof id);
    bytes.append(s.loss_mask.begin(), s.loss_mask.end());
    per_sample += content_hash(bytes) + "\n";
  }
  return content_hash(per_sample);
}

namespace {

Tensor host_copy(const Tensor& t, DType dtype) {
  return raw::contiguous(raw::to_dtype(raw::to_device(t, kCPU), dtype));
}

// Note [Finite features]: a target whose forward overflows (finite weights of 3e38 in an
// outside tester's embed_tokens and down_proj) gives inf and NaN features; written, they
// surfaced only as train's NaN loss, blaming the learning rate. Each sample's stored
// features (as stored: bf16 can overflow where f32 did not) are checked on the host before
// the writer takes them. Said: the shallowest layer id whose output is not finite (where
// the overflow shows first), else the final norm's output. "" when every value is finite.
std::string non_finite_feature(const SampleFeatures& f, const std::vector<int64_t>& layers) {
  const auto name = [](double v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; };
  if (nn::first_non_finite(f.hidden_states) >= 0) {
    const int64_t S = f.hidden_states.shape()[0], K = static_cast<int64_t>(layers.size());
    const int64_t H = f.hidden_states.shape()[1] / K;
    const std::vector<double> v = f.hidden_states.to_vector();
    int64_t layer = -1, token = 0;
    double value = 0;
    for (int64_t k = 0; k < K; ++k) {
      if (layer >= 0 && layers[static_cast<size_t>(k)] > layer) continue;
      for (int64_t s = 0; s < S; ++s) {
        const double* row = v.data() + s * K * H + k * H;
        const double* bad = std::find_if(row, row + H, [](double x) { return !std::isfinite(x); });
        if (bad != row + H) {
          layer = layers[static_cast<size_t>(k)];
          token = s;
          value = *bad;
          break;
        }
      }
    }
    return "layer " + std::to_string(layer) + "'s output, stored as hidden_states, holds " +
           name(value) + " at token " + std::to_string(token);
  }
  double value = 0;
  const int64_t bad = nn::first_non_finite(f.last_hidden, &value);
  if (bad < 0) return "";
  return std::string("the final norm's output, stored as last_hidden, holds ") + name(value) +
         " at token " + std::to_string(bad / f.last_hidden.shape()[1]);
}

}  // namespace

FeatureFileIndex write_feature_files(const FeatureTarget& target,
                                     const std::vector<DrafterSequence>& sequences,
                                     const std::vector<int64_t>& layers, DType dtype,
                                     const std::string& out_dir, uint64_t max_shard_bytes,
                                     const std::function<void(int64_t)>& on_sample,
                                     const std::vector<std::string>& datasets,
                                     const BucketOptions& buckets, int64_t* resumed) {
  FeatureFileIndex header;
  header.layer_ids = layers;
  header.hidden_size = target.lm->config().hidden_size;
  header.dtype = dtype;
  header.target = fs::absolute(target.path).lexically_normal().string();
  header.target_fingerprint = target.fingerprint;
  header.tokenizer_hash = target.tokenizer_hash;
  FeatureFileWriter writer(out_dir, header, max_shard_bytes,
                           {.data_fingerprint = features_data_fingerprint(sequences, datasets),
                            .num_inputs = static_cast<int64_t>(sequences.size())});
  if (resumed) *resumed = writer.resumed_samples();
  const int64_t window_tokens = 4 * buckets.batch_tokens;
  // Note [Resuming features]: the samples an interrupted run already wrote are kept.
  for (size_t begin = static_cast<size_t>(writer.num_samples()); begin < sequences.size();) {
    // A window of consecutive samples: bucketed inside, written in order.
    size_t end = begin + 1;
    int64_t tokens = static_cast<int64_t>(sequences[begin].ids.size());
    while (end < sequences.size() &&
           tokens + static_cast<int64_t>(sequences[end].ids.size()) <= window_tokens) {
      tokens += static_cast<int64_t>(sequences[end].ids.size());
      ++end;
    }
    const std::vector<DrafterSequence> window(sequences.begin() + static_cast<ptrdiff_t>(begin),
                                              sequences.begin() + static_cast<ptrdiff_t>(end));
    std::vector<int64_t> lengths;
    for (const DrafterSequence& s : window) lengths.push_back(static_cast<int64_t>(s.ids.size()));
    std::vector<SampleFeatures> features(window.size());
    for (const LengthBucket& b : length_buckets(lengths, buckets)) {
      std::vector<SampleFeatures> got = bucket_features(*target.lm, window, b, layers, dtype);
      for (size_t r = 0; r < b.samples.size(); ++r) features[b.samples[r]] = std::move(got[r]);
    }
    for (size_t i = 0; i < window.size(); ++i) {  // on the host, as stored
      features[i].hidden_states = host_copy(features[i].hidden_states, dtype);
      features[i].last_hidden = host_copy(features[i].last_hidden, dtype);
      const std::string bad = non_finite_feature(features[i], layers);
      if (!bad.empty()) {
        const bool removed = writer.discard();
        CG_FAIL("sample ", begin + i, ": the target's output is not finite (", bad,
                "): its forward overflowed in ", dtype_name(target.dtype),
                " (weights too large for it, or damaged); ",
                removed ? "no feature set was written"
                        : "the interrupted run's feature set is left as it was",
                ": check the target's weights");
      }
    }
    for (size_t i = 0; i < window.size(); ++i) {
      const size_t index = begin + i;
      writer.add(window[i], features[i].hidden_states, features[i].last_hidden,
                 index < datasets.size() ? datasets[index] : std::string());
      features[i] = {};
      if (on_sample) on_sample(static_cast<int64_t>(index));
    }
    begin = end;
  }
  return writer.finish();
}

}  // namespace cg::train
