// Why this file exists: MPI's process-wide state for dist/ (mpi_runtime.h): initialising
// MPI once, finalising it at exit, the world rank and MPI_Abort.
//
// Note [MPI lifetime]: MPI may be initialised once per process and never again after
// MPI_Finalize, while a program (a test binary) may make several communicators one after
// another. So the first MPI communicator initialises MPI (MPI_THREAD_SERIALIZED: only one
// thread calls MPI at a time; the NCCL watchdog thread only calls MPI_Abort, on its way
// out) and registers MPI_Finalize with atexit; each communicator works on its own
// duplicate of MPI_COMM_WORLD. A program that returns from main finalises; one that fails
// must end through abort_job (MPI_Abort), because MPI_Finalize waits for the other ranks,
// which may be waiting in a collective for this one. An uncaught exception
// (std::terminate, SIGABRT) skips atexit, and mpirun then ends the other ranks.
#include <mpi.h>

#include <cstdlib>

#include "core/error.h"
#include "dist/mpi_runtime.h"

namespace cg::dist::detail {

namespace {
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
}  // namespace

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int mpi_world_rank() {
  if (!mpi_active()) return -1;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void mpi_abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; in case an implementation does
}

// Initialises MPI once per process (Note [MPI lifetime]).
void ensure_mpi_initialized() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  CG_CHECK(
      !finalized,
      "MPI was already finalised in this process: make every communicator before the program ends");
  if (initialized) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  std::atexit(finalize_at_exit);
}

}  // namespace cg::dist::detail
