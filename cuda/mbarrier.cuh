// Why this file exists: the shared-memory barrier object (mbarrier, sm_90) in inline PTX,
// for kernels whose warps hand tiles to each other without a barrier of the whole CTA (the
// flash forward's loading warp and its consumers, Note [Forward loading warp] in
// attention_flash_forward_wgmma.cu). Only the three operations used: init, arrive, wait.
//
// A barrier counts arrivals; when `count` threads have arrived its phase completes and it
// starts over. A waiter names the parity of the phase it waits for (0 for the first
// completion, 1 for the second, 0 again for the third, ...). Arrive has release and the
// wait acquire semantics at CTA scope, so what a thread wrote before arriving is visible to
// a thread after its wait returns (for wgmma's reads through the async proxy, the writer
// also fences: wgmma::fence_proxy_async).
#pragma once

#include <cstdint>

namespace cg::cuda::mbar {

// One thread initializes; a __syncthreads() before any other thread uses the barrier.
__device__ __forceinline__ void init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

}  // namespace cg::cuda::mbar
