// Why this file exists: chat data (train/chat_data.h) decides what a drafter learns; a
// rendering one byte off the template's, or a mask one token off, trains a drafter on text
// its target never sees. These tests pin the Qwen3 template's hard cases, the mask rule,
// the three line forms, bad lines and dataset names, on the small golden tokenizer
// (tests/golden/tokenizer/tokenizer.json). tests/chat_golden_test.cpp compares with what
// Hugging Face renders.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/chat_data.h"
#include "train/hf_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using cg::train::ChatMessage;
using cg::train::HfTokenizer;

const HfTokenizer& tok() {
  static const HfTokenizer t =
      HfTokenizer::from_file(std::string(CHUNKGRAD_GOLDEN_DIR) + "/tokenizer/tokenizer.json");
  return t;
}

ChatMessage S(std::string c) { return {"system", std::move(c), std::nullopt}; }
ChatMessage U(std::string c) { return {"user", std::move(c), std::nullopt}; }
ChatMessage A(std::string c, std::optional<std::string> r = std::nullopt) {
  return {"assistant", std::move(c), std::move(r)};
}

std::string render(const std::vector<ChatMessage>& m) {
  return cg::train::render_qwen3_chat(m).text;
}

// The text of the tokens with mask 1, and of those with mask 0.
std::pair<std::string, std::string> split_by_mask(const std::vector<ChatMessage>& m) {
  const cg::train::DrafterSequence s =
      cg::train::tokenize_chat(cg::train::render_qwen3_chat(m), cg::train::hf_encoder(tok()));
  std::string on, off;
  for (size_t i = 0; i < s.ids.size(); ++i) (s.loss_mask[i] ? on : off) += tok().decode({s.ids[i]});
  return {on, off};
}

