// Why this file exists: mpi_runtime.h for a build without MPI (CHUNKGRAD_MPI=OFF): MPI is
// never active, and asking for the MPI communicator says how to get one.
#include <cstdlib>

#include "core/error.h"
#include "dist/mpi_runtime.h"

namespace cg::dist::detail {

bool mpi_active() { return false; }
int mpi_world_rank() { return -1; }
void mpi_end_together() {}
void mpi_abort(int code) { std::_Exit(code); }
std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions&) {
  CG_FAIL(
      "this process was launched by mpirun with several ranks, but this build of chunkgrad has no "
      "MPI: "
      "install openmpi-bin libopenmpi-dev (tools/deps.sh) and reconfigure with -DCHUNKGRAD_MPI=ON");
}

}  // namespace cg::dist::detail
