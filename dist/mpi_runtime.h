// Why this file exists: the few things dist/ needs from MPI outside the MPI communicator
// (abort_job's rank and MPI_Abort, the factory's MPI communicator), declared without
// mpi.h so that communicator.cpp compiles the same with or without MPI:
// mpi_runtime.cpp implements them with MPI, mpi_runtime_absent.cpp for a build without.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace cg::dist::detail {

// MPI is initialised and not yet finalised.
bool mpi_active();
// This process's rank in MPI_COMM_WORLD, or -1 when MPI is not active.
int mpi_world_rank();
// The exit handler finalises MPI whatever the exit status (Note [Ending together]).
void mpi_end_together();
// MPI_Abort(MPI_COMM_WORLD, code): ends every rank of the job.
[[noreturn]] void mpi_abort(int code);
// Initialises MPI once per process and finalises it at exit (Note [MPI lifetime],
// mpi_runtime.cpp). MPI builds only: called by the MPI communicator.
void ensure_mpi_initialized();
// The MPI communicator (with NCCL for options.device when that is a CUDA device).
std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions& options);

}  // namespace cg::dist::detail
