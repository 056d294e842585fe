// Why this file exists: NCCL collectives on CUDA tensors for the MPI communicator
// (nccl_communicator.h): a non-blocking NCCL communicator on the rank's device, a
// watchdog thread that turns a hang or an asynchronous NCCL error into an aborted
// communicator and a message, and the rule for the stream each collective runs on.
//
// Note [NCCL watchdog]: a rank that dies or hangs leaves the others' NCCL kernels spinning
// forever; a blocking communicator would then hang the job. So the communicator is made
// non-blocking (ncclConfig_t::blocking = 0): calls return at once, ncclInProgress while
// NCCL is still setting them up, and ncclCommGetAsyncError says when they are ready or have
// failed; ncclCommAbort can then end the communicator from another thread. After each
// collective an event is recorded on its stream, with the time it was queued; the
// watchdog thread (one per communicator, waking every 50 ms) pops the events that have
// completed and polls ncclCommGetAsyncError. The oldest event not completed after
// CommOptions::timeout_seconds, an asynchronous error, or a setup (init, enqueue) that
// stays in progress that long, is a failure: the communicator is aborted (its kernels
// return, so streams waiting on them drain) and the job ends through abort_job with
// "rank R: NCCL <collective> on cuda:N did not finish within T s ..." (or, with
// CommOptions::abort_job_on_failure = false, the next call throws that message). Every
// call on the ncclComm_t takes comm_mu_, so the watchdog's abort never frees the
// communicator under a call in flight; none of those calls blocks (non-blocking mode).
// The timeout must exceed the longest gap between two ranks reaching one collective (a
// checkpoint rank 0 writes alone, an evaluation on rank 0): the default is 10 minutes.
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/stream_guard.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "dist/nccl_communicator.h"

