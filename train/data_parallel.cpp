// Why this file exists: slices, agreements and checks of data-parallel training
// (data_parallel.h).
#include "train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/factories.h"
#include "core/views.h"

namespace cg::train {

RankSlice rank_slice(const TrainConfig& config, int rank, int world_size) {
  const int64_t batch = config.drafter.optim.batch_size;
  const int64_t world = world_size;
  RankSlice s;
  if (config.dist.mode == "weak") {
    s.rows = batch * world;
    s.begin = batch * rank;
    s.end = s.begin + batch;
    return s;
  }
  CG_CHECK(batch % world == 0, "train config: drafter.optim.batch_size ", batch,
           " cannot be split over ", world,
           " ranks (dist.mode same_batch gives each rank batch_size / ranks sequences of every "
           "micro-batch): make batch_size a multiple of ",
           world, ", run on a number of ranks that divides ", batch,
           ", or set dist.mode weak (each rank batch_size sequences of its own)");
  s.rows = batch;
  s.begin = batch / world * rank;
  s.end = s.begin + batch / world;
  return s;
}

std::vector<Tensor> same_on_every_rank(std::vector<Tensor> params, dist::Communicator* comm) {
  if (comm == nullptr || comm->world_size() == 1) return params;
  for (const Tensor& p : params) {
    Tensor values = p.detach();
    comm->broadcast(values, 0);
  }
  return params;
}

bool any_rank(dist::Communicator* comm, bool flag) {
  if (comm == nullptr || comm->world_size() == 1) return flag;
  Tensor t = full({1}, flag ? 1.0 : 0.0, {.dtype = DType::i32});
  comm->all_reduce(t, dist::ReduceOp::sum);
  return t.item() > 0;
}

void sum_over_ranks(dist::Communicator* comm, std::vector<double>& values) {
  if (comm == nullptr || comm->world_size() == 1 || values.empty()) return;
  Tensor t = from_vector(values, {static_cast<int64_t>(values.size())}, {.dtype = DType::f64});
  comm->all_reduce(t, dist::ReduceOp::sum);
  values = t.to_vector();
}

std::string broadcast_text(dist::Communicator* comm, const std::string& text, int root) {
  if (comm == nullptr || comm->world_size() == 1) return text;
  const bool mine = comm->rank() == root;
  Tensor size = full({1}, mine ? static_cast<double>(text.size()) : 0.0, {.dtype = DType::i64});
  comm->broadcast(size, root);
  const auto n = static_cast<int64_t>(size.item());
  if (n == 0) return std::string();
  std::vector<double> bytes(static_cast<size_t>(n), 0.0);
  if (mine) {
    for (size_t i = 0; i < text.size(); ++i) bytes[i] = static_cast<unsigned char>(text[i]);
  }
  Tensor t = from_vector(bytes, {n}, {.dtype = DType::i32});
  comm->broadcast(t, root);
  std::string out;
  for (double b : t.to_vector()) out.push_back(static_cast<char>(static_cast<unsigned char>(b)));
  return out;
}

namespace {

// What must agree across ranks (Note [Ranks started alike]).
nlohmann::json started_with(const TrainConfig& config, int64_t resume_step,
                            const std::string& data_fingerprint) {
  nlohmann::json j = config.to_json();
  j.erase("progress");
  const std::string device = j["device"].get<std::string>();
  j["device"] = device.substr(0, device.find(':'));
  j["resume_step"] = resume_step;
  if (!data_fingerprint.empty()) j["data_bytes"] = nlohmann::json::parse(data_fingerprint);
  return j;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// The line every rank throws when rank `other` was started unlike rank 0.
std::string started_unlike(const nlohmann::json& rank0, const nlohmann::json& mine, int other) {
  const nlohmann::json patch = nlohmann::json::diff(rank0, mine);
  std::string field = "?", was = "-", now = "-";
  if (!patch.empty()) {
    const nlohmann::json::json_pointer at(patch[0]["path"].get<std::string>());
    field = at.to_string().substr(1);
    std::replace(field.begin(), field.end(), '/', '.');
    if (rank0.contains(at)) was = rank0[at].dump();
    if (mine.contains(at)) now = mine[at].dump();
  }
  const std::string ranks = " on rank " + std::to_string(other) + " and " + was + " on rank 0";
  if (field.rfind("data_bytes", 0) == 0) {
    return "data parallel: the ranks read different data (" + field + " is " + now + ranks +
           "): the same config's paths hold other bytes on rank " + std::to_string(other) +
           "; every rank must read the same files (a shared filesystem, or identical copies at "
           "the same paths, relative paths resolving alike: docs/data_parallel.md)";
  }
  if (field == "resume_step") {
    return "data parallel: the ranks resume from different steps (" + now + ranks +
           "): run_dir must be one folder every rank sees (a shared filesystem, the same "
           "path on every machine) and every rank needs the same --resume-from "
           "(docs/data_parallel.md)";
  }
  return "data parallel: the ranks were started with different configs: " + field + " is " + now +
         ranks +
         "; start every rank with the same --config and --set options "
         "(docs/data_parallel.md)";
}

}  // namespace

void check_ranks_started_alike(dist::Communicator* comm, const TrainConfig& config,
                               int64_t resume_step, const std::string& data_fingerprint) {
  if (comm == nullptr || comm->world_size() == 1) return;
  const std::string mine = started_with(config, resume_step, data_fingerprint).dump();
  const uint64_t hash = fnv1a(mine);
  Tensor local = full({1}, 0.0, {.dtype = DType::i64});
  std::memcpy(local.data_ptr(), &hash, sizeof hash);
  Tensor all = zeros({comm->world_size()}, {.dtype = DType::i64});
  comm->all_gather(local, all);
  const auto* h = static_cast<const uint64_t*>(all.data_ptr());
  int other = 1;
  while (other < comm->world_size() && h[other] == h[0]) ++other;
  if (other == comm->world_size()) return;
  const std::string rank0 = broadcast_text(comm, mine, 0);
  const std::string theirs = broadcast_text(comm, mine, other);
  throw dist::EveryRankError(
      started_unlike(nlohmann::json::parse(rank0), nlohmann::json::parse(theirs), other), __FILE__,
      __LINE__);
}

void fail_together(dist::Communicator& comm, const std::string& failure) {
  Tensor local = full({1}, failure.empty() ? 0.0 : 1.0, {.dtype = DType::i64});
  Tensor all = zeros({comm.world_size()}, {.dtype = DType::i64});
  comm.all_gather(local, all);
  const auto* failed = static_cast<const int64_t*>(all.data_ptr());
  int first = 0;
  while (first < comm.world_size() && failed[first] == 0) ++first;
  if (first == comm.world_size()) return;
  const std::string text = broadcast_text(&comm, failure, first);
  throw dist::EveryRankError(first == 0 ? text : "rank " + std::to_string(first) + ": " + text,
                             __FILE__, __LINE__);
}

void check_parameters_agree(dist::Communicator& comm, const std::vector<Tensor>& params,
                            int64_t step) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over every parameter's values
  for (const Tensor& p : params) {
    for (double v : p.detach().to_vector()) {
      uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      hash = (hash ^ bits) * 1099511628211ull;
    }
  }
  Tensor mine = full({1}, 0.0, {.dtype = DType::i64});
  std::memcpy(mine.data_ptr(), &hash, sizeof hash);
  Tensor all = zeros({comm.world_size()}, {.dtype = DType::i64});
  comm.all_gather(mine, all);
  const auto* h = static_cast<const uint64_t*>(all.data_ptr());
  std::string differ;
  for (int r = 1; r < comm.world_size(); ++r)
    if (h[r] != h[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  CG_CHECK(differ.empty(), "data parallel: after step ", step, " the parameters of rank(s) ",
           differ,
           " differ from rank 0's (dist.check_every): the ranks no longer train the same model. "
           "Ranks started with different configs or data do this (the config and the resume "
           "step are compared at the start, the data's bytes are not: check that every rank "
           "reads the same feature files); otherwise it is a bug in chunkgrad's gradient "
           "reduction, please report it with the config");
}

void debug_delay_save_if_asked() {
  const char* ms = std::getenv("CHUNKGRAD_DEBUG_SAVE_DELAY_MS");
  if (ms != nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(ms)));
}

void debug_fail_if_asked(int rank, int64_t step) {
  const char* r = std::getenv("CHUNKGRAD_DEBUG_FAIL_RANK");
  const char* s = std::getenv("CHUNKGRAD_DEBUG_FAIL_STEP");
  if (r == nullptr || s == nullptr) return;
  if (std::atoi(r) != rank || std::atoll(s) != step) return;
  CG_FAIL("debug: rank ", rank, " fails at step ", step,
          " as CHUNKGRAD_DEBUG_FAIL_RANK and CHUNKGRAD_DEBUG_FAIL_STEP ask (a test of failure "
          "handling; unset them to train)");
}

}  // namespace cg::train
