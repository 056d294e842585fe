// Why this file exists: a checkpoint is only useful if it reads back exactly and a bad
// one fails loudly. These tests round-trip every dtype bit for bit, parse a file whose
// bytes are written by hand (so the reader is checked against the format, not against
// our own writer), corrupt headers in each way the reader must catch, and round-trip a
// sharded checkpoint through its index.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/factories.h"
#include "nn/safetensors.h"
#include "nn_test_util.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

using testing_nn::bit_equal;
using testing_nn::TempDir;
using testing_nn::write_bytes;
namespace st = safetensors;

// A tensor whose bytes are random (every bit pattern, NaNs included, for floats; 0/1 for
// bool), so a round trip that converts through any float type would show.
Tensor random_bits(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = raw::empty(shape, dtype, kCPU);
  Generator gen(seed);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) {
    p[i] = static_cast<unsigned char>(gen.next_u64() & (dtype == DType::boolean ? 1 : 0xFF));
  }
  return t;
}

// 8-byte little-endian length + header text + data.
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

template <typename T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

TEST(Safetensors, RoundTripEveryDtypeBitExact) {
  TempDir dir;
  st::NamedTensors tensors;
  uint64_t seed = 1;
  for (DType dt :
       {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32, DType::boolean}) {
    tensors.emplace_back(std::string("t_") + dtype_name(dt), random_bits({3, 5}, dt, seed++));
  }
  tensors.emplace_back("scalar", random_bits({}, DType::f32, 99));
  tensors.emplace_back("empty", raw::empty({0, 4}, DType::bf16, kCPU));
  // A transposed view is written in row-major order of its logical shape.
  Tensor base = random_bits({4, 6}, DType::f64, 7);
  tensors.emplace_back("transposed", raw::transpose(base, 0, 1));
  st::save_file(tensors, dir.file("a.safetensors"), {{"format", "pt"}, {"step", "12"}});

  st::File file(dir.file("a.safetensors"));
  ASSERT_EQ(file.names().size(), tensors.size());
  EXPECT_EQ(file.data_start() % 8, 0u);  // header padded to 8-byte alignment
  EXPECT_EQ(file.metadata().at("step"), "12");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (const auto& [name, t] : tensors) { EXPECT_TRUE(bit_equal(file.load(name), t)) << name; }
  EXPECT_EQ(file.info("t_bf16").dtype, DType::bf16);
  EXPECT_EQ(file.info("scalar").shape, Shape{});
  // Names come back in data order, which is the order they were written in.
  EXPECT_EQ(file.names().front(), "t_f32");
  EXPECT_EQ(file.names().back(), "transposed");
}

// Note [U8 as bytes]: a boolean tensor written as U8 says U8 in the header, and any U8
// tensor (values 0..255, as a mask from another writer may hold) reads back as its bytes.
TEST(Safetensors, U8MasksRoundTripAsTheirBytes) {
  TempDir dir;
  const Tensor mask = from_ints({1, 0, 1, 1, 0}, {5}, {.dtype = DType::boolean});
  st::save_file({{"mask", mask}, {"ids", from_ints({7, 8}, {2}, {.dtype = DType::i32})}},
                dir.file("m.safetensors"), {}, {"mask"});
  st::File file(dir.file("m.safetensors"));
  EXPECT_TRUE(file.info("mask").u8);
  EXPECT_FALSE(file.info("ids").u8);
  EXPECT_TRUE(bit_equal(file.load("mask"), mask));
  EXPECT_TRUE(bit_equal(file.load("ids"), from_ints({7, 8}, {2}, {.dtype = DType::i32})));
  std::ifstream in(dir.file("m.safetensors"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("\"dtype\":\"U8\""), std::string::npos);
  // Written from a float tensor: refused, naming it.
  try {
    st::save_file({{"m", zeros({2})}}, dir.file("bad.safetensors"), {}, {"m"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("'m' is written as U8"), std::string::npos);
  }
}

TEST(Safetensors, HandMadeFileParses) {
  TempDir dir;
  // Header lists b before a and puts a first in the data: offsets decide, not order.
  const std::string header = R"({"__metadata__":{"who":"hand"},)"
                             R"("b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},)"
                             R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
                             R"("c":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
                             R"("z":{"dtype":"F16","shape":[0],"data_offsets":[22,22]}})";
  const std::string data = bytes_of<float>({1.5f, -2.0f}) + bytes_of<int32_t>({7, -9}) +
                           bytes_of<uint16_t>({0x3F80, 0xC000, 0x7F80});  // 1, -2, inf
  write_bytes(dir.file("h.safetensors"), file_bytes(header, data));

  st::File file(dir.file("h.safetensors"));
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "b", "c", "z"}));
  EXPECT_EQ(file.metadata().at("who"), "hand");
  EXPECT_EQ(file.data_start(), 8 + header.size());
  EXPECT_EQ(file.load("a").shape(), (Shape{1, 2}));
  EXPECT_EQ(file.load("a").to_vector(), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(file.load("b").dtype(), DType::i32);
  EXPECT_EQ(file.load("b").to_vector(), (std::vector<double>{7, -9}));
  EXPECT_EQ(file.load("c").to_vector(), (std::vector<double>{1.0, -2.0, INFINITY}));
  EXPECT_EQ(file.load("z").numel(), 0);
  TENSOR_EXPECT_ERROR(file.load("nope"), "no tensor named 'nope'");
  // The writer's header for the same entries parses to the same infos.
  auto opened = st::open(dir.file("h.safetensors"));
  EXPECT_EQ(opened->info("c").begin, 16u);
  EXPECT_EQ(opened->info("c").end, 22u);
}

