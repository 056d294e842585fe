// Why this file exists: `chunkgrad train`, the main job: corpus -> target -> drafter data ->
// DFlash drafter training -> speculative decoding -> the memory story, configured by one
// JSON file (docs/train_config.md; configs/toy.json is the default). The work is
// train/pipeline.h's; this file only reads the command line and prints the summary.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/communicator.h"
#include "examples/chunkgrad/commands.h"
#include "examples/chunkgrad/data_files.h"
#include "examples/common/program.h"
#include "train/config_overrides.h"
#include "train/data_parallel.h"
#include "train/offline_features.h"
#include "train/pipeline.h"
#include "train/stop_signal.h"
#include "train/train_config.h"

namespace cg::cli {

namespace {
struct TrainOptions {
  std::string config;             // "" = the built-in toy defaults
  std::string run_dir;            // overrides the config's run_dir
  std::string device;             // overrides the config's device
  std::string features;           // features.source offline with this folder
  std::string target;             // features.source target with this folder ...
  std::vector<std::string> data;  // ... and these sample files
  std::string tokenizer;          // ... read with this tokenizer.json (features.tokenizer)
  std::vector<std::string> sets;  // --set key=value, in the order given
  std::string resume_from;        // a drafter checkpoint instead of the newest
  bool json = false;
  bool no_progress = false;
  bool fresh = false;
  bool print_config = false;
  bool allow_template = false;  // kAllowChatTemplateFlag
  int64_t memory_limit_mb = 0;
};

// The config file (or the toy defaults), each --set applied in order, then --features
// (features.source offline and features.dir; a --set of either that says otherwise is an
// error, not silently overridden), then read and checked; an error about a field that a
// --set gave says so.
train::TrainConfig read_config(const std::string& path, const std::vector<std::string>& sets,
                               const std::string& features, const std::string& target,
                               const std::vector<std::string>& data, const std::string& tokenizer) {
  nlohmann::json j = path.empty() ? nlohmann::json::object() : train::TrainConfig::file_json(path);
  for (const std::string& s : sets) train::apply_config_override(j, s);
  if (!target.empty()) {
    nlohmann::json& f = j["features"];
    if (!f.is_object()) f = nlohmann::json::object();
    for (const std::string& s : sets) {
      const std::string key = s.substr(0, s.find('='));
      CG_CHECK(key != "features.source" && key != "features.target" && key != "features.data" &&
                   (key != "features.tokenizer" || tokenizer.empty()),
               "--target ", target, " and --set ", s,
               " both say where the features come from; drop one");
    }
    f["source"] = "target";
    f["target"] = target;
    f["data"] = data;
    if (!tokenizer.empty()) f["tokenizer"] = tokenizer;
  }
  if (!features.empty()) {
    nlohmann::json& f = j["features"];
    if (!f.is_object()) f = nlohmann::json::object();
    for (const std::string& s : sets) {
      const std::string key = s.substr(0, s.find('='));
      CG_CHECK(key != "features.source" || f["source"] == "offline", "--features ", features,
               " and --set ", s, " disagree: --features reads offline feature files; drop one");
      CG_CHECK(key != "features.dir" || f["dir"] == features, "--features ", features,
               " and --set ", s, " name two folders; drop one");
    }
    f["source"] = "offline";
    f["dir"] = features;
    // Note [Layers from the feature folder]: a SpecForge user expects the features to fix
    // the layers; the public rule's default failed instead ("drafter.target_layers is
    // empty, so the layer rule picks ..."). When neither the config nor a --set names
    // drafter.target_layers, they are the folder's index.json layer_ids. Named (even as [],
    // the public rule), they stay, and a disagreement is offline_features.h's error.
    if (!j.contains("drafter")) j["drafter"] = nlohmann::json::object();
    nlohmann::json& d = j["drafter"];  // (not an object: from_json below says so)
    if (d.is_object() && !d.contains("target_layers")) {
      try {
        d["target_layers"] = train::read_feature_index(features).layer_ids;
      } catch (const cg::Error&) {}  // a folder that cannot be read: the run's open says why
    }
  }
  try {
    return train::TrainConfig::from_json(j);
  } catch (const cg::Error& e) {
    for (auto it = sets.rbegin(); it != sets.rend(); ++it) {
      const std::string key = it->substr(0, it->find('='));
      if (e.message().find(key) == std::string::npos) continue;
      // A value that parses as JSON is JSON: run_dir=123 is a number; "123" is the text.
      const bool text = e.message().find("must be a string") != std::string::npos;
      CG_FAIL(e.message(), " (set by --set ", key,
              text ? "; for text that reads as JSON, quote it: --set '" + key + "=\"...\"'" : "",
              ")");
    }
    throw;
  }
}

// `mpirun -np N chunkgrad train`: every rank runs the pipeline with the communicator, and
// rank 0 prints the summary. A failure on one rank ends every rank with its message
// (dist::abort_job): the others would otherwise wait for it in the next collective. A stop
// or an error every rank met at the same point ends the ranks together instead (Note
// [Ending together], dist/communicator.h): each returns its status (rank 0 says why).
nlohmann::json run_ranks(const train::TrainConfig& config, train::PipelineOptions options) {
  const int rank = dist::detect_launch().rank;
  try {
    const std::unique_ptr<dist::Communicator> comm =
        dist::make_communicator({.device = Device::parse(config.device)});
    options.comm = comm.get();
    nlohmann::json summary = train::run_pipeline(config, options);
    if (comm->rank() != 0) summary = nullptr;  // rank 0 prints
    return summary;
  } catch (const train::Interrupted&) {
    // Every rank stopped after the same step (Note [Stopping together]) and waited for
    // rank 0's checkpoint (Note [Saving together], drafter_trainer.h).
    dist::end_job_together();
    if (rank != 0) std::exit(train::kExitInterrupted);  // rank 0 says where it stopped
    throw;
  } catch (const dist::EveryRankError&) {
    dist::end_job_together();
    if (rank != 0) std::exit(program::kExitError);  // rank 0 prints the one line
    throw;
  } catch (const cg::Error& e) {
    dist::abort_job("chunkgrad train: error: " + e.message());
  } catch (const std::exception& e) {
    dist::abort_job(std::string("chunkgrad train: error: ") + e.what());
  }
}

// The run directory must not be, or lie inside, a folder or file the run reads (the
// Hugging Face target's folder: train writes its own config.json there).
void check_run_dir_not_input(const train::TrainConfig& config, const std::string& config_file) {
  NamedPaths inputs = {{config_file, "--config"},
                       {config.features.dir, "features.dir"},
                       {config.drafter.init_from, "drafter.init_from"},
                       {config.target.checkpoint, "target.checkpoint"},
                       {config.target.hf_config, "target.hf_config"},
                       {config.corpus.path, "corpus.path"}};
  auto add = [&](const NamedPaths& more) { inputs.insert(inputs.end(), more.begin(), more.end()); };
  NamedPaths targets = target_inputs(config.features.target, "features.target");
  add(tokenizer_inputs(config.features.tokenizer, "features.tokenizer"));
  for (const std::string& file : config.features.data) inputs.emplace_back(file, "features.data");
  if (config.features.source == "offline") {
    // The run reads the target the features were written from too (its embedding and
    // lm_head): a second tester's run wrote its config.json over that model's.
    try {
      const NamedPaths more = target_inputs(train::read_feature_index(config.features.dir).target,
                                            "the target features.dir was written from");
      targets.insert(targets.end(), more.begin(), more.end());
    } catch (const Error&) {  // (an unreadable folder is the run's to report)
    }
  }
  add(targets);
  program::check_output_not_input(config.run_dir, "run_dir", inputs);
  // A chunkgrad run read as a target is its target/ and config.json: the run directory
  // must not hold them either, or this run writes its own config.json over that one (a
  // third tester). (Other inputs may sit in it: a resume reads its own config.json.)
  program::check_inputs_outside(config.run_dir, "run_dir", targets);
}

// --resume-from: an existing file; a path that is not there names the checkpoints beside it
// (an outside tester's step_10.safetensors was step_00000010.safetensors).
CLI::Validator existing_checkpoint() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        std::string why = CLI::ExistingFile(path);
        if (why.empty()) return why;
        namespace fs = std::filesystem;
        fs::path dir = fs::path(path).parent_path();
        if (dir.empty()) dir = ".";
        std::vector<std::string> names;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir, ec)) {
          const std::string name = e.path().filename().string();
          if (name.starts_with("step_") && name.ends_with(".safetensors")) names.push_back(name);
        }
        if (names.empty()) return why;
        std::sort(names.rbegin(), names.rend());  // newest first
        why += "; " + dir.string() + " holds ";
        for (size_t i = 0; i < names.size() && i < 3; ++i) why += (i > 0 ? ", " : "") + names[i];
        if (names.size() > 3) why += " and " + std::to_string(names.size() - 3) + " more";
        return why + " (checkpoints are named by their step in 8 digits)";
      },
      "FILE");
}

}  // namespace

