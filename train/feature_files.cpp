// Why this file exists: the feature files' index and writer (feature_files.h).
#include "train/feature_files.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/atomic_file.h"
#include "core/content_hash.h"
#include "core/factories.h"
#include "core/json_input.h"
#include "core/views.h"
#include "ops/shape_ops.h"

namespace cg::train {

namespace fs = std::filesystem;

nlohmann::json FeatureFileIndex::to_json() const {
  nlohmann::json shard_list = nlohmann::json::array();
  for (const Shard& s : shards) {
    shard_list.push_back(
        {{"file", s.file}, {"first", s.first}, {"count", s.count}, {"bytes", s.bytes}});
    if (!s.header_xxh3.empty()) shard_list.back()["header_xxh3"] = s.header_xxh3;
  }
  nlohmann::json j = {{"format", "chunkgrad-features"},
                      {"format_version", kFeatureFormatVersion},
                      {"num_samples", num_samples},
                      {"shards", shard_list},
                      {"layer_ids", layer_ids},
                      {"num_layers", num_layers()},
                      {"hidden_size", hidden_size},
                      {"dtype", dtype_name(dtype)},
                      {"max_seq_len", max_seq_len},
                      {"target", target},
                      {"target_fingerprint", target_fingerprint},
                      {"tokenizer_hash", tokenizer_hash}};
  if (!dataset_names.empty()) {
    j["dataset_names"] = dataset_names;
    j["sample_datasets"] = sample_datasets;
  }
  return j;
}

namespace {

// A field of index.json, present and of the right kind, or one error naming both.
struct IndexFields {
  const nlohmann::json& j;
  const std::string& path;
  const nlohmann::json& get(const char* name) const {
    CG_CHECK(j.contains(name), "feature files: ", path, ": field '", name,
             "' is missing (written by another program, or damaged)");
    return j[name];
  }
  int64_t integer(const nlohmann::json& v, const std::string& name, int64_t low) const {
    CG_CHECK(v.is_number_integer() && v.get<int64_t>() >= low, "feature files: ", path, ": field '",
             name, "' must be an integer >= ", low, ", got ", describe_json(v));
    return v.get<int64_t>();
  }
  int64_t integer(const char* name, int64_t low) const { return integer(get(name), name, low); }
  std::string text(const char* name) const {
    const nlohmann::json& v = get(name);
    CG_CHECK(v.is_string(), "feature files: ", path, ": field '", name, "' must be a string, got ",
             describe_json(v));
    return v.get<std::string>();
  }
};

}  // namespace

FeatureFileIndex FeatureFileIndex::from_json(const std::string& text, const std::string& path,
                                             bool partial) {
  const nlohmann::json j = parse_untrusted_json(text, path);
  CG_CHECK(j.is_object(), "feature files: ", path, " is not a JSON object");
  const IndexFields f{j, path};
  CG_CHECK(f.text("format") == "chunkgrad-features", "feature files: ", path,
           ": field 'format' is '", f.text("format"), "', not 'chunkgrad-features'");
  const int64_t version = f.integer("format_version", 1);
  CG_CHECK(version == kFeatureFormatVersion, "feature files: ", path,
           ": field 'format_version' is ", version, "; this chunkgrad reads version ",
           kFeatureFormatVersion, " (write the features again with this chunkgrad)");
  FeatureFileIndex x;
  x.num_samples = f.integer("num_samples", partial ? 0 : 1);
  x.hidden_size = f.integer("hidden_size", 1);
  x.max_seq_len = f.integer("max_seq_len", partial ? 0 : 1);
  const std::string dt = f.text("dtype");
  CG_CHECK(dt == "bf16" || dt == "f32", "feature files: ", path, ": field 'dtype' is '", dt,
           "'; expected bf16 or f32");
  x.dtype = parse_dtype(dt);
  const nlohmann::json& layers = f.get("layer_ids");
  CG_CHECK(layers.is_array() && !layers.empty(), "feature files: ", path,
           ": field 'layer_ids' must be a non-empty array, got ", describe_json(layers));
  for (const auto& l : layers) x.layer_ids.push_back(f.integer(l, "layer_ids", 0));
  const int64_t k = f.integer("num_layers", 1);
  CG_CHECK(k == x.num_layers(), "feature files: ", path, ": field 'num_layers' is ", k,
           " but 'layer_ids' lists ", x.num_layers(), " layers");
  x.target = f.text("target");
  x.target_fingerprint = f.text("target_fingerprint");
  x.tokenizer_hash = f.text("tokenizer_hash");
  const nlohmann::json& shards = f.get("shards");
  CG_CHECK(shards.is_array() && (partial || !shards.empty()), "feature files: ", path,
           ": field 'shards' must be a non-empty array, got ", describe_json(shards));
  int64_t next = 0;
  for (const auto& s : shards) {
    CG_CHECK(s.is_object() && s.contains("file") && s["file"].is_string() && s.contains("first") &&
                 s.contains("count") && s.contains("bytes"),
             "feature files: ", path,
             ": a 'shards' entry must be {file, first, count, bytes}, got ", describe_json(s));
    Shard sh;
    sh.file = s["file"].get<std::string>();
    CG_CHECK(fs::path(sh.file).filename().string() == sh.file && !sh.file.empty() &&
                 sh.file != "." && sh.file != "..",
             "feature files: ", path, ": shard file '", sh.file,
             "' must be a plain file name in the folder");
    sh.first = f.integer(s["first"], "shards.first", 0);
    sh.count = f.integer(s["count"], "shards.count", 1);
    sh.bytes = static_cast<uint64_t>(f.integer(s["bytes"], "shards.bytes", 8));
    if (s.contains("header_xxh3")) {  // optional: Note [Shard header hashes]
      const nlohmann::json& h = s["header_xxh3"];
      const bool hex =
          h.is_string() && h.get<std::string>().size() == 32 &&
          h.get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos;
      CG_CHECK(hex, "feature files: ", path, ": field 'shards.header_xxh3' of shard '", sh.file,
               "' must be 32 lowercase hex digits, got ", describe_json(h));
      sh.header_xxh3 = h.get<std::string>();
    }
    CG_CHECK(sh.first == next, "feature files: ", path, ": shard '", sh.file, "' starts at sample ",
             sh.first, ", expected ", next, " (shards must cover the samples in order)");
    next += sh.count;
    x.shards.push_back(sh);
  }
  CG_CHECK(next == x.num_samples, "feature files: ", path, ": the shards hold ", next,
           " samples but field 'num_samples' is ", x.num_samples);
  // A writer records the hash for every shard or (before it did) for none: a mix is an
  // edited index, which would let an unhashed shard through (an outside tester's finding).
  const auto hashed = std::count_if(x.shards.begin(), x.shards.end(),
                                    [](const Shard& sh) { return !sh.header_xxh3.empty(); });
  CG_CHECK(hashed == 0 || hashed == static_cast<std::ptrdiff_t>(x.shards.size()),
           "feature files: ", path, ": field 'shards.header_xxh3' is on ", hashed, " of ",
           x.shards.size(),
           " shards (a writer records it for every shard: the index was edited); write the "
           "features again");
  if (j.contains("dataset_names") || j.contains("sample_datasets")) {  // optional: newer files
    const nlohmann::json& names = f.get("dataset_names");
    const nlohmann::json& of = f.get("sample_datasets");
    CG_CHECK(names.is_array() && !names.empty(), "feature files: ", path,
             ": field 'dataset_names' must be a non-empty array of strings, got ",
             describe_json(names));
    for (const auto& n : names) {
      CG_CHECK(n.is_string(), "feature files: ", path,
               ": field 'dataset_names' must hold strings, got ", describe_json(n));
      x.dataset_names.push_back(n.get<std::string>());
    }
    CG_CHECK(of.is_array() && static_cast<int64_t>(of.size()) == x.num_samples,
             "feature files: ", path, ": field 'sample_datasets' must be an array of ",
             x.num_samples, " entries (one per sample), got ", describe_json(of));
    for (const auto& v : of) {
      const int64_t d = f.integer(v, "sample_datasets", 0);
      CG_CHECK(d < static_cast<int64_t>(x.dataset_names.size()), "feature files: ", path,
               ": field 'sample_datasets' holds ", d, " but 'dataset_names' has ",
               x.dataset_names.size(), " names");
      x.sample_datasets.push_back(static_cast<int32_t>(d));
    }
  }
  return x;
}

uint64_t feature_sample_bytes(int64_t seq_len, int64_t num_layers, int64_t hidden_size,
                              DType dtype) {
  const uint64_t s = static_cast<uint64_t>(seq_len);
  return s * 4 + s * 1 +
         s * static_cast<uint64_t>((num_layers + 1) * hidden_size) * element_size(dtype);
}

std::string feature_tensor_name(int64_t sample, const char* field) {
  return std::to_string(sample) + "." + field;
}

std::string shard_header_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CG_CHECK(in.good(), "feature files: cannot open shard ", path);
  unsigned char len[8] = {};
  in.read(reinterpret_cast<char*>(len), 8);
  CG_CHECK(in.gcount() == 8, "feature files: shard ", path, " is shorter than a header");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];  // little-endian
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  CG_CHECK(!ec && n <= size - 8, "feature files: shard ", path, " has a header of ", n,
           " bytes in a file of ", size);
  std::string bytes(8 + n, '\0');
  std::copy(len, len + 8, bytes.begin());
  in.read(bytes.data() + 8, static_cast<std::streamsize>(n));
  CG_CHECK(static_cast<uint64_t>(in.gcount()) == n, "feature files: cannot read the header of ",
           path);
  return content_hash(bytes);
}