namespace cg::dist::detail {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::boolean: return ncclUint8;
  }
  CG_FAIL("dtype code ", static_cast<int>(dt), " has no NCCL type");
}
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::average ? ncclAvg : ncclSum; }

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class NcclComm final : public NcclDeviceComm {
 public:
  NcclComm(const CommOptions& options, int rank, int world, const std::string& unique_id)
      : options_(options), index_(options.device.index), rank_(rank), world_(world) {
    ncclUniqueId id;
    CG_CHECK(unique_id.size() == sizeof(id), "NCCL unique id of ", unique_id.size(),
             " bytes, expected ", sizeof(id), ": every rank must run the same chunkgrad build");
    std::memcpy(&id, unique_id.data(), sizeof(id));
    CG_CUDA_CHECK(cudaSetDevice(index_));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      const ncclResult_t started = ncclCommInitRankConfig(&comm_, world_, id, rank_, &config);
      CG_CHECK(started == ncclSuccess || started == ncclInProgress, where(),
               ": ncclCommInitRankConfig failed: ", ncclGetErrorString(started),
               ": check that every rank sees its GPU and NCCL_DEBUG=INFO says why");
    }
    wait_ready("ncclCommInitRankConfig", Clock::now());
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (!aborted_) {
      // Finalize flushes the queued collectives; an error or a timeout falls back to abort.
      ncclResult_t state = ncclCommFinalize(comm_);
      const Clock::time_point start = Clock::now();
      while (state == ncclInProgress && seconds_since(start) < options_.timeout_seconds) {
        std::this_thread::yield();
        ncclCommGetAsyncError(comm_, &state);
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    for (Pending& p : pending_) cudaEventDestroy(p.done);
  }

  void all_reduce(Tensor& t, ReduceOp op) override {
    enqueue("all_reduce", {&t}, [&](cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype()), nccl_op(op), comm_, s);
    });
  }
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    enqueue("reduce_scatter", {&input, &output}, [&](cudaStream_t s) {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(),
                               static_cast<size_t>(output.numel()), nccl_type(output.dtype()),
                               nccl_op(op), comm_, s);
    });
  }
  void all_gather(const Tensor& input, Tensor& output) override {
    enqueue("all_gather", {&input, &output}, [&](cudaStream_t s) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                           nccl_type(input.dtype()), comm_, s);
    });
  }
  void broadcast(Tensor& t, int root) override {
    enqueue("broadcast", {&t}, [&](cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype()), root, comm_, s);
    });
  }

  void synchronize() override {
    throw_if_failed();
    CG_CUDA_CHECK(cudaSetDevice(index_));
    const cudaError_t synced = cudaStreamSynchronize(cg::cuda::current_stream(index_));
    throw_if_failed();  // an abort by the watchdog is what let the stream drain
    CG_CUDA_CHECK(synced);
  }

 private:
  struct Pending {
    cudaEvent_t done;
    const char* what;
    Clock::time_point queued;
  };

  std::string where() const {
    return ::cg::detail::concat("rank ", rank_, " of ", world_, " on ", options_.device.str());
  }

  // Queues one collective on the calling thread's current stream of the device (Note
  // [Collective streams], communicator.h) and hands its completion to the watchdog.
  template <typename Call>
  void enqueue(const char* what, std::initializer_list<const Tensor*> tensors, Call&& call) {
    throw_if_failed();
    CG_CUDA_CHECK(cudaSetDevice(index_));
    const StreamId stream_id = cg::current_stream(options_.device);
    const cudaStream_t stream = cg::cuda::current_stream(index_);
    for (const Tensor* t : tensors) t->storage()->record_stream(stream_id);
    const Clock::time_point queued = Clock::now();
    ncclResult_t started;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      CG_CHECK(!aborted_, what, ": ", where(), ": the NCCL communicator was aborted");
      started = call(stream);
    }
    if (started != ncclSuccess && started != ncclInProgress) {
      fail(::cg::detail::concat("NCCL ", what, " on ", where(),
                                " failed: ", ncclGetErrorString(started)));
      throw_if_failed();
    }
    wait_ready(what, queued);
    cudaEvent_t done;
    CG_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CG_CUDA_CHECK(cudaEventRecord(done, stream));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back({done, what, queued});
    }
    for (const Tensor* t : tensors) t->storage()->bump_version();
  }

  // Polls until NCCL has finished setting up the last call (non-blocking mode): fails on an
  // error, or when that takes longer than the timeout.
  void wait_ready(const char* what, Clock::time_point since) {
    for (;;) {
      ncclResult_t state;
      {
        std::lock_guard<std::mutex> lock(comm_mu_);
        if (aborted_) break;
        ncclCommGetAsyncError(comm_, &state);
      }
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        fail(::cg::detail::concat("NCCL ", what, " on ", where(),
                                  " failed: ", ncclGetErrorString(state)));
        break;
      }
      if (seconds_since(since) > options_.timeout_seconds) {
        fail(timeout_message(what));
        break;
      }
      std::this_thread::yield();
    }
    throw_if_failed();
  }

  std::string timeout_message(const char* what) const {
    return ::cg::detail::concat(
        "NCCL ", what, " on ", where(), " did not finish within ", options_.timeout_seconds,
        " s (CommOptions::timeout_seconds): a rank is hung, dead or calling another "
        "collective; the NCCL communicator was aborted");
  }

  // Records the first failure, aborts the communicator, and ends the job when asked to.
  void fail(const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_.empty()) failure_ = message;
    }
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (!aborted_) {
        aborted_ = true;
        ncclCommAbort(comm_);
      }
    }
    if (options_.abort_job_on_failure) abort_job(message);
  }

  void throw_if_failed() {
    std::lock_guard<std::mutex> lock(mu_);
    CG_CHECK(failure_.empty(), failure_);
  }

  // The watchdog thread (Note [NCCL watchdog]).
  void watch() {
    cudaSetDevice(index_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_ && failure_.empty()) {
      cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stop_; });
      if (stop_) break;
      std::string failure;
      while (!pending_.empty()) {
        Pending& p = pending_.front();
        const cudaError_t q = cudaEventQuery(p.done);
        if (q == cudaSuccess) {
          cudaEventDestroy(p.done);
          pending_.pop_front();
          continue;
        }
        if (q != cudaErrorNotReady) {
          failure = ::cg::detail::concat("NCCL ", p.what, " on ", where(),
                                         ": its stream failed: ", cudaGetErrorString(q));
        } else if (seconds_since(p.queued) > options_.timeout_seconds) {
          failure = timeout_message(p.what);
        }
        break;
      }
      lock.unlock();
      if (failure.empty()) {
        std::lock_guard<std::mutex> comm_lock(comm_mu_);
        ncclResult_t state = ncclSuccess;
        if (!aborted_) ncclCommGetAsyncError(comm_, &state);
        if (state != ncclSuccess && state != ncclInProgress) {
          failure = ::cg::detail::concat(
              "NCCL on ", where(), " reported an error: ", ncclGetErrorString(state),
              " (NCCL_DEBUG=INFO says more); the NCCL communicator was aborted");
        }
      }
      if (!failure.empty()) fail(failure);
      lock.lock();
    }
  }

  CommOptions options_;
  int index_, rank_, world_;
  ncclComm_t comm_ = nullptr;
  std::mutex comm_mu_;    // every call on comm_ (Note [NCCL watchdog])
  bool aborted_ = false;  // guarded by comm_mu_
  std::mutex mu_;         // guards what follows
  std::condition_variable cv_;
  bool stop_ = false;
  std::string failure_;
  std::deque<Pending> pending_;
  std::thread watchdog_;
};

}  // namespace

std::string nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  CG_CHECK(r == ncclSuccess, "ncclGetUniqueId failed: ", ncclGetErrorString(r),
           ": NCCL needs a network interface (NCCL_SOCKET_IFNAME names it)");
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

std::unique_ptr<NcclDeviceComm> make_nccl_device_comm(const CommOptions& options, int rank,
                                                      int world_size,
                                                      const std::string& unique_id) {
  return std::make_unique<NcclComm>(options, rank, world_size, unique_id);
}

}  // namespace cg::dist::detail
