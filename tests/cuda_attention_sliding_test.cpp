// Why this file exists: the sliding-window DFlash rule (the drafter's sliding layers,
// AttentionMask::dflash_blocks with sliding_window W) on the GPU against the CPU
// reference, forward (out, lse) and backward (dq, dk, dv), on every path that takes it:
// flash (bf16, f16; Note [Sliding tiles] in cuda/attention_flash_common.cuh) and rows
// (every dtype). The cases aim at the packed tiles: GQA groups 4 (32/8 heads) and 5
// (40/8), head dims 64 and 128, anchors at 0, 1 and the end, repeated and padded (by a
// negative anchor and by flag), per-batch anchors, windows of 1, narrower than a block,
// straddling key tiles and wider than the context, blocks wider than a tile (tiles whose
// rows are one head's slots kmin..kmax with kmin > 0), and a shape near the real one
// (64 blocks x 24 over 4096 context keys, W = 2048); the dk/dv pass's context key parts
// split by active blocks under both rules; the Hopper forward's dense tiles (rows of several
// blocks in one CTA) under both rules; the backward's scratch read only where written.
// Compiled only in CUDA builds; skipped without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/factories.h"
#include "cuda/cuda_attention.h"
#include "cuda/cuda_kernels.h"
#include "ops/attention_mask.h"
#include "tests/cuda_attention_test_util.h"

namespace cg {
namespace {

using cuda::AttentionPath;
using testing::check_case;
using testing::check_paths;
using testing::dflash_case;
using testing::kDTypes;
using testing::ScopedEnv;

class CudaAttentionSlidingTest : public testing::CudaAttentionTest {};

std::string label(int64_t hq, int64_t hkv, int64_t hd, int64_t W) {
  return "heads " + std::to_string(hq) + "/" + std::to_string(hkv) + " hd " + std::to_string(hd) +
         " W " + std::to_string(W);
}

// Blocks of 24 over 150 context keys (three key tiles), per-batch anchors at 0, 1, the
// end (150), repeated, mid-way and padded both ways; windows 1 (a slot sees itself), 5
// (narrower than the block: the in-block window cuts), 70 (straddles key tiles) and 1000
// (wider than the context). Every dtype and path, hd 64 and 128, GQA 4 and 5.
TEST_F(CudaAttentionSlidingTest, EdgeCasesEveryDtypeAndPath) {
  const int64_t S = 150, N = 6, Bs = 24;
  const Tensor anchors = from_ints({0, 1, 150, 150, -1, 64,  //
                                    7, 0, 97, 97, 130, 2},
                                   {2, N});
  const Tensor padded =
      from_vector({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, {2, N}, {.dtype = DType::boolean});
  for (DType dt : kDTypes) {
    for (int64_t hd : {64, 128}) {
      for (int64_t hq : {32, 40}) {
        for (int64_t W : {1, 5, 70, 1000}) {
          const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, anchors, padded, W);
          check_paths(dflash_case(dt, hd, hq, 8, 2, S, N, Bs, m), label(hq, 8, hd, W));
        }
      }
    }
  }
}

// Shared anchors ([N]), sorted as the trainer draws them, including the first and last
// context positions; W around a tile (63, 64, 65) and the block size (24).
TEST_F(CudaAttentionSlidingTest, SharedAnchorsWindowsAroundATile) {
  const int64_t S = 200, N = 5, Bs = 24;
  const Tensor anchors = from_ints({0, 33, 64, 129, 200}, {N});
  for (DType dt : {DType::bf16, DType::f16}) {
    for (int64_t W : {24, 63, 64, 65}) {
      const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, anchors, Tensor(), W);
      check_paths(dflash_case(dt, 128, 32, 8, 1, S, N, Bs, m), label(32, 8, 128, W));
    }
  }
}

// Blocks wider than a tile: 70 slots x group 3 (210 packed rows; dq tiles of one head's
// slots 0..63 and 52..69), 150 slots x group 2 (a forward tile of slots 106..149 only),
// and blocks of 16 without GQA.
TEST_F(CudaAttentionSlidingTest, WideAndSmallBlocks) {
  for (DType dt : {DType::bf16, DType::f32}) {
    for (int64_t W : {30, 100}) {
      const AttentionMask m70 =
          AttentionMask::dflash_blocks(40, 70, from_ints({0, 40, 17}, {3}), Tensor(), W);
      check_paths(dflash_case(dt, 128, 3, 1, 1, 40, 3, 70, m70), "Bs 70 " + label(3, 1, 128, W));
      const AttentionMask m150 =
          AttentionMask::dflash_blocks(300, 150, from_ints({300, 120}, {2}), Tensor(), W);
      check_paths(dflash_case(dt, 64, 2, 1, 1, 300, 2, 150, m150), "Bs 150 " + label(2, 1, 64, W));
      const AttentionMask m16 =
          AttentionMask::dflash_blocks(70, 16, from_ints({1, 0, 70, 33, 64}, {5}), Tensor(), W);
      check_paths(dflash_case(dt, 64, 2, 2, 1, 70, 5, 16, m16), "Bs 16 " + label(2, 2, 64, W));
    }
  }
}

// Note [Row table] (cuda/attention_flash_dkdv_layout.cuh): the dk/dv pass looks up where a packed
// row lives in a table of group * block_size rows, up to 512; larger groups work rows out
// as before. 8 heads x 70 slots (560 rows) takes that path, under both rules.
TEST_F(CudaAttentionSlidingTest, GroupsPastTheRowTable) {
  for (int64_t W : {0, 30}) {
    const AttentionMask m =
        AttentionMask::dflash_blocks(100, 70, from_ints({0, 100, 37}, {3}), Tensor(), W);
    check_paths(dflash_case(DType::bf16, 64, 8, 1, 1, 100, 3, 70, m),
                "Bs 70 " + label(8, 1, 64, W));
  }
}

// Near the drafter's shape: 64 blocks of 24 over 4096 context keys, W = 2048, 32/8 heads
// of 128, anchors spread over the context and sorted (one at 0, one at the end), bf16 on
// the path automatic takes (flash).
TEST_F(CudaAttentionSlidingTest, NearTheRealShape) {
  const int64_t S = 4096, N = 64, Bs = 24, W = 2048;
  std::vector<int64_t> a(N);
  for (int64_t b = 0; b < N; ++b) a[b] = b * S / (N - 1);
  const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, from_ints(a, {N}), Tensor(), W);
  check_case(dflash_case(DType::bf16, 128, 32, 8, 1, S, N, Bs, m), AttentionPath::automatic,
             "64 x 24 over 4096, " + label(32, 8, 128, W));
}