// Writes a file with `header` and `data` and returns the error its reading raises.
std::string open_error(const TempDir& dir, const std::string& bytes) {
  write_bytes(dir.file("bad.safetensors"), bytes);
  try {
    st::File f(dir.file("bad.safetensors"));
  } catch (const Error& e) { return e.message(); }
  return "(no error)";
}

TEST(Safetensors, CorruptHeadersRaiseClearErrors) {
  TempDir dir;
  const std::string data8 = bytes_of<float>({1.0f, 2.0f});
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  uint64_t b, uint64_t e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":[" + std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  auto expect = [&](const std::string& bytes, std::initializer_list<const char*> words) {
    const std::string msg = open_error(dir, bytes);
    for (const char* w : words) {
      EXPECT_NE(msg.find(w), std::string::npos) << "message: " << msg << "\nlacks: " << w;
    }
  };
  const std::string good = "{" + entry("a", "F32", "[2]", 0, 8) + "}";
  ASSERT_EQ(open_error(dir, file_bytes(good, data8)), "(no error)");

  // Too short to hold the length; a length past the end of the file; absurd length.
  expect("abc", {"shorter than the 8-byte header length"});
  std::string long_len = file_bytes(good, data8);
  long_len[0] = static_cast<char>(0xF0);
  expect(long_len, {"declares a header of", "truncated"});
  std::string huge = file_bytes(good, data8);
  for (int i = 0; i < 8; ++i) huge[i] = static_cast<char>(0xFF);
  expect(huge, {"declares a header of"});
  // Not JSON; JSON but not an object.
  expect(file_bytes("{\"a\":", data8), {"not valid JSON"});
  expect(file_bytes("[1,2]   ", ""), {"must be a JSON object"});
  // Offsets beyond the data section.
  expect(file_bytes("{" + entry("a", "F32", "[4]", 0, 16) + "}", data8),
         {"'a'", "reach past the data section", "8 bytes"});
  // Overlapping tensors.
  expect(
      file_bytes("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[1]", 4, 8) + "}",
                 data8),
      {"overlap", "'a'", "'b'"});
  // A hole in the data section; trailing bytes.
  expect(file_bytes("{" + entry("a", "F32", "[1]", 4, 8) + "}", data8), {"belong to no tensor"});
  expect(file_bytes("{" + entry("a", "F32", "[1]", 0, 4) + "}", data8), {"trailing bytes"});
  // Size that does not match shape x dtype.
  expect(file_bytes("{" + entry("a", "F32", "[3]", 0, 8) + "}", data8),
         {"span 8 bytes", "needs 12"});
  // Unknown dtype; a real dtype chunkgrad cannot hold.
  // (one list of what is read in both: an outside tester found two that disagreed)
  const char* readable = "reads F32, BF16, F16, F64, I64, I32, BOOL and U8";
  expect(file_bytes("{" + entry("a", "Q7", "[2]", 0, 8) + "}", data8),
         {"unknown dtype 'Q7'", readable});
  expect(file_bytes("{" + entry("a", "I8", "[8]", 0, 8) + "}", data8),
         {"dtype I8", "cannot hold", readable});
  // Negative shape; end before begin; a duplicate name; a missing field.
  expect(file_bytes("{" + entry("a", "F32", "[-2]", 0, 8) + "}", data8), {"non-negative"});
  expect(file_bytes("{" + entry("a", "F32", "[2]", 8, 0) + "}", data8), {"end before"});
  expect(
      file_bytes("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("a", "F32", "[1]", 4, 8) + "}",
                 data8),
      {"names tensor 'a' twice"});
  expect(file_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", data8), {"data_offsets"});
  // (an outside tester: a damaged key was "an object with 3 keys"; now the keys are shown)
  expect(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offseus":[0,8]}})", data8),
         {"has no \"data_offsets\"", "\"data_offseus\""});
  // Metadata must be strings.
  expect(file_bytes(R"({"__metadata__":{"n":3},)" + entry("a", "F32", "[2]", 0, 8) + "}", data8),
         {"__metadata__", "'n'"});
}

TEST(Safetensors, WriterRefusesBadInput) {
  TempDir dir;
  Tensor t = zeros({2});
  TENSOR_EXPECT_ERROR(st::save_file({{"a", t}, {"a", t}}, dir.file("x.safetensors")),
                      "'a' appears twice");
  TENSOR_EXPECT_ERROR(st::save_file({{"__metadata__", t}}, dir.file("x.safetensors")),
                      "cannot be named");
  TENSOR_EXPECT_ERROR(st::open(dir.file("missing.safetensors")), "does not exist");
  TENSOR_EXPECT_ERROR(st::open(dir.str()), "neither model.safetensors nor");
}

