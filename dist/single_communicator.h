// Why this file exists: the communicator of a process that is the whole job (world size 1:
// not launched by mpirun), so that data-parallel code runs unchanged in a plain run.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace cg::dist::detail {

// Rank 0 of 1: reductions leave tensors as they are (the sum and the average of one value
// are the value), all_gather and reduce_scatter copy input to output, broadcast checks its
// root. Every call checks its arguments as the other backends do, on any device.
std::unique_ptr<Communicator> make_single_communicator(const CommOptions& options);

}  // namespace cg::dist::detail
