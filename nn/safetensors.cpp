// Why this file exists: the safetensors reader (format in safetensors.h; the writer is
// safetensors_write.cpp).
// Every check a corrupted or hostile file could fail is made on the header before any
// data is read, and each failure says which file, which tensor and what is wrong.
#include "nn/safetensors.h"
#include "nn/safetensors_format.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/content_hash.h"
#include "core/json_input.h"
#include "core/memory_trace.h"
#include "core/views.h"

namespace cg::safetensors {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; chunkgrad reads it as host memory");

namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
using cg::describe_json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"}, {DType::bf16, "BF16"}, {DType::f16, "F16"},     {DType::f64, "F64"},
    {DType::i64, "I64"}, {DType::i32, "I32"},   {DType::boolean, "BOOL"}};

uint64_t file_size_of(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  CG_CHECK(!ec, "safetensors: cannot open '", path, "': ", ec.message());
  return size;
}

// numel * element size, or a clear error when it overflows 64 bits.
uint64_t bytes_of(const Shape& shape, DType dtype, const std::string& where) {
  uint64_t n = element_size(dtype);
  for (int64_t d : shape) {
    const uint64_t u = static_cast<uint64_t>(d);
    CG_CHECK(u == 0 || n <= UINT64_MAX / u, where, ": shape ", shape_str(shape),
             " is too large to address");
    n *= u;
  }
  return n;
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A JSON number that must be a non-negative integer (shape dims, offsets).
uint64_t as_unsigned(const json& v, const std::string& where, const char* what) {
  CG_CHECK(v.is_number_unsigned(), where, ": ", what, " must be non-negative integers, got ",
           describe_json(v));
  return v.get<uint64_t>();
}

// Parses the header text, refusing duplicate tensor names (JSON allows them; the format
// does not, and a silent "last one wins" would hide a corrupted file) and nesting deeper
// than any header needs (json_input.h: a deep value would overflow the stack later).
json parse_header_json(const std::string& text, const std::string& path) {
  check_json_depth(text, "safetensors: the header of '" + path + "'");
  // Note [Duplicate keys] (core/json_input.cpp), at every level: a tensor named twice, and
  // a key twice inside an entry or __metadata__ (an outside tester's second
  // "chunkgrad.xxh3" was the one read).
  std::vector<std::pair<std::set<std::string>, std::string>> open;  // an object's keys, its name
  std::string duplicate, inner_duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if (event == E::object_start || event == E::array_start)
      open.push_back({{}, open.empty() ? std::string() : open.back().second});
    if ((event == E::object_end || event == E::array_end) && !open.empty()) open.pop_back();
    if (event == E::key && !open.empty() && parsed.is_string()) {
      const std::string key = parsed.get<std::string>();
      if (!open.back().first.insert(key).second) {
        if (depth == 1 && duplicate.empty()) duplicate = key;
        if (depth > 1 && inner_duplicate.empty())
          inner_duplicate = "the key " + describe_json(json(key)) + " twice in " +
                            describe_json(json(open.back().second));
      }
      if (depth == 1) open.back().second = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, on_event);
  } catch (const json::exception& e) {
    CG_FAIL("safetensors: the header of '", path, "' is not valid JSON (", e.what(),
            "); the file is corrupted or not a safetensors file");
  }
  CG_CHECK(duplicate.empty(), "safetensors: the header of '", path, "' names tensor '", duplicate,
           "' twice");
  CG_CHECK(inner_duplicate.empty(), "safetensors: the header of '", path, "' has ", inner_duplicate,
           "; readers disagree on which one counts: the file is damaged");
  CG_CHECK(header.is_object(), "safetensors: the header of '", path,
           "' must be a JSON object, got ", header.type_name());
  return header;
}

void read_exact(std::ifstream& in, char* dst, uint64_t nbytes, uint64_t at, const std::string& path,
                const std::string& name) {
  in.seekg(static_cast<std::streamoff>(at));
  in.read(dst, static_cast<std::streamsize>(nbytes));
  CG_CHECK(in && static_cast<uint64_t>(in.gcount()) == nbytes, "safetensors: reading ", nbytes,
           " bytes of '", name, "' at byte ", at, " of '", path,
           "' failed (file truncated or changed since it was opened?)");
}

