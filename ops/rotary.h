// Why this file exists: rotary position embedding (RoPE) on q and k. DFlash places
// tokens at arbitrary positions -- context keys at 0..S-1, block tokens at anchor+k --
// so the op takes the positions as a tensor instead of assuming an arange, and builds
// its cos/sin table from them on each call (cheap: [positions, head_dim/2], shared by
// every head).
#pragma once

#include "core/tensor.h"

namespace cg {

// Rotates x by its tokens' positions, Qwen3/HF rotate_half convention:
//   x        [..., S, H, hd] (the layout right after q_proj/k_proj and a view; transpose
//            to [..., H, S, hd] afterwards if attention wants it), any floating dtype,
//            any strides; hd must be even
//   positions  i64 (or i32), [S] or any shape that broadcasts to x.shape[:-2], e.g.
//            [B, S] for per-sequence positions; values are arbitrary integers
//   theta    the RoPE base (1e6 for Qwen3, 1e7 for Qwen3.5/3.6)
// For each pair (i, i + hd/2), i < hd/2, with angle a = pos * theta^(-2i/hd):
//   out[i]        = x[i] cos a - x[i + hd/2] sin a
//   out[i + hd/2] = x[i + hd/2] cos a + x[i] sin a
// i.e. out = x * cos + rotate_half(x) * sin with cos = cat(cos a, cos a), as HF does.
// Angles, cos and sin in double; the rotation in fp32 (f64 for f64 x), one rounding.
// Saves positions only; the backward is the inverse rotation (angle -a) of the gradient.
Tensor apply_rotary(const Tensor& x, const Tensor& positions, double theta);

}  // namespace cg
