// Why this file exists: Hopper's warpgroup MMA (wgmma, sm_90a) in inline PTX, for the
// flash attention kernels that use it (attention_flash_forward_wgmma.cu): the shared-memory
// matrix descriptor, the 128-byte swizzle the descriptors describe, the MMA shapes the
// kernels issue and the fences around them. No CUTLASS: a handful of instructions, named.
//
// Note [wgmma]: a warpgroup (4 consecutive warps, 128 threads) issues one MMA together:
// D (64 x N, fp32, registers) (+)= A (64 x 16) * B (16 x N). A comes from shared memory
// (a descriptor) or from registers; B always from shared memory. The instruction is
// asynchronous: `commit` closes a group of issued MMAs and `wait<n>` blocks until at most
// n groups are still running. The compiler does not know the registers of D are in flight,
// so every D register is passed through an empty asm before the first MMA and after the
// wait (fence_operands): no read or write of D moves into the window.
//   - Fragments: warp w of the group holds rows 16w .. 16w + 15 of D, laid out per n8 column
//     block t exactly as mma.sync m16n8's C fragment: d[4t + e] is row 16w + lane/4 + 8(e/2),
//     column 8t + 2(lane%4) + e%2. A from registers is mma.sync m16n8k16's A fragment. So
//     the mma.sync kernels' softmax, masks and packing carry over unchanged.
//   - Shared-memory operands here use the 128-byte swizzle: a tile of rows of 64 16-bit
//     elements (128 bytes a row), base 1024-byte aligned, 16-byte chunk c of row r stored at
//     r * 128 + ((c ^ (r % 8)) * 16) (swizzle128_offset). A row of 128 elements (head dim
//     128) is two such tiles, one after the other ("column blocks").
//   - K-major operand (the 16-long K dimension contiguous: Q and K for S = Q K^T): SBO =
//     1024 (the next 8 rows), LBO unused; the k-th 16 columns of a column block start at
//     +32 k bytes (the hardware applies the swizzle to the address it forms).
//   - MN-major operand (N contiguous: V for O += P V, rows are keys = the K dimension):
//     "transposed" (tnsp = 1); SBO = 1024 (the next 8 keys), LBO = the byte distance to the
//     next column block of 64 N-elements; the k-th 16 keys start at +2048 k bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace cg::cuda::wgmma {

// Whether this process may launch wgmma kernels: built for sm_90a (CHUNKGRAD_CUDA_ARCHS
// holds 90a), the current card is compute capability 9.0 (an sm_90a binary runs there
// only) and CHUNKGRAD_FLASH_WGMMA is not "0". Host code; read once.
bool available();

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a 128-byte-swizzled tile.
__device__ __forceinline__ uint32_t swizzle128_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) * 16));
}

// A shared-memory matrix descriptor for the 128-byte swizzle (layout type 1).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                               uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_byte_addr >> 4) & 0x3fff);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3fff) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3fff) << 32;
  d |= uint64_t{1} << 62;
  return d;
}

// desc_sw128(addr + bytes, ...) from desc = desc_sw128(addr, ...), bytes a multiple of 16:
// the start address is the descriptor's low 14 bits in 16-byte units, and (addr + bytes) >> 4
// stays below 2^14 for any shared memory address (< 256 KB), so it is one 32-bit add on the
// low word that never carries out of the field, and the high word stays as it is. (Built
// from each MMA's own address, a descriptor cost about ten instructions: shift, mask, or,
// the high word's constant, each moved to a uniform register; Note [Descriptors once a
// tile] in cuda/attention_flash_dkdv_kernel.cuh.)
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xffffffff00000000ull) | lo;
}

// (Outside an sm_90a compile these trap: the host launches wgmma kernels only where
// they exist, but their code must compile in every build.)
__device__ __forceinline__ void fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Generic-proxy writes to shared memory (st.shared, cp.async) before wgmma reads them.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The MMAs, one asm statement each; TY is the operand type's PTX name, "bf16" or "f16".
// SS: A and B from shared memory, B K-major; TA "0": A K-major, "1": MN-major (imm-trans-a);
// p = accumulate into d.
#define CG_WGMMA_SS(N, TY, OUTS, REGS, A, B, P, TA)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P                                         \
               ", 0;\n"                                                                      \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, " A \
               ", " B ", p, 1, 1, " TA ", 0;\n}\n"                                           \
               : OUTS                                                                        \
               : "l"(a), "l"(b), "r"(accumulate))
// RS: A from registers, B from shared memory, MN-major (imm-trans-b 1); always accumulates.
#define CG_WGMMA_RS(N, TY, OUTS, REGS, A, B, P)                                              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P                                         \
               ", 0;\n"                                                                      \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, " A \
               ", " B ", p, 1, 1, 1;\n}\n"                                                   \
               : OUTS                                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))
// D registers and their operands, 16, 32 or 64 of them (each list extends the last).
#define CG_WGMMA_D16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define CG_WGMMA_D24 CG_WGMMA_D16 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define CG_WGMMA_D32 \
  CG_WGMMA_D16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define CG_WGMMA_D64                                                                        \
  CG_WGMMA_D32                                                                              \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, " \
  "%49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define CG_WGMMA_OUTS16                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15])
#define CG_WGMMA_OUTS24                                                                          \
  CG_WGMMA_OUTS16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), \
      "+f"(d[22]), "+f"(d[23])
