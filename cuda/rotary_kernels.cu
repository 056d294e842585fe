// Why this file exists: the CUDA rotary kernel (launch_rotary, declared in
// cuda/norm_kernels.h beside rms_norm's). It moves little data per element, so it gives a
// row of x to a group of lanes (Note [Row groups], cuda/row_groups.cuh): the row's
// offsets and its position are found once per row, and each lane rotates a run of pairs
// (i, i + hd/2), reading both halves in 16-byte packs where the layout allows.
//
// Numerics, as the CPU (cpu/rotary.cpp) to rounding: the angle pos * theta^(-2i/hd) is
// formed in double and reduced to [-pi, pi] there (a multiplication by 1/(2 pi), rint, and
// an fma); the sine and cosine of the reduced angle are then taken in float (about 1e-7
// absolute: a double sincos per element made this kernel compute-bound). f64 tensors take
// a double sincos of the angle itself. The rotation is in the compute type.
#include <type_traits>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"
#include "cuda/norm_kernels.h"
#include "cuda/row_groups.cuh"

namespace cg::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------

// The inverse frequencies theta^(-2i/hd) of the first kRotaryTable pairs are computed once
// per block into shared memory.
constexpr int kRotaryTable = 256;

// cos and sign * sin of `angle` (Numerics above).
template <typename C>
__device__ __forceinline__ void rotation_of(double angle, double sign, C& c, C& s) {
  if constexpr (std::is_same_v<C, double>) {
    double sd, cd;
    sincos(angle, &sd, &cd);
    c = cd;
    s = sign * sd;
  } else {
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    constexpr double kInvTwoPi = 0.15915494309189533576888376337251;
    const float reduced = static_cast<float>(angle - kTwoPi * rint(angle * kInvTwoPi));
    float sf, cf;
    sincosf(reduced, &sf, &cf);
    c = static_cast<C>(cf);
    s = static_cast<C>(sign * sf);
  }
}

// x rows from `rows` operand 0 ([..., S, H] leading dims), elements stride sx; out rows
// contiguous [hd]; positions[offset of operand 2] the row's position. kLanes lanes per row;
// kPacked: unit strides and aligned rows, a lane rotates kPack<T> pairs per step.
template <typename T, int kLanes, bool kPacked>
__global__ void __launch_bounds__(kThreads)
    rotary_kernel(const T* x, T* out, const int64_t* positions, Strided rows, int64_t hd,
                  int64_t sx, double theta, double sign) {
  using C = compute_t<T>;
  constexpr int P = kPacked ? kPack<T> : 1;
  const int64_t half = hd / 2;
  __shared__ double inv_table[kRotaryTable];
  for (int64_t i = threadIdx.x; i < half && i < kRotaryTable; i += blockDim.x) {
    inv_table[i] = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
  }
  __syncthreads();
  const RowLanes<kLanes> at;
  for (int64_t r = blockIdx.x * at.per_block + at.group; r < rows.numel;
       r += gridDim.x * at.per_block) {
    int64_t o[3];
    offsets_of<3>(rows, r, o);
    const double pos = static_cast<double>(positions[o[2]]);
    const T* xr = x + o[0];
    T* yr = out + r * hd;
    for (int64_t i0 = static_cast<int64_t>(at.lane) * P; i0 < half; i0 += kLanes * P) {
      C a[P], b[P], ya[P], yb[P];
      if constexpr (kPacked) {
        load_pack<T, P>(xr + i0, a);
        load_pack<T, P>(xr + i0 + half, b);
      } else {
        a[0] = ld(xr + i0 * sx);
        b[0] = ld(xr + (i0 + half) * sx);
      }
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const int64_t i = i0 + e;
        const double inv_freq =
            i < kRotaryTable ? inv_table[i]
                             : pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
        C c, s;
        rotation_of<C>(pos * inv_freq, sign, c, s);
        ya[e] = a[e] * c - b[e] * s;
        yb[e] = b[e] * c + a[e] * s;
      }
      store_pack<T, P>(yr + i0, ya);
      store_pack<T, P>(yr + i0 + half, yb);
    }
  }
}

// Calls f(lanes) as an integral constant, lanes in {4, 8, 16, 32}.
template <typename F>
void with_lanes(int lanes, F&& f) {
  using std::integral_constant;
  switch (lanes) {
    case 4: return f(integral_constant<int, 4>{});
    case 8: return f(integral_constant<int, 8>{});
    case 16: return f(integral_constant<int, 16>{});
    default: return f(integral_constant<int, 32>{});
  }
}

}  // namespace

// ---- launcher -----------------------------------------------------------------------------

void launch_rotary(DType dtype, const void* x, void* out, const int64_t* positions,
                   const Strided& rows, int64_t hd, int64_t sx, double theta, bool inverse,
                   cudaStream_t stream) {
  const int64_t half = hd / 2;
  if (rows.numel == 0 || half == 0) return;
  const double sign = inverse ? -1.0 : 1.0;
  visit_floating(dtype, "apply_rotary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int P = kPack<T>;
    // Packs of both halves: unit strides, half a multiple of the pack, aligned rows.
    const bool packed = sx == 1 && half % P == 0 && packs_fit(x, rows, 0, P) && aligned16(out);
    const int64_t units = packed ? half / P : half;  // a lane's steps along a row
    const int lanes = static_cast<int>(std::clamp<int64_t>(pow2_at_least(units), 4, 32));
    with_lanes(lanes, [&](auto lanes_c) {
      constexpr int L = decltype(lanes_c)::value;
      const auto kernel = packed ? rotary_kernel<T, L, true> : rotary_kernel<T, L, false>;
      kernel<<<row_grid(kernel, kThreads, rows.numel, kThreads / L), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(out), positions, rows, hd, sx, theta, sign);
    });
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
