// Why this file exists: the NCCL half of the MPI communicator (CUDA tensors), declared
// without nccl.h or mpi.h: the MPI communicator hands the unique id around and routes
// CUDA tensors here; dist/nccl_communicator.cpp (built with CHUNKGRAD_NCCL) implements it.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace cg::dist::detail {

// One NCCL communicator over every rank, on options.device, in non-blocking mode with a
// watchdog (Note [NCCL watchdog], nccl_communicator.cpp). Arguments are checked by the
// caller (collective_checks.h). Collectives are queued on the calling thread's current
// stream of the device (Note [Collective streams], communicator.h).
class NcclDeviceComm {
 public:
  virtual ~NcclDeviceComm() = default;
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  virtual void all_gather(const Tensor& input, Tensor& output) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  // Waits for everything queued so far on the calling thread's current stream of the
  // device; throws the watchdog's message when the communicator has failed.
  virtual void synchronize() = 0;
};

// A fresh ncclUniqueId's bytes (rank 0 makes one; the MPI communicator broadcasts it).
std::string nccl_unique_id();
// Joins the NCCL communicator (collective: every rank calls it with rank 0's id).
std::unique_ptr<NcclDeviceComm> make_nccl_device_comm(const CommOptions& options, int rank,
                                                      int world_size, const std::string& unique_id);

}  // namespace cg::dist::detail