#define CG_WGMMA_OUTS32                                                                          \
  CG_WGMMA_OUTS16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define CG_WGMMA_OUTS64                                                                          \
  CG_WGMMA_OUTS32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), \
      "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), \
      "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), \
      "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), \
      "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (64 x 32, fp32) = (accumulate ? d : 0) + A (64 x 16, desc a) * B (16 x 32, K-major: 32
// rows of 16, desc b). A is K-major, or with MnMajorA MN-major (its 64 rows contiguous: K^T
// read from K's tile, as the fused dq's dq^T = K^T dS^T does).
template <typename T, bool MnMajorA = false>
__device__ __forceinline__ void mma_m64n32k16_ss(float (&d)[16], uint64_t a, uint64_t b,
                                                 int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<T, __nv_bfloat16> && MnMajorA) {
    CG_WGMMA_SS(32, "bf16", CG_WGMMA_OUTS16, CG_WGMMA_D16, "%16", "%17", "%18", "1");
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    CG_WGMMA_SS(32, "bf16", CG_WGMMA_OUTS16, CG_WGMMA_D16, "%16", "%17", "%18", "0");
  } else if constexpr (MnMajorA) {
    CG_WGMMA_SS(32, "f16", CG_WGMMA_OUTS16, CG_WGMMA_D16, "%16", "%17", "%18", "1");
  } else {
    CG_WGMMA_SS(32, "f16", CG_WGMMA_OUTS16, CG_WGMMA_D16, "%16", "%17", "%18", "0");
  }
#else
  __trap();
#endif
}

// The same with N = 48 (Note [48-row query tiles] in cuda/attention_flash_dkdv.cu).
template <typename T, bool MnMajorA = false>
__device__ __forceinline__ void mma_m64n48k16_ss(float (&d)[24], uint64_t a, uint64_t b,
                                                 int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<T, __nv_bfloat16> && MnMajorA) {
    CG_WGMMA_SS(48, "bf16", CG_WGMMA_OUTS24, CG_WGMMA_D24, "%24", "%25", "%26", "1");
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    CG_WGMMA_SS(48, "bf16", CG_WGMMA_OUTS24, CG_WGMMA_D24, "%24", "%25", "%26", "0");
  } else if constexpr (MnMajorA) {
    CG_WGMMA_SS(48, "f16", CG_WGMMA_OUTS24, CG_WGMMA_D24, "%24", "%25", "%26", "1");
  } else {
    CG_WGMMA_SS(48, "f16", CG_WGMMA_OUTS24, CG_WGMMA_D24, "%24", "%25", "%26", "0");
  }
#else
  __trap();
#endif
}

// m64n32k16 or m64n48k16, chosen by d's size (a thread holds N / 2 floats of D).
template <typename T, bool MnMajorA = false, int N>
__device__ __forceinline__ void mma_m64nQk16_ss(float (&d)[N], uint64_t a, uint64_t b,
                                                int accumulate) {
  static_assert(N == 16 || N == 24, "N = 32 or 48");
  if constexpr (N == 16) {
    mma_m64n32k16_ss<T, MnMajorA>(d, a, b, accumulate);
  } else {
    mma_m64n48k16_ss<T, MnMajorA>(d, a, b, accumulate);
  }
}

// d (64 x 64, fp32) = (accumulate ? d : 0) + A (64 x 16, K-major, desc a) * B (16 x 64,
// K-major: 64 rows of 16, desc b).
template <typename T>
__device__ __forceinline__ void mma_m64n64k16_ss(float (&d)[32], uint64_t a, uint64_t b,
                                                 int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    CG_WGMMA_SS(64, "bf16", CG_WGMMA_OUTS32, CG_WGMMA_D32, "%32", "%33", "%34", "0");
  } else {
    CG_WGMMA_SS(64, "f16", CG_WGMMA_OUTS32, CG_WGMMA_D32, "%32", "%33", "%34", "0");
  }
#else
  __trap();
#endif
}

// d (64 x 128, fp32) += A (64 x 16, registers: the m16n8k16 A fragment of this warp's 16
// rows) * B (16 x 128, MN-major, desc b).
template <typename T>
__device__ __forceinline__ void mma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4],
                                                  uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    CG_WGMMA_RS(128, "bf16", CG_WGMMA_OUTS64, CG_WGMMA_D64, "{%64, %65, %66, %67}", "%68", "%69");
  } else {
    CG_WGMMA_RS(128, "f16", CG_WGMMA_OUTS64, CG_WGMMA_D64, "{%64, %65, %66, %67}", "%68", "%69");
  }
#else
  __trap();
#endif
}

#undef CG_WGMMA_SS
#undef CG_WGMMA_RS
#undef CG_WGMMA_OUTS16
#undef CG_WGMMA_D16
#undef CG_WGMMA_D24
#undef CG_WGMMA_OUTS24
#undef CG_WGMMA_D32
#undef CG_WGMMA_D64
#undef CG_WGMMA_OUTS32
#undef CG_WGMMA_OUTS64

// Closes the group of MMAs just issued into d; unless issue_only, waits for it and pins d.
template <int N>
__device__ __forceinline__ void commit_and_wait(float (&d)[N], bool issue_only = false) {
  commit();
  if (issue_only) return;  // (the caller waits)
  wait<0>();
  fence_operands(d);
}

}  // namespace cg::cuda::wgmma
