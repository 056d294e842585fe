// Why this file exists: `chunkgrad tokenize` end to end on the hand-built tokenizer of
// hf_tokenizer_test_util.h: the output formats (one JSON array for the whole input, one
// line per JSONL line, raw text back from --decode, stdin as "-") and one error line with
// exit code 1 for a bad line or a malformed tokenizer.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "hf_tokenizer_test_util.h"
#include "train_program_fixture.h"

namespace {

using Result = train_program_fixture::TrainRun;

class TokenizeProgram : public train_program_fixture::TrainProgram {
 protected:
  void SetUp() override {
    TrainProgram::SetUp();
    write("tokenizer.json", hf_tokenizer_test::tiny_tokenizer_json().dump());
  }
  std::string at(const std::string& name) const { return path(name); }
  // `chunkgrad tokenize --tokenizer <tokenizer> ARGS <stdin_file`.
  Result tokenize(const std::string& args, const std::string& stdin_file = "/dev/null",
                  const std::string& tokenizer = "tokenizer.json") const {
    return run("tokenize --tokenizer '" + path(tokenizer) + "' " + args + " <'" + stdin_file + "'");
  }
};

TEST_F(TokenizeProgram, WholeInputIsOneArray) {
  write("text.txt", "<|im_start|>the\n hello");
  Result r = tokenize(at("text.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // "the" "\n" " hello": the last piece has no merge with its Ġ, then he, llo.
  EXPECT_EQ(r.out, "[300,116,257,10,32,257,260]\n");
  r = tokenize("-", at("text.txt"));  // the same through stdin
  EXPECT_EQ(r.out, "[300,116,257,10,32,257,260]\n");
}

TEST_F(TokenizeProgram, DecodeGivesTheBytesBack) {
  write("ids.json", "[300, 116, 257, 10, 32, 257, 260]\n");
  Result r = tokenize("--decode " + at("ids.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>the\n hello");  // no newline added
}

TEST_F(TokenizeProgram, JsonlIsOneLineEach) {
  // A blank line gives a blank line: output line N is input line N's (an outside tester).
  write("texts.jsonl", "\"the\"\n\" the\"\r\n\n  \r\n\"\"\n\"a\\r\\nb<|im_end|>\"\n\n");
  Result r = tokenize("--jsonl " + at("texts.jsonl"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[116,257]\n[258]\n\n\n[]\n[97,13,10,98,301]\n\n");
  write("ids.jsonl", "[116,257]\n[258]\n\n[]\n[97,13,10,98,301]\n[195]\n");
  r = tokenize("--jsonl --decode " + at("ids.jsonl"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Half a character (byte C3 alone) is U+FFFD in JSON.
  EXPECT_EQ(r.out, "\"the\"\n\" the\"\n\n\"\"\n\"a\\r\\nb<|im_end|>\"\n\"\xEF\xBF\xBD\"\n");
}

// An outside tester: without --jsonl, half a character came out as its lone byte (invalid
// UTF-8); now U+FFFD, as with --jsonl and as Hugging Face decodes it.
TEST_F(TokenizeProgram, DecodeWritesValidUtf8) {
  write("ids.json", "[116, 257, 195]\n");
  const Result r = tokenize("--decode " + at("ids.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "the\xEF\xBF\xBD");
}

TEST_F(TokenizeProgram, BadInputIsOneErrorLine) {
  write("bad.jsonl", "\"fine\"\n[1, 2]\n");
  Result r = tokenize("--jsonl " + at("bad.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "[102,105,110,101]\n");
  EXPECT_NE(r.err.find("chunkgrad tokenize: error: line 2: expected a JSON string"),
            std::string::npos)
      << r.err;
  write("bad_ids.json", "[116, 9999]");
  r = tokenize("--decode " + at("bad_ids.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the input: token id 9999 is not in the tokenizer's vocabulary"),
            std::string::npos)
      << r.err;
  write("latin1.txt", "caf\xE9");
  r = tokenize(at("latin1.txt"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not valid UTF-8 (at byte 3)"), std::string::npos) << r.err;

  nlohmann::json broken = hf_tokenizer_test::tiny_tokenizer_json();
  broken["model"]["merges"][0] = nlohmann::json::array({"q", "zzz"});
  write("broken.json", broken.dump());
  r = tokenize(at("latin1.txt"), "/dev/null", "broken.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.merges[0]: 'zzz' is not in model.vocab"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(TokenizeProgram, DecodeErrorsNameTheIdAsGivenOnce) {
  // 2^64 - 1 is not id -1; and the place is said once.
  write("huge.json", "[116, 18446744073709551615]");
  Result r = tokenize("--decode " + at("huge.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the input: token id 18446744073709551615 is not in the tokenizer's "
                       "vocabulary (ids 0 .. 303)"),
            std::string::npos)
      << r.err;
  write("object.json", "{\"ids\": [1]}");
  r = tokenize("--decode " + at("object.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error: the input: expected a JSON array of token ids"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("the input: the input"), std::string::npos) << r.err;
  write("floats.jsonl", "[1]\n[1.5]\n");
  r = tokenize("--jsonl --decode " + at("floats.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error: line 2: expected integer token ids, got 1.5"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("line 2: line 2"), std::string::npos) << r.err;
}

TEST_F(TokenizeProgram, DeeplyNestedInputIsAnErrorNotACrash) {
  // dump() of this in a message would recurse 200,000 deep and overflow the stack.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  write("deep.json", deep);
  Result r = tokenize("--decode " + at("deep.json"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the input nests JSON arrays and objects deeper than 64 levels"),
            std::string::npos)
      << r.err;
  write("deep.jsonl", "\"fine\"\n" + deep + "\n");
  r = tokenize("--jsonl " + at("deep.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("line 2 nests JSON arrays and objects deeper than 64 levels"),
            std::string::npos)
      << r.err;
}

TEST_F(TokenizeProgram, AMissingInputFileIsOneClearLine) {
  Result r = tokenize(at("no_such.txt"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no file '" + at("no_such.txt") + "' (give a file, or - for stdin)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find(" OR "), std::string::npos) << r.err;
  r = tokenize(at(""));  // the test's folder
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is a folder; give a file, or -"), std::string::npos) << r.err;
}

}  // namespace