namespace {

// The index's dataset fields from each sample's name (none when no sample is named).
void set_datasets(FeatureFileIndex& index, const std::vector<std::string>& datasets) {
  index.dataset_names.clear();
  index.sample_datasets.clear();
  if (std::none_of(datasets.begin(), datasets.end(), [](const auto& d) { return !d.empty(); }))
    return;
  for (const std::string& d : datasets) {
    auto it = std::find(index.dataset_names.begin(), index.dataset_names.end(), d);
    if (it == index.dataset_names.end())
      it = index.dataset_names.insert(index.dataset_names.end(), d);
    index.sample_datasets.push_back(static_cast<int32_t>(it - index.dataset_names.begin()));
  }
}

}  // namespace

FeatureFileWriter::FeatureFileWriter(std::string dir, FeatureFileIndex header,
                                     uint64_t max_shard_bytes, FeatureRunIdentity identity)
    : dir_(std::move(dir)),
      index_(std::move(header)),
      max_shard_bytes_(max_shard_bytes),
      identity_(std::move(identity)) {
  CG_CHECK(index_.dtype == DType::bf16 || index_.dtype == DType::f32,
           "feature files: the storage dtype must be bf16 or f32, not ", dtype_name(index_.dtype));
  CG_CHECK(index_.num_layers() >= 1 && index_.hidden_size >= 1,
           "feature files: need at least one layer and a hidden size");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  CG_CHECK(!ec && fs::is_directory(dir_), "feature files: cannot create the folder ", dir_, ": ",
           ec ? ec.message() : std::string("a file is in the way"));
  CG_CHECK(!fs::exists(fs::path(dir_) / "index.json"), "feature files: ", dir_,
           " already holds index.json (a feature set); give an empty folder or remove it first");
  check_writable_dir(dir_, "the feature folder");
  index_.shards.clear();
  index_.num_samples = 0;
  index_.max_seq_len = 0;
  const fs::path partial = fs::path(dir_) / kPartialFeatureIndex;
  if (fs::exists(partial)) resume(partial.string());
  pending_first_ = index_.num_samples;
  write_partial_index();  // from the start: a run stopped before its first shard resumes too
}

