// Why this file exists: `--set key=value` overrides of the train config (config_overrides.h).
#include "train/config_overrides.h"

#include <algorithm>

#include "core/error.h"
#include "core/json_input.h"
#include "train/train_config.h"

namespace cg::train {
namespace {

void collect_paths(const nlohmann::json& j, const std::string& prefix,
                   std::vector<std::string>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = prefix + it.key();
    if (it->is_object()) {
      collect_paths(*it, path + ".", out);
    } else {
      out.push_back(path);
    }
  }
}

// Edits (insert, delete, replace one character) from a to b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string last_part(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// "did you mean drafter.optim.lr or target.optim.lr?" for "lr"; the closest spelling for a
// typo ("drafter.blok_size"); "" when nothing is close.
std::string nearest_fields(const std::string& key, const std::vector<std::string>& fields) {
  std::vector<std::string> same_name;  // the key is a field's own name without its section
  for (const std::string& f : fields) {
    if (last_part(f) == last_part(key)) same_name.push_back(f);
  }
  if (same_name.empty()) {
    size_t best = std::string::npos;
    std::string nearest;
    for (const std::string& f : fields) {
      const size_t d = edit_distance(key, f);
      if (d < best) {
        best = d;
        nearest = f;
      }
    }
    if (best <= std::max<size_t>(2, key.size() / 4)) same_name.push_back(nearest);
  }
  std::string text;
  for (size_t i = 0; i < same_name.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == same_name.size() ? " or " : ", ") + same_name[i];
  }
  return text;
}

}  // namespace

std::vector<std::string> config_field_paths() {
  std::vector<std::string> paths;
  collect_paths(TrainConfig().to_json(), "", paths);
  return paths;
}

ConfigOverride parse_config_override(const std::string& assignment) {
  const size_t eq = assignment.find('=');
  CG_CHECK(eq != std::string::npos && eq > 0,
           "expected KEY=VALUE with a config field's dotted name as KEY (e.g. "
           "drafter.optim.lr=1e-3), got '",
           assignment, "'");
  ConfigOverride o;
  o.key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const std::vector<std::string> fields = config_field_paths();
  if (std::find(fields.begin(), fields.end(), o.key) == fields.end()) {
    const nlohmann::json defaults = TrainConfig().to_json();
    std::string pointer = "/" + o.key;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    bool section = false;
    try {
      section = defaults.contains(nlohmann::json::json_pointer(pointer)) &&
                defaults.at(nlohmann::json::json_pointer(pointer)).is_object();
    } catch (const nlohmann::json::exception&) {}  // not a valid pointer: not a section either
    CG_CHECK(!section, "'", o.key, "' is a section, not a field; set its fields one by one (",
             o.key, ".<field>=...; docs/train_config.md lists them)");
    const std::string near = nearest_fields(o.key, fields);
    CG_FAIL("'", o.key, "' is not a config field",
            near.empty() ? std::string() : "; did you mean " + near + "?",
            " (docs/train_config.md lists them all)");
  }
  // JSON when the text is JSON (1e-3, true, [2, 5], "a string"); else the text as a string
  // (kl, runs/x). The depth check keeps a hostile value from recursing (core/json_input.h).
  check_json_depth(text, "--set " + o.key);
  o.value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (o.value.is_discarded()) o.value = text;
  return o;
}

void apply_config_override(nlohmann::json& config, const std::string& assignment) {
  const ConfigOverride o = parse_config_override(assignment);
  CG_CHECK(config.is_object(), "train config: must be a JSON object, got ", describe_json(config));
  nlohmann::json* at = &config;
  std::string path;
  size_t from = 0;
  for (size_t dot = o.key.find('.'); dot != std::string::npos; dot = o.key.find('.', from)) {
    const std::string section = o.key.substr(from, dot - from);
    path += (path.empty() ? "" : ".") + section;
    nlohmann::json& next = (*at)[section];
    if (next.is_null()) next = nlohmann::json::object();
    CG_CHECK(next.is_object(), "train config: ", path, ": must be an object, got ",
             describe_json(next), " (so --set ", o.key, " has nowhere to go)");
    at = &next;
    from = dot + 1;
  }
  (*at)[o.key.substr(from)] = o.value;
}

}  // namespace cg::train
