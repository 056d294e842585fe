// Why this file exists: `chunkgrad eval`, the last step of the recipe: does a drafter in
// the public DFlash layout (`chunkgrad export`) make its target decode faster, on the
// user's own prompts, without changing a token?
//
//   chunkgrad eval --target /models/Qwen3-8B --drafter /runs/a/public \
//       --data gsm8k.jsonl --data mtbench.jsonl --device cuda --dtype bf16 --json eval.json
//
// prints tau per dataset and overall, the per-slot acceptance, target-only and
// speculative tokens/s and the speedup, and whether the outputs equal target-only greedy
// decoding (train/speculative_eval.h). A mismatch that is not a near tie is printed, then
// the program exits 1. The work is train/eval_inputs.h's and train/speculative_eval.h's;
// this file reads and checks the command line.
#include <algorithm>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/error.h"
#include "examples/chunkgrad/commands.h"
#include "examples/chunkgrad/data_files.h"
#include "examples/common/program.h"
#include "train/dflash_block_drafter.h"
#include "train/eval_inputs.h"
#include "train/progress.h"
#include "train/speculative_eval.h"

namespace cg::cli {

namespace {

struct EvalOptions {
  std::string target, drafter, dtype = "f32", device = kCPU.str(), json, tokenizer;
  std::vector<std::string> data;
  int64_t max_new_tokens = 256, limit = 0, eos_id = -2;
  double tie_tolerance = -1;  // -1: by dtype (Note [Eval tie tolerance])
  bool ceiling = false, no_progress = false, strict = false, allow_template = false;
};

// Note [Eval tie tolerance]: a divergence is a near tie when both picks are within
// tolerance * (1 + |max logit|) of the largest logit (Note [Near ties]). In f32 the verify
// forward and the one-token step agree to rounding, ~1e-6 relative: 1e-4 has room to
// spare. In bf16 every matmul input is rounded to 8 bits of mantissa (~4e-3 relative),
// and the rounding adds up over the layers, so the default is 2e-2 there: about 0.5 of a
// logit at a max logit of 25. A mismatch above it is reported as one; measure the real
// gap with --tie-tolerance when in doubt.
double default_tie_tolerance(const std::string& dtype) { return dtype == "bf16" ? 2e-2 : 1e-4; }

}  // namespace

void add_eval_command(CLI::App& app, CommandBody& run) {
  static EvalOptions o;
  CLI::App* sub = app.add_subcommand(
      "eval",
      "speculative decoding of a target with a public-layout DFlash drafter: tau, "
      "per-slot acceptance, speedup, and the lossless check");
  sub->add_option("--target", o.target, target_folder_help())
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--drafter", o.drafter,
                  "a drafter folder in the public DFlash layout (config.json + "
                  "model.safetensors, as `chunkgrad export` writes)")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--data", o.data,
                  "chat or pre-tokenized JSONL (docs/chat_data.md); the prompt is what precedes "
                  "the last assistant answer; repeat for several datasets")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--tokenizer", o.tokenizer,
                  "the tokenizer.json conversations are read with (default: the target folder's)")
      ->check(CLI::ExistingFile);
  sub->add_flag("--strict", o.strict, "a bad data line is an error (default: skipped, counted)");
  sub->add_flag(kAllowChatTemplateFlag, o.allow_template, kAllowChatTemplateHelp);
  sub->add_option("--max-new-tokens", o.max_new_tokens,
                  "tokens to generate per prompt (default 256)")
      ->check(program::integer_in(1, int64_t{1} << 20));
  sub->add_option("--limit", o.limit, "at most this many prompts per dataset (default: all)")
      ->check(program::integer_in(1, int64_t{1} << 40))
      ->default_str("all");
  sub->add_option("--device", o.device, cg::device_names_help() + " (default cpu)")
      ->check(program::device_name());
  sub->add_option("--dtype", o.dtype, "the target's weights and compute dtype (default f32)")
      ->check(program::one_of({"f32", "bf16"}));
  sub->add_option("--eos-id", o.eos_id,
                  "stop a prompt after this token only (default: the target's eos_token_id ids, "
                  "from generation_config.json, else config.json; -1: never)")
      ->check(program::integer_in(-1, int64_t{1} << 40))
      ->default_str("the target's");
  sub->add_option("--tie-tolerance", o.tie_tolerance,
                  "how close two logits must be for a divergence to count as a near tie, relative "
                  "to 1 + |max logit| (default 1e-4 in f32, 2e-2 in bf16)")
      ->check(program::number_in(0, 1))
      ->default_str("by dtype");
  sub->add_flag("--ceiling", o.ceiling,
                "also time a free drafter that is always right (the speedup's ceiling)");
  sub->add_option("--json", o.json, "also write the report as JSON to this file")
      ->check(program::not_empty());
  sub->add_flag("--no-progress", o.no_progress, "no progress lines on stderr");
  sub->callback([&run] {
    run = [] {
      const Device device = Device::parse(o.device);
      backend_for(device);  // no GPU: one error line before any work
      program::OutputFile json_out;
      if (!o.json.empty()) {
        NamedPaths inputs = target_inputs(o.target, "--target");
        inputs.emplace_back(o.drafter, "--drafter");
        for (auto& in : tokenizer_inputs(o.tokenizer, "--tokenizer")) inputs.push_back(in);
        for (const std::string& file : o.data) inputs.emplace_back(file, "--data");
        program::check_output_not_input(o.json, "--json", inputs);
        json_out = program::OutputFile(o.json, "--json");
      }
      auto say = [](const std::string& line) {
        if (!o.no_progress) program::progress("eval", line);
      };
      const DType dtype = o.dtype == "bf16" ? DType::bf16 : DType::f32;
      say("loading the target " + o.target + " (" + o.dtype + ", " + device.str() + ")");
      // (--eos-id given: the folder's EOS fields are not read, so a damaged one is no error)
      train::EvalTarget target = train::load_eval_target(o.target, device, dtype, o.eos_id == -2);
      const nn::Qwen3Config& arch = target.lm->config();
      train::PublicDrafter drafter = train::load_drafter_for_target(o.drafter, *target.lm);
      const train::ChatData data =
          read_data_files(o.data, data_tokenizer(o.tokenizer, o.target, o.allow_template),
                          arch.vocab_size, o.strict);
      for (const train::DataFileReport& f : data.files) {
        if (f.bad_lines > 0) std::fprintf(stderr, "warning: --data %s\n", f.describe().c_str());
      }
      std::vector<train::EvalPrompt> prompts = train::eval_prompts(data, o.limit);
      const std::vector<int64_t> eos = o.eos_id == -2   ? target.eos_ids
                                       : o.eos_id == -1 ? std::vector<int64_t>{}
                                                        : std::vector<int64_t>{o.eos_id};
      CG_CHECK(o.eos_id < arch.vocab_size, "--eos-id ", o.eos_id,
               " is outside the target's vocabulary (0 .. ", arch.vocab_size - 1, ")");
      int64_t longest = 0;
      for (const train::EvalPrompt& p : prompts)
        longest = std::max(longest, static_cast<int64_t>(p.ids.size()) + o.max_new_tokens);
      train::warn_past_context(arch.max_position_embeddings, longest,
                               "--data's longest prompt plus --max-new-tokens");
      say("drafter " + o.drafter + ": block_size " + std::to_string(drafter.info.block_size) +
          ", drafter layers " + std::to_string(drafter.config.layers.num_layers) + "; " +
          std::to_string(prompts.size()) + " prompts, eos " + nlohmann::json(eos).dump());
      train::DFlashBlockDrafter block_drafter(*drafter.drafter);
      auto bar = std::make_shared<train::ProgressBar>(
          "decoding", static_cast<int64_t>(prompts.size()), !o.no_progress);
      const train::EvalReport report = train::evaluate_by_dataset(
          *target.lm, block_drafter, prompts, drafter.info.block_size,
          {.max_new_tokens = o.max_new_tokens,
           .eos_ids = eos,
           .tie_tolerance = o.tie_tolerance >= 0 ? o.tie_tolerance : default_tie_tolerance(o.dtype),
           .measure_ceiling = o.ceiling,
           .on_progress = [bar](int64_t done, int64_t all, int64_t tokens) {
             bar->update(done, tokens);
             if (done == all) bar->finish();
           }});
      std::fputs(report.str().c_str(), stdout);
      std::fflush(stdout);
      nlohmann::json j = report.json();
      j["target"] = o.target;
      j["drafter"] = o.drafter;
      j["dtype"] = o.dtype;
      j["device"] = device.str();
      j["eos_ids"] = eos;
      if (json_out.is_open()) json_out.write_json(j);
      CG_CHECK(report.lossless_up_to_near_ties(),
               "speculative decoding is not lossless: ", report.mismatched_prompts,
               " prompt(s) differ from target-only decoding where the logits were not a near "
               "tie (first: ",
               report.first_mismatch, "); this is a bug in the decoding loop, not the drafter");
    };
  });
}

}  // namespace cg::cli
