// Why this file exists: the one interface through which chunkgrad's ranks talk to each other
// (data-parallel training, issue 22): who am I (rank, world size, local rank) and the
// collectives on tensors (all-reduce, reduce-scatter, all-gather, broadcast, barrier). The
// training code calls only this; which engine moves the bytes is chosen once, at
// make_communicator():
//   - not launched by mpirun: a single-process communicator (world size 1), so the same
//     code path runs unchanged and a plain run stays exactly what it was;
//   - launched by `mpirun -np N`: MPI for host (CPU) tensors, and NCCL for CUDA tensors
//     when CommOptions::device is a CUDA device (its index is the local rank's).
//
//   auto comm = cg::dist::make_communicator({.device = cg::dist::device_for_local_rank(
//                                                "cuda", cg::dist::detect_launch())});
//   comm->all_reduce(grad_bucket, cg::dist::ReduceOp::sum);   // in place, every rank
//   if (comm->rank() == 0) save_checkpoint(...);
//
// Note [Collective contract]: every rank calls the same collectives in the same order with
// tensors of the same dtype and element count. The MPI backend checks that and every rank
// throws the same error on a mismatch (CommOptions::check_agreement); on NCCL a mismatch
// is undefined, as in NCCL itself. Tensors must be contiguous, of one device the communicator was made for
// (CPU always; CommOptions::device for a device communicator) and all tensors of one call
// of the same dtype and device. Outputs are written in place and count as in-place writes
// (their storage's version is bumped). Supported dtypes: f32, f64, bf16, f16 for every
// collective; i32, i64 for everything but ReduceOp::average (integer division would
// truncate: sum and divide yourself); boolean only for broadcast and all_gather.
//
// Note [Collective streams]: on a CUDA tensor a collective is queued on the calling
// thread's current stream for the tensor's device (cg::current_stream, core/stream_guard.h)
// and returns before it finishes, like a kernel: work queued later on that stream sees
// the result. To overlap the gradient all-reduce with backward, put it under a
// StreamGuard(device, side stream) after DeviceKernels::stream_wait(side, compute) (the
// bucket's gradients must be complete before the collective reads them); the collective
// records the tensors' storage on that stream (StorageImpl::record_stream), so their
// blocks are not reused by the compute stream before the collective is done (Note
// [Streams], core/caching_allocator.h). Before the optimizer reads the result on the
// compute stream, wait for the side stream the same way. On host tensors collectives are
// blocking: they return with the result in place.
//
// Note [Failure]: errors in arguments (dtype, shape, device, root) throw cg::Error before
// anything is sent -- on every rank at once for host tensors (CommOptions::check_agreement).
// Any other error leaves the other ranks waiting for a collective that never comes, so a
// program under mpirun catches errors at its top level and calls abort_job(), which prints
// "rank R: message" and ends every rank (MPI_Abort). Returning a non-zero status from main
// does the same (an exit handler calls MPI_Abort instead of MPI_Finalize, which would wait
// for the others: Note [MPI lifetime], dist/mpi_runtime.cpp); so does a crash (mpirun ends
// the job). The MPI backend has no timeout (Open MPI 4.1 has none for collectives): a rank
// that hangs without failing hangs the job. The NCCL backend runs a non-blocking
// communicator with a watchdog thread (dist/nccl_communicator.cpp): a collective not
// finished within CommOptions::timeout_seconds, or an asynchronous NCCL error, aborts the
// NCCL communicator (ncclCommAbort) and ends the job through abort_job with a message
// naming the collective, the rank and the timeout (or, with abort_job_on_failure = false,
// makes the next call on the communicator throw that message).
#pragma once

#include <memory>
#include <string>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