void FeatureFileWriter::add(const DrafterSequence& sequence, const Tensor& hidden_states,
                            const Tensor& last_hidden, const std::string& dataset) {
  CG_CHECK(!finished_, "feature files: add() after finish()");
  const int64_t S = static_cast<int64_t>(sequence.ids.size());
  const int64_t K = index_.num_layers(), H = index_.hidden_size;
  CG_CHECK(S >= 1 && sequence.loss_mask.size() == sequence.ids.size(), "feature files: sample ",
           index_.num_samples, " has ", S, " ids and ", sequence.loss_mask.size(),
           " loss-mask entries");
  CG_CHECK(hidden_states.defined() && hidden_states.shape() == Shape({S, K * H}),
           "feature files: sample ", index_.num_samples, ": hidden_states must be [", S, ", ",
           K * H, "], got ", hidden_states.defined() ? shape_str(hidden_states.shape()) : "none");
  CG_CHECK(last_hidden.defined() && last_hidden.shape() == Shape({S, H}), "feature files: sample ",
           index_.num_samples, ": last_hidden must be [", S, ", ", H, "], got ",
           last_hidden.defined() ? shape_str(last_hidden.shape()) : "none");
  const int64_t i = index_.num_samples;
  std::vector<int64_t> mask(sequence.loss_mask.begin(), sequence.loss_mask.end());
  for (int64_t id : sequence.ids) {
    CG_CHECK(id >= 0 && id <= INT32_MAX, "feature files: sample ", i, " has token id ", id,
             ", which int32 cannot hold");
  }
  const auto host = [&](const Tensor& t) {
    return raw::contiguous(raw::to_dtype(raw::to_device(t, kCPU), index_.dtype));
  };
  pending_.emplace_back(feature_tensor_name(i, "input_ids"),
                        from_ints(sequence.ids, {S}, {.dtype = DType::i32}));
  pending_.emplace_back(feature_tensor_name(i, "loss_mask"),
                        from_ints(mask, {S}, {.dtype = DType::boolean}));
  pending_u8_.insert(feature_tensor_name(i, "loss_mask"));
  pending_.emplace_back(feature_tensor_name(i, "hidden_states"), host(hidden_states));
  pending_.emplace_back(feature_tensor_name(i, "last_hidden"), host(last_hidden));
  datasets_.push_back(dataset);
  ++index_.num_samples;
  index_.max_seq_len = std::max(index_.max_seq_len, S);
  pending_bytes_ += feature_sample_bytes(S, K, H, index_.dtype);
  if (pending_bytes_ >= max_shard_bytes_) flush_shard();
}

