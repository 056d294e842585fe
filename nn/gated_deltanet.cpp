// Why this file exists: a PLACEHOLDER on branch qwen35 so that the decoder layer links
// before helper deltaops' Gated DeltaNet module reaches main; constructing one throws.
// The lead keeps deltaops' nn/gated_deltanet.cpp on merge and drops this one.
#include "nn/gated_deltanet.h"

#include "core/error.h"

namespace cg::nn {

GatedDeltaNet::GatedDeltaNet(const Qwen3Config&, InitOptions) : Module("GatedDeltaNet") {
  CG_FAIL("GatedDeltaNet: not built on this branch yet (placeholder until deltaops' module)");
}

Tensor GatedDeltaNet::forward(const Tensor&) const {
  CG_FAIL("GatedDeltaNet: not built on this branch yet");
}

Tensor GatedDeltaNet::forward_cached(const Tensor&, KVCache&, int64_t) const {
  CG_FAIL("GatedDeltaNet: not built on this branch yet");
}

}  // namespace cg::nn
