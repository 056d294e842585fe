// Why this file exists: the entry point of `chunkgrad`; it lists the subcommands
// (commands.h) and runs the chosen one inside Program::run, so every failure becomes one
// error line and exit code 1.
#include "core/error.h"
#include "examples/chunkgrad/commands.h"
#include "examples/common/program.h"

int main(int argc, char** argv) {
  cg::program::Program program("chunkgrad",
                               "chunkgrad: train DFlash-style drafters and read memory traces");
  CLI::App& app = program.app();
  app.require_subcommand(1, 1);
  cg::cli::CommandBody run;
  cg::cli::add_train_command(app, run);
  cg::cli::add_trace_command(app, run);
  cg::cli::add_features_command(app, run);
#ifdef CHUNKGRAD_WITH_TOKENIZER
  cg::cli::add_tokenize_command(app, run);
#else
  // Built without PCRE2 / utf8proc (CMakeLists.txt): the subcommand is there to say so.
  app.add_subcommand("tokenize", "not in this build (needs libpcre2-dev and libutf8proc-dev)")
      ->allow_extras()
      ->callback([&run] {
        run = [] {
          CG_FAIL(
              "this chunkgrad was built without the tokenizer: install libpcre2-dev and "
              "libutf8proc-dev (tools/deps.sh does) and configure and build again");
        };
      });
#endif
  cg::cli::add_export_command(app, run);
  cg::cli::add_regenerate_command(app, run);
  cg::cli::add_eval_command(app, run);
  return program.run(argc, argv, [&] {
    CG_CHECK(run, "no subcommand ran");
    run();
  });
}
