// Why this file exists: the fused path of head_loss (ops/head_loss.h explains the modes),
// kept apart from the public header because only head_loss calls it, after checking.
#pragma once

#include "ops/head_loss.h"

namespace cg {

HeadLossResult fused_head_loss(const HeadLossInputs& inputs, const HeadLossOptions& options,
                               int64_t chunk_rows);

// Bytes the fused chunk loop allocates with chunks of `rows` rows for these inputs (the
// chunk's logits, the teacher's, and the largest GEMM's scratch on this device).
size_t fused_head_chunk_bytes(const HeadLossInputs& inputs, const HeadLossOptions& options,
                              int64_t rows);

}  // namespace cg
