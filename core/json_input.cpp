// Why this file exists: the depth check, bounded parse and safe descriptions behind every
// JSON reader of the project (json_input.h).
#include "core/json_input.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace cg {

void check_json_depth(std::string_view text, const std::string& what) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
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

void check_not_a_device(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  CG_CHECK(ec || (!std::filesystem::is_character_file(status) &&
                  !std::filesystem::is_block_file(status)),
           what, ": '", path, "' is a device, not a file; give a file");
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  CG_CHECK(!std::filesystem::is_directory(path, ec), what, ": '", path,
           "' is a directory; give a file");
  check_not_a_device(path, what);
  std::ifstream in(path, std::ios::binary);
  CG_CHECK(in, what, ": cannot open '", path, "'");
  // (bounded: a pipe that never ends is an error, not all of memory)
  constexpr size_t kMaxBytes = size_t{1} << 30;
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    CG_CHECK(text.size() <= kMaxBytes, what, ": '", path, "' is larger than 1 GiB; not a ",
             "config or header chunkgrad reads");
  }
  CG_CHECK(in.eof(), what, ": reading '", path, "' failed");
  return text;
}

namespace {

// Note [Duplicate keys]: JSON allows {"lr": 1, "lr": 2} and nlohmann keeps the last value
// silently; a config edited by hand then trains with a value the user did not see (the
// docs promise no silent fallback), and a header with a tensor twice is hostile. The
// parser's callback sees each key as it is read; one set of keys per open object (arrays
// get an empty slot) finds the second one.
struct DuplicateKey {
  std::string key;  // with its path: "drafter.optim.lr"
};

struct OpenLevel {
  bool object = false;
  std::set<std::string> keys;  // of an object
  std::string last;            // its latest key: the name of a value opened under it
};

}  // namespace

// The keys as a SAX pass sees them (nlohmann's parse callback would do, but it looks for
// discarded values in the parent at every object's end: quadratic in an array's length,
// 100 s for a trace file of 600k events). Stops at the first duplicate; a syntax error
// is left to the parse that follows, which words it.
class DuplicateKeyFinder : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::optional<DuplicateKey> found;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_.push_back({true, {}, {}});
    return true;
  }
  bool end_object() override { return pop(); }
  bool start_array(std::size_t) override {
    open_.push_back({false, {}, {}});
    return true;
  }
  bool end_array() override { return pop(); }
  bool key(string_t& k) override {
    if (open_.empty() || !open_.back().object) return true;
    open_.back().last = k;
    if (open_.back().keys.insert(k).second) return true;
    std::string path;
    for (const OpenLevel& level : open_)
      path += level.object ? (path.empty() ? "" : ".") + level.last : "[]";
    found = DuplicateKey{path};
    return false;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool pop() {
    if (!open_.empty()) open_.pop_back();
    return true;
  }
  std::vector<OpenLevel> open_;  // the objects and arrays being read, outermost first
};

nlohmann::json parse_json_without_duplicate_keys(const std::string& text, const std::string& what) {
  DuplicateKeyFinder finder;
  nlohmann::json::sax_parse(text, &finder);
  if (finder.found) {
    CG_FAIL(what, " has the key ", describe_json(nlohmann::json(finder.found->key)),
            " twice in one object; JSON readers "
            "disagree on which one counts, so remove one of them");
  }
  return nlohmann::json::parse(text);
}

nlohmann::json parse_untrusted_json(const std::string& text, const std::string& what) {
  check_json_depth(text, what);
  try {
    return parse_json_without_duplicate_keys(text, what);
  } catch (const nlohmann::json::exception& e) {
    CG_FAIL(what, " is not valid JSON (", e.what(), ")");
  }
}

std::string describe_json(const nlohmann::json& value) {
  constexpr size_t kMaxChars = 64;
  switch (value.type()) {
    case nlohmann::json::value_t::array:
      return "an array of " + std::to_string(value.size()) +
             (value.size() == 1 ? " value" : " values");
    case nlohmann::json::value_t::object:
      return "an object with " + std::to_string(value.size()) +
             (value.size() == 1 ? " key" : " keys");
    case nlohmann::json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      std::string out = "\"";
      for (size_t i = 0; i < s.size() && i < kMaxChars; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        out += (c >= 0x20 && c < 0x7F) ? static_cast<char>(c) : '?';
      }
      return out + (s.size() > kMaxChars ? "...\"" : "\"");
    }
    case nlohmann::json::value_t::binary: return "binary data";
    case nlohmann::json::value_t::discarded: return "a discarded value";
    case nlohmann::json::value_t::number_float: {
      // The shortest of %.15g / %.17g that reads back as the same number: 1e23 as the user
      // wrote it, not dump()'s 9.999999999999999e+22.
      const double v = value.get<double>();
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.15g", v);
      if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
      const std::string text = buf;
      return text.find_first_of(".en") == std::string::npos ? text + ".0"
                                                            : text;  // 1.0 stays a float
    }
    default: return value.dump();  // null, boolean, integer: one token, no recursion
  }
}

}  // namespace cg
