// Why this file exists: the CUDA table's moe_route and moe_experts entries (CudaKernels,
// cuda/cuda_kernels.h; contracts in ops/kernels.h, Note [MoE rounding]). The op layer
// (ops/moe.cpp) has checked shapes, dtypes, devices and index ranges and made everything
// contiguous; these allocate outputs and scratch, call the launchers of cuda/moe_kernels.cu
// and run the per-expert GEMMs through cuBLAS.
//
// Note [MoE grouped GEMM]: each expert's two products (h = xs_e gate_up[e]^T, then
// ys_e = act_e down[e]^T) differ only in their row count, so they are one
// cublasGemmGroupedBatchedEx call per projection: a group of one problem per expert with
// rows, m/n/k and leading dimensions in host arrays, the A/B/C pointer arrays written on
// the device by the plan kernel (moe_kernels.cu). The row counts must be on the host, so
// each moe_experts call copies the E counts back once: one host wait per layer (Note [Host
// sync count]; the copy notes it). When cuBLAS refuses the grouped call (its status is
// not success: a dtype or architecture it does not take) the automatic path remembers
// that for the dtype and loops over the experts with cublasGemmEx, one call per expert
// and projection. The loop uses cuBLAS, not lt_gemm.cpp's cuBLASLt plans: those are cached
// per exact M, and the row counts change with every batch. Column-major view (Note
// [Column-major GEMM], lt_gemm.cpp): row-major h [rows, 2I] is column-major h^T = W X^T
// with W = gate_up[e] read transposed (lda H) and X = xs_e as stored (ldb H).
// On the H200 (CUDA 13.0, cuBLAS 13.1, 2026-12-02) cuBLAS took the grouped call for f32,
// f64, bf16 and f16 (tests/cuda_moe_test.cpp prints the path each case ran). At the
// 35B-A3B layer shape in bf16 (bench/run_moe_bench.sh): T = 4096 grouped 1.13 ms (183
// TFLOP/s of 6 T k H I), the loop 5.96 ms, torch._grouped_mm 2.13 ms, transformers' eager
// loop 91.9 ms; decoding T = 1 grouped 0.082 ms, the loop 0.228 ms, T = 16 0.26 ms.
// Of the 1.12 ms at T = 4096 the stages around the GEMMs take 0.22 ms (plan 0.026, gather
// 0.052, swiglu 0.072, combine 0.071): the grouped GEMMs and the host wait about 0.9 ms.
// Next: swiglu and combine with 16-byte loads (1.4 and 1.9 TB/s now), then a grouped
// kernel of our own that reads the offsets on the device (no host wait; decoding).
#include <cublas_v2.h>

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/memory_trace.h"
#include "core/views.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_kernels.h"
#include "cuda/launch_helpers.h"
#include "cuda/lt_gemm.h"
#include "cuda/moe_kernels.h"