void FeatureFileWriter::flush_shard() {
  if (pending_.empty()) return;
  char name[64];
  std::snprintf(name, sizeof name, "features-%05zu.safetensors", index_.shards.size());
  const std::string path = (fs::path(dir_) / name).string();
  safetensors::save_file(pending_, path, {{"format", "chunkgrad-features"}}, pending_u8_);
  FeatureFileIndex::Shard s;
  s.file = name;
  s.first = pending_first_;
  s.count = index_.num_samples - pending_first_;
  s.bytes = fs::file_size(path);
  s.header_xxh3 = shard_header_hash(path);
  index_.shards.push_back(s);
  write_partial_index();  // only now is the shard listed: it is whole on disk
  pending_.clear();
  pending_u8_.clear();
  pending_bytes_ = 0;
  pending_first_ = index_.num_samples;
}

const FeatureFileIndex& FeatureFileWriter::finish() {
  CG_CHECK(!finished_, "feature files: finish() twice");
  CG_CHECK(index_.num_samples > 0, "feature files: no samples were written to ", dir_);
  flush_shard();
  set_datasets(index_, datasets_);
  write_file_atomically((fs::path(dir_) / "index.json").string(), index_.to_json().dump(2) + "\n",
                        "the feature index");
  std::error_code ec;  // index.json is the set now; a stale partial index would only confuse
  fs::remove(fs::path(dir_) / kPartialFeatureIndex, ec);
  finished_ = true;
  return index_;
}

bool FeatureFileWriter::discard() {
  finished_ = true;
  pending_.clear();
  pending_u8_.clear();
  if (resumed_ > 0) return false;
  std::vector<fs::path> set;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.is_regular_file() && is_feature_set_file(e.path().filename().string()))
      set.push_back(e.path());
  }
  for (const fs::path& p : set) {
    std::error_code ec;
    fs::remove(p, ec);
  }
  return true;
}

void FeatureFileWriter::write_partial_index() const {
  FeatureFileIndex partial = index_;
  set_datasets(partial, datasets_);
  nlohmann::json j = partial.to_json();
  j["data_fingerprint"] = identity_.data_fingerprint;
  j["num_inputs"] = identity_.num_inputs;
  write_file_atomically((fs::path(dir_) / kPartialFeatureIndex).string(), j.dump(2) + "\n",
                        "the partial feature index");
}

