// Why this file exists: `chunkgrad train`, the main job (placeholder until the drafter
// pipeline lands in train/).
#include "core/error.h"
#include "examples/chunkgrad/commands.h"

namespace cg::cli {

void add_train_command(CLI::App& app, CommandBody& run) {
  CLI::App* sub = app.add_subcommand("train", "train a target LM and a DFlash drafter for it");
  sub->callback([&run] { run = [] { CG_CHECK(false, "chunkgrad train is not built yet"); }; });
}

}  // namespace cg::cli