namespace cg::dist {

enum class ReduceOp { sum, average };
const char* reduce_op_name(ReduceOp op);  // "sum", "average"

// How this process was started: read from the environment mpirun (Open MPI) sets
// (OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK, _LOCAL_SIZE); MPI is not initialised by this.
struct LaunchInfo {
  bool under_mpirun = false;  // false: a plain run, world size 1
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the ranks on this machine: picks the GPU
  int local_size = 1;
};
LaunchInfo detect_launch();

// The device this rank trains on, from the device text of a config or --device: under
// mpirun the text gives the device type and the local rank gives its index ("cuda" on
// local rank 3 is cuda:3); an explicit index that disagrees with the local rank
// ("cuda:1" on local rank 0, with world size > 1) is refused with what to write instead.
// A plain run (world size 1) keeps the text's meaning ("cuda:1" stays cuda:1). Checks the
// device exists (cg::resolve_device): `what` starts the message ("device", "--device").
Device device_for_local_rank(const std::string& device_text, const LaunchInfo& launch,
                             const std::string& what = "device");

struct CommOptions {
  // The device whose tensors this communicator reduces besides the host's: kCPU for MPI
  // only; a CUDA device creates an NCCL communicator on it (its index must be the local
  // rank's under mpirun: use device_for_local_rank()).
  Device device = kCPU;
  // NCCL watchdog (Note [Failure]): a collective, or the communicator's creation, that has
  // not finished after this many seconds aborts the job. Must be > 0.
  double timeout_seconds = 600.0;
  // On a watchdog failure: true ends every rank (abort_job); false aborts only the NCCL
  // communicator and makes the next call throw (tests).
  bool abort_job_on_failure = true;
  // MPI backend: before each collective the ranks exchange what they pass (collective,
  // dtype, element count, root: one small MPI_Allgather) and every rank throws the same
  // cg::Error when they disagree, instead of hanging or reading garbage. Off saves that
  // round trip; NCCL collectives are not checked (it would add a host round trip between
  // the ranks to every bucket, and hold back a rank whose host runs ahead).
  bool check_agreement = true;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // "single", "mpi" or "mpi+nccl": for logs.
  virtual std::string backend_name() const = 0;
  // The device besides the host whose tensors it takes (CommOptions::device).
  virtual Device device() const = 0;

  // t = reduction over ranks of t, on every rank (Note [Collective contract]).
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  // output = rank r's chunk of the reduction of input over ranks, where input.numel() ==
  // world_size() * output.numel() and chunk r is elements [r*n, (r+1)*n) of input in
  // row-major order (n = output.numel()). Pad uneven shards: padded_numel().
  virtual void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  // output elements [r*n, (r+1)*n) = rank r's input (n = input.numel()); output.numel() ==
  // world_size() * n.
  virtual void all_gather(const Tensor& input, Tensor& output) = 0;
  // t = rank root's t on every rank.
  virtual void broadcast(Tensor& t, int root) = 0;
  // Returns on every rank once every rank has called it; on a device communicator, also
  // waits for every collective queued so far on the calling thread's current stream.
  virtual void barrier() = 0;
};

// The communicator for this process (see the top of this file). Throws cg::Error when the
// process was launched by mpirun with more than one rank but this build has no MPI
// (reconfigure with -DCHUNKGRAD_MPI=ON), or options.device is a CUDA device and this build
// has no NCCL (world size > 1), or options are invalid.
std::unique_ptr<Communicator> make_communicator(const CommOptions& options = {});

// The smallest multiple of world_size that is >= numel: a flat buffer of that many
// elements splits into world_size equal shards for reduce_scatter / all_gather.
int64_t padded_numel(int64_t numel, int world_size);

// Ends the whole job from a failing rank (Note [Failure]): prints "rank R: message" once to
// stderr (R from MPI, else from the launch environment, else 0) and calls MPI_Abort when
// MPI is initialised; otherwise exits the process with exit_code. Never returns.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

// Note [Ending together]: abort_job ends the job from one rank while the others may be
// anywhere, so nothing of theirs unwinds (rank 0's run lock stays, a folder it made
// stays) and mpirun reports the abort, not the status. When every rank knows, through a
// collective, that the job ends here -- a stop every rank agreed on after the same step,
// or a check whose failure every rank learnt (EveryRankError) -- each rank unwinds,
// calls end_job_together() and returns its status from main: the exit handler then
// finalises MPI instead of aborting (Note [MPI lifetime], dist/mpi_runtime.cpp), and
// mpirun exits with the lowest rank's non-zero status (130 for a stop, 1 for an error).
// Nothing without MPI.
void end_job_together();

// An error every rank raises at the same point with the same message (its cause was
// shared by a collective): the ranks end together (Note [Ending together]), rank 0 says
// why.
class EveryRankError : public Error {
 public:
  using Error::Error;
};

// Whether this build has the backends (CMake options CHUNKGRAD_MPI, CHUNKGRAD_NCCL).
bool built_with_mpi();
bool built_with_nccl();

}  // namespace cg::dist
