// Why this file exists: `chunkgrad trace`, which reads allocator traces (placeholder until
// the trace readers land).
#include "core/error.h"
#include "examples/chunkgrad/commands.h"

namespace cg::cli {

void add_trace_command(CLI::App& app, CommandBody& run) {
  CLI::App* sub = app.add_subcommand("trace", "read allocator traces: the peak and what held it");
  sub->callback([&run] { run = [] { CG_CHECK(false, "chunkgrad trace is not built yet"); }; });
}

}  // namespace cg::cli
