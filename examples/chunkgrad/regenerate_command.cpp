// Why this file exists: `chunkgrad regenerate`, the step of the DFlash recipe that has the
// target answer each prompt itself (issue 20 item 3): chat or pre-tokenized JSONL in, the same
// prompts with the target's responses out, resumable. The work is train/regenerate.h's;
// this file reads and checks the command line.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/error.h"
#include "examples/chunkgrad/commands.h"
#include "examples/chunkgrad/data_files.h"
#include "examples/common/program.h"
#include "train/feature_target.h"
#include "train/regenerate.h"
#include "train/tokenizer.h"

namespace cg::cli {

namespace {

struct RegenerateCommandOptions {
  std::string target, data, out, eos_ids, tokenizer, dtype = "f32", device = kCPU.str();
  int64_t max_new_tokens = 512, batch_size = 64, top_k = 0, limit = 0;
  double temperature = 0.0, top_p = 1.0;
  uint64_t seed = 0;
  bool no_progress = false, strict = false, allow_template = false;
};

// "151645,151643" -> ids. Throws naming --eos-ids.
std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) { used = 0; }
    CG_CHECK(used == item.size() && !item.empty() && v >= 0, "--eos-ids '", text,
             "': expected token ids >= 0 separated by commas (e.g. 151645,151643), not '", item,
             "'");
    ids.push_back(v);
  }
  CG_CHECK(!ids.empty() && !text.ends_with(","), "--eos-ids '", text,
           "': expected token ids separated by commas");
  return ids;
}

}  // namespace

