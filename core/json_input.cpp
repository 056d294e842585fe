// Why this file exists: the depth check, bounded parse and safe descriptions behind every
// JSON reader of the project (json_input.h).
#include "core/json_input.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace cg {

void check_json_depth(std::string_view text, const std::string& what) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
      CG_CHECK(depth <= kMaxJsonDepth, what, " nests JSON arrays and objects deeper than ",
               kMaxJsonDepth, " levels (at byte ", i,
               "); no real file does, so it is corrupted or hostile");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  CG_CHECK(in, what, ": cannot open '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  CG_CHECK(in.good() || in.eof(), what, ": reading '", path, "' failed");
  return text.str();
}

nlohmann::json parse_untrusted_json(const std::string& text, const std::string& what) {
  check_json_depth(text, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    CG_FAIL(what, " is not valid JSON (", e.what(), ")");
  }
}

std::string describe_json(const nlohmann::json& value) {
  constexpr size_t kMaxChars = 64;
  switch (value.type()) {
    case nlohmann::json::value_t::array:
      return "an array of " + std::to_string(value.size()) + " values";
    case nlohmann::json::value_t::object:
      return "an object with " + std::to_string(value.size()) + " keys";
    case nlohmann::json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      std::string out = "\"";
      for (size_t i = 0; i < s.size() && i < kMaxChars; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        out += (c >= 0x20 && c < 0x7F) ? static_cast<char>(c) : '?';
      }
      return out + (s.size() > kMaxChars ? "...\"" : "\"");
    }
    case nlohmann::json::value_t::binary:
      return "binary data";
    case nlohmann::json::value_t::discarded:
      return "a discarded value";
    default:
      return value.dump();  // null, boolean, number: one token, no recursion
  }
}

}  // namespace cg