// Note [Tensor checksums]: the bytes just read against the hash their file recorded.
void check_tensor_checksum(const void* data, uint64_t nbytes, const std::string& recorded,
                           const std::string& name, const std::string& path) {
  const std::string now = content_hash(data, nbytes);
  CG_CHECK(now == recorded, "safetensors: tensor '", name, "' in '", path,
           "' does not match the checksum written with it (XXH3-128 ", now, ", recorded ", recorded,
           "): the file was damaged or changed after it was written; restore it "
           "from a copy, or write it again");
}

}  // namespace

std::string metadata_checksum(const std::map<std::string, std::string>& metadata) {
  return content_hash(json(metadata).dump());
}

// ---- dtypes ----------------------------------------------------------------------

const char* dtype_to_safetensors(DType dtype) {
  for (const auto& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  CG_FAIL("safetensors: dtype ", dtype_name(dtype), " has no safetensors name");
}

namespace {

// The dtypes a file may hold, for both errors below (they listed two different sets): the
// table's, then U8, read as bytes (Note [U8 as bytes]).
std::string readable_dtypes() {
  std::string out;
  for (const auto& d : kDTypeNames) out += std::string(out.empty() ? "" : ", ") + d.name;
  return out + " and U8";
}

}  // namespace

DType dtype_from_safetensors(const std::string& name, const std::string& tensor_name) {
  for (const auto& d : kDTypeNames) {
    if (name == d.name) return d.dtype;
  }
  static const std::set<std::string> known_elsewhere = {"I8",  "U16",     "I16",     "U32",
                                                        "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                                        "F4",  "F6_E2M3", "F6_E3M2", "C64"};
  CG_CHECK(!known_elsewhere.count(name), "safetensors: tensor '", tensor_name, "' has dtype ", name,
           ", which chunkgrad cannot hold; it reads ", readable_dtypes(),
           " (convert the checkpoint first)");
  CG_FAIL("safetensors: tensor '", tensor_name, "' has unknown dtype '", name,
          "'; chunkgrad reads ", readable_dtypes());
}

// ---- Reader ----------------------------------------------------------------------

std::map<std::string, Tensor> Reader::load_all(Device device) const {
  return load_some(names(), device);
}

std::map<std::string, Tensor> Reader::load_some(const std::vector<std::string>& wanted,
                                                Device device) const {
  std::map<std::string, Tensor> out;
  for (const std::string& name : wanted) out.emplace(name, load(name, device));
  return out;
}

// ---- File ------------------------------------------------------------------------

File::File(std::string path) : path_(std::move(path)) {
  const uint64_t file_size = file_size_of(path_);
  CG_CHECK(file_size >= 8, "safetensors: '", path_, "' is ", file_size,
           " bytes long, shorter than the 8-byte header length; not a safetensors file");
  std::ifstream in(path_, std::ios::binary);
  CG_CHECK(in, "safetensors: cannot open '", path_, "' for reading");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  CG_CHECK(in, "safetensors: cannot read the header length of '", path_, "'");
  const uint64_t header_len = read_u64_le(len_bytes);
  CG_CHECK(header_len <= file_size - 8, "safetensors: '", path_, "' declares a header of ",
           header_len, " bytes but only ", file_size - 8,
           " bytes follow the length; the file is truncated or not a safetensors file");
  CG_CHECK(header_len <= kMaxHeaderBytes, "safetensors: '", path_, "' declares a header of ",
           header_len, " bytes, above the format's limit of ", kMaxHeaderBytes);
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  CG_CHECK(in, "safetensors: cannot read the ", header_len, "-byte header of '", path_, "'");
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  const json header = parse_header_json(text, path_);
  std::vector<TensorInfo> infos;
  std::optional<std::string> checksum_text;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      CG_CHECK(entry.is_object(), "safetensors: ", kMetadataKey, " in '", path_,
               "' must be an object of strings, got ", entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        CG_CHECK(value.is_string(), "safetensors: ", kMetadataKey, " in '", path_,
                 "' must map strings to strings; key '", key, "' holds ", describe_json(value));
        if (key == kChecksumKey) {
          checksum_text = value.get<std::string>();
        } else {
          metadata_[key] = value.get<std::string>();
        }
      }
      continue;
    }
    const std::string where = "safetensors: tensor '" + name + "' in '" + path_ + "'";
    CG_CHECK(entry.is_object(), where,
             " must be an object with dtype, shape and data_offsets, got ", describe_json(entry));
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      // (an outside tester's damaged key was reported as "an object with 3 keys")
      if (entry.contains(key)) continue;
      std::string keys;
      for (const auto& [k, v] : entry.items())
        keys += (keys.empty() ? "" : ", ") + describe_json(nlohmann::json(k));
      CG_FAIL(where, " has no \"", key, "\" (its keys: ", keys.empty() ? "none" : keys,
              "); the file is damaged");
    }
    CG_CHECK(entry["dtype"].is_string(), where, ": dtype must be a string, got ",
             describe_json(entry["dtype"]));
    TensorInfo info;
    info.name = name;
    info.u8 = entry["dtype"].get<std::string>() == "U8";  // Note [U8 as bytes]
    info.dtype =
        info.u8 ? DType::boolean : dtype_from_safetensors(entry["dtype"].get<std::string>(), name);
    CG_CHECK(entry["shape"].is_array(), where, ": shape must be an array, got ",
             describe_json(entry["shape"]));
    for (const json& d : entry["shape"]) {
      const uint64_t u = as_unsigned(d, where, "shape dims");
      CG_CHECK(u <= static_cast<uint64_t>(INT64_MAX), where, ": shape dim ", u, " is too large");
      info.shape.push_back(static_cast<int64_t>(u));
    }
    const json& offsets = entry["data_offsets"];
    CG_CHECK(offsets.is_array() && offsets.size() == 2, where,
             ": data_offsets must be [begin, end], got ", describe_json(offsets));
    info.begin = as_unsigned(offsets[0], where, "data_offsets");
    info.end = as_unsigned(offsets[1], where, "data_offsets");
    CG_CHECK(info.begin <= info.end, where, ": data_offsets [", info.begin, ", ", info.end,
             "] end before they begin");
    CG_CHECK(info.end <= data_size, where, ": data_offsets [", info.begin, ", ", info.end,
             "] reach past the data section, which is ", data_size,
             " bytes long; the file is truncated or its header corrupted");
    const uint64_t expected = bytes_of(info.shape, info.dtype, where);
    CG_CHECK(info.nbytes() == expected, where, ": data_offsets [", info.begin, ", ", info.end,
             "] span ", info.nbytes(), " bytes but shape ", shape_str(info.shape), " of ",
             entry["dtype"].get<std::string>(), " needs ", expected);
    infos.push_back(std::move(info));
  }

  // The data section must be covered exactly: sorted by offset, each tensor starts where
  // the previous one ended (empty tensors take no room), and the last ends at the end.
  std::stable_sort(infos.begin(), infos.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& info : infos) {
    CG_CHECK(info.begin >= covered, "safetensors: tensors '", previous ? previous->name : "",
             "' and '", info.name, "' in '", path_, "' overlap (bytes [", info.begin, ", ", covered,
             ") of the data section are claimed by both)");
    CG_CHECK(info.begin == covered, "safetensors: bytes [", covered, ", ", info.begin,
             ") of the data section of '", path_, "' belong to no tensor (a hole before '",
             info.name, "'); the header is corrupted");
    covered = info.end;
    if (info.nbytes() > 0) previous = &info;
  }
  CG_CHECK(covered == data_size, "safetensors: the tensors of '", path_, "' cover ", covered,
           " bytes but the data section is ", data_size,
           " bytes long; the file has trailing bytes or its header is corrupted");

  for (TensorInfo& info : infos) {
    names_.push_back(info.name);
    infos_.emplace(info.name, std::move(info));
  }
  if (checksum_text) read_checksums(*checksum_text);
}

