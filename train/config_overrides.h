// Why this file exists: `chunkgrad train --set drafter.optim.lr=1e-3` -- one config field
// changed from the command line without editing or copying the JSON file, as PyTorch and
// Hugging Face users do with their trainers' flags. An override is applied to the config's
// JSON before TrainConfig::from_json reads it, so a wrong type or a bad value gets the
// same error, naming the field, as the same mistake in the file; a key that names no
// field is refused here, with the nearest field's name.
//
//   nlohmann::json j = parse_untrusted_json(text, "train config");
//   apply_config_override(j, "drafter.loss.kind=kl");      // "kl": not JSON, a string
//   apply_config_override(j, "drafter.optim.steps=2000");  // 2000: JSON, a number
//   TrainConfig config = TrainConfig::from_json(j);
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cg::train {

struct ConfigOverride {
  std::string key;       // a field's dotted path: "drafter.optim.lr"
  nlohmann::json value;  // the text as JSON when it parses as JSON, else the text as a string
};

// Reads "key=value": the key must name a field of TrainConfig (not a section such as
// "drafter.optim"); the value is JSON when it parses as JSON (numbers, true/false, null,
// arrays, "quoted strings"), otherwise the text itself as a string. Throws cg::Error
// saying what to write instead: no '=', an unknown key (with the nearest known one).
ConfigOverride parse_config_override(const std::string& assignment);

// parse_config_override, then sets the field in `config` (a config file's JSON object),
// making the sections on the way when the file has none.
void apply_config_override(nlohmann::json& config, const std::string& assignment);

// Every field's dotted path, in TrainConfig's order ("run_dir", ..., "memory.trace_dir").
std::vector<std::string> config_field_paths();

}  // namespace cg::train