// Note [Dense DFlash rows] (cuda/attention_flash_dense_rows.cuh): where the anchors ascend,
// the Hopper forward packs the rows of consecutive blocks into its 192-row CTAs (128 with
// CHUNKGRAD_FLASH_FWD_ROWS=128, ctest attention_dense_two_warpgroups). Blocks of 16 without
// GQA (16 rows a block: a CTA holds 12 blocks; 8 at 128 rows), 21 of them (a partial last
// CTA of 9; 5 at 128 rows), two batch rows of ascending anchors (the second with repeats, at 0 and at the end),
// and padded blocks (a negative anchor) inside a CTA; 3 heads x 24 (72 rows: CTAs start
// mid-block); a CTA whose last context tile runs past the context range into block keys its
// rows see; under the full rule (W 0), a window narrower than a block (5) and one across
// key tiles (40). (Shuffled anchors take one-block tiles: DflashLongContext and the rest.)
TEST_F(CudaAttentionSlidingTest, DenseTilesOfSmallBlocks) {
  const int64_t S = 200, N = 21, Bs = 16;
  std::vector<int64_t> a(2 * N);
  for (int64_t b = 0; b < N; ++b) {
    a[b] = b * S / (N - 1) / 3 * 3;  // ascending: 0, 9, 18, 30, ..., 198
    a[N + b] = b * b * S / ((N - 1) * (N - 1));
  }
  a[5] = -1;
  a[N + 12] = -1;
  for (int64_t W : {0, 5, 40}) {
    const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, from_ints(a, {2, N}), Tensor(), W);
    check_paths(dflash_case(DType::bf16, 128, 2, 2, 2, S, N, Bs, m),
                "Bs 16 " + label(2, 2, 128, W));
    const AttentionMask m24 = AttentionMask::dflash_blocks(
        S, 24, from_ints(std::vector<int64_t>(a.begin() + N, a.begin() + N + 7), {7}), Tensor(), W);
    check_paths(dflash_case(DType::f16, 128, 3, 1, 1, S, 7, 24, m24),
                "Bs 24 " + label(3, 1, 128, W));
    // One CTA holds all four blocks; its last context tile [192, 256) runs past the range's
    // end (200) into the block keys (200 + 16 b), which its rows see: loaded as zeros there,
    // they must stay hidden.
    const AttentionMask tail =
        AttentionMask::dflash_blocks(S, Bs, from_ints({5, 190, 198, 200}, {4}), Tensor(), W);
    check_paths(dflash_case(DType::bf16, 128, 1, 1, 1, S, 4, Bs, tail),
                "tail " + label(1, 1, 128, W));
  }
}

