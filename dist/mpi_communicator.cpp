// Why this file exists: the communicator of a job launched by mpirun: MPI collectives on
// host tensors, and NCCL (nccl_communicator.h) on the CUDA tensors of CommOptions::device,
// with NCCL's unique id handed out by MPI_Bcast.
//
// Note [16-bit floats over MPI]: MPI has no bf16 or f16 type. all_gather and broadcast move
// them as 16-bit words (MPI_UINT16_T: a copy needs no arithmetic). The reductions widen the
// tensor to an fp32 buffer, reduce that in fp32 (MPI_FLOAT, MPI_SUM), divide by the world
// size for an average, and round once back to the 16-bit format (round to nearest even,
// core/dtype.h), so that the result is the fp32 sum rounded once -- what one process
// summing in fp32 would get, up to fp32's summation order -- and not a sum rounded at every
// step of MPI's reduction tree, as an MPI_Op on 16-bit words would be. The buffer costs
// 4 bytes per element on the host for the call's duration.
//
// Note [MPI errors]: MPI_COMM_WORLD's error handler, MPI_ERRORS_ARE_FATAL, stays on every
// duplicate: an MPI failure (a peer gone, a truncated message) ends the whole job with
// MPI's own message. Argument errors are cg::Error thrown before anything is sent, on every
// rank at once when CommOptions::check_agreement is on (agree() below).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/collective_checks.h"
#include "dist/mpi_runtime.h"
#include "dist/nccl_communicator.h"

namespace cg::dist::detail {

namespace {

MPI_Datatype mpi_type(DType dt) {
  switch (dt) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;  // copies only (Note [16-bit floats over MPI])
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::boolean: return MPI_UINT8_T;
  }
  CG_FAIL("dtype code ", static_cast<int>(dt), " has no MPI type");
}

int mpi_count(int64_t numel, const char* what) {
  CG_CHECK(numel <= INT_MAX, what, ": ", numel, " elements per rank is more than MPI's int count (",
           INT_MAX, "): split the tensor into buckets below 2^31 elements");
  return static_cast<int>(numel);
}

// The fp32 copy of a 16-bit float buffer, and back (Note [16-bit floats over MPI]).
std::vector<float> widen(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const auto* bits = static_cast<const uint16_t*>(t.data_ptr());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = t.dtype() == DType::bf16 ? bf16_to_float(bf16{bits[i]}) : f16_to_float(f16{bits[i]});
  }
  return out;
}
void narrow_into(const std::vector<float>& values, const Tensor& t) {
  auto* bits = static_cast<uint16_t*>(t.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] =
        t.dtype() == DType::bf16 ? float_to_bf16(values[i]).bits : float_to_f16(values[i]).bits;
  }
}

