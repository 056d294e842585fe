// Why this file exists: `chunkgrad features`, the offline feature stage (issue 19): a
// target (a Hugging Face Qwen3-family folder or a chunkgrad run's cached toy target) reads
// chat or pre-tokenized JSONL (train/chat_data.h, docs/chat_data.md) and its hidden states
// are written as feature shards (docs/feature_files.md) that `chunkgrad train --features
// DIR` trains a drafter from. Run again into the same --out, it resumes an interrupted run,
// as `chunkgrad train` resumes in its run directory (Note [Resuming features],
// train/feature_files.h); with --fresh it starts over there, as `chunkgrad train --fresh`.
// The work is train/feature_target.h's and train/chat_data.h's; this file reads and checks
// the command line.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>

#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/error.h"
#include "examples/chunkgrad/commands.h"
#include "examples/chunkgrad/data_files.h"
#include "examples/common/program.h"
#include "train/chat_data.h"
#include "train/dflash_batch.h"
#include "train/feature_target.h"
#include "train/tokenizer.h"
#include "train/train_config.h"

namespace cg::cli {

namespace {

// --fresh: --out may hold a feature set (train::is_feature_set_file) and nothing else.
void check_only_feature_files(const std::filesystem::path& out) {
  if (!std::filesystem::exists(out)) return;
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    CG_CHECK(e.is_regular_file() && train::is_feature_set_file(name), "--out ", out.string(),
             " holds ", name,
             ", which is not a feature set's; --fresh removes only index.json, "
             "index.partial.json and features-NNNNN.safetensors: give a folder with nothing "
             "else in it");
  }
}

// --fresh: removes the feature set in `out`; returns the files removed.
int remove_feature_set(const std::filesystem::path& out) {
  std::vector<std::filesystem::path> set;
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    if (e.is_regular_file() && train::is_feature_set_file(e.path().filename().string()))
      set.push_back(e.path());
  }
  for (const auto& p : set) {
    std::error_code ec;
    std::filesystem::remove(p, ec);
    CG_CHECK(!ec, "--fresh: cannot remove ", p.string(), " (", ec.message(), ")");
  }
  return static_cast<int>(set.size());
}

struct FeaturesOptions {
  std::string target, out, layers, tokenizer, dtype = "bf16", device = kCPU.str();
  std::vector<std::string> data;
  int64_t shard_mb = 1024;
  int64_t batch_tokens = -1;  // -1: 16384 on a GPU, 0 (one sample a forward) on the CPU
  bool no_progress = false, strict = false, allow_template = false, fresh = false;
};

// "1,16,31" -> ids; "" when not given. Throws naming --layers.
std::vector<int64_t> parse_layers(const std::string& text) {
  std::vector<int64_t> ids;
  if (text.empty()) return ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) { used = 0; }
    CG_CHECK(used == item.size() && !item.empty() && v >= 0, "--layers '", text,
             "': expected layer ids >= 0 separated by commas (e.g. 1,16,31), not '", item, "'");
    // As drafter.target_layers: a layer twice would be the same features under two slots,
    // which no training config accepts.
    CG_CHECK(std::find(ids.begin(), ids.end(), v) == ids.end(), "--layers '", text, "': layer ", v,
             " is listed twice; list each layer once");
    ids.push_back(v);
  }
  CG_CHECK(!text.ends_with(","), "--layers '", text, "': a trailing comma");
  return ids;
}

CLI::Validator layer_list() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          parse_layers(text);
        } catch (const Error& e) { return e.message(); }
        return text.empty() ? std::string("must not be empty") : std::string();
      },
      "L1,L2,...");
}

}  // namespace

