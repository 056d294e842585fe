// Why this file exists: see lt_gemm.h. How a row-major chunkgrad matrix meets cuBLASLt's
// column-major world:
//
// Note [Column-major GEMM]: element (i, j) of a matrix X [r, c] lives at p[i rs + j cs]. A
// column-major layout L (rows, cols, ld) holds L(i, j) at p[i + j ld]. So X with cs == 1
// IS the column-major X^T [c, r] with ld = rs, and X with rs == 1 is the column-major
// X [r, c] with ld = cs: every operand with a unit stride in one dim is read in place,
// and wanting X or X^T only decides the transpose flag. The output D cannot be transposed
// in cuBLASLt, so a row-major out (cs == 1) is computed as out^T = b^T a^T [N, M], a
// column-major out as out = a b [M, N]. Size-1 dims may carry any stride (as cpu/
// gemm.cpp's in_place_view).
#include "cuda/lt_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/loop_nest.h"
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_kernels.h"
#include "cuda/elementwise_kernels.h"
#include "cuda/kernel_args.h"
#include "cuda/lt_autotune.h"
#include "ops/kernel_shapes.h"

namespace cg::cuda {

cudaDataType_t blas_data_type(DType d) {
  switch (d) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  CG_FAIL("gemm: dtype ", dtype_name(d), " is not floating");
}

namespace {

// One matrix of a (strided-batch) product, by raw pointer.
struct LtMatrix {
  const void* data;
  DType dtype;
  int64_t rows, cols;
  int64_t rs, cs;            // element strides
  int64_t batch_stride = 0;  // elements between consecutive batches (0: broadcast)
};

// How X is read in place (Note [Column-major GEMM]); false when it has no unit stride.
// The rule is ops/kernel_shapes.h's gemm_layout, shared with the CPU GEMM.
bool layout_of(const LtMatrix& x, bool& row_major, int64_t& ld) {
  const GemmLayout l = gemm_layout(x.rows, x.cols, x.rs, x.cs);
  row_major = l.row_major;
  ld = l.ld;
  return l.in_place;
}

bool in_place(const Tensor& t) {
  bool rm;
  int64_t ld;
  const int64_t n = t.dim();
  return layout_of({nullptr, t.dtype(), t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2],
                    t.strides()[n - 1]},
                   rm, ld);
}

// Inputs cuBLASLt multiplies as they are: a pair of one of these dtypes.
bool lt_input_dtype(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }
// The output dtypes cuBLASLt pairs with inputs of dtype `in` (f64 handled apart).
bool lt_output_ok(DType in, DType out) {
  if (in == DType::f32) return out == DType::f32;
  return out == in || out == DType::f32;
}

bool tf32_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("CHUNKGRAD_TF32");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

// The largest power of two (<= 256) dividing the address and every batch step.
uint32_t alignment_of(const void* p, int64_t batch_stride_bytes) {
  uint64_t v = reinterpret_cast<uintptr_t>(p) | 256u;
  if (batch_stride_bytes != 0) v |= static_cast<uint64_t>(batch_stride_bytes);
  return static_cast<uint32_t>(v & (~v + 1));
}

// Note [Workspace size]: the workspace cuBLASLt may take grows with the output (split-K
// keeps fp32 partial tiles of it), up to kLtWorkspaceBytes: a one-row GEMM of a fused-loss
// chunk under a small budget must not be charged 32 MiB, a large GEMM gets the full amount.
uint64_t workspace_limit(int64_t M, int64_t N) {
  const double want = 4.0 * static_cast<double>(M) * static_cast<double>(N);
  return want >= static_cast<double>(kLtWorkspaceBytes) ? kLtWorkspaceBytes
                                                        : static_cast<uint64_t>(want) / 256 * 256;
}

// ---- per-device handle and plan cache --------------------------------------------------

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans;  // never erased (see below)
};

