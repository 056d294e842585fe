// Why this file exists: `chunkgrad tokenize`, the tokenizer of a Hugging Face checkpoint
// (train/hf_tokenizer.h) on the command line, to look at ids, to check them against
// another tool, and to pre-tokenize text for the pipeline's stages:
//
//   chunkgrad tokenize --tokenizer tokenizer.json notes.txt        [9707, 11, 1879, 0]
//   chunkgrad tokenize --tokenizer tokenizer.json --jsonl texts.jsonl  one array a line
//   chunkgrad tokenize --tokenizer tokenizer.json --decode ids.json    the text back
//
// Without --jsonl the whole input (a file, or stdin for "-") is one text and the output
// one JSON array; decoding reads one array and writes the text, so encode then decode
// gives the input back. With --jsonl each input line is a JSON string (encode) or a JSON
// array of ids (decode) and gets its own output line, an array or a JSON string; a blank
// input line gets a blank output line, so that line N of the output is line N's (an
// outside tester lined the two files up); a bad line is one error naming its line number.
// Decoded text is valid UTF-8 in both modes: ids cut mid-character give U+FFFD where the
// partial character was, as Hugging Face `tokenizers` decodes them (the tokenizer itself
// returns the bytes: Note [Decode] in train/hf_tokenizer.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "examples/chunkgrad/commands.h"
#include "examples/common/program.h"
#include "train/hf_tokenizer.h"

namespace cg::cli {

namespace {

using nlohmann::json;

struct TokenizeOptions {
  std::string tokenizer, input = "-";
  bool jsonl = false, decode = false;
};

void write(const std::string& text) {
  CG_CHECK(std::fwrite(text.data(), 1, text.size(), stdout) == text.size(),
           "writing to stdout failed");
}

std::string ids_json(const std::vector<int64_t>& ids) { return json(ids).dump(); }

// `where`: "the input" or "line 12"; throws naming it when j is not an array of ids.
std::vector<int64_t> ids_of(const json& j, const std::string& where,
                            const train::HfTokenizer& tok) {
  CG_CHECK(j.is_array(), where, ": expected a JSON array of token ids, got ", describe_json(j));
  std::vector<int64_t> ids;
  ids.reserve(j.size());
  for (const json& v : j) {
    CG_CHECK(v.is_number_integer(), where, ": expected integer token ids, got ", describe_json(v));
    // An id above 2^63 - 1 would wrap to a negative one and be reported as such.
    CG_CHECK(!v.is_number_unsigned() ||
                 v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
             where, ": token id ", describe_json(v),
             " is not in the tokenizer's vocabulary (ids 0 .. ", tok.vocab_size() - 1, ")");
    ids.push_back(v.get<int64_t>());
  }
  return ids;
}

// Input nested deeper than ids need is refused before parsing (core/json_input.h: a
// message showing such a value would overflow the stack); messages use describe_json.
json parse(const std::string& text, const std::string& where) {
  check_json_depth(text, where);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) { CG_FAIL(where, ": not valid JSON (", e.what(), ")"); }
}

// `text` with each ill-formed UTF-8 sequence replaced by U+FFFD: the replacement JSON output
// makes (json::error_handler_t::replace), read back, so that both modes decode alike.
std::string valid_utf8(const std::string& text) {
  return json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace))
      .get<std::string>();
}

// Error messages from the tokenizer (bad UTF-8, an unknown id) get the place in front.
template <typename F>
auto at(const std::string& where, F f) {
  try {
    return f();
  } catch (const Error& e) { CG_FAIL(where, ": ", e.message()); }
}

void run_tokenize(const TokenizeOptions& o) {
  const train::HfTokenizer tok = train::HfTokenizer::from_file(o.tokenizer);
  std::ifstream file;
  if (o.input != "-") {
    file.open(o.input, std::ios::binary);
    CG_CHECK(file, "cannot open the input '", o.input, "'");
  }
  std::istream& in = o.input == "-" ? std::cin : file;
  if (!o.jsonl) {
    std::stringstream all;
    all << in.rdbuf();
    if (o.decode) {
      const std::vector<int64_t> ids = ids_of(parse(all.str(), "the input"), "the input", tok);
      write(valid_utf8(at("the input", [&] { return tok.decode(ids); })));
    } else {
      write(ids_json(at("the input", [&] { return tok.encode(all.str()); })) + "\n");
    }
    return;
  }
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      write("\n");
      continue;
    }
    const std::string where = "line " + std::to_string(number);
    const json j = parse(line, where);
    if (o.decode) {
      const std::vector<int64_t> ids = ids_of(j, where, tok);
      const std::string text = at(where, [&] { return tok.decode(ids); });
      write(json(valid_utf8(text)).dump() + "\n");
    } else {
      CG_CHECK(j.is_string(), where, ": expected a JSON string (the text to encode), got ",
               describe_json(j));
      write(ids_json(at(where, [&] { return tok.encode(j.get<std::string>()); })) + "\n");
    }
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app, CommandBody& run) {
  static TokenizeOptions o;
  CLI::App* sub = app.add_subcommand(
      "tokenize", "encode text to token ids (or decode ids) with a Hugging Face tokenizer.json");
  sub->add_option("--tokenizer", o.tokenizer, "a tokenizer.json (byte-level BPE, the Qwen family)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_flag(
      "--jsonl", o.jsonl,
      "one JSON string (or, with --decode, one array of ids) a line; one output line each");
  sub->add_flag("--decode", o.decode, "ids to text: the input holds JSON arrays of token ids");
  sub->add_option("input", o.input, "the input file, or - for stdin (default -)")
      ->check(CLI::Validator(
          [](std::string& input) -> std::string {
            namespace fs = std::filesystem;
            if (fs::is_directory(input)) return "'" + input + "' is a folder; give a file, or -";
            // Named pipes and /dev/stdin are inputs too.
            if (input == "-" || fs::exists(input)) return "";
            return "no file '" + input + "' (give a file, or - for stdin)";
          },
          "FILE or -"));
  sub->callback([&run] { run = [] { run_tokenize(o); }; });
}

}  // namespace cg::cli