// Note [Tensor checksums]: the "chunkgrad.xxh3" metadata string, a JSON object of tensor
// name -> 32 hex digits; anything else there means a damaged header.
void File::read_checksums(const std::string& text) {
  const std::string where = std::string("safetensors: the tensor checksums (") + kMetadataKey +
                            " \"" + kChecksumKey + "\") of '" + path_ + "'";
  json sums;
  try {
    sums = parse_untrusted_json(text, where);
  } catch (const Error& e) { CG_FAIL(e.message(), "; the header is damaged"); }
  CG_CHECK(sums.is_object(), where, " must be a JSON object, got ", describe_json(sums),
           "; the header is damaged");
  for (const auto& [name, hex] : sums.items()) {
    CG_CHECK(name == kMetadataKey || infos_.count(name) > 0, where,
             " name a tensor the file does not hold, ", describe_json(json(name)),
             "; the header is damaged");
    CG_CHECK(hex.is_string() && hex.get<std::string>().size() == kChecksumHexDigits &&
                 hex.get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos,
             where, ": the checksum of '", name, "' must be ", kChecksumHexDigits,
             " lowercase hex digits, got ", describe_json(hex), "; the header is damaged");
    if (name != kMetadataKey) checksums_[name] = hex.get<std::string>();
  }
  // save_file records every tensor and the metadata: fewer is a header changed since.
  for (const std::string& name : names_) {
    CG_CHECK(checksums_.count(name) > 0, where, " have none for tensor '", name,
             "', which the writer records for every tensor; the header is damaged");
  }
  CG_CHECK(sums.contains(kMetadataKey), where, " have none for the metadata (key \"", kMetadataKey,
           "\"), which the writer records; the header is damaged");
  const std::string now = metadata_checksum(metadata_);
  const std::string recorded = sums[kMetadataKey].get<std::string>();
  CG_CHECK(now == recorded, "safetensors: the metadata of '", path_,
           "' does not match the checksum written with it (XXH3-128 ", now, ", recorded ", recorded,
           "): the file was damaged or changed after it was written; restore it "
           "from a copy, or write it again");
}

