// Why this file exists: `chunkgrad train`, the main job: corpus -> target -> drafter data ->
// DFlash drafter training -> speculative decoding -> the memory story, configured by one
// JSON file (docs/train_config.md; configs/toy.json is the default). The work is
// train/pipeline.h's; this file only reads the command line and prints the summary.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "examples/chunkgrad/commands.h"
#include "examples/common/program.h"
#include "train/pipeline.h"
#include "train/train_config.h"

namespace cg::cli {

namespace {
struct TrainOptions {
  std::string config;    // "" = the built-in toy defaults
  std::string run_dir;   // overrides the config's run_dir
  std::string device;    // overrides the config's device
  std::string features;  // features.source offline with this folder
  bool json = false;
  bool no_progress = false;
  bool fresh = false;
  bool print_config = false;
  int64_t memory_limit_mb = 0;
};
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
  sub->add_flag("--json", o.json, "print the summary as JSON on stdout instead of text");
  sub->add_flag("--no-progress", o.no_progress, "no progress bar or stage lines on stderr");
  sub->add_flag("--fresh", o.fresh, "do not resume from the run directory's drafter checkpoint");
  sub->add_flag("--print-config", o.print_config, "print the effective config as JSON and exit");
  sub->add_option("--memory-limit-mb", o.memory_limit_mb, "cap the CPU allocator (0: no limit)")
      ->check(program::integer_in(0, int64_t{1} << 40));
  sub->callback([&run] {
    run = [] {
      program::set_cpu_memory_limit_mb(o.memory_limit_mb);
      train::TrainConfig config =
          o.config.empty() ? train::TrainConfig() : train::TrainConfig::from_file(o.config);
      if (!o.run_dir.empty()) config.run_dir = o.run_dir;
      if (o.no_progress) config.progress = false;
      if (o.fresh) config.resume = false;
      if (!o.device.empty()) config.device = o.device;
      if (!o.features.empty()) {
        config.features.source = "offline";
        config.features.dir = o.features;
      }
      config.validate();
      config.compute_device();  // up front: no GPU is one error line, before any work
      if (o.print_config) {
        std::cout << config.to_json().dump(2) << "\n";
        return;
      }
      program::make_output_dir(config.run_dir, "run_dir");
      const nlohmann::json summary = train::run_pipeline(config);
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
