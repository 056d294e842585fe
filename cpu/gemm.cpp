// Why this file exists: see gemm.h (and its Note [GEMM blocking]). Shapes per piece of
// the output, rows [m0, m1) x columns [n0, n1), walked in tiles when something converts:
//   A tile [mt, kt] of a     (its own memory, or converted into a_buf)
//   B tile [kt, nt] of b     (its own memory, or converted into b_buf)
//   C tile [mt, nt] of out   (its own memory, or an accumulator o_buf stored at the end)
// Each output element sums over k in the same order however the output is split (tiles
// of k are kGemmTileRows whatever the piece, and Eigen's own k blocking depends only on
// the k it is given), so the result does not depend on the thread count.
#include "cpu/gemm.h"

#include <Eigen/Core>
#include <algorithm>

#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/thread_pool.h"
#include "ops/kernel_shapes.h"

namespace cg::cpu {

namespace {

// A matrix as Eigen reads it: element (i, j) at p[i * ld + j] (row major) or p[i + j * ld].
template <typename C>
struct View {
  C* p;
  int64_t ld;
  bool row_major;
};

// How x is read in place, if it can be: a unit stride in one dim and a leading dimension
// that does not overlap rows (or columns). Size-1 dims may carry any stride.
// The rule is ops/kernel_shapes.h's gemm_layout, shared with the CUDA GEMM.
bool in_place_view(const GemmMatrix& x, int64_t& ld, bool& row_major) {
  const GemmLayout l = gemm_layout(x.rows, x.cols, x.row_stride, x.col_stride);
  ld = l.ld;
  row_major = l.row_major;
  return l.in_place;
}

bool readable_in_place(const GemmMatrix& x, DType compute) {
  int64_t ld;
  bool row_major;
  return x.dtype == compute && in_place_view(x, ld, row_major);
}

DType compute_dtype(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out) {
  const bool f64 = a.dtype == DType::f64 && b.dtype == DType::f64 && out.dtype == DType::f64;
  return f64 ? DType::f64 : DType::f32;
}

struct Plan {
  DType compute;
  bool a_conv, b_conv, o_conv;  // walked in converted tiles
  // Pieces form a grid_m x grid_n grid over out; its cuts fall on multiples of kGemmCut
  // (Note [GEMM blocking]); the last row and column of pieces take the rest.
  int64_t units_m, units_n;  // whole kGemmCut units along M and N (>= 1)
  int64_t grid_m, grid_n;
  int64_t pieces;
  int64_t a_elems, b_elems, o_elems;  // scratch elements per piece
};

// The grid with the smallest largest piece (in kGemmCut x kGemmCut units) using at most
// `threads` pieces; among equals, the one whose pieces are least thin (Eigen packs a
// piece's operands: a thin piece spends its time packing).
void choose_grid(Plan& p, int64_t threads) {
  p.grid_m = p.grid_n = 1;
  int64_t best_area = p.units_m * p.units_n, best_side = std::min(p.units_m, p.units_n);
  for (int64_t gm = 1; gm <= std::min(threads, p.units_m); ++gm) {
    const int64_t gn = std::min(threads / gm, p.units_n);
    const int64_t um = (p.units_m + gm - 1) / gm, un = (p.units_n + gn - 1) / gn;
    const int64_t area = um * un, side = std::min(um, un);
    if (area < best_area || (area == best_area && side > best_side)) {
      best_area = area;
      best_side = side;
      p.grid_m = gm;
      p.grid_n = gn;
    }
  }
}

Plan plan_of(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out) {
  const int64_t M = out.rows, N = out.cols, K = a.cols;
  Plan p;
  p.compute = compute_dtype(a, b, out);
  p.a_conv = !readable_in_place(a, p.compute);
  p.b_conv = !readable_in_place(b, p.compute);
  p.o_conv = !readable_in_place(out, p.compute);
  p.units_m = std::max<int64_t>(M / kGemmCut, 1);
  p.units_n = std::max<int64_t>(N / kGemmCut, 1);
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  p.grid_m = p.grid_n = 1;
  if (work >= static_cast<double>(kGemmParallelWork)) choose_grid(p, num_threads());
  p.pieces = p.grid_m * p.grid_n;
  const int64_t tm = std::min(kGemmTileRows, M), tn = std::min(kGemmTileRows, N),
                tk = std::min(kGemmTileRows, K);
  p.a_elems = p.a_conv ? tm * tk : 0;
  p.b_elems = p.b_conv ? tk * tn : 0;
  p.o_elems = p.o_conv ? tm * tn : 0;
  return p;
}

int64_t scratch_elements(const Plan& p, const GemmMatrix& a) {
  if (a.cols == 0) return 0;  // K = 0: out is only scaled
  return p.pieces * (p.a_elems + p.b_elems + p.o_elems);
}

// ---- converting tiles -------------------------------------------------------------------

template <typename C, typename S>
void convert_line(const S* src, int64_t stride, int64_t count, C* dst) {
  if (stride == 1) {
    for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<C>(load(src + i));
  } else {
    for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<C>(load(src + i * stride));
  }
}

// Rows [r0, r0 + nr) x columns [c0, c0 + nc) of x as a dense compute-type tile in dst,
// laid out in x's own order (so the copy reads x's memory in order), or row major when
// force_row_major.
template <typename C>
View<C> convert_tile(const GemmMatrix& x, int64_t r0, int64_t nr, int64_t c0, int64_t nc, C* dst,
                     bool force_row_major = false) {
  const bool row_major = force_row_major || !(x.row_stride == 1 && x.col_stride != 1);
  dispatch_floating(x.dtype, "gemm", [&]<typename S>() {
    const S* base = static_cast<const S*>(x.data) + r0 * x.row_stride + c0 * x.col_stride;
    if (row_major) {
      for (int64_t i = 0; i < nr; ++i)
        convert_line(base + i * x.row_stride, x.col_stride, nc, dst + i * nc);
    } else {
      for (int64_t j = 0; j < nc; ++j)
        convert_line(base + j * x.col_stride, x.row_stride, nr, dst + j * nr);
    }
  });
  return {dst, row_major ? nc : nr, row_major};
}

// out tile = acc (row-major [nr, nc]), rounded to out's dtype.
template <typename C>
void store_tile(const GemmMatrix& out, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                const C* acc) {
  dispatch_floating(out.dtype, "gemm", [&]<typename S>() {
    S* base = static_cast<S*>(out.data) + r0 * out.row_stride + c0 * out.col_stride;
    for (int64_t i = 0; i < nr; ++i) {
      S* row = base + i * out.row_stride;
      const C* a = acc + i * nc;
      for (int64_t j = 0; j < nc; ++j)
        store(row + j * out.col_stride, static_cast<compute_t<S>>(a[j]));
    }
  });
}

// ---- Eigen ------------------------------------------------------------------------------

template <typename C, int Order>
using ConstMap = Eigen::Map<const Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Order>, 0,
                            Eigen::OuterStride<>>;
template <typename C, int Order>
using MutMap =
    Eigen::Map<Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Order>, 0, Eigen::OuterStride<>>;

// c = alpha * a b (assign) or c += alpha * a b; a [m, k], b [k, n], c [m, n].
template <typename C, int OA, int OB, int OC>
void eigen_product(View<C> a, View<C> b, View<C> c, int64_t m, int64_t n, int64_t k, C alpha,
                   bool assign) {
  ConstMap<C, OA> A(a.p, m, k, Eigen::OuterStride<>(a.ld));
  ConstMap<C, OB> B(b.p, k, n, Eigen::OuterStride<>(b.ld));
  MutMap<C, OC> Cm(c.p, m, n, Eigen::OuterStride<>(c.ld));
  if (assign) {
    Cm.noalias() = alpha * (A * B);
  } else {
    Cm.noalias() += alpha * (A * B);
  }
}

template <typename C>
void product(View<C> a, View<C> b, View<C> c, int64_t m, int64_t n, int64_t k, C alpha,
             bool assign) {
  constexpr int R = Eigen::RowMajor, L = Eigen::ColMajor;
  const int key = (a.row_major ? 4 : 0) | (b.row_major ? 2 : 0) | (c.row_major ? 1 : 0);
  switch (key) {
    case 0: return eigen_product<C, L, L, L>(a, b, c, m, n, k, alpha, assign);
    case 1: return eigen_product<C, L, L, R>(a, b, c, m, n, k, alpha, assign);
    case 2: return eigen_product<C, L, R, L>(a, b, c, m, n, k, alpha, assign);
    case 3: return eigen_product<C, L, R, R>(a, b, c, m, n, k, alpha, assign);
    case 4: return eigen_product<C, R, L, L>(a, b, c, m, n, k, alpha, assign);
    case 5: return eigen_product<C, R, L, R>(a, b, c, m, n, k, alpha, assign);
    case 6: return eigen_product<C, R, R, L>(a, b, c, m, n, k, alpha, assign);
    default: return eigen_product<C, R, R, R>(a, b, c, m, n, k, alpha, assign);
  }
}

// Element (r, c) of an in-place matrix.
template <typename C>
View<C> in_place_at(const GemmMatrix& x, int64_t r, int64_t c) {
  int64_t ld = 0;
  bool row_major = true;
  in_place_view(x, ld, row_major);
  C* p = static_cast<C*>(x.data) + r * x.row_stride + c * x.col_stride;
  return {p, ld, row_major};
}

// c *= beta for an in-place output tile (beta != 0, != 1).
template <typename C>
void scale_view(View<C> c, int64_t m, int64_t n, C beta) {
  for (int64_t i = 0; i < (c.row_major ? m : n); ++i) {
    C* line = c.p + i * c.ld;
    for (int64_t j = 0; j < (c.row_major ? n : m); ++j) line[j] *= beta;
  }
}

// One piece: out[m0:m1, n0:n1] = alpha a[m0:m1, :] b[:, n0:n1] + beta out[m0:m1, n0:n1].
template <typename C>
void run_piece(const Plan& p, const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out,
               C alpha, C beta, int64_t m0, int64_t m1, int64_t n0, int64_t n1, C* scratch) {
  const int64_t K = a.cols, pm = m1 - m0, pn = n1 - n0;
  const int64_t mt = p.a_conv || p.o_conv ? std::min(kGemmTileRows, pm) : pm;
  const int64_t nt = p.b_conv || p.o_conv ? std::min(kGemmTileRows, pn) : pn;
  const int64_t kt = p.a_conv || p.b_conv ? std::min(kGemmTileRows, K) : K;
  C* a_buf = scratch;
  C* b_buf = a_buf + p.a_elems;
  C* o_buf = b_buf + p.b_elems;
  for (int64_t i0 = m0; i0 < m1; i0 += mt) {
    const int64_t m = std::min(mt, m1 - i0);
    for (int64_t j0 = n0; j0 < n1; j0 += nt) {
      const int64_t n = std::min(nt, n1 - j0);
      View<C> c;
      bool assign = beta == C(0);
      if (p.o_conv) {
        c = {o_buf, n, true};
        if (!assign) {  // acc = beta * out
          convert_tile<C>(out, i0, m, j0, n, o_buf, /*row_major=*/true);
          for (int64_t e = 0; e < m * n; ++e) o_buf[e] *= beta;
        }
      } else {
        c = in_place_at<C>(out, i0, j0);
        if (!assign && beta != C(1)) scale_view(c, m, n, beta);
      }
      for (int64_t k0 = 0; k0 < K; k0 += kt) {
        const int64_t k = std::min(kt, K - k0);
        const View<C> at =
            p.a_conv ? convert_tile<C>(a, i0, m, k0, k, a_buf) : in_place_at<C>(a, i0, k0);
        const View<C> bt =
            p.b_conv ? convert_tile<C>(b, k0, k, j0, n, b_buf) : in_place_at<C>(b, k0, j0);
        product<C>(at, bt, c, m, n, k, alpha, assign);
        assign = false;
      }
      if (p.o_conv) store_tile<C>(out, i0, m, j0, n, o_buf);
    }
  }
}

// K = 0: out = beta * out (0 when beta is 0, whatever out held).
void scale_output(const GemmMatrix& out, double beta) {
  dispatch_floating(out.dtype, "gemm", [&]<typename S>() {
    using C = compute_t<S>;
    S* base = static_cast<S*>(out.data);
    for (int64_t i = 0; i < out.rows; ++i) {
      for (int64_t j = 0; j < out.cols; ++j) {
        S* e = base + i * out.row_stride + j * out.col_stride;
        store(e, beta == 0.0 ? C(0) : static_cast<C>(beta * static_cast<double>(load(e))));
      }
    }
  });
}

template <typename C>
void run(const Plan& p, const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out,
         double alpha, double beta, C* scratch) {
  const int64_t M = out.rows, N = out.cols;
  const int64_t per_piece = p.a_elems + p.b_elems + p.o_elems;
  // Cut i of `grid` pieces over `units` units of a dim of `size` elements.
  auto cut = [](int64_t i, int64_t grid, int64_t units, int64_t size) {
    return i == grid ? size : units * i / grid * kGemmCut;
  };
  parallel_for(p.pieces, [&](int64_t begin, int64_t end, int worker) {
    for (int64_t piece = begin; piece < end; ++piece) {
      const int64_t pi = piece / p.grid_n, pj = piece % p.grid_n;
      const int64_t m0 = cut(pi, p.grid_m, p.units_m, M), m1 = cut(pi + 1, p.grid_m, p.units_m, M);
      const int64_t n0 = cut(pj, p.grid_n, p.units_n, N), n1 = cut(pj + 1, p.grid_n, p.units_n, N);
      run_piece<C>(p, a, b, out, static_cast<C>(alpha), static_cast<C>(beta), m0, m1, n0, n1,
                   scratch + worker * per_piece);
    }
  });
}

}  // namespace

GemmMatrix gemm_matrix(const Tensor& t) {
  return {t.data_ptr(), t.dtype(), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

bool gemm_in_place(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out) {
  const DType cd = compute_dtype(a, b, out);
  return readable_in_place(a, cd) && readable_in_place(b, cd) && readable_in_place(out, cd);
}

size_t gemm_scratch_bytes(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out) {
  if (out.rows == 0 || out.cols == 0) return 0;
  const Plan p = plan_of(a, b, out);
  const size_t bytes = static_cast<size_t>(scratch_elements(p, a)) * element_size(p.compute);
  // The caching allocator's block sizes (Note [Sizes], core/caching_allocator.h): 512 B
  // multiples, and 2 MiB multiples from 10 MiB on (such a request is a segment of its own).
  if (bytes >= (size_t{10} << 20))
    return (bytes + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
  return (bytes + 511) / 512 * 512;
}

void gemm(const GemmMatrix& a, const GemmMatrix& b, const GemmMatrix& out, double alpha,
          double beta) {
  if (out.rows == 0 || out.cols == 0) return;
  if (a.cols == 0) {
    scale_output(out, beta);
    return;
  }
  const Plan p = plan_of(a, b, out);
  const int64_t elements = scratch_elements(p, a);
  const Tensor scratch = elements > 0 ? raw::empty({elements}, p.compute, kCPU) : Tensor();
  if (p.compute == DType::f64) {
    run<double>(p, a, b, out, alpha, beta, elements > 0 ? scratch.data<double>() : nullptr);
  } else {
    run<float>(p, a, b, out, alpha, beta, elements > 0 ? scratch.data<float>() : nullptr);
  }
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  CG_CHECK(a.defined() && b.defined() && out.defined(),
           "gemm: a, b and out must be defined tensors");
  CG_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2, "gemm: a, b and out must be 2-D, got ",
           a.dim(), "-d, ", b.dim(), "-d and ", out.dim(), "-d");
  CG_CHECK(a.size(1) == b.size(0) && out.size(0) == a.size(0) && out.size(1) == b.size(1),
           "gemm: shapes do not chain: a [", a.size(0), ", ", a.size(1), "] @ b [", b.size(0), ", ",
           b.size(1), "] into out [", out.size(0), ", ", out.size(1), "]");
  CG_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()) && is_floating(out.dtype()),
           "gemm: a, b and out must be floating tensors, got ", dtype_name(a.dtype()), ", ",
           dtype_name(b.dtype()), " and ", dtype_name(out.dtype()));
  CG_CHECK(a.device() == b.device() && a.device() == out.device(),
           "gemm: a, b and out must be on one device (host-addressable memory)");
  gemm(gemm_matrix(a), gemm_matrix(b), gemm_matrix(out), alpha, beta);
}

size_t gemm_scratch_bytes(const Tensor& a, const Tensor& b, const Tensor& out) {
  return gemm_scratch_bytes(gemm_matrix(a), gemm_matrix(b), gemm_matrix(out));
}

// The CPU table's entries: cpu::gemm itself, and its scratch bound by shape only.
void CpuKernels::gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                      double beta) {
  cpu::gemm(a, b, out, alpha, beta);
}

size_t CpuKernels::gemm_scratch_bytes(const GemmDesc& d) const {
  // Shapes only: a dense operand as row major, any other with no unit stride at all.
  auto matrix = [](DType dtype, int64_t rows, int64_t cols, bool dense) {
    return dense ? GemmMatrix{nullptr, dtype, rows, cols, std::max<int64_t>(cols, 1), 1}
                 : GemmMatrix{nullptr, dtype, rows, cols, 2 * std::max<int64_t>(cols, 1), 2};
  };
  return cpu::gemm_scratch_bytes(matrix(d.a, d.m, d.k, d.a_dense), matrix(d.b, d.k, d.n, d.b_dense),
                                 matrix(d.out, d.m, d.n, d.out_dense));
}

}  // namespace cg::cpu
