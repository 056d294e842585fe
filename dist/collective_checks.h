// Why this file exists: the argument checks every backend runs before a collective sends
// anything (Note [Collective contract], dist/communicator.h), written once so that the
// single-process, MPI and NCCL backends refuse the same calls with the same sentences.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "dist/communicator.h"

namespace cg::dist {

// Which collective a call is, for messages and the MPI agreement check.
enum class Collective : int8_t { all_reduce, reduce_scatter, all_gather, broadcast };
const char* collective_name(Collective c);  // "all_reduce", ...

// `t` (called `role`: "tensor", "input", "output") is defined, contiguous, on the host or
// on `device`, and of a dtype `c` takes (with `op` for the reductions). Throws cg::Error
// naming the collective and what to change.
void check_tensor(Collective c, const Tensor& t, const char* role, Device device,
                  const ReduceOp* op = nullptr);
// input and output of reduce_scatter / all_gather: each passes check_tensor, they share
// dtype and device, and the larger has world_size times the elements of the smaller.
void check_pair(Collective c, const Tensor& input, const Tensor& output, int world_size,
                Device device, const ReduceOp* op = nullptr);
// 0 <= root < world_size.
void check_root(int root, int world_size);

}  // namespace cg::dist