// Note [cuBLASLt state]: one handle per device, created on first use and never destroyed
// (as the compute stream: tensors may be freed in static destruction, and cuBLASLt may
// already be unloaded then); the plans it caches are as long-lived. Guarded by one mutex:
// plan lookup is a map find, far below a GEMM's time.
std::mutex g_mutex;
std::map<int, DeviceState>& states() {
  static auto* s = new std::map<int, DeviceState>();
  return *s;
}

cublasLtMatrixLayout_t make_layout(DType dtype, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t batch_stride) {
  cublasLtMatrixLayout_t l = nullptr;
  CG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, blas_data_type(dtype), static_cast<uint64_t>(rows),
                                             static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    CG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof(count)));
    CG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &batch_stride, sizeof(batch_stride)));
  }
  return l;
}

// One operand as cuBLASLt sees it: want_t asks for X^T instead of X.
struct LtOperand {
  cublasOperation_t op;
  int64_t rows, cols, ld;  // of the stored column-major layout
};
LtOperand operand_of(const LtMatrix& x, bool want_t) {
  bool row_major = false;
  int64_t ld = 0;
  CG_CHECK(layout_of(x, row_major, ld),
           "gemm: an operand has no unit stride (internal: it "
           "should have been made contiguous)");
  // row-major X == column-major X^T [cols, rows].
  const int64_t r = row_major ? x.cols : x.rows, c = row_major ? x.rows : x.cols;
  const bool stored_is_t = row_major;  // stored layout is X^T
  return {stored_is_t == want_t ? CUBLAS_OP_N : CUBLAS_OP_T, r, c, ld};
}

