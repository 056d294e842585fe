// Why this file exists: every JSON chunkgrad reads comes from someone else (safetensors
// headers, shard indexes, config.json), and a hostile one must raise cg::Error, never
// crash (issue 8, item 1). A ~400 KB header whose entry, data_offsets or __metadata__
// value was JSON nested 100,000 deep overflowed the stack: the error message dump()ed it.
// These files are generated here; without the fix the test binary dies of SIGSEGV.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "nn/config.h"
#include "nn/safetensors.h"
#include "nn_test_util.h"
#include "tests/error_helpers.h"

namespace cg {
namespace {

using testing_nn::TempDir;
using testing_nn::write_bytes;

constexpr int kDeep = 100'000;

std::string nested_array(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// 8-byte little-endian length + header text + data.
std::string safetensors_bytes(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

TEST(JsonHostile, DeeplyNestedSafetensorsHeadersRaiseErrors) {
  TempDir dir;
  const std::string deep = nested_array(kDeep);
  const std::string ok_entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  const std::string cases[] = {
      R"({"t":)" + deep + "}",                                                  // the entry
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":)" + deep + "}}",       // offsets
      R"({"t":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})",  // shape
      R"({"t":{"dtype":)" + deep + R"(,"shape":[1],"data_offsets":[0,4]}})",    // dtype
      R"({"__metadata__":{"k":)" + deep + "}," + R"("t":)" + ok_entry + "}",    // metadata
      R"({"__metadata__":)" + deep + "," + R"("t":)" + ok_entry + "}",
      // objects nest as deep, and an unterminated nest is as hostile
      R"({"t":)" + std::string(kDeep, '{') + "}",
      R"({"t":{"a":)" + std::string(kDeep / 2, '['),
  };
  int i = 0;
  for (const std::string& header : cases) {
    const std::string path = dir.file("deep" + std::to_string(i++) + ".safetensors");
    write_bytes(path, safetensors_bytes(header, std::string(4, '\0')));
    EXPECT_ERROR_HAS(safetensors::File{path}, "deeper than 64 levels", path.c_str());
  }
}

TEST(JsonHostile, ErrorMessagesDescribeValuesWithoutDumpingThem) {
  // Shallow but wrong values are named by kind and size, not printed whole.
  TempDir dir;
  std::string many = "[";
  for (int k = 0; k < 20000; ++k) many += (k ? ",0" : "0");
  many += "]";
  const std::string path = dir.file("wide.safetensors");
  write_bytes(
      path, safetensors_bytes(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":)" + many + "}}"));
  const std::string msg = testing::error_of([&] { safetensors::File f(path); });
  EXPECT_NE(msg.find("data_offsets must be [begin, end], got an array of 20000 values"),
            std::string::npos)
      << msg.substr(0, 300);
  EXPECT_LT(msg.size(), 400u);

  EXPECT_EQ(describe_json(nlohmann::json::parse("[1,[2,[3]]]")), "an array of 2 values");
  EXPECT_EQ(describe_json(nlohmann::json::parse(R"({"a":1,"b":{}})")), "an object with 2 keys");
  EXPECT_EQ(describe_json(nlohmann::json(3.5)), "3.5");
  EXPECT_EQ(describe_json(nlohmann::json(nullptr)), "null");
  EXPECT_EQ(describe_json(nlohmann::json("a\nb")), "\"a?b\"");
  EXPECT_EQ(describe_json(nlohmann::json(std::string(100, 'x'))),
            "\"" + std::string(64, 'x') + "...\"");
}

// Issue 18 item 21: duplicate keys silently took the last value, and a float was
// described as dump() writes it (1e23 as 9.999999999999999e+22).
TEST(JsonHostile, DuplicateKeysAreRefusedWithTheirPath) {
  EXPECT_ERROR_HAS(parse_untrusted_json(R"({"a": {"lr": 1, "lr": 2}})", "the test's config"),
                   "the test's config has the key \"a.lr\" twice");
  EXPECT_ERROR_HAS(parse_untrusted_json(R"([{"x": 1}, {"x": 2, "y": [1, {"x": 3, "x": 4}]}])", "t"),
                   "\"[].y[].x\" twice");
  // The same key in sibling objects, and values that repeat, are fine.
  EXPECT_NO_THROW(
      parse_untrusted_json(R"({"a": {"x": 1}, "b": {"x": 1}, "c": [1, 1], "x": "x"})", "t"));
  EXPECT_EQ(describe_json(nlohmann::json::parse("1e23")), "1e+23");
  EXPECT_EQ(describe_json(nlohmann::json(2.0)), "2.0");
  EXPECT_EQ(describe_json(nlohmann::json(0.1)), "0.1");
  EXPECT_EQ(describe_json(nlohmann::json(1.0 / 3.0)), "0.33333333333333331");
}

TEST(JsonHostile, DepthCheckSkipsStringsAndAllowsRealNesting) {
  // Brackets inside strings (escaped quotes included) are not nesting.
  const std::string in_string = R"({"k":")" + std::string(1000, '[') + R"(\"[[[" })";
  EXPECT_NO_THROW(check_json_depth(in_string, "x"));
  EXPECT_NO_THROW(parse_untrusted_json(in_string, "x"));
  EXPECT_NO_THROW(check_json_depth(nested_array(64), "x"));
  EXPECT_ERROR_HAS(check_json_depth(nested_array(65), "the thing"), "the thing",
                   "deeper than 64 levels");
  EXPECT_ERROR_HAS(parse_untrusted_json("{\"a\": [1, 2", "the file"), "the file", "not valid JSON");
}

TEST(JsonHostile, DeeplyNestedIndexAndConfigRaiseErrors) {
  TempDir dir;
  const std::string deep = nested_array(kDeep);
  write_bytes(dir.file("model.safetensors.index.json"),
              R"({"metadata":{"total_size":)" + deep + R"(},"weight_map":{}})");
  EXPECT_ERROR_HAS(safetensors::Sharded{dir.file("model.safetensors.index.json")},
                   "deeper than 64 levels");
  write_bytes(dir.file("index2.json"), R"({"weight_map":{"a":)" + deep + "}}");
  EXPECT_ERROR_HAS(safetensors::Sharded{dir.file("index2.json")}, "deeper than 64 levels");

  write_bytes(dir.file("config.json"), R"({"vocab_size":8,"rope_parameters":)" + deep + "}");
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_file(dir.file("config.json")), "deeper than 64 levels",
                   "config.json");
  // A shallow config.json whose wrong values are deep containers is described, not dumped.
  nlohmann::json j = {{"vocab_size", 8},          {"hidden_size", 8}, {"num_hidden_layers", 1},
                      {"num_attention_heads", 2}, {"head_dim", 4},    {"intermediate_size", 8},
                      {"rope_theta", 1e4}};
  nlohmann::json nest = nlohmann::json::array();
  for (int k = 0; k < 60; ++k) nest = nlohmann::json::array({nest});
  j["hidden_act"] = nest;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "hidden_act is an array of 1 value");
}

}  // namespace
}  // namespace cg
