// Why this file exists: MPI's process-wide state for dist/ (mpi_runtime.h): initialising
// MPI once, finalising it at exit, the world rank and MPI_Abort.
//
// Note [MPI lifetime]: MPI may be initialised once per process and never again after
// MPI_Finalize, while a program (a test binary) may make several communicators one after
// another. So the first MPI communicator initialises MPI (MPI_THREAD_SERIALIZED: only one
// thread calls MPI at a time; the NCCL watchdog thread only calls MPI_Abort, on its way
// out), and each communicator works on its own duplicate of MPI_COMM_WORLD. At exit, a
// handler that sees the exit status (glibc's on_exit) finalises MPI when the status is 0
// and calls MPI_Abort otherwise: MPI_Finalize waits for every rank, so a rank that failed
// and returned 1 from main while the others wait for it in a collective would hang the
// job there (seen with Open MPI 4.1.4); aborting ends every rank instead, as abort_job
// does. An uncaught exception (std::terminate, SIGABRT) skips the handler, and mpirun then
// ends the other ranks. A rank that returns 0 while the others still expect collectives
// breaks the contract and hangs in MPI_Finalize. The exception is end_job_together()
// (Note [Ending together], dist/communicator.h): every rank reached the same point and
// ends with the same status, so MPI is finalised and each rank's status reaches mpirun.
#include <mpi.h>

#include <stdlib.h>  // on_exit

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "dist/mpi_runtime.h"

namespace cg::dist::detail {

namespace {
std::atomic<bool> g_ending_together{false};  // end_job_together() was called

// Note [MPI lifetime]: finalise on success, end every rank on failure.
void finalize_or_abort_at_exit(int status, void*) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  if (status != 0 && !g_ending_together.load()) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(
        stderr,
        "rank %d: exiting with status %d while the other ranks may wait for it: ending the job\n",
        rank, status);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
  }
  MPI_Finalize();
  // Ending together with a failure (a stop's 130, a shared error's 1): the rest of the
  // exit is skipped, as MPI_Abort's path skips it. Under AddressSanitizer that rest is the
  // leak check, which then counts what Open MPI's components keep after a job whose ranks
  // did not all return 0 (seen in CI: 121 KB in 3351 allocations, none of chunkgrad's,
  // the rank's status turned into 1).
  if (status != 0) {
    std::fflush(nullptr);
    std::_Exit(status);
  }
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

void mpi_end_together() { g_ending_together.store(true); }

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
  on_exit(finalize_or_abort_at_exit, nullptr);  // glibc
}

}  // namespace cg::dist::detail