void add_features_command(CLI::App& app, CommandBody& run) {
  static FeaturesOptions o;
  CLI::App* sub = app.add_subcommand(
      "features",
      "write a target's hidden states for chat or pre-tokenized data as feature shards");
  sub->add_option("--target", o.target, target_folder_help())
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--data", o.data,
                  "JSONL, one sample a line: chat ({\"messages\": [...]} or ShareGPT "
                  "{\"conversations\": [...]}) or pre-tokenized ({\"input_ids\": [...]}); "
                  "repeat for several files (docs/chat_data.md)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--tokenizer", o.tokenizer,
                  "the tokenizer.json chat lines are tokenized with (default: the target "
                  "folder's; pre-tokenized lines need none)")
      ->check(CLI::ExistingFile);
  sub->add_flag("--strict", o.strict,
                "a bad data line is an error (default: bad lines are skipped and counted)");
  sub->add_flag(kAllowChatTemplateFlag, o.allow_template, kAllowChatTemplateHelp);
  sub->add_option("--out", o.out,
                  "the feature folder to write: empty, or an interrupted run's (holding "
                  "index.partial.json), which the same command resumes (--fresh: starts over)")
      ->required()
      ->check(program::not_empty());
  sub->add_option("--layers", o.layers,
                  "target layer ids (layer l = the output of decoder layer l); default: a run's "
                  "drafter layers, else the DFlash rule for the target's depth")
      ->check(layer_list());
  sub->add_option("--dtype", o.dtype, "storage dtype")->check(program::one_of({"bf16", "f32"}));
  sub->add_option("--device", o.device, cg::device_names_help() + " (default cpu)")
      ->check(program::device_name());
  sub->add_option("--shard-mb", o.shard_mb, "MiB of features per shard (default 1024)")
      ->check(program::integer_in(1, int64_t{1} << 30));
  // The default (-1) is "by device", outside the range a user may give: --help says it in
  // words (it showed "from 0 to 1073741824=-1").
  sub->add_option("--batch-tokens", o.batch_tokens,
                  "padded tokens per target forward, samples bucketed by length; 0: one "
                  "sample a forward")
      ->check(program::integer_in(0, int64_t{1} << 30))
      ->default_str("16384 on a GPU, 0 on the CPU");
  sub->add_flag("--fresh", o.fresh,
                "start over: the feature set already in --out (finished or interrupted) is "
                "removed once the target and the data have loaded; anything else there is "
                "refused");
  sub->add_flag("--no-progress", o.no_progress, "no progress lines on stderr");
  sub->callback([&run] {
    run = [] {
      std::error_code made_error;
      const Device device = Device::parse(o.device);
      backend_for(device);  // no GPU: one error line before any work
      const std::filesystem::path out(o.out);
      NamedPaths inputs = target_inputs(o.target, "--target");
      for (auto& in : tokenizer_inputs(o.tokenizer, "--tokenizer")) inputs.push_back(in);
      for (const std::string& file : o.data) inputs.emplace_back(file, "--data");
      program::check_output_not_input(o.out, "--out", inputs);
      program::check_inputs_outside(o.out, "--out", inputs);
      CG_CHECK(!std::filesystem::exists(out) || std::filesystem::is_directory(out), "--out ", o.out,
               " is a file, not a folder");
      if (o.fresh) check_only_feature_files(out);
      CG_CHECK(o.fresh || !std::filesystem::exists(out / "index.json"), "--out ", o.out,
               " already holds index.json (a finished feature set); give an empty folder, or "
               "--fresh to replace it");
      // Note [Resuming features]: an interrupted run's folder (index.partial.json) is resumed
      // once the target and the data are known to be the same. Anything else in the folder
      // would end up beside the new shards.
      const bool resuming = !o.fresh && std::filesystem::exists(out / train::kPartialFeatureIndex);
      CG_CHECK(
          o.fresh || resuming || !std::filesystem::exists(out) || std::filesystem::is_empty(out),
          "--out ", o.out, " is not empty (",
          std::filesystem::exists(out)
              ? std::filesystem::directory_iterator(out)->path().filename().string()
              : std::string(),
          " ...) and holds no ", train::kPartialFeatureIndex,
          " of an interrupted run to resume; give an empty folder");
      if (resuming && !o.no_progress)
        std::fprintf(stderr, "chunkgrad features: %s holds an interrupted run (%s): resuming it\n",
                     o.out.c_str(), train::kPartialFeatureIndex);
      // Before the target's (long) load: the shards are made there. A folder this run made
      // goes again if the run fails before writing into it (a bad target, no valid sample).
      const program::RemoveIfLeftEmpty made_here(o.out);
      std::filesystem::create_directories(o.out, made_error);
      CG_CHECK(!made_error, "--out ", o.out, ": cannot create the folder (", made_error.message(),
               "); give a writable place");
      check_writable_dir(o.out, "--out");
      // The target first: its vocabulary decides which lines are bad. It runs in the storage
      // dtype on a GPU (bf16: the fast path), in f32 on the CPU (what the goldens compare).
      const DType compute = device == kCPU || o.dtype == "f32" ? DType::f32 : DType::bf16;
      train::FeatureTarget target = train::load_feature_target(o.target, device, compute);
      const nn::Qwen3Config& arch = target.lm->config();
      const train::ChatData data =
          read_data_files(o.data, data_tokenizer(o.tokenizer, o.target, o.allow_template),
                          arch.vocab_size, o.strict);
      const std::vector<train::DrafterSequence> samples = data.sequences();
      // A chunkgrad run's byte target has one MASK, 259, which training refuses to find in
      // the data (train/offline_features.h): refused here, before the features are written.
      if (target.kind == "chunkgrad run") {
        const auto [sample, at] = train::find_token(samples, train::ByteTokenizer::kMask);
        CG_CHECK(sample < 0, "--data: sample ", sample, " holds ", train::ByteTokenizer::kMask,
                 " at token ", at,
                 ", the byte tokenizer's MASK, which the drafter reads in place of a token; "
                 "pre-tokenized data for a chunkgrad run's target holds bytes, BOS, EOS and PAD "
                 "(0 .. ",
                 train::ByteTokenizer::kMask - 1, ")");
      }
      std::vector<std::string> datasets;
      for (const train::DataSample& s : data.samples) datasets.push_back(s.dataset);
      std::vector<int64_t> layers = parse_layers(o.layers);
      if (layers.empty()) layers = target.default_layers;
      CG_CHECK(!layers.empty(), "--layers: the target has ", arch.num_layers,
               " decoder layers, too few for the DFlash rule's default of ",
               train::DrafterConfig().num_target_features, " layers; list them, e.g. --layers ",
               arch.num_layers / 2);
      for (int64_t l : layers) {
        CG_CHECK(l < arch.num_layers, "--layers: layer ", l, " does not exist; the target has ",
                 arch.num_layers, " decoder layers (0 .. ", arch.num_layers - 1, ")");
      }
      int64_t longest = 0;
      for (const train::DrafterSequence& s : samples)
        longest = std::max(longest, static_cast<int64_t>(s.ids.size()));
      train::warn_past_context(arch.max_position_embeddings, longest, "--data's longest sample");
      const DType dtype = o.dtype == "f32" ? DType::f32 : DType::bf16;
      if (!o.no_progress) {
        std::fprintf(stderr, "chunkgrad features: %s target %s, %zu samples, layers",
                     target.kind.c_str(), o.target.c_str(), samples.size());
        for (int64_t l : layers) std::fprintf(stderr, " %lld", static_cast<long long>(l));
        std::fprintf(stderr, ", %s (computed in %s)\n", o.dtype.c_str(), dtype_name(compute));
      }
      for (const train::DataFileReport& f : data.files) {  // bad lines are said even so
        if (!o.no_progress || f.bad_lines > 0)
          std::fprintf(stderr, "chunkgrad features: %s\n", f.describe().c_str());
      }
      if (o.fresh) {  // only now: a run that fails before this leaves the old set
        const int removed = remove_feature_set(out);
        if (removed > 0 && !o.no_progress)
          std::fprintf(stderr,
                       "chunkgrad features: --fresh: removed the %d files of the feature "
                       "set in %s\n",
                       removed, o.out.c_str());
      }
      int64_t resumed = 0;
      const train::FeatureFileIndex index = train::write_feature_files(
          target, samples, layers, dtype, o.out, static_cast<uint64_t>(o.shard_mb) << 20,
          [&](int64_t i) {
            if (!o.no_progress &&
                ((i + 1) % 100 == 0 || i + 1 == static_cast<int64_t>(samples.size())))
              std::fprintf(stderr, "chunkgrad features: %lld / %zu samples\n",
                           static_cast<long long>(i + 1), samples.size());
          },
          datasets,
          {.batch_tokens = o.batch_tokens >= 0 ? o.batch_tokens
                           : device == kCPU    ? 0
                                               : 16384},
          &resumed);
      uint64_t bytes = 0;
      for (const auto& s : index.shards) bytes += s.bytes;
      std::printf("features: %lld samples, %zu shards, %llu bytes in %s",
                  static_cast<long long>(index.num_samples), index.shards.size(),
                  static_cast<unsigned long long>(bytes), o.out.c_str());
      if (resumed > 0)
        std::printf(" (%lld written by the interrupted run)", static_cast<long long>(resumed));
      std::printf("\n");
    };
  });
}

}  // namespace cg::cli
