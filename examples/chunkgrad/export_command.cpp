// Why this file exists: `chunkgrad export`, a trained drafter written in the public DFlash
// layout (config.json + one bf16 model.safetensors) that vLLM, SGLang and the public
// reference load (docs/export.md). The work is train/drafter_export.h's; this file reads
// and checks the command line.
#include <cstdio>

#include "core/error.h"
#include "examples/chunkgrad/commands.h"
#include "examples/common/program.h"
#include "train/drafter_export.h"

namespace cg::cli {

namespace {

struct ExportOptions {
  std::string run_dir, checkpoint, out;
  int64_t max_position_embeddings = 0;
};

}  // namespace

void add_export_command(CLI::App& app, CommandBody& run) {
  static ExportOptions o;
  CLI::App* sub = app.add_subcommand(
      "export",
      "write a trained drafter as config.json + model.safetensors (public DFlash layout)");
  auto* run_dir = sub->add_option("--run-dir", o.run_dir,
                                  "a chunkgrad run directory: its newest drafter checkpoint")
                      ->check(CLI::ExistingDirectory);
  auto* checkpoint =
      sub->add_option("--checkpoint", o.checkpoint, "a drafter checkpoint (step_<N>.safetensors)")
          ->check(CLI::ExistingFile);
  run_dir->excludes(checkpoint);
  sub->add_option("--out", o.out, "the folder to write (must not hold config.json yet)")
      ->required()
      ->check(program::not_empty());
  sub->add_option("--max-position-embeddings", o.max_position_embeddings,
                  "config.json's max_position_embeddings")
      ->check(program::integer_in(1, int64_t{1} << 40))
      ->default_str("the target's, else 40960");  // (0 inside: "not given")
  sub->callback([&run] {
    run = [] {
      CG_CHECK(!o.run_dir.empty() || !o.checkpoint.empty(),
               "give --run-dir DIR (its newest checkpoint) or --checkpoint FILE");
      const train::ExportResult r = train::export_drafter_checkpoint(o.run_dir, o.checkpoint, o.out,
                                                                     o.max_position_embeddings);
      std::printf("export: %s (step %lld, %lld parameters) -> %s/config.json, model.safetensors\n",
                  r.checkpoint.c_str(), static_cast<long long>(r.step),
                  static_cast<long long>(r.parameters), o.out.c_str());
    };
  });
}

}  // namespace cg::cli
