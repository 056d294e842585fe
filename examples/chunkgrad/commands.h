// Why this file exists: `chunkgrad` is the project's one command-line program, with a
// subcommand per job (`chunkgrad train ...`, `chunkgrad trace ...`), as users of git or
// cargo expect. Each subcommand lives in its own file and registers itself here; main.cpp
// only lists them. The rules for bad input are Program's (examples/common/program.h):
// options validated up front, one error line "chunkgrad <subcommand>: error: ...", exit 1.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "nn/config.h"

namespace cg::cli {

// The --target help of every command that loads a target (train/feature_target.h): a
// Hugging Face folder of a model_type nn::Qwen3Config reads (listed from its one list), or,
// where the command takes one (not `train --target`: train/target_features.cpp), a
// chunkgrad run directory with a cached target.
inline std::string target_folder_help(bool run_directories = true) {
  std::string types;
  for (const std::string& t : nn::Qwen3Config::hf_model_types())
    types += (types.empty() ? "" : ", ") + t;
  return "a Hugging Face model folder (config.json + safetensors) of model_type " + types +
         " (Qwen3, Qwen3.5 / Qwen3.6 and their MoE forms)" +
         (run_directories ? ", or a chunkgrad run directory with a cached target"
                          : " (a chunkgrad run's own toy target: features.source online)");
}

// The work a subcommand does once the command line is parsed and validated. A command's
// add_* function adds its CLI11 subcommand to `app` and, from that subcommand's callback,
// stores its work in `run`; main runs it inside Program::run.
using CommandBody = std::function<void()>;

void add_train_command(CLI::App& app, CommandBody& run);     // train_command.cpp
void add_trace_command(CLI::App& app, CommandBody& run);     // trace_command.cpp
void add_features_command(CLI::App& app, CommandBody& run);  // features_command.cpp
// Built with the tokenizer only (CHUNKGRAD_WITH_TOKENIZER, set on main.cpp).
void add_tokenize_command(CLI::App& app, CommandBody& run);    // tokenize_command.cpp
void add_export_command(CLI::App& app, CommandBody& run);      // export_command.cpp
void add_regenerate_command(CLI::App& app, CommandBody& run);  // regenerate_command.cpp
void add_eval_command(CLI::App& app, CommandBody& run);        // eval_command.cpp

}  // namespace cg::cli