// D = alpha op(A) op(B) + beta C over `batch` strided batches, on device `index`.
// Preconditions (the callers establish them): a.dtype == b.dtype, both lt_input_dtype and
// lt_output_ok(a.dtype, out.dtype), or all three f64; every matrix has a unit stride.
void run_lt(int index, const LtMatrix& a, const LtMatrix& b, const LtMatrix& out, int64_t batch,
            double alpha, double beta) {
  const int64_t M = out.rows, N = out.cols, K = a.cols;
  bool out_row_major = false;
  int64_t ldc = 0;
  CG_CHECK(layout_of(out, out_row_major, ldc), "gemm: out has no unit stride (internal)");
  // Column-major problem D [m, n] = op(A) [m, k] op(B) [k, n] (Note [Column-major GEMM]).
  const LtMatrix& first = out_row_major ? b : a;
  const LtMatrix& second = out_row_major ? a : b;
  const LtOperand A = operand_of(first, out_row_major);
  const LtOperand B = operand_of(second, out_row_major);
  const int64_t m = out_row_major ? N : M, n = out_row_major ? M : N;
  const bool f64 = out.dtype == DType::f64;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F
          : (a.dtype == DType::f32 && tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                     : CUBLAS_COMPUTE_32F);
  const size_t ea = element_size(a.dtype), eo = element_size(out.dtype);
  const uint32_t align_a = alignment_of(first.data, first.batch_stride * static_cast<int64_t>(ea));
  const uint32_t align_b =
      alignment_of(second.data, second.batch_stride * static_cast<int64_t>(ea));
  const uint32_t align_c = alignment_of(out.data, out.batch_stride * static_cast<int64_t>(eo));
  const std::vector<int64_t> key = {m,
                                    n,
                                    K,
                                    static_cast<int64_t>(a.dtype),
                                    static_cast<int64_t>(out.dtype),
                                    static_cast<int64_t>(compute),
                                    A.op,
                                    A.ld,
                                    B.op,
                                    B.ld,
                                    ldc,
                                    batch,
                                    first.batch_stride,
                                    second.batch_stride,
                                    out.batch_stride,
                                    align_a,
                                    align_b,
                                    align_c,
                                    beta != 0.0};

  CG_CUDA_CHECK(cudaSetDevice(index));
  const cudaStream_t stream = current_stream(index);
  Plan* plan = nullptr;
  cublasLtHandle_t handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    DeviceState& st = states()[index];
    if (st.handle == nullptr) CG_CUBLAS_CHECK(cublasLtCreate(&st.handle));
    handle = st.handle;
    auto it = st.plans.find(key);
    if (it == st.plans.end()) {
      auto p = std::make_unique<Plan>();
      const cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;
      CG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, scale_type));
      CG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &A.op,
                                                     sizeof(A.op)));
      CG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &B.op,
                                                     sizeof(B.op)));
      p->a = make_layout(a.dtype, A.rows, A.cols, A.ld, batch, first.batch_stride);
      p->b = make_layout(a.dtype, B.rows, B.cols, B.ld, batch, second.batch_stride);
      p->c = make_layout(out.dtype, m, n, ldc, batch, out.batch_stride);
      cublasLtMatmulPreference_t pref = nullptr;
      CG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      const uint64_t ws = workspace_limit(M, N);
      CG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
      // Note [Split-K reductions]: split-K kernels may add their partial sums in the
      // output's dtype (in place or in a bf16 buffer), which rounds every partial to 8 bits
      // of mantissa; only reductions in the compute type (fp32) are allowed.
      const uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      CG_CUBLAS_CHECK(
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                               &reduction_mask, sizeof(reduction_mask)));
      CG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
      CG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
      CG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
      CG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
      cublasLtMatmulHeuristicResult_t results[kLtAutotuneCandidates] = {};
      int found = 0;
      const bool tune = lt_autotune_enabled() && beta == 0.0 &&
                        2.0 * static_cast<double>(M) * static_cast<double>(N) *
                                static_cast<double>(K) * static_cast<double>(batch) >=
                            1e10;
      const cublasStatus_t hs =
          cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->a, p->b, p->c, p->c, pref,
                                         tune ? kLtAutotuneCandidates : 1, results, &found);
      cublasLtMatmulPreferenceDestroy(pref);
      CG_CHECK(hs == CUBLAS_STATUS_SUCCESS && found > 0,
               "gemm: cuBLASLt has no algorithm for out [", M, ", ", N, "] = a [", M, ", ", K,
               "] @ b [", K, ", ", N, "] in ", dtype_name(a.dtype), " -> ", dtype_name(out.dtype),
               " (batch ", batch, "; status ", cublas_status_name(hs),
               "); make the operands contiguous");
      int best = 0;
      if (tune && found > 1) {
        best = lt_fastest_algorithm(handle, p->desc, p->a, p->b, p->c, results, found, index,
                                    stream, first.data, second.data, out.data, f64);
      }
      p->algo = results[best].algo;
      p->workspace = results[best].workspaceSize;
      it = st.plans.emplace(key, std::move(p)).first;
    }
    plan = it->second.get();
  }
  // The workspace is a tensor of the caching allocator, freed (for the next request on
  // this stream) when this call returns: the next user is ordered after this GEMM.
  Tensor workspace;
  if (plan->workspace > 0) {
    workspace = raw::empty({static_cast<int64_t>((plan->workspace + 7) / 8)}, DType::i64,
                           Device{DeviceType::cuda, index});
  }
  const float alpha32 = static_cast<float>(alpha), beta32 = static_cast<float>(beta);
  const void* pa = f64 ? static_cast<const void*>(&alpha) : &alpha32;
  const void* pb = f64 ? static_cast<const void*>(&beta) : &beta32;
  CG_CUBLAS_CHECK(cublasLtMatmul(handle, plan->desc, pa, first.data, plan->a, second.data, plan->b,
                                 pb, out.data, plan->c, const_cast<void*>(out.data), plan->c,
                                 &plan->algo, workspace.defined() ? workspace.data_ptr() : nullptr,
                                 plan->workspace, stream));
}

LtMatrix matrix_of(const Tensor& t) {
  return {t.data_ptr(), t.dtype(), t.size(0), t.size(1), t.stride(0), t.stride(1), 0};
}

