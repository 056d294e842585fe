// Why this file exists: slices, agreements and checks of data-parallel training
// (data_parallel.h).
#include "train/data_parallel.h"

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
           " differ from rank 0's (dist.check_every): the ranks no longer train the same model; "
           "this is a bug in chunkgrad's gradient reduction, please report it with the config");
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