namespace cg::cuda {

namespace {

// One cuBLAS handle per device, created on first use and never destroyed (as the
// cuBLASLt handle: Note [cuBLASLt state] in lt_gemm.cpp). The mutex covers a whole
// moe_experts GEMM sequence: the handle's stream and workspace are set per call.
std::mutex g_blas_mutex;
cublasHandle_t blas_handle_locked(int index) {
  static auto* handles = new std::map<int, cublasHandle_t>();
  cublasHandle_t& h = (*handles)[index];
  if (h == nullptr) CG_CUBLAS_CHECK(cublasCreate(&h));
  return h;
}

// Per dtype: cuBLAS refused the grouped call once (the automatic path then loops).
std::array<bool, 16> g_grouped_refused{};
thread_local MoeGemmPath t_last_path = MoeGemmPath::automatic;

// One projection over every expert with rows: C_g = A_g^T B_g in column-major terms,
// A_g [k, m] (lda), B_g [k, rows_g] (ldb), C_g [m, rows_g] (ldc).
struct Projection {
  int m, k, lda, ldb, ldc;
  const void* const* a;  // device pointer arrays, one entry per group
  const void* const* b;
  void* const* c;
};

struct GemmContext {
  cublasHandle_t handle;
  DType dtype;
  const std::vector<int>& rows;  // per group (experts with rows, ascending)
};

cublasComputeType_t compute_of(DType d) {
  return d == DType::f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
}

cublasStatus_t run_grouped(const GemmContext& g, const Projection& p) {
  const int groups = static_cast<int>(g.rows.size());
  const std::vector<cublasOperation_t> ta(groups, CUBLAS_OP_T), tb(groups, CUBLAS_OP_N);
  const std::vector<int> m(groups, p.m), k(groups, p.k), lda(groups, p.lda), ldb(groups, p.ldb),
      ldc(groups, p.ldc), size(groups, 1);
  const cudaDataType_t t = blas_data_type(g.dtype);
  if (g.dtype == DType::f64) {
    const std::vector<double> alpha(groups, 1.0), beta(groups, 0.0);
    return cublasGemmGroupedBatchedEx(g.handle, ta.data(), tb.data(), m.data(), g.rows.data(),
                                      k.data(), alpha.data(), p.a, t, lda.data(), p.b, t,
                                      ldb.data(), beta.data(), p.c, t, ldc.data(), groups,
                                      size.data(), compute_of(g.dtype));
  }
  const std::vector<float> alpha(groups, 1.0f), beta(groups, 0.0f);
  return cublasGemmGroupedBatchedEx(g.handle, ta.data(), tb.data(), m.data(), g.rows.data(),
                                    k.data(), alpha.data(), p.a, t, lda.data(), p.b, t, ldb.data(),
                                    beta.data(), p.c, t, ldc.data(), groups, size.data(),
                                    compute_of(g.dtype));
}

// The loop: one cublasGemmEx per group, pointers from the host-side offsets.
struct HostPointers {
  const char *a, *b;
  char* c;
  size_t a_step;        // bytes per expert of A
  size_t b_row, c_row;  // bytes per row of B and C
};
void run_loop(const GemmContext& g, const Projection& p, const HostPointers& hp,
              const std::vector<int>& experts, const std::vector<int>& row_offsets) {
  const cudaDataType_t t = blas_data_type(g.dtype);
  const double alpha64 = 1.0, beta64 = 0.0;
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const bool f64 = g.dtype == DType::f64;
  for (size_t i = 0; i < experts.size(); ++i) {
    const size_t e = static_cast<size_t>(experts[i]), o = static_cast<size_t>(row_offsets[i]);
    CG_CUBLAS_CHECK(cublasGemmEx(
        g.handle, CUBLAS_OP_T, CUBLAS_OP_N, p.m, g.rows[i], p.k,
        f64 ? static_cast<const void*>(&alpha64) : &alpha32, hp.a + e * hp.a_step, t, p.lda,
        hp.b + o * hp.b_row, t, p.ldb, f64 ? static_cast<const void*>(&beta64) : &beta32,
        hp.c + o * hp.c_row, t, p.ldc, compute_of(g.dtype), CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

MoeGemmPath last_moe_gemm_path() { return t_last_path; }

MoeRouting CudaKernels::moe_route(const Tensor& router_logits, int64_t top_k) {
  const int64_t N = router_logits.size(0), E = router_logits.size(1);
  const DType wd = router_logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  MoeRouting r;
  r.weights = raw::empty({N, top_k}, wd, router_logits.device());
  r.indices = raw::empty({N, top_k}, DType::i32, router_logits.device());
  launch_moe_route(router_logits.dtype(), router_logits.data_ptr(), r.weights.data_ptr(),
                   r.indices.data<int32_t>(), N, E, top_k, stream_of(router_logits));
  return r;
}

Tensor CudaKernels::moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                                const MoeRouting& routing) {
  return run_moe_experts(x, gate_up, down, routing, MoeGemmPath::automatic);
}

MoeScratch make_moe_scratch(const Tensor& x, const Tensor& gate_up, const Tensor& down, int64_t k) {
  const int64_t R = x.size(0) * k, H = x.size(1), E = gate_up.size(0), I = gate_up.size(1) / 2;
  const DType dt = x.dtype();
  const Device dev = x.device();
  MoeScratch m;
  {
    CategoryGuard temporary(MemoryCategory::temporary);
    m.ints = raw::empty({2 * R + 2 * E + 1}, DType::i32, dev);
    m.ptrs = raw::empty({6 * E}, DType::i64, dev);
    m.xs = raw::empty({R, H}, dt, dev);
    m.h = raw::empty({R, 2 * I}, dt, dev);
    m.act = raw::empty({R, I}, dt, dev);
    m.ys = raw::empty({R, H}, dt, dev);
  }
  m.rank = m.ints.data<int32_t>();
  m.pos = m.rank + R;
  m.counts = m.pos + R;
  m.offsets = m.counts + E;
  const size_t eb = element_size(dt);
  m.buffers = MoeBuffers{gate_up.data_ptr(),
                         down.data_ptr(),
                         m.xs.data_ptr(),
                         m.h.data_ptr(),
                         m.act.data_ptr(),
                         m.ys.data_ptr(),
                         H,
                         I,
                         eb,
                         eb};
  m.ptr_array = reinterpret_cast<const void**>(m.ptrs.data<int64_t>());
  return m;
}

Tensor run_moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                       const MoeRouting& routing, MoeGemmPath path) {
  const int64_t N = x.size(0), H = x.size(1), E = gate_up.size(0), I = gate_up.size(1) / 2;
  const int64_t k = routing.indices.size(1), R = N * k;
  const DType dt = x.dtype();
  const Device dev = x.device();
  Tensor out = raw::empty({N, H}, dt, dev);
  if (N == 0 || H == 0) return out;
  if (R == 0 || I == 0) {
    raw::fill_(out, 0.0);
    return out;
  }
  const cudaStream_t stream = stream_of(x);
  const MoeScratch m = make_moe_scratch(x, gate_up, down, k);
  const Tensor &ints = m.ints, &xs = m.xs, &h = m.h, &act = m.act, &ys = m.ys;
  int32_t *rank = m.rank, *pos = m.pos, *counts = m.counts, *offsets = m.offsets;
  const MoeBuffers& buffers = m.buffers;
  const void** ptr_array = m.ptr_array;
  const size_t eb = element_size(dt);
  const int32_t* indices = routing.indices.data<int32_t>();
  launch_moe_plan(indices, R, E, buffers, rank, counts, offsets, ptr_array, stream);
  launch_moe_gather(dt, x.data_ptr(), indices, rank, offsets, pos, xs.data_ptr(), R, k, H, stream);

  // The one host wait (Note [MoE grouped GEMM]).
  const Tensor counts_host =
      raw::to_device(raw::narrow(ints, 0, 2 * R, E), Device{DeviceType::cpu, 0});
  const int32_t* c = counts_host.data<int32_t>();
  std::vector<int> rows, experts, row_offsets;
  for (int64_t e = 0, o = 0; e < E; o += c[e], ++e) {
    if (c[e] == 0) continue;
    rows.push_back(c[e]);
    experts.push_back(static_cast<int>(e));
    row_offsets.push_back(static_cast<int>(o));
  }
  const auto at = [&](int j) { return ptr_array + j * E; };
  const Projection up_proj{static_cast<int>(2 * I),
                           static_cast<int>(H),
                           static_cast<int>(H),
                           static_cast<int>(H),
                           static_cast<int>(2 * I),
                           at(0),
                           at(1),
                           const_cast<void* const*>(at(2))};
  const Projection down_proj{static_cast<int>(H),
                             static_cast<int>(I),
                             static_cast<int>(I),
                             static_cast<int>(I),
                             static_cast<int>(H),
                             at(3),
                             at(4),
                             const_cast<void* const*>(at(5))};
  const HostPointers up_host{static_cast<const char*>(gate_up.data_ptr()),
                             static_cast<const char*>(xs.data_ptr()),
                             static_cast<char*>(h.data_ptr()),
                             static_cast<size_t>(2 * I * H) * eb,
                             static_cast<size_t>(H) * eb,
                             static_cast<size_t>(2 * I) * eb};
  const HostPointers down_host{static_cast<const char*>(down.data_ptr()),
                               static_cast<const char*>(act.data_ptr()),
                               static_cast<char*>(ys.data_ptr()),
                               static_cast<size_t>(H * I) * eb,
                               static_cast<size_t>(I) * eb,
                               static_cast<size_t>(H) * eb};

  Tensor workspace;
  {
    CategoryGuard temporary(MemoryCategory::temporary);
    workspace = raw::empty({static_cast<int64_t>(kLtWorkspaceBytes / 8)}, DType::i64, dev);
  }
  const size_t refused_slot = static_cast<size_t>(dt) % g_grouped_refused.size();
  std::lock_guard<std::mutex> lock(g_blas_mutex);
  const cublasHandle_t handle = blas_handle_locked(dev.index);
  // cublasSetStream resets the workspace to cuBLAS's own pool: the stream first.
  CG_CUBLAS_CHECK(cublasSetStream(handle, stream));
  CG_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace.data_ptr(), kLtWorkspaceBytes));
  const GemmContext g{handle, dt, rows};
  bool grouped = path == MoeGemmPath::grouped ||
                 (path == MoeGemmPath::automatic && !g_grouped_refused[refused_slot]);
  if (grouped) {
    const cublasStatus_t st = run_grouped(g, up_proj);
    if (st != CUBLAS_STATUS_SUCCESS) {
      CG_CHECK(path != MoeGemmPath::grouped, "moe_experts: cuBLAS refused the grouped GEMM for ",
               dtype_name(dt), " (", cublas_status_name(st), "); use the automatic or loop path");
      g_grouped_refused[refused_slot] = true;
      grouped = false;
    }
  }
  if (!grouped) run_loop(g, up_proj, up_host, experts, row_offsets);
  launch_moe_swiglu(dt, h.data_ptr(), act.data_ptr(), R, I, stream);
  if (grouped) {
    CG_CUBLAS_CHECK(run_grouped(g, down_proj));
  } else {
    run_loop(g, down_proj, down_host, experts, row_offsets);
  }
  t_last_path = grouped ? MoeGemmPath::grouped : MoeGemmPath::loop;
  launch_moe_combine(dt, dt, routing.weights.dtype(), ys.data_ptr(), routing.weights.data_ptr(),
                     pos, out.data_ptr(), N, k, H, stream);
  return out;
}

}  // namespace cg::cuda
