// Why this file exists: what dist/communicator.h promises that does not depend on a
// backend: reading the launch environment, the device a rank takes, the choice of
// backend, padded shard sizes and abort_job.
#include "dist/communicator.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/mpi_runtime.h"
#include "dist/single_communicator.h"

namespace cg::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::average: return "average";
  }
  CG_FAIL("reduce op code ", static_cast<int>(op), " is not a ReduceOp");
}

namespace {
// The integer in environment variable `name`, or `fallback` when it is unset.
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  CG_CHECK(end != text && *end == '\0' && value >= 0 && value < (1L << 24), "environment variable ",
           name, "='", text,
           "' is not a rank or a rank count: unset it, or launch with mpirun which sets it");
  return static_cast<int>(value);
}
}  // namespace

// Note [Launch detection]: Open MPI's mpirun puts OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK
// and _LOCAL_SIZE into every rank's environment before the program starts, so whether
// this is a multi-rank run is known without initialising MPI (which a plain run never
// does: it stays exactly what it was). Other launchers (MPICH's hydra, Slurm's srun) set
// other names and are not recognised: their ranks would each run alone.
LaunchInfo detect_launch() {
  LaunchInfo info;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) return info;
  info.under_mpirun = true;
  info.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
  info.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
  info.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  info.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  CG_CHECK(info.world_size >= 1 && info.rank < info.world_size && info.local_rank < info.local_size,
           "the mpirun environment is inconsistent (OMPI_COMM_WORLD_RANK ", info.rank, " of SIZE ",
           info.world_size, ", LOCAL_RANK ", info.local_rank, " of LOCAL_SIZE ", info.local_size,
           "): launch with Open MPI's mpirun");
  return info;
}

Device device_for_local_rank(const std::string& device_text, const LaunchInfo& launch,
                             const std::string& what) {
  const Device named = Device::parse(device_text);
  // A type without numbered devices (the host) keeps index 0 whatever it is given.
  const bool numbered = Device(named.type, 1).index == 1;
  if (launch.world_size <= 1 || !numbered) return resolve_device(device_text, what);
  const Device mine(named.type, launch.local_rank);
  const bool explicit_index = device_text.find(':') != std::string::npos;
  CG_CHECK(
      !explicit_index || named.index == launch.local_rank, what, " ", device_text,
      ": under mpirun rank ", launch.rank, " has local rank ", launch.local_rank, " and so uses ",
      mine.str(),
      " (one process per device, its index is the local rank): write the device type alone (\"",
      device_type_name(named.type), "\")");
  return resolve_device(mine.str(), what);
}

std::unique_ptr<Communicator> make_communicator(const CommOptions& options) {
  CG_CHECK(std::isfinite(options.timeout_seconds) && options.timeout_seconds > 0,
           "CommOptions::timeout_seconds is ", options.timeout_seconds,
           ": give a positive number of seconds");
  const LaunchInfo launch = detect_launch();
  if (!launch.under_mpirun || (launch.world_size == 1 && !built_with_mpi())) {
    return detail::make_single_communicator(options);
  }
  return detail::make_mpi_communicator(options);
}

int64_t padded_numel(int64_t numel, int world_size) {
  CG_CHECK(numel >= 0 && world_size >= 1, "padded_numel(", numel, ", ", world_size,
           "): needs numel >= 0 and world_size >= 1");
  return (numel + world_size - 1) / world_size * world_size;
}

void abort_job(const std::string& message, int exit_code) {
  static std::atomic<bool> aborting{false};
  if (aborting.exchange(true)) {
    // Another thread is already ending the job (the watchdog and the main thread may both
    // fail): its message is the one printed.
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  int rank = detail::mpi_world_rank();
  if (rank < 0) {
    try {
      rank = detect_launch().rank;
    } catch (const Error&) { rank = 0; }
  }
  std::fflush(stdout);
  std::fprintf(stderr, "rank %d: %s\n", rank, message.c_str());
  std::fflush(stderr);
  if (detail::mpi_active()) detail::mpi_abort(exit_code == 0 ? 1 : exit_code);
  std::_Exit(exit_code == 0 ? 1 : exit_code);
}

void end_job_together() { detail::mpi_end_together(); }

bool built_with_mpi() {
#ifdef CHUNKGRAD_DIST_MPI
  return true;
#else
  return false;
#endif
}

bool built_with_nccl() {
#ifdef CHUNKGRAD_DIST_NCCL
  return true;
#else
  return false;
#endif
}

}  // namespace cg::dist