void add_regenerate_command(CLI::App& app, CommandBody& run) {
  static RegenerateCommandOptions o;
  CLI::App* sub = app.add_subcommand(
      "regenerate",
      "have the target answer each sample's prompt again (chat or pre-tokenized JSONL)");
  sub->add_option("--target", o.target, target_folder_help())
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--data", o.data,
                  "chat or pre-tokenized JSONL (docs/chat_data.md); the prompt is everything "
                  "before the last run of loss_mask = 1 (the last assistant answer)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--tokenizer", o.tokenizer,
                  "the tokenizer.json conversations are read with (default: the target folder's)")
      ->check(CLI::ExistingFile);
  sub->add_flag("--strict", o.strict, "a bad data line is an error (default: skipped, counted)");
  sub->add_flag(kAllowChatTemplateFlag, o.allow_template, kAllowChatTemplateHelp);
  sub->add_option("--out", o.out,
                  "the JSONL to write; a rerun with the same options continues it "
                  "(its options are kept in OUT.options.json)")
      ->required()
      ->check(program::not_empty());
  sub->add_option("--max-new-tokens", o.max_new_tokens, "response length limit (default 512)")
      ->check(program::integer_in(1, int64_t{1} << 20));
  sub->add_option("--batch-size", o.batch_size, "rows decoded together (default 64)")
      ->check(program::integer_in(1, 4096));
  sub->add_option("--eos-ids", o.eos_ids,
                  "ids that end a response (default: the target folder's generation_config.json "
                  "or config.json eos_token_id)");
  sub->add_option("--temperature", o.temperature, "0 = greedy (default); > 0 samples")
      ->check(program::number_in(0.0, 100.0));
  sub->add_option("--top-k", o.top_k, "sample among the k most likely tokens (0 = all)")
      ->check(program::integer_in(0, int64_t{1} << 30));
  sub->add_option("--top-p", o.top_p,
                  "sample among the most likely tokens holding this much "
                  "probability (1 = all)")
      ->check(program::number_in(0.0, 1.0, /*lo_open=*/true));
  sub->add_option("--seed", o.seed, "seed of the draws (each sample's own, from its line)");
  sub->add_option("--dtype", o.dtype, "weights and KV cache: f32 (default) or bf16")
      ->check(program::one_of({"bf16", "f32"}));
  sub->add_option("--device", o.device, cg::device_names_help() + " (default cpu)")
      ->check(program::device_name());
  sub->add_option("--limit", o.limit, "the first N samples only (0 = all)")
      ->check(program::integer_in(0, int64_t{1} << 40));
  sub->add_flag("--no-progress", o.no_progress, "no progress bar on stderr");
  sub->callback([&run] {
    run = [] {
      CG_CHECK(o.temperature > 0.0 || (o.top_k == 0 && o.top_p == 1.0),
               "--top-k and --top-p shape sampling; they need --temperature > 0 (greedy "
               "decoding takes the most likely token)");
      std::vector<int64_t> eos = o.eos_ids.empty() ? std::vector<int64_t>{} : parse_ids(o.eos_ids);
      namespace fs = std::filesystem;
      NamedPaths inputs = target_inputs(o.target, "--target");
      for (auto& in : tokenizer_inputs(o.tokenizer, "--tokenizer")) inputs.push_back(in);
      inputs.emplace_back(o.data, "--data");
      program::check_output_not_input(o.out, "--out", inputs);
      CG_CHECK(!fs::is_directory(o.out), "--out ", o.out, " is a folder; give a file (JSONL)");
      const fs::path parent = fs::path(o.out).parent_path();
      CG_CHECK(parent.empty() || fs::is_directory(parent), "--out ", o.out, ": the folder ",
               parent.string(), " does not exist");
      // Before the target's (long) load: the output and its options record are made there.
      check_writable_dir(parent.empty() ? "." : parent.string(), "--out " + o.out);
      const Device device = Device::parse(o.device);
      backend_for(device);  // no GPU: one error line before any work
      // The data first: its errors come before the target's (long) load.
      const train::ChatData data =
          read_data_files({o.data}, data_tokenizer(o.tokenizer, o.target, o.allow_template),
                          std::numeric_limits<int64_t>::max(), o.strict);
      for (const train::DataFileReport& f : data.files) {
        if (f.bad_lines > 0) std::fprintf(stderr, "warning: --data %s\n", f.describe().c_str());
      }
      std::vector<train::RegenerateSample> samples = train::regenerate_inputs(data);
      if (o.limit > 0 && static_cast<int64_t>(samples.size()) > o.limit) samples.resize(o.limit);
      train::FeatureTarget target = train::load_feature_target(
          o.target, device, o.dtype == "bf16" ? DType::bf16 : DType::f32);
      const nn::Qwen3Config& arch = target.lm->config();
      for (const train::RegenerateSample& sample : samples) {
        for (int64_t id : sample.ids) {
          CG_CHECK(id < arch.vocab_size, "--data ", o.data, " line ", sample.source_line,
                   " has token id ", id, "; the target's vocabulary has ", arch.vocab_size, " ids");
        }
      }
      if (eos.empty()) {
        eos = target.kind == "chunkgrad run" ? std::vector<int64_t>{train::ByteTokenizer::kEos}
                                             : train::eos_ids_of_folder(o.target);
      }
      CG_CHECK(!eos.empty(), "--target ", o.target,
               " names no eos_token_id (generation_config.json, config.json); pass --eos-ids "
               "(Qwen3: 151645,151643 for <|im_end|> and <|endoftext|>)");
      for (int64_t id : eos) {
        CG_CHECK(id < arch.vocab_size, "--eos-ids: id ", id,
                 " is outside the target's vocabulary (", arch.vocab_size, " ids)");
      }
      int64_t longest = 0;
      for (const train::RegenerateSample& sample : samples)
        longest = std::max(longest, sample.prompt_length + o.max_new_tokens);
      train::warn_past_context(arch.max_position_embeddings, longest,
                               "--data's longest prompt plus --max-new-tokens");
      const nlohmann::json record{{"target_fingerprint", target.fingerprint},
                                  {"dtype", o.dtype},
                                  {"max_new_tokens", o.max_new_tokens},
                                  {"eos_ids", eos},
                                  {"temperature", o.temperature},
                                  {"top_k", o.top_k},
                                  {"top_p", o.top_p},
                                  {"seed", o.seed}};
      if (!o.no_progress) {
        std::fprintf(stderr, "chunkgrad regenerate: %s target %s, %zu samples, %s on %s\n",
                     target.kind.c_str(), o.target.c_str(), samples.size(), o.dtype.c_str(),
                     device.str().c_str());
      }
      const train::RegenerateStats s = train::regenerate(*target.lm, samples,
                                                         {.max_new_tokens = o.max_new_tokens,
                                                          .batch_size = o.batch_size,
                                                          .eos_ids = eos,
                                                          .temperature = o.temperature,
                                                          .top_p = o.top_p,
                                                          .top_k = o.top_k,
                                                          .seed = o.seed,
                                                          .progress = !o.no_progress},
                                                         o.out, record);
      std::printf(
          "regenerate: %lld samples written (%lld already there), %lld new tokens, "
          "%lld stopped at EOS, %.2f s\n",
          static_cast<long long>(s.written), static_cast<long long>(s.skipped),
          static_cast<long long>(s.new_tokens), static_cast<long long>(s.eos_stops), s.seconds);
      const double rate = s.seconds > 0 ? static_cast<double>(s.new_tokens) / s.seconds : 0.0;
      const double fill = s.decode.steps > 0 ? static_cast<double>(s.decode.row_steps) /
                                                   static_cast<double>(s.decode.steps)
                                             : 0.0;
      std::printf(
          "throughput: %.1f new tokens/s (batch %lld, %.1f rows a step on average, %lld "
          "steps, %lld prefills, %lld rebuilds, %s %s)\n",
          rate, static_cast<long long>(o.batch_size), fill, static_cast<long long>(s.decode.steps),
          static_cast<long long>(s.decode.prefills), static_cast<long long>(s.decode.rebuilds),
          o.dtype.c_str(), device.str().c_str());
    };
  });
}

}  // namespace cg::cli