// K == 0 (or an empty product): out = beta out, 0 when beta is 0 whatever out held.
void scale_output(const Tensor& out, double beta) {
  if (beta == 0.0) {
    raw::fill_(out, 0.0);
    return;
  }
  if (beta == 1.0) return;
  const Strided g = strided_of<2>(out.shape(), {&out.strides(), &out.strides()}, "gemm");
  launch_unary(UnaryOp::scale, out.dtype(), out.data_ptr(), out.data_ptr(), beta, g,
               current_stream(out.device().index));
}

size_t allocator_rounded(size_t bytes) {
  // The caching allocator's block sizes (Note [Sizes], core/caching_allocator.h).
  if (bytes >= (size_t{10} << 20)) {
    return (bytes + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
  }
  return (bytes + 511) / 512 * 512;
}

}  // namespace

void CudaKernels::gemm(const Tensor& a_in, const Tensor& b_in, const Tensor& out, double alpha,
                       double beta) {
  const int64_t M = out.size(0), N = out.size(1), K = a_in.size(1);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    scale_output(out, beta);
    return;
  }
  const int index = out.device().index;
  const bool all_f64 =
      a_in.dtype() == DType::f64 && b_in.dtype() == DType::f64 && out.dtype() == DType::f64;
  // Inputs: one dtype cuBLASLt pairs with itself, else both in f32 (the CPU computes in f32
  // unless all three are f64); each with a unit stride in one dim, else a contiguous copy.
  DType in_dtype = a_in.dtype();
  if (!all_f64 && (a_in.dtype() != b_in.dtype() || !lt_input_dtype(a_in.dtype()))) {
    in_dtype = DType::f32;
  }
  auto prepare = [&](const Tensor& x) {
    Tensor y = raw::to_dtype(x, in_dtype);
    return in_place(y) ? y : raw::contiguous(y);
  };
  const Tensor a = prepare(a_in), b = prepare(b_in);
  // Output: written in place when cuBLASLt can, else through an f32 (or contiguous) copy.
  const bool out_ok = (all_f64 || lt_output_ok(in_dtype, out.dtype())) && in_place(out);
  Tensor o = out;
  if (!out_ok) {
    const DType od =
        all_f64 ? DType::f64 : (lt_output_ok(in_dtype, out.dtype()) ? out.dtype() : DType::f32);
    o = beta == 0.0 ? raw::empty(out.shape(), od, out.device())
                    : raw::contiguous(raw::to_dtype(out, od));
  }
  run_lt(index, matrix_of(a), matrix_of(b), matrix_of(o), 1, alpha, beta);
  if (!out_ok) raw::copy_(out, o);
}

