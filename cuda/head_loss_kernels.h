// Why this file exists: the launchers of the CUDA lm_head loss row kernel and its helpers
// behind the kernel table's head_loss_rows, check_labels and row_weights entries
// (ops/kernels.h; the math per row is ops/loss_row_math.h's). Raw device pointers,
// launched on `stream` without waiting.
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "ops/loss_config.h"

namespace cg::cuda {

// Per-row outputs, each [C] contiguous, null when not wanted; floating ones in the compute
// dtype of the logits (f64 for f64, else f32).
struct HeadRowPointers {
  void* loss = nullptr;
  void* lse = nullptr;
  void* entropy = nullptr;
  int64_t* argmax = nullptr;
  int64_t* teacher_argmax = nullptr;
};

// logits [C, V] contiguous (dtype), softcapped in place, then overwritten with
// grad_scale[i] * d loss_i / d logits_i when want_grad; teacher [C, V] like logits or null;
// labels [C] i64 or null (values already checked); grad_scale [C] compute dtype or null.
void launch_head_loss_rows(DType dtype, void* logits, void* teacher, const int64_t* labels,
                           int64_t C, int64_t V, const LossConfig& config, bool want_grad,
                           const void* grad_scale, const HeadRowPointers& out, cudaStream_t stream);

// Writes into *first_bad (one device i64, set to INT64_MAX first by this call) the
// smallest i with labels[i * stride] neither ignore_index nor in [0, V), and that label
// into first_bad[1].
void launch_find_bad_label(const int64_t* labels, int64_t n, int64_t stride, int64_t V,
                           int64_t ignore_index, int64_t* first_bad, cudaStream_t stream);

// out[i * out_stride] (dtype) = w_i / (normalize ? sum w : 1), w_i = weights[i] (1 when
// null; weights_dtype floating) or 0 where labels[i] == ignore_index (labels may be null).
void launch_row_weights(const int64_t* labels, int64_t label_stride, const void* weights,
                        DType weights_dtype, int64_t weight_stride, int64_t ignore_index,
                        bool normalize, void* out, DType out_dtype, int64_t out_stride, int64_t n,
                        cudaStream_t stream);

}  // namespace cg::cuda