std::string File::checksum(const std::string& name) const {
  info(name);  // names the file when it has no such tensor
  const auto it = checksums_.find(name);
  return it == checksums_.end() ? std::string() : it->second;
}

bool File::contains(const std::string& name) const { return infos_.count(name) > 0; }

const TensorInfo& File::info(const std::string& name) const {
  auto it = infos_.find(name);
  CG_CHECK(it != infos_.end(), "safetensors: '", path_, "' holds no tensor named '", name,
           "' (it holds ", names_.size(), " tensors)");
  return it->second;
}

void File::load_into(const std::string& name, const Tensor& dst) const {
  const TensorInfo& ti = info(name);
  CG_CHECK(dst.defined() && dst.device() == kCPU && dst.is_contiguous(), "safetensors: load_into('",
           name, "') needs a defined, contiguous host tensor (on cg::kCPU)");
  CG_CHECK(dst.dtype() == ti.dtype && dst.shape() == ti.shape, "safetensors: tensor '", name,
           "' in '", path_, "' is ", dtype_name(ti.dtype), " ", shape_str(ti.shape),
           " but the destination is ", dtype_name(dst.dtype()), " ", shape_str(dst.shape()));
  if (ti.nbytes() == 0) return;
  std::ifstream in(path_, std::ios::binary);
  CG_CHECK(in, "safetensors: cannot open '", path_, "' for reading");
  dst.storage()->bump_version();  // an in-place write (Note [Version counter], core/storage.h)
  read_exact(in, static_cast<char*>(dst.data_ptr()), ti.nbytes(), data_start_ + ti.begin, path_,
             name);
  const auto sum = checksums_.find(name);
  if (sum != checksums_.end())
    check_tensor_checksum(dst.data_ptr(), ti.nbytes(), sum->second, name, path_);
}

Tensor File::load(const std::string& name, Device device) const {
  const TensorInfo& ti = info(name);
  Tensor host = raw::empty(ti.shape, ti.dtype, kCPU);
  load_into(name, host);
  return raw::to_device(host, device);
}

// ---- Sharded ---------------------------------------------------------------------

