// Why this file exists: the FLOP count of a drafter step (flop_count.h).
#include "train/flop_count.h"

#include <algorithm>

namespace cg::train {

double mean_visible_keys(int64_t S, int64_t bs, int64_t W) {
  if (S <= 0 || bs <= 0) return 0;
  double keys = 0;
  for (int64_t a = 0; a < S; ++a) {
    for (int64_t k = 0; k < bs; ++k) {
      if (W <= 0) {
        keys += static_cast<double>(a + bs);  // context [0, a) and the whole block
      } else {
        const int64_t first = std::max<int64_t>(0, a + k - (W - 1));
        keys += static_cast<double>(std::max<int64_t>(0, a - first));  // context [first, a)
        keys += static_cast<double>(k - std::max<int64_t>(0, k - (W - 1)) + 1);  // slots <= k
      }
    }
  }
  return keys / static_cast<double>(S * bs);
}

DrafterStepFlops drafter_step_flops(const DrafterStepShape& s) {
  const double C = static_cast<double>(s.sequences * s.context_len);
  const double P = static_cast<double>(s.sequences * s.anchors * s.block_size);
  const double H = static_cast<double>(s.hidden), K = static_cast<double>(s.target_features);
  const double q = static_cast<double>(s.num_heads * s.head_dim);
  const double kv = static_cast<double>(s.num_kv_heads * s.head_dim);
  const double I = static_cast<double>(s.intermediate), V = static_cast<double>(s.vocab);
  const double layers = static_cast<double>(s.sliding.size());
  DrafterStepFlops f;
  f.fc = 2 * (2 * C * K * H * H);  // forward + dW
  f.context_kv = 3 * layers * (2 * C * H * 2 * kv);
  const double per_position = 2 * H * (q + 2 * kv) + 2 * q * H + 3 * 2 * H * I;
  f.block_gemms = 3 * layers * P * per_position;
  const double full = mean_visible_keys(s.context_len, s.block_size, 0);
  const double sliding = mean_visible_keys(s.context_len, s.block_size, s.sliding_window);
  const double per_pair = 4 * static_cast<double>(s.head_dim * s.num_heads);
  for (bool slides : s.sliding) f.attention += 3.5 * per_pair * P * (slides ? sliding : full);
  f.student_head = 2 * (2 * P * H * V);
  f.teacher_head = s.teacher ? 2 * P * H * V : 0;
  return f;
}

DrafterStepShape drafter_step_shape(const nn::DFlashDrafterConfig& drafter,
                                    const DrafterConfig& config, int64_t seq_len) {
  DrafterStepShape s;
  s.sequences = config.optim.batch_size * config.optim.grad_accum;
  s.context_len = seq_len;
  s.anchors = config.max_anchors;
  s.block_size = config.block_size;
  const nn::Qwen3Config& l = drafter.layers;
  s.hidden = l.hidden_size;
  s.target_features = static_cast<int64_t>(drafter.target_layers.size());
  s.num_heads = l.num_heads;
  s.num_kv_heads = l.num_kv_heads;
  s.head_dim = l.head_dim;
  s.intermediate = l.intermediate_size;
  s.vocab = l.vocab_size;
  for (int64_t i = 0; i < l.num_layers; ++i)
    s.sliding.push_back(drafter.layer_type(static_cast<size_t>(i)) ==
                        nn::DrafterAttention::sliding);
  s.sliding_window = drafter.sliding_window;
  s.teacher = config.loss.loss_kind() != LossKind::cross_entropy;
  return s;
}

StepThroughput step_throughput(const DrafterStepShape& s, double flops, double seconds) {
  StepThroughput t;
  if (seconds <= 0) return t;
  t.ms = seconds * 1e3;
  t.context_tokens_per_s = static_cast<double>(s.sequences * s.context_len) / seconds;
  t.positions_per_s = static_cast<double>(s.sequences * s.anchors * s.block_size) / seconds;
  t.mfu = model_flops_utilization(flops, seconds);
  return t;
}

double model_flops_utilization(double flops, double seconds, double peak) {
  return seconds > 0 && peak > 0 ? flops / seconds / peak : 0;
}

}  // namespace cg::train
