// Why this file exists: see lt_autotune.h.
#include "cuda/lt_autotune.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "core/views.h"
#include "cuda/cuda_check.h"
#include "cuda/event_timer.h"

namespace cg::cuda {

// Note [Autotune]: with CHUNKGRAD_LT_AUTOTUNE=1, the first call of a large GEMM (>= 1e10
// flops) with beta == 0 times up to kLtAutotuneCandidates of the heuristic's algorithms on
// its own operands (the output is overwritten anyway) and keeps the fastest. Off by
// default: it synchronises the host once per new shape and measures noise for small gains
// (the heuristic's first choice was within 1% of PyTorch at the drafter's shapes).
bool lt_autotune_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("CHUNKGRAD_LT_AUTOTUNE");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

int lt_fastest_algorithm(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                         cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                         cublasLtMatrixLayout_t lc, const cublasLtMatmulHeuristicResult_t* results,
                         int found, int index, cudaStream_t stream, const void* a, const void* b,
                         const void* d, bool f64) {
  size_t most = 0;
  for (int c = 0; c < found; ++c) most = std::max(most, results[c].workspaceSize);
  Tensor workspace;
  if (most > 0) {
    workspace = raw::empty({static_cast<int64_t>((most + 7) / 8)}, DType::i64,
                           Device{DeviceType::cuda, index});
  }
  const float one32 = 1.0f, zero32 = 0.0f;
  const double one64 = 1.0, zero64 = 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = f64 ? static_cast<const void*>(&zero64) : &zero32;
  EventTimer timer(stream);
  int best = 0;
  float best_ms = -1.0f;  // none timed yet
  for (int c = 0; c < found; ++c) {
    std::vector<float> times;
    bool ok = true;
    for (int r = 0; r < 4 && ok; ++r) {  // a warm-up, then 3 timed runs
      if (r > 0) timer.start();
      ok = cublasLtMatmul(handle, desc, alpha, a, la, b, lb, beta, d, lc, const_cast<void*>(d), lc,
                          &results[c].algo, workspace.defined() ? workspace.data_ptr() : nullptr,
                          results[c].workspaceSize, stream) == CUBLAS_STATUS_SUCCESS;
      if (r > 0 && ok) {
        note_host_sync();  // Note [Host sync count]: once per new shape (warm-up)
        times.push_back(timer.stop_ms());
      }
    }
    if (!ok) continue;
    const float ms = median(std::move(times));
    if (best_ms < 0.0f || ms < best_ms) {
      best = c;
      best_ms = ms;
    }
  }
  return best;
}

}  // namespace cg::cuda