// Divides every element by `world` in the tensor's own precision (f32 or f64).
void divide_in_place(const Tensor& t, int world) {
  if (t.dtype() == DType::f64) {
    double* p = static_cast<double*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] /= world;
  } else {
    float* p = static_cast<float*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] /= static_cast<float>(world);
  }
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const CommOptions& options) : options_(options) {
    ensure_mpi_initialized();
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
    // Local rank: the ranks that share this machine's memory (Open MPI's
    // OMPI_COMM_WORLD_LOCAL_RANK says the same under mpirun; this works under any launcher).
    MPI_Comm local;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    if (options_.device != kCPU) join_nccl();
  }
  ~MpiCommunicator() override {
    nccl_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string backend_name() const override { return nccl_ ? "mpi+nccl" : "mpi"; }
  Device device() const override { return options_.device; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    agree(Collective::all_reduce, t, static_cast<int>(op),
          [&] { check_tensor(Collective::all_reduce, t, "tensor", options_.device, &op); });
    if (t.device() != kCPU) return nccl_->all_reduce(t, op);
    const int n = mpi_count(t.numel(), "all_reduce");
    if (is_half(t.dtype())) {
      std::vector<float> wide = widen(t);
      MPI_Allreduce(MPI_IN_PLACE, wide.data(), n, MPI_FLOAT, MPI_SUM, comm_);
      if (op == ReduceOp::average) {
        for (float& v : wide) v /= static_cast<float>(world_);
      }
      narrow_into(wide, t);
    } else {
      MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), n, mpi_type(t.dtype()), MPI_SUM, comm_);
      if (op == ReduceOp::average) divide_in_place(t, world_);
    }
    t.storage()->bump_version();
  }

  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    agree(Collective::reduce_scatter, output, static_cast<int>(op), [&] {
      check_pair(Collective::reduce_scatter, input, output, world_, options_.device, &op);
    });
    if (output.device() != kCPU) return nccl_->reduce_scatter(input, output, op);
    const int n = mpi_count(output.numel(), "reduce_scatter");
    if (is_half(output.dtype())) {
      std::vector<float> wide_in = widen(input);
      std::vector<float> wide_out(static_cast<size_t>(n));
      MPI_Reduce_scatter_block(wide_in.data(), wide_out.data(), n, MPI_FLOAT, MPI_SUM, comm_);
      if (op == ReduceOp::average) {
        for (float& v : wide_out) v /= static_cast<float>(world_);
      }
      narrow_into(wide_out, output);
    } else {
      MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), n, mpi_type(output.dtype()),
                               MPI_SUM, comm_);
      if (op == ReduceOp::average) divide_in_place(output, world_);
    }
    output.storage()->bump_version();
  }

  void all_gather(const Tensor& input, Tensor& output) override {
    agree(Collective::all_gather, input, 0,
          [&] { check_pair(Collective::all_gather, input, output, world_, options_.device); });
    if (output.device() != kCPU) return nccl_->all_gather(input, output);
    const int n = mpi_count(input.numel(), "all_gather");
    const MPI_Datatype type = mpi_type(input.dtype());
    MPI_Allgather(input.data_ptr(), n, type, output.data_ptr(), n, type, comm_);
    output.storage()->bump_version();
  }

  void broadcast(Tensor& t, int root) override {
    agree(Collective::broadcast, t, root, [&] {
      check_tensor(Collective::broadcast, t, "tensor", options_.device);
      check_root(root, world_);
    });
    if (t.device() != kCPU) return nccl_->broadcast(t, root);
    MPI_Bcast(t.data_ptr(), mpi_count(t.numel(), "broadcast"), mpi_type(t.dtype()), root, comm_);
    t.storage()->bump_version();
  }

  void barrier() override {
    if (nccl_) nccl_->synchronize();
    MPI_Barrier(comm_);
  }

 private:
  void join_nccl() {
#ifdef CHUNKGRAD_DIST_NCCL
    CG_CHECK(options_.device.is_cuda(), "CommOptions::device is ", options_.device.str(),
             ": the communicator reduces host tensors and CUDA tensors (NCCL) only");
    CG_CHECK(world_ == 1 || options_.device.index == local_rank_, "CommOptions::device is ",
             options_.device.str(), " but rank ", rank_, " has local rank ", local_rank_,
             ": one process per GPU, its index is the local rank's (dist::device_for_local_rank "
             "gives it)");
    std::string id;
    if (rank_ == 0) id = nccl_unique_id();
    int size = static_cast<int>(id.size());
    MPI_Bcast(&size, 1, MPI_INT, 0, comm_);
    id.resize(static_cast<size_t>(size));
    MPI_Bcast(id.data(), size, MPI_CHAR, 0, comm_);
    nccl_ = make_nccl_device_comm(options_, rank_, world_, id);
#else
    CG_FAIL("CommOptions::device is ", options_.device.str(),
            " but this build of chunkgrad has no NCCL backend: ",
            "reconfigure with -DCHUNKGRAD_NCCL=ON (needs CUDA, MPI, nccl.h and libnccl), or reduce "
            "host tensors");
#endif
  }

  // Note [Agreement check]: runs the local argument checks, then (with check_agreement)
  // every rank shares {checks passed, collective, dtype, element count, op or root} in one
  // MPI_Allgather. A rank whose checks failed rethrows its error; the others throw too,
  // naming it, so that no rank waits for a collective that will not come. Ranks that
  // disagree all throw the same sentence. `t` is the tensor whose size every rank shares
  // (all_gather's input, reduce_scatter's output).
  template <typename Checks>
  void agree(Collective c, const Tensor& t, int extra, Checks&& checks) {
    std::exception_ptr local_error;
    try {
      checks();
    } catch (const Error&) { local_error = std::current_exception(); }
    // Device tensors go to NCCL unchecked (CommOptions::check_agreement says why); the
    // choice depends only on the tensor's device, so ranks that keep the contract agree on it.
    const bool on_host = !t.defined() || t.device() == kCPU;
    if (!options_.check_agreement || world_ == 1 || !on_host) {
      if (local_error) std::rethrow_exception(local_error);
      return;
    }
    const bool ok = !local_error;
    const int64_t mine[5] = {ok ? 1 : 0, static_cast<int64_t>(c),
                             ok ? static_cast<int64_t>(t.dtype()) : -1, ok ? t.numel() : -1, extra};
    std::vector<int64_t> all(static_cast<size_t>(5 * world_));
    MPI_Allgather(mine, 5, MPI_INT64_T, all.data(), 5, MPI_INT64_T, comm_);
    if (local_error) std::rethrow_exception(local_error);
    const char* name = collective_name(c);
    for (int r = 0; r < world_; ++r) {
      CG_CHECK(all[5 * r] == 1, name, ": rank ", r,
               " refused its arguments (its own error says why); rank ", rank_,
               " stops too, so that no rank waits");
    }
    auto describe = [&](int r) {
      const int64_t* s = &all[static_cast<size_t>(5 * r)];
      return ::cg::detail::concat(
          collective_name(static_cast<Collective>(s[1])), " of ", s[3], " ",
          dtype_name(static_cast<DType>(s[2])),
          static_cast<Collective>(s[1]) == Collective::broadcast ? " from root " : " with op code ",
          s[4]);
    };
    for (int r = 1; r < world_; ++r) {
      const bool same = std::equal(&all[5 * r], &all[5 * r] + 5, all.begin());
      CG_CHECK(same, name, ": the ranks disagree: rank 0 calls ", describe(0), " but rank ", r,
               " calls ", describe(r),
               ": every rank must make the same collective calls in the same order, with the same "
               "dtype, "
               "element count and root");
    }
  }

  CommOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_size_ = 1;
  std::unique_ptr<NcclDeviceComm> nccl_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(options);
}

}  // namespace cg::dist::detail