Sharded::Sharded(std::string index_path) : index_path_(std::move(index_path)) {
  folder_ = fs::path(index_path_).parent_path().string();
  const json index = parse_untrusted_json(read_text_file(index_path_, "safetensors: the index"),
                                          "safetensors: the index '" + index_path_ + "'");
  CG_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
           "safetensors: the index '", index_path_,
           "' must be an object with a \"weight_map\" object {name: shard file}");
  if (index.contains("metadata")) {
    CG_CHECK(index["metadata"].is_object(), "safetensors: \"metadata\" in '", index_path_,
             "' must be an object");
    for (const auto& [key, value] : index["metadata"].items()) {
      // dump() is safe here: parse_untrusted_json bounded the depth.
      metadata_[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    CG_CHECK(file.is_string(), "safetensors: weight_map entry '", name, "' in '", index_path_,
             "' must name a shard file, got ", describe_json(file));
    const std::string f = file.get<std::string>();
    CG_CHECK(fs::path(f).filename().string() == f, "safetensors: weight_map entry '", name,
             "' in '", index_path_, "' names '", f,
             "'; shard files must sit next to the index (a plain file name)");
    names_.push_back(name);
    file_of_[name] = f;
    if (files.insert(f).second) shard_files_.push_back(f);
  }
}

Sharded::~Sharded() = default;

bool Sharded::contains(const std::string& name) const { return file_of_.count(name) > 0; }

std::string Sharded::path_of(const std::string& name) const {
  auto it = file_of_.find(name);
  CG_CHECK(it != file_of_.end(), "safetensors: the index '", index_path_,
           "' maps no tensor named '", name, "'");
  return (fs::path(folder_) / it->second).string();
}

const File& Sharded::shard_of(const std::string& name) const {
  auto it = file_of_.find(name);
  CG_CHECK(it != file_of_.end(), "safetensors: the index '", index_path_,
           "' maps no tensor named '", name, "'");
  std::lock_guard<std::mutex> lock(mutex_);  // loads may come from several threads
  auto opened = opened_.find(it->second);
  if (opened == opened_.end()) {
    auto file = std::make_unique<File>((fs::path(folder_) / it->second).string());
    // Every name the index puts in this shard must be there, with nothing extra.
    size_t mapped_here = 0;
    for (const auto& [n, f] : file_of_) {
      if (f != it->second) continue;
      ++mapped_here;
      CG_CHECK(file->contains(n), "safetensors: the index '", index_path_, "' puts '", n, "' in '",
               f, "', which holds no such tensor");
    }
    if (mapped_here != file->names().size()) {
      // Name one tensor the index sends elsewhere, and say where (a shard renamed or
      // missing: an outside tester's edit was reported as a count alone).
      std::string elsewhere;
      for (const std::string& n : file->names()) {
        auto mapped = file_of_.find(n);
        if (mapped != file_of_.end() && mapped->second == it->second) continue;
        std::error_code ec;
        elsewhere = mapped == file_of_.end()
                        ? "; it holds '" + n + "', which the index does not name"
                        : "; it holds '" + n + "', which the index maps to '" + mapped->second +
                              "'" +
                              (fs::is_regular_file(fs::path(folder_) / mapped->second, ec)
                                   ? std::string()
                                   : ", not a file in " + folder_);
        break;
      }
      CG_FAIL("safetensors: shard '", it->second, "' holds ", file->names().size(),
              " tensors but the index '", index_path_, "' maps only ", mapped_here, " to it",
              elsewhere);
    }
    opened = opened_.emplace(it->second, std::move(file)).first;
  }
  return *opened->second;
}

const TensorInfo& Sharded::info(const std::string& name) const { return shard_of(name).info(name); }
Tensor Sharded::load(const std::string& name, Device device) const {
  return shard_of(name).load(name, device);
}
std::string Sharded::checksum(const std::string& name) const {
  return shard_of(name).checksum(name);
}

void Sharded::load_into(const std::string& name, const Tensor& dst) const {
  shard_of(name).load_into(name, dst);
}

std::unique_ptr<Reader> open(const std::string& path) {
  const fs::path p(path);
  if (fs::is_directory(p)) {
    // transformers' order (modeling_utils _get_resolved_checkpoint_files): model.safetensors
    // when the folder has one, else the index of a sharded checkpoint. A folder with both
    // (a re-saved model beside its old shards) loads the single file in either program.
    if (fs::is_regular_file(p / kSingleName))
      return std::make_unique<File>((p / kSingleName).string());
    if (fs::exists(p / kIndexName)) return std::make_unique<Sharded>((p / kIndexName).string());
    CG_FAIL("safetensors: folder '", path, "' holds neither ", kSingleName, " nor ", kIndexName);
  }
  CG_CHECK(fs::exists(p), "safetensors: '", path, "' does not exist");
  const std::string name = p.filename().string();
  if (name.size() >= 5 && name.ends_with(".json")) return std::make_unique<Sharded>(path);
  return std::make_unique<File>(path);
}

}  // namespace cg::safetensors
