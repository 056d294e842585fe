// Why this file exists: a data-parallel program in miniature whose rank 1 fails while rank 0
// waits in an all_reduce for it, caught at the top level and ended through abort_job, as
// `chunkgrad train` does under mpirun (Note [Failure], dist/communicator.h).
// With the argument `return`, rank 1 prints its error and returns 1 from main instead
// (Note [MPI lifetime], dist/mpi_runtime.cpp: the exit handler then ends the job).
// dist_abort_test.sh runs both with 2 ranks and checks that the job ends at once, non-zero,
// printing "rank 1: ..." once.
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "core/factories.h"
#include "dist/communicator.h"

int main(int argc, char** argv) {
  const bool return_on_failure = argc > 1 && std::strcmp(argv[1], "return") == 0;
  try {
    auto comm = cg::dist::make_communicator();
    cg::Tensor gradients = cg::ones({16});
    for (int step = 0; step < 3; ++step) {
      if (comm->rank() == 1 && step == 2) throw std::runtime_error("simulated failure in step 2");
      comm->all_reduce(gradients, cg::dist::ReduceOp::sum);  // rank 0 waits here in step 2
    }
    comm->barrier();
    std::printf("rank %d: finished, which it must not\n", comm->rank());
  } catch (const std::exception& e) { cg::dist::abort_job(e.what()); }
  return 0;
}