void add_train_command(CLI::App& app, CommandBody& run) {
  static TrainOptions o;
  CLI::App* sub = app.add_subcommand("train", "train a target LM and a DFlash drafter for it");
  // Both checked as given, as --device: `--config ""` was read as "not given" (the toy
  // defaults) and `--run-dir ""` as "the config's run_dir".
  sub->add_option(
         "--config", o.config,
         "JSON config (docs/train_config.md); without it the toy defaults (configs/toy.json)")
      ->check(program::not_empty());
  sub->add_option("--run-dir", o.run_dir, "run directory (overrides the config's run_dir)")
      ->check(program::not_empty());
  // Checked as given: `--device ""` is an error, not "the config's device" (o.device
  // stays empty only when --device is not given at all).
  sub->add_option("--device", o.device,
                  cg::device_names_help() + " (overrides the config's device)")
      ->check(program::device_name());
  sub->add_option("--features", o.features,
                  "train from the feature folder `chunkgrad features` wrote (features.source "
                  "offline, features.dir DIR; docs/feature_files.md)")
      ->check(program::not_empty());
  CLI::Option* target =
      sub->add_option("--target", o.target,
                      "train from the features of " + target_folder_help(false) +
                          ", computed each step on --device (features.source target; needs "
                          "--data and drafter.mask_token_id)")
          ->check(CLI::ExistingDirectory);
  sub->add_option("--data", o.data,
                  "with --target: JSONL samples, conversations or pre-tokenized "
                  "(docs/chat_data.md; repeatable)")
      ->check(CLI::ExistingFile)
      ->needs(target);
  sub->add_option("--tokenizer", o.tokenizer,
                  "with --target: the tokenizer.json conversation lines are read with "
                  "(features.tokenizer; default: the target folder's)")
      ->check(CLI::ExistingFile)
      ->needs(target);
  // Not tied to --target: a config file may set features.source target itself.
  sub->add_flag(kAllowChatTemplateFlag, o.allow_template, kAllowChatTemplateHelp);
  target->excludes("--features");
  // Checked as given (the key names a field; the syntax), before any work; the value's type
  // and range when the config is read, with the same errors as in the file.
  sub->add_option("--set", o.sets,
                  "set one config field by its dotted name, after --config is read "
                  "(repeatable; e.g. --set drafter.optim.lr=1e-3 --set drafter.loss.kind=kl). "
                  "VALUE is JSON when it parses as JSON (numbers, true/false, [1, 2], \"text\"), "
                  "otherwise text; --run-dir, --device and --fresh still win")
      ->allow_extra_args(false)
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              train::parse_config_override(text);
            } catch (const cg::Error& e) { return e.message(); }
            return std::string();
          },
          ""))
      ->type_name("KEY=VALUE")
      ->default_str("");
  sub->add_flag("--json", o.json, "print the summary as JSON on stdout instead of text");
  sub->add_flag("--no-progress", o.no_progress, "no progress bar or stage lines on stderr");
  CLI::Option* fresh = sub->add_flag("--fresh", o.fresh,
                                     "do not resume from the run directory's drafter checkpoint");
  sub->add_option("--resume-from", o.resume_from,
                  "resume from this drafter checkpoint (RUN_DIR/drafter/step_00000010.safetensors "
                  "for step 10) instead of the run directory's newest; checked as a resume is, "
                  "and refused rather than replaced when damaged. The run directory's later "
                  "checkpoints are removed when this run saves its first")
      ->check(existing_checkpoint())
      ->excludes(fresh);
  sub->add_flag("--print-config", o.print_config, "print the effective config as JSON and exit");
  sub->add_option("--memory-limit-mb", o.memory_limit_mb,
                  "cap the CPU allocator (0: no limit; else at least 2, its smallest segment)")
      ->check(program::integer_in(0, int64_t{1} << 40));
  sub->callback([&run] {
    run = [] {
      // At least the CPU allocator's small-pool segment: under it the first small tensor
      // fails wherever it comes (an outside tester's --memory-limit-mb 1 ran out of memory
      // in the target stage, naming no stage, after the run directory was written).
      CG_CHECK(o.memory_limit_mb == 0 || o.memory_limit_mb >= 2, "--memory-limit-mb ",
               o.memory_limit_mb,
               " is under the CPU allocator's smallest segment (2 MiB): give 0 (no limit) or at "
               "least 2");
      program::set_cpu_memory_limit_mb(o.memory_limit_mb);
      train::TrainConfig config =
          read_config(o.config, o.sets, o.features, o.target, o.data, o.tokenizer);
      if (!o.run_dir.empty()) config.run_dir = o.run_dir;
      if (o.no_progress) config.progress = false;
      if (o.fresh) config.resume = false;
      if (!o.device.empty()) config.device = o.device;
      config.validate();
      // Under mpirun: one rank per process, the device from the local rank (docs/data_parallel.md).
      const dist::LaunchInfo launch = dist::detect_launch();
      if (!launch.under_mpirun) {
        config.compute_device();  // up front: no GPU is one error line, before any work
      } else {
        config.device = dist::device_for_local_rank(config.device, launch, "device").str();
        if (launch.rank != 0) config.progress = false;  // rank 0 reports
        // What the ranks add to the checks, made before the run directory is made or
        // changed, as every check of a one-process run is: a batch they cannot split.
        (void)train::rank_slice(config, launch.rank, launch.world_size);
      }
      if (o.print_config) {
        std::cout << config.to_json().dump(2) << "\n";
        return;
      }
      check_run_dir_not_input(config, o.config);
      // (a run refused before it writes anything leaves no empty run directory behind; under
      // mpirun rank 0 makes it, and a refusal every rank meets unwinds to here: Note [Ending
      // together], dist/communicator.h)
      const program::RemoveIfLeftEmpty made_here(launch.rank == 0 ? config.run_dir : "");
      if (launch.rank == 0) program::make_output_dir(config.run_dir, "run_dir");
      train::PipelineOptions options{.resume_from = o.resume_from};
      DataTokenizer tokenizer;
      if (config.features.source == "target") {
        tokenizer =
            data_tokenizer(config.features.tokenizer, config.features.target, o.allow_template);
        options.encode = tokenizer.encode;
        options.no_tokenizer_hint = tokenizer.hint;
        options.template_problem = tokenizer.template_problem;
        options.template_problem_is_error = tokenizer.template_is_error;
      }
      const nlohmann::json summary =
          launch.under_mpirun ? run_ranks(config, options) : train::run_pipeline(config, options);
      if (summary.is_null()) return;  // not rank 0
      if (o.json) {
        std::cout << summary.dump() << "\n";
      } else {
        std::cout << train::summary_text(summary) << "summary: " << config.run_dir
                  << "/summary.json\n";
      }
      std::cout.flush();
      CG_CHECK(std::cout.good(), "writing the summary to stdout failed");
    };
  });
}

}  // namespace cg::cli