// Two batch rows of 16 blocks over 256 context keys: anchors at 0, the end, repeated,
// bunched at tile edges, padded by -1 and by flag.
constexpr int64_t kPartsContext = 256, kPartsBlocks = 16;
Tensor parts_anchors() {
  return from_ints({0, 0, 1, 63, 64, 64, 65, 127, 128, 129, 192, 200, 255, 256, 256, -1,
                    0, 0, 0, 0,  3,  64, 64, 64,  64,  64,  64,  130, 250, 256, 256, 256},
                   {2, kPartsBlocks});
}
Tensor parts_padded() {
  return from_vector({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0,
                      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
                     {2, kPartsBlocks}, {.dtype = DType::boolean});
}

// Note [Context key parts] splits a context key tile's active blocks (not its block
// indices) among the dk/dv pass's CTAs: 16 sorted blocks over 4 key tiles (8 parts here),
// anchors at 0, repeated, at tile edges (63, 64, 128), at the end (256) and padded (a
// negative anchor, and by flag), so that tiles have from none to all blocks active and
// most parts get one block or none; under the full rule (W 0) and windows where a tile
// sees one key (2: slot 0 of anchor 64 sees only key 63), a whole tile (65) or a tile plus
// one key (66).
TEST_F(CudaAttentionSlidingTest, ContextPartsByActiveBlocks) {
  const int64_t S = kPartsContext, N = kPartsBlocks, Bs = 24;
  const Tensor anchors = parts_anchors(), padded = parts_padded();
  for (DType dt : {DType::bf16, DType::f16}) {
    for (int64_t W : {0, 2, 65, 66, 1000}) {
      const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, anchors, padded, W);
      check_paths(dflash_case(dt, 128, 32, 8, 2, S, N, Bs, m), label(32, 8, 128, W));
    }
  }
}

// The backward's scratch starting as NaN (CHUNKGRAD_FLASH_SCRATCH_NAN=1): every part of it
// the flash backward reads must be written first -- the context parts' partial sums and
// the fused dq's buffer, which at hd 128 the blocks' own key CTAs store before the context
// CTAs add (Note [dq first writers] in cuda/attention_flash_dkdv.cu) and whose padded
// blocks' rows nobody writes. Both rules, padded blocks, blocks of 24 and 64 (one key
// tile), of 20 and 5 (4 x 20 and 4 x 5 rows end inside a 32-row tile) and of 70 (two key
// tiles: the buffer is zeroed then). The stores are bulk copies on sm_90, and float2
// stores with CHUNKGRAD_FLASH_DQ_BULK=0 (the second pass); on a card without the
// warpgroup MMA the buffer is zeroed and added to instead.
TEST_F(CudaAttentionSlidingTest, ScratchStartingAsNaN) {
  const ScopedEnv nan_scratch("CHUNKGRAD_FLASH_SCRATCH_NAN", "1");
  const int64_t S = kPartsContext, N = kPartsBlocks;
  const Tensor anchors = parts_anchors(), padded = parts_padded();
  for (const char* bulk : {"1", "0"}) {
    const ScopedEnv pass("CHUNKGRAD_FLASH_DQ_BULK", bulk);
    for (int64_t Bs : {24, 64, 20, 5, 70}) {
      for (int64_t W : {0, 66}) {
        const AttentionMask m = AttentionMask::dflash_blocks(S, Bs, anchors, padded, W);
        check_case(dflash_case(DType::bf16, 128, 32, 8, 2, S, N, Bs, m), AttentionPath::flash,
                   label(32, 8, 128, W) + " Bs " + std::to_string(Bs) + " bulk " + bulk);
      }
    }
  }
}

// Automatic takes flash for the sliding rule in bf16 / f16 (rows otherwise); forcing
// cudnn on it is refused, as for the full DFlash rule.
TEST_F(CudaAttentionSlidingTest, PathChoice) {
  const Device d = cuda_device(0);
  const AttentionMask m = AttentionMask::dflash_blocks(8, 4, from_ints({4, 8}, {2}), Tensor(), 3);
  const ResolvedAttentionMask r = resolve_attention_mask(m, 1, 4, 8, 16, d, "t");
  EXPECT_EQ(r.sliding_window, 3);
  EXPECT_STREQ(cuda::cuda_attention_path(DType::bf16, 128, r, 0.1), "flash");
  EXPECT_STREQ(cuda::cuda_attention_path(DType::f32, 128, r, 0.1), "rows");
  const Tensor q = empty({1, 4, 8, 128}, {.dtype = DType::bf16, .device = d});
  const Tensor k = empty({1, 4, 16, 128}, {.dtype = DType::bf16, .device = d});
  EXPECT_THROW(cuda::CudaKernels(AttentionPath::cudnn).attention_forward(q, k, k, r, 0.1), Error);
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
