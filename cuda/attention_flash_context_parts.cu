// Why this file exists: the two small kernels around the flash dk/dv pass that Note
// [Context key parts] (cuda/attention_flash_key_tiles.cuh) adds -- one finds each split
// context tile's block range before the pass, one adds the parts' partial dk and dv after
// it -- and the choice of how many parts, apart from the pass itself
// (cuda/attention_flash_dkdv.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "cuda/attention_flash_backward.cuh"
#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_key_tiles.cuh"
#include "cuda/attention_kernels.h"
#include "cuda/cuda_check.h"
#include "cuda/wgmma.cuh"

namespace cg::cuda::flash {

namespace {

// Note [Context key parts]: the block range of every (batch row, context tile, part) into
// a.ctx_ranges, one warp each (grid: batch_grid(ctx_tiles * parts, B)), before the dk/dv
// pass; there the range is two loads instead of a loop in a kernel short of registers.
__global__ void context_ranges_kernel(BwdArgs a) {
  const int64_t b = batch_of_block();  // Note [Batch grid]
  if (b >= a.s.B) return;
  KeyTileWork w = key_tile_work<kTile>(a.s, a.m, a.ctx_parts, a.ctx_key_tile, blockIdx.x);
  balance_context_part(w, a.m, b, a.ctx_parts);
  if (threadIdx.x == 0) {
    int* r = a.ctx_ranges + (b * gridDim.x + blockIdx.x) * 2;
    r[0] = static_cast<int>(w.seg_begin);
    r[1] = static_cast<int>(w.seg_end);
  }
}

// Note [Context key parts]: dk = scale * (sum of the parts' dk), dv = sum of their dv, for
// the context keys [0, context_len) of every (b, kv head); a thread per pair of elements.
template <typename T, int HD>
__global__ void context_parts_sum_kernel(BwdArgs a) {
  const AttnShape& s = a.s;
  const int64_t ctx = a.m.context_len, parts = a.ctx_parts;
  const int64_t pairs = s.B * s.Hkv * ctx * (HD / 2);
  const int64_t plane = s.B * parts * s.Hkv * ctx * HD;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < pairs;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = (e % (HD / 2)) * 2, j = (e / (HD / 2)) % ctx;
    const int64_t hk = (e / (HD / 2) / ctx) % s.Hkv, b = e / (HD / 2) / ctx / s.Hkv;
    float2 sk = make_float2(0.f, 0.f), sv = make_float2(0.f, 0.f);
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t at = (((b * parts + p) * s.Hkv + hk) * ctx + j) * HD + d;
      const float2 k = *reinterpret_cast<const float2*>(a.ctx_partial + at);
      const float2 v = *reinterpret_cast<const float2*>(a.ctx_partial + plane + at);
      sk.x += k.x;
      sk.y += k.y;
      sv.x += v.x;
      sv.y += v.y;
    }
    const int64_t row = (b * s.Hkv + hk) * s.Sk + j;
    if (a.dk != nullptr) {
      *reinterpret_cast<uint32_t*>(static_cast<T*>(a.dk) + row * HD + d) =
          pack2<T>(sk.x * a.scale, sk.y * a.scale);
    }
    if (a.dv != nullptr) {
      *reinterpret_cast<uint32_t*>(static_cast<T*>(a.dv) + row * HD + d) = pack2<T>(sv.x, sv.y);
    }
  }
}

}  // namespace

void launch_context_ranges(const BwdArgs& a, cudaStream_t stream) {
  const int64_t ctx_tiles = (a.m.context_len + a.ctx_key_tile - 1) / a.ctx_key_tile;
  context_ranges_kernel<<<batch_grid(ctx_tiles * a.ctx_parts, a.s.B), 32, 0, stream>>>(a);
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_context_parts_sum(DType dtype, const BwdArgs& a, cudaStream_t stream) {
  dispatch_flash(dtype, a.s.hd, [&]<typename T, int HD>() {
    const int64_t pairs = a.s.B * a.s.Hkv * a.m.context_len * (HD / 2);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((pairs + 255) / 256, 65536));
    context_parts_sum_kernel<T, HD><<<blocks, 256, 0, stream>>>(a);
    CG_CUDA_CHECK(cudaGetLastError());
  });
}

int dkdv_context_parts(const AttnShape& s, const AttnMaskArgs& m) {
  if (m.kind != AttnMaskKind::dflash || m.context_len == 0 || m.num_blocks < 2) return 1;
  static const int forced = [] {  // CHUNKGRAD_FLASH_DKDV_PARTS=1..8: for benchmarks
    const char* e = std::getenv("CHUNKGRAD_FLASH_DKDV_PARTS");
    const int v = e != nullptr ? std::atoi(e) : 0;
    return v >= 1 && v <= 8 ? v : 0;
  }();
  int device = 0, sms = 0;
  CG_CUDA_CHECK(cudaGetDevice(&device));
  CG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // About four waves of context CTAs at three CTAs a multiprocessor (Note [dk/dv query
  // tiles]), so that no single tile's CTA outlasts the rest by much. (Counted in 64-key
  // tiles; the 128-key CTAs of Note [128-key CTAs] are half as many at one a
  // multiprocessor, i.e. as many waves, and 8 parts measured the same as these 4 there.)
  // Under the full rule with ascending anchors (the trainer's), three waves' worth: the
  // 128-key CTAs on 48-row tiles (Note [48-row query tiles]; H100, 32/8 heads, 1024 x 24
  // over 4096 keys, two rounds of CHUNKGRAD_FLASH_DKDV_PARTS=1..5 in one call, 2026-12-05)
  // took the backward in 8.06, 8.00-8.05, 7.91-7.97, 8.14-8.21 and 8.11-8.15 ms with 1 to
  // 5 parts, and at 40/8 heads (32-row tiles) 10.71-10.73 with 3 against 10.79-10.82 with
  // 4; with shuffled anchors 4 stayed ahead (7.21-7.23 against 7.35-7.38), as it did under
  // the sliding rule (6.61-6.63 against 6.75 sorted, 8.93 against 9.00 at 40/8).
  // (Where the 128-key CTAs run: head dim 128 on the warpgroup MMA; measured nowhere else.)
  const bool wide = s.hd == 128 && wgmma::available();
  const int64_t waves = wide && m.anchors_sorted && m.sliding_window == 0 ? 9 : 12;
  const int64_t ctx_ctas = (m.context_len + kTile - 1) / kTile * s.Hkv * s.B;
  const int64_t wanted = forced != 0 ? forced : (waves * sms + ctx_ctas - 1) / ctx_ctas;
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, std::min<int64_t>(8, m.num_blocks)));
}

}  // namespace cg::cuda::flash
