// Why this file exists: the launcher of the drafter's head-loss row kernel (forward KL
// against a teacher at tau 1, optionally mixed with hard CE, bf16 logits), where a cluster
// of CTAs holds each row in shared memory so that it is read from memory once (Note [Rows
// held on chip], cuda/head_rows_cluster.cu). launch_head_loss_rows tries it first.
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "cuda/head_loss_kernels.h"
#include "ops/loss_config.h"

namespace cg::cuda {

// Launches the kernel and returns true when the call is one it computes (the drafter's
// loss above, bf16, V a multiple of 8 up to 262144 and at least 32768, 16-byte aligned
// rows, a device of compute capability 9.0 or later, and CHUNKGRAD_HEAD_ROWS_CLUSTER not
// set to 0); returns false, launching nothing, otherwise. Arguments as
// launch_head_loss_rows's.
bool launch_head_rows_cluster(DType dtype, void* logits, void* teacher, const int64_t* labels,
                              int64_t C, int64_t V, const LossConfig& config, bool want_grad,
                              const void* grad_scale, const HeadRowPointers& out,
                              cudaStream_t stream);

// How many times launch_head_rows_cluster launched its kernel in this process (the tests
// check that the calls they compare ran it).
int64_t head_rows_cluster_launches();

}  // namespace cg::cuda