// Note [Resuming features].
void FeatureFileWriter::resume(const std::string& partial_path) {
  const std::string text = read_text_file(partial_path, "the partial feature index");
  const FeatureFileIndex was = FeatureFileIndex::from_json(text, partial_path, /*partial=*/true);
  const nlohmann::json j = parse_untrusted_json(text, partial_path);
  const IndexFields f{j, partial_path};
  const std::string data_fingerprint = f.text("data_fingerprint");
  const int64_t num_inputs = f.integer("num_inputs", 0);
  // One line for the first field that differs: what it was, what it is now, what to do.
  const auto differs = [&](const char* field, const std::string& then, const std::string& now) {
    CG_FAIL("feature files: ", dir_, " holds an interrupted feature set (", kPartialFeatureIndex,
            ") whose field '", field, "' is ", then, ", but this run's is ", now,
            "; run the command that wrote it (same --target, --data, --layers, --dtype, "
            "--tokenizer) to resume it, or give another --out");
  };
  const auto list = [](const std::vector<int64_t>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
  };
  if (was.layer_ids != index_.layer_ids)
    differs("layer_ids", list(was.layer_ids), list(index_.layer_ids));
  if (was.hidden_size != index_.hidden_size)
    differs("hidden_size", std::to_string(was.hidden_size), std::to_string(index_.hidden_size));
  if (was.dtype != index_.dtype) differs("dtype", dtype_name(was.dtype), dtype_name(index_.dtype));
  if (was.target_fingerprint != index_.target_fingerprint)
    differs("target_fingerprint",
            was.target_fingerprint + " (another target, or its weights changed)",
            index_.target_fingerprint);
  if (was.tokenizer_hash != index_.tokenizer_hash)
    differs("tokenizer_hash", was.tokenizer_hash, index_.tokenizer_hash);
  if (!identity_.data_fingerprint.empty() && data_fingerprint != identity_.data_fingerprint)
    differs("data_fingerprint", data_fingerprint + " (other data, or read otherwise)",
            identity_.data_fingerprint);
  if (identity_.num_inputs > 0 && num_inputs != identity_.num_inputs)
    differs("num_inputs", std::to_string(num_inputs), std::to_string(identity_.num_inputs));
  // Keep the listed shards that are still whole, up to the first that is not.
  std::set<std::string> kept;
  for (const FeatureFileIndex::Shard& sh : was.shards) {
    const std::string path = (fs::path(dir_) / sh.file).string();
    std::error_code ec;
    if (fs::file_size(path, ec) != sh.bytes || ec) break;
    try {  // (Note [Shard header hashes])
      if (!sh.header_xxh3.empty() && shard_header_hash(path) != sh.header_xxh3) break;
    } catch (const Error&) { break; }
    int64_t longest = 0;
    bool whole = true;
    try {
      const safetensors::File file(path);
      for (int64_t i = sh.first; i < sh.first + sh.count && whole; ++i) {
        const std::string ids = feature_tensor_name(i, "input_ids");
        whole = file.contains(ids) && file.info(ids).shape.size() == 1;
        if (whole) longest = std::max(longest, file.info(ids).shape[0]);
      }
    } catch (const Error&) { whole = false; }
    if (!whole) break;
    index_.shards.push_back(sh);
    // (a shard listed by a writer from before the hashes: hashed now, so that the index
    // holds it for every shard)
    if (sh.header_xxh3.empty()) index_.shards.back().header_xxh3 = shard_header_hash(path);
    kept.insert(sh.file);
    index_.num_samples = sh.first + sh.count;
    index_.max_seq_len = std::max(index_.max_seq_len, longest);
  }
  for (int64_t i = 0; i < index_.num_samples; ++i) {
    const size_t at = static_cast<size_t>(i);
    datasets_.push_back(at < was.sample_datasets.size()
                            ? was.dataset_names[static_cast<size_t>(was.sample_datasets[at])]
                            : std::string());
  }
  // The shard being written when the run stopped (and any listed after a damaged one) goes:
  // it is written again under its name, and a stale later one must not stay beside the set.
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("features-") && name.ends_with(".safetensors") && !kept.count(name))
      stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove(p);
  resumed_ = index_.num_samples;
}

bool is_feature_set_file(const std::string& name) {
  const std::string base = name.ends_with(".tmp") ? name.substr(0, name.size() - 4) : name;
  if (base == "index.json" || base == kPartialFeatureIndex) return true;
  const std::string digits =
      base.starts_with("features-") && base.ends_with(".safetensors")
          ? base.substr(9, base.size() - 9 - std::string(".safetensors").size())
          : std::string();
  return digits.size() >= 5 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace cg::train