Tensor CudaKernels::matmul(const Tensor& a_in, const Tensor& b_in) {
  CG_CHECK(a_in.dtype() == DType::f32 || a_in.dtype() == DType::f64 ||
               a_in.dtype() == DType::bf16 || a_in.dtype() == DType::f16,
           "matmul: dtype ", dtype_name(a_in.dtype()),
           " is not supported; it computes on f32, "
           "f64, bf16 and f16 tensors");
  const Tensor a = in_place(a_in) ? a_in : raw::contiguous(a_in);
  const Tensor b0 = raw::to_dtype(b_in, a.dtype());
  const Tensor b = in_place(b0) ? b0 : raw::contiguous(b0);
  const int64_t na = a.dim(), nb = b.dim();
  const MatmulShape ms = matmul_shape(a, b);
  const int64_t n = ms.n, k = ms.k, m = ms.m, count = ms.count;
  const Shape& batch = ms.batch;
  Tensor out = raw::empty(ms.out_shape, a.dtype(), a.device());
  if (n * m == 0 || count == 0) return out;
  if (k == 0) {
    raw::fill_(out, 0.0);
    return out;
  }
  const int index = a.device().index;
  const int64_t as = a.strides()[na - 2], ac = a.strides()[na - 1];
  const int64_t bs = b.strides()[nb - 2], bc = b.strides()[nb - 1];

  // b without batch dims and a's batch dims folding into its rows: one GEMM of count*n rows.
  if (ms.folded_a_row_stride >= 0) {
    const LtMatrix fa{a.data_ptr(), a.dtype(), count * n, k, ms.folded_a_row_stride, ac, 0};
    bool rm;
    int64_t ld;
    if (layout_of(fa, rm, ld)) {
      run_lt(index, fa, {b.data_ptr(), b.dtype(), k, m, bs, bc, 0},
             {out.data_ptr(), out.dtype(), count * n, m, m, 1, 0}, 1, 1.0, 0.0);
      return out;
    }
  }

  // Batch strides at the broadcast batch shape (0 where broadcast), merged into runs.
  const int64_t nbatch = static_cast<int64_t>(batch.size());
  Shape sa = ms.batch_strides_a, sb = ms.batch_strides_b, so(nbatch, 0);
  for (int64_t d = nbatch - 1, s = n * m; d >= 0; --d) {
    so[d] = s;
    s *= batch[d];
  }
  const LoopNest<3> loop = simplify_loops<3>(batch, {&sa, &sb, &so});
  const size_t inner = loop.dims() - 1;
  const int64_t runs = loop.numel() / loop.sizes[inner];
  const size_t ea = element_size(a.dtype()), eo = element_size(out.dtype());
  const int64_t max_batch = 65535;  // one call's batch count, comfortably within int32
  for (int64_t r = 0; r < runs; ++r) {
    int64_t oa = 0, ob = 0, oo = 0, rest = r;
    for (int64_t d = static_cast<int64_t>(inner) - 1; d >= 0; --d) {
      const int64_t i = rest % loop.sizes[d];
      rest /= loop.sizes[d];
      oa += i * loop.strides[0][d];
      ob += i * loop.strides[1][d];
      oo += i * loop.strides[2][d];
    }
    for (int64_t b0i = 0; b0i < loop.sizes[inner]; b0i += max_batch) {
      const int64_t cnt = std::min(max_batch, loop.sizes[inner] - b0i);
      const int64_t ia = oa + b0i * loop.strides[0][inner], ib = ob + b0i * loop.strides[1][inner],
                    io = oo + b0i * loop.strides[2][inner];
      run_lt(index,
             {static_cast<const char*>(a.data_ptr()) + ia * static_cast<int64_t>(ea), a.dtype(), n,
              k, as, ac, loop.strides[0][inner]},
             {static_cast<const char*>(b.data_ptr()) + ib * static_cast<int64_t>(ea), b.dtype(), k,
              m, bs, bc, loop.strides[1][inner]},
             {static_cast<char*>(out.data_ptr()) + io * static_cast<int64_t>(eo), out.dtype(), n, m,
              m, 1, loop.strides[2][inner]},
             cnt, 1.0, 0.0);
    }
  }
  return out;
}

size_t CudaKernels::gemm_scratch_bytes(const GemmDesc& d) const {
  if (d.m == 0 || d.n == 0) return 0;
  const bool all_f64 = d.a == DType::f64 && d.b == DType::f64 && d.out == DType::f64;
  const bool convert_in = !all_f64 && (d.a != d.b || !lt_input_dtype(d.a));
  const DType in = convert_in ? DType::f32 : d.a;
  const uint64_t ws = workspace_limit(d.m, d.n);
  size_t total = ws > 0 ? allocator_rounded(ws) : 0;
  auto add = [&](int64_t rows, int64_t cols, DType dtype) {
    total += allocator_rounded(static_cast<size_t>(rows * cols) * element_size(dtype));
  };
  if (convert_in || !d.a_dense) add(d.m, d.k, in);
  if (convert_in || !d.b_dense) add(d.k, d.n, in);
  const bool out_ok = (all_f64 || lt_output_ok(in, d.out)) && d.out_dense;
  if (!out_ok) add(d.m, d.n, all_f64 ? DType::f64 : DType::f32);
  return total;
}

}  // namespace cg::cuda