TEST(ChatTemplate, SystemOnlyWhenGivenAndTheLastAnswerCarriesTheEmptyThinkBlock) {
  EXPECT_EQ(render({U("Hi"), A("Hello")}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "Hello<|im_end|>\n");
  EXPECT_EQ(render({S("Be brief."), U("Hi"), A("Hello")}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nHello<|im_end|>\n");
}

TEST(ChatTemplate, OnlyAnswersAfterTheLastQueryGetAThinkBlock) {
  // Earlier turns: none. After the last query: the last message, or one with reasoning.
  EXPECT_EQ(render({U("a"), A("b"), U("c"), A("d")}),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n"
            "<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "d<|im_end|>\n");
  EXPECT_EQ(render({U("a"), A("one"), A("two")}),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\none<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\ntwo<|im_end|>\n");
  // A conversation that ends with the user: no answer is after the last query.
  EXPECT_EQ(render({U("a"), A("b"), U("c")}),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n"
            "<|im_start|>user\nc<|im_end|>\n");
  // No user at all: the last query is the last message; nothing comes after it.
  EXPECT_EQ(render({S("s"), A("alone")}),
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\nalone<|im_end|>\n");
  // A user turn that is a tool response is not a query.
  EXPECT_EQ(render({U("q"), A("x"), U("<tool_response>r</tool_response>"), A("y")}),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nx<|im_end|>\n"
            "<|im_start|>user\n<tool_response>r</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\ny<|im_end|>\n");
  // A later system message renders as a turn of its own.
  EXPECT_EQ(render({U("a"), S("s2"), A("b")}),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>system\ns2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nb<|im_end|>\n");
}

TEST(ChatTemplate, ContentWithThinkIsSplit) {
  EXPECT_EQ(render({U("x"), A("<think>\nplan\n</think>\n\nanswer")}),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\n"
            "answer<|im_end|>\n");
  // Before the last query the reasoning is dropped.
  EXPECT_EQ(render({U("x"), A("<think>hidden</think>shown"), U("y"), A("z")}),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\nshown<|im_end|>\n"
            "<|im_start|>user\ny<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "z<|im_end|>\n");
  // Not the last message but with reasoning: its block is kept.
  EXPECT_EQ(render({U("x"), A("<think>p</think>one"), A("two")}),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\np\n</think>\n\n"
            "one<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\ntwo<|im_end|>\n");
  // First </think> ends the reasoning, the last starts the content.
  EXPECT_EQ(render({U("x"), A("<think>a</think>b</think>\n\nc")}),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\na\n</think>\n\n"
            "c<|im_end|>\n");
  // <think> alone splits nothing.
  EXPECT_EQ(render({U("x"), A("a <think> b")}),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "a <think> b<|im_end|>\n");
  // reasoning_content replaces the split; its outer newlines go.
  EXPECT_EQ(render({U("x"), A("42", "\n\nsix times seven\n")}),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\nsix times "
            "seven\n</think>\n\n42<|im_end|>\n");
}

TEST(ChatTemplate, EmptyAndNewlineContent) {
  EXPECT_EQ(render({U(""), A("")}),
            "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "<|im_end|>\n");
  // The last answer loses its leading newlines; an earlier one keeps them.
  EXPECT_EQ(render({U("x"), A("\n\nlate")}),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "late<|im_end|>\n");
  EXPECT_TRUE(render({U("x"), A("\nearly"), U("y"), A("z")})
                  .starts_with("<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n\nearly"
                               "<|im_end|>\n"));
}

TEST(ChatTemplate, ToolRolesAreRefused) {
  EXPECT_THROW(render({U("x"), {"tool", "r", std::nullopt}, A("y")}), cg::Error);
}

TEST(ChatMask, AnswersAndTheirImEndOnly) {
  auto [on, off] = split_by_mask({S("sys"), U("What is 2 + 2?"), A("It is 4.")});
  EXPECT_EQ(on, "It is 4.<|im_end|>");
  EXPECT_EQ(off,
            "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n\n");
  std::tie(on, off) = split_by_mask({U("a"), A("first"), U("b"), A("second")});
  EXPECT_EQ(on, "first<|im_end|>second<|im_end|>");
  // A non-empty think block is the answer's; the empty one is the prompt's.
  std::tie(on, off) = split_by_mask({U("x"), A("<think>\nplan\n</think>\n\nanswer")});
  EXPECT_EQ(on, "<think>\nplan\n</think>\n\nanswer<|im_end|>");
  // An empty answer: its <|im_end|> only.
  std::tie(on, off) = split_by_mask({U("x"), A("")});
  EXPECT_EQ(on, "<|im_end|>");
  // Special tokens written in the content are the answer's tokens too.
  std::tie(on, off) = split_by_mask({U("x"), A("a<|im_end|>b")});
  EXPECT_EQ(on, "a<|im_end|>b<|im_end|>");
}

TEST(ChatMask, UnicodeAndAStraddlingToken) {
  const std::string nfd = "cafe\xcc\x81 \xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab";  // e + U+0301, jamo
  auto [on, off] = split_by_mask({U(nfd), A("Ünïcödé 👍🏽 " + nfd)});
  // The tokenizer normalises to NFC: the masked tokens decode to the NFC answer.
  EXPECT_EQ(on, "Ünïcödé 👍🏽 café 한<|im_end|>");
  // An earlier answer that starts with a newline: "\n\n" is one token across the header's
  // newline and the answer's; it counts as the answer's.
  std::tie(on, off) = split_by_mask({U("x"), A("\nearly"), U("y"), A("z")});
  const std::string first = tok().encode("\n\n").size() == 1 ? "\n\n" : "\n";
  EXPECT_TRUE(on.starts_with(first + "early<|im_end|>")) << on;
}

TEST(HfTokenizerOffsets, IdsAsEncodeAndRangesInOrder) {
  const std::string nfd = "e\xcc\x81 and A\xcc\x8a";
  const std::vector<std::string> texts = {"<|im_start|>user\nhi there<|im_end|>\n",
                                          "plain words, 123", nfd, "x<tool_call>y", ""};
  for (const std::string& text : texts) {
    const HfTokenizer::Encoding e = tok().encode_with_offsets(text);
    EXPECT_EQ(e.ids, tok().encode(text)) << text;
    ASSERT_EQ(e.offsets.size(), e.ids.size());
    size_t at = 0;
    for (size_t i = 0; i < e.ids.size(); ++i) {
      EXPECT_LE(e.offsets[i].first, e.offsets[i].second);
      EXPECT_LE(e.offsets[i].second, text.size());
      if (text != nfd) {  // exact: each token's bytes are its text
        EXPECT_EQ(e.offsets[i].first, at) << text << " token " << i;
        EXPECT_EQ(tok().decode({e.ids[i]}),
                  text.substr(e.offsets[i].first, e.offsets[i].second - e.offsets[i].first));
        at = e.offsets[i].second;
      }
    }
    if (text != nfd) EXPECT_EQ(at, text.size());
  }
  // NFC changed "e\u0301" and "A\u030a": their tokens map to the whole changed run.
  const HfTokenizer::Encoding e = tok().encode_with_offsets(nfd);
  EXPECT_EQ(e.offsets.front().first, 0u);
  EXPECT_EQ(e.offsets.back().second, nfd.size());
}

class ChatFiles : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("chunkgrad_chat_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir); }
  void TearDown() override { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
  cg::train::ChatDataOptions options(bool strict = false) {
    return {.encode = cg::train::hf_encoder(tok()), .vocab_size = 1003, .strict = strict};
  }
};

TEST_F(ChatFiles, TheThreeFormsAndDatasetNames) {
  const std::string messages =
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})";
  const std::string sharegpt =
      R"({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}], "dataset": "share"})";
  const std::string a = write("alpha.jsonl", messages + "\n\n" + sharegpt + "\n");
  const std::string b = write("beta.jsonl", R"({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]})"
                                            "\n"
                                            R"({"input_ids": [8, 9], "dataset": "pre"})"
                                            "\n");
  const cg::train::ChatData data = cg::train::read_chat_data({a, b}, options());
  ASSERT_EQ(data.samples.size(), 4u);
  EXPECT_EQ(data.samples[0].sequence.ids, data.samples[1].sequence.ids);  // same conversation
  EXPECT_EQ(data.samples[0].sequence.loss_mask, data.samples[1].sequence.loss_mask);
  EXPECT_EQ(data.samples[0].sequence.ids,
            tok().encode(cg::train::render_qwen3_chat({S("s"), U("hi"), A("hello")}).text));
  EXPECT_EQ(data.samples[0].dataset, "alpha");  // the file's stem
  EXPECT_EQ(data.samples[1].dataset, "share");
  EXPECT_EQ(data.samples[1].where(), a + ":3");  // blank line 2 skipped, not bad
  EXPECT_EQ(data.samples[2].sequence.ids, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(data.samples[2].sequence.loss_mask, (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(data.samples[2].dataset, "beta");
  EXPECT_EQ(data.samples[3].sequence.loss_mask, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(data.samples[3].dataset, "pre");
  ASSERT_EQ(data.files.size(), 2u);
  EXPECT_EQ(data.files[0].samples, 2);
  EXPECT_EQ(data.files[0].bad_lines, 0);
  EXPECT_EQ(data.files[1].describe(), b + ": 2 samples");
}

TEST_F(ChatFiles, BadLinesAreCountedOrWithStrictAnError) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{not json", "the line"},
      {R"({"text": "hello"})", "unknown form"},
      {R"({"messages": [], "input_ids": [1, 2]})", "ambiguous form"},
      {R"({"messages": []})", "the conversation is empty"},
      {R"({"messages": [{"role": "user", "content": "only a question"}]})", "no assistant turn"},
      {R"({"messages": [{"role": "narrator", "content": "x"}, {"role": "assistant", "content": "y"}]})",
       "messages[0].role \"narrator\": unknown role"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}]})",
       "tool calls and tool results are not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}]})",
       "messages[1] has tool_calls"},
      {R"({"conversations": [{"from": "human", "value": "x"}, {"from": "function_call", "value": "y"}]})",
       "conversations[1].from \"function_call\""},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}, {"role": "assistant", "content": "y"}]})",
       "messages[0].content must be a string"},
      {R"({"input_ids": [1, 5000]})",
       "input_ids[1] = 5000 is not a token id of the vocabulary (0 .. 1002)"},
      {R"({"input_ids": [1]})", "a sample needs at least 2"},
      {R"({"input_ids": [1, 2], "loss_mask": [1, 2]})", "loss_mask[1] = 2 is not 0 or 1"},
      {R"({"input_ids": [1, 2], "dataset": 7})", "\"dataset\" must be a string"},
  };
  const std::string good =
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})";
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string path = write("bad.jsonl", good + "\n" + bad[i].first + "\n" + good + "\n");
    const cg::train::ChatData data = cg::train::read_chat_data({path}, options());
    EXPECT_EQ(data.samples.size(), 2u) << bad[i].first;
    ASSERT_EQ(data.files[0].bad_lines, 1) << bad[i].first;
    EXPECT_EQ(data.files[0].first_bad_line, 2);
    EXPECT_NE(data.files[0].first_bad_reason.find(bad[i].second), std::string::npos)
        << data.files[0].first_bad_reason;
    try {
      cg::train::read_chat_data({path}, options(/*strict=*/true));
      ADD_FAILURE() << "strict accepted " << bad[i].first;
    } catch (const cg::Error& e) {
      EXPECT_EQ(e.message().rfind(path + ":2: ", 0), 0u) << e.message();
      EXPECT_NE(e.message().find(bad[i].second), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("fix or remove this line"), std::string::npos) << e.message();
    }
  }
  // Several bad lines: the count and the first.
  const std::string path =
      write("many.jsonl", "[]\n" + good + "\n{\"input_ids\": [1]}\n{\"messages\": []}\n");
  const cg::train::ChatData data = cg::train::read_chat_data({path}, options());
  EXPECT_EQ(data.files[0].bad_lines, 3);
  EXPECT_EQ(data.files[0].first_bad_line, 1);
  EXPECT_EQ(data.files[0].describe(),
            path +
                ": 1 sample; 3 bad lines skipped (first: line 1: expected a JSON object, got "
                "an array of 0 values)");
  // Nothing good at all: an error.
  EXPECT_THROW(cg::train::read_chat_data({write("none.jsonl", "[]\n")}, options()), cg::Error);
}

TEST_F(ChatFiles, AConversationWithoutATokenizerSaysWhatToGive) {
  const std::string path = write(
      "c.jsonl",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"
      "\n");
  cg::train::ChatDataOptions o{.strict = true, .no_tokenizer_hint = "give --tokenizer FILE"};
  try {
    cg::train::read_chat_data({path}, o);
    ADD_FAILURE() << "read without a tokenizer";
  } catch (const cg::Error& e) {
    EXPECT_NE(e.message().find("needs a tokenizer to become ids; give --tokenizer FILE"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