TEST(Safetensors, ShardedRoundTripThroughIndex) {
  TempDir dir;
  st::NamedTensors tensors;
  for (int i = 0; i < 7; ++i) {
    tensors.emplace_back("layers." + std::to_string(i) + ".w",
                         random_bits({16, 8}, i % 2 ? DType::bf16 : DType::f32, 100 + i));
  }
  // f32 tensors are 512 B, bf16 256 B; 1000 B per shard gives several shards.
  const auto files = st::save_sharded(tensors, dir.str(), 1000, {{"format", "pt"}});
  ASSERT_GT(files.size(), 2u);
  EXPECT_EQ(files.front(), "model-00001-of-0000" + std::to_string(files.size()) + ".safetensors");
  for (const std::string& f : files) {
    EXPECT_LE(std::filesystem::file_size(dir.file(f)), 1000u + 1024u);  // data + header
  }
  nlohmann::json index =
      nlohmann::json::parse(std::ifstream(dir.file("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 4u * 512 + 3u * 256);
  EXPECT_EQ(index["weight_map"].size(), tensors.size());

  auto reader = st::open(dir.str());  // the folder: finds the index
  EXPECT_EQ(reader->names().size(), tensors.size());
  EXPECT_EQ(reader->metadata().at("total_size"), std::to_string(4 * 512 + 3 * 256));
  auto all = reader->load_all();
  for (const auto& [name, t] : tensors) EXPECT_TRUE(bit_equal(all.at(name), t)) << name;

  // Only the shard holding the asked tensor is opened: delete the last shard, then read
  // from the first.
  std::filesystem::remove(dir.file(files.back()));
  auto lazy = st::open(dir.file("model.safetensors.index.json"));
  EXPECT_TRUE(bit_equal(lazy->load("layers.0.w"), tensors[0].second));
  TENSOR_EXPECT_ERROR(lazy->load(tensors.back().first), "cannot open");

  // An index that puts a tensor in the wrong shard is caught when that shard opens.
  index["weight_map"]["layers.0.w"] = files[1];
  std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
  auto wrong = st::open(dir.str());
  TENSOR_EXPECT_ERROR(wrong->load("layers.0.w"), "puts 'layers.0.w'", "holds no such tensor");
}

// An outside tester mapped one tensor to a shard file that does not exist: the error
// counted the tensors only. Now it names the tensor, where the index sends it, and that
// the file is not there.
TEST(Safetensors, AnIndexSendingATensorToAMissingShardSaysWhich) {
  TempDir dir;
  st::NamedTensors tensors;
  for (int i = 0; i < 4; ++i)
    tensors.emplace_back("layers." + std::to_string(i) + ".w", random_bits({16, 8}, DType::f32, i));
  const auto files = st::save_sharded(tensors, dir.str(), 1100, {{"format", "pt"}});
  ASSERT_EQ(files.size(), 2u);  // two tensors a shard
  nlohmann::json index =
      nlohmann::json::parse(std::ifstream(dir.file("model.safetensors.index.json")));
  index["weight_map"]["layers.1.w"] = "model-gone.safetensors";
  std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
  TENSOR_EXPECT_ERROR(st::open(dir.str())->load("layers.0.w"), "holds 'layers.1.w'",
                      "maps to 'model-gone.safetensors', not a file in");
}

TEST(Safetensors, OneShardIsAPlainFile) {
  TempDir dir;
  const auto files = st::save_sharded({{"w", ones({4})}}, dir.str(), 1 << 20);
  EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.safetensors.index.json")));
  EXPECT_EQ(st::open(dir.str())->load("w").to_vector(), (std::vector<double>{1, 1, 1, 1}));
}

// An outside tester: a folder holding both model.safetensors and an index loaded the
// index, where transformers loads model.safetensors. Now both programs read the single file.
TEST(Safetensors, AFolderWithBothReadsTheSingleFileAsTransformersDoes) {
  TempDir dir;
  st::NamedTensors old_shards;
  for (int i = 0; i < 4; ++i) old_shards.emplace_back("w" + std::to_string(i), zeros({16, 8}));
  ASSERT_GT(st::save_sharded(old_shards, dir.str(), 1000).size(), 1u);
  st::save_file({{"w0", ones({2})}}, dir.file("model.safetensors"));
  const auto reader = st::open(dir.str());
  EXPECT_EQ(reader->names(), std::vector<std::string>{"w0"});
  EXPECT_EQ(reader->load("w0").to_vector(), (std::vector<double>{1, 1}));
  // The index is read when it is named, or when the folder has no single file.
  EXPECT_EQ(st::open(dir.file("model.safetensors.index.json"))->names().size(), 4u);
  std::filesystem::remove(dir.file("model.safetensors"));
  EXPECT_EQ(st::open(dir.str())->names().size(), 4u);
}

}  // namespace
}  // namespace cg
