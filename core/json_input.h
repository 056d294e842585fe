// Why this file exists: chunkgrad reads JSON written by others (safetensors headers,
// shard indexes, config.json, train configs, memory traces) and promises a cg::Error, never a crash, for a hostile
// file. nlohmann's parser is iterative, but dump(), comparisons and copies of a value
// recurse once per nesting level: a 400 KB header nested 100,000 deep overflows the stack
// the moment an error message dump()s it. So every reader here (1) checks the nesting
// depth of the raw text before parsing, and (2) never puts a dump() of an untrusted
// value into a message, only describe_json() of it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace cg {

// Deeper than any real header or config needs (they nest 3 to 5 levels).
constexpr size_t kMaxJsonDepth = 64;

// Throws cg::Error naming `what` (a file, "the header of 'x.safetensors'") when arrays and
// objects in `text` nest deeper than kMaxJsonDepth. A linear scan that skips strings; it
// does not validate the JSON otherwise (the parser does that next).
void check_json_depth(std::string_view text, const std::string& what);

// Throws cg::Error naming `what` when `path` is a character or block device (/dev/zero,
// /dev/urandom), which a reader of whole files would read until memory runs out. Pipes
// (`--config <(jq ...)`) stay allowed.
void check_not_a_device(const std::string& path, const std::string& what);

// The whole of a text file (at most 1 GiB), or a cg::Error naming `what` and the path.
std::string read_text_file(const std::string& path, const std::string& what);

// check_json_depth, then nlohmann::json::parse; a parse error becomes a cg::Error naming
// `what`, and so does a key twice in one object (Note [Duplicate keys]).
nlohmann::json parse_untrusted_json(const std::string& text, const std::string& what);
// nlohmann::json::parse, refusing a key twice in one object with a cg::Error naming `what`
// and the key's path; parse errors stay nlohmann's, for callers that word them themselves.
nlohmann::json parse_json_without_duplicate_keys(const std::string& text, const std::string& what);

// A value for an error message: numbers, booleans and null as JSON, strings quoted and cut
// to 64 characters (non-printable bytes shown as '?'), arrays and objects only by kind and
// size ("an array of 3 values"). Never recursive, never long.
std::string describe_json(const nlohmann::json& value);

}  // namespace cg
