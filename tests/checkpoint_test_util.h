// Why this file exists: the small drafter the activation-checkpointing tests share
// (dflash_checkpoint_test.cpp on the CPU, cuda_checkpoint_test.cpp on the GPU): three
// layers, sliding / full / sliding, 4 x 8 query heads over 2 KV heads, its own hidden size
// and MLP width (a wide MLP makes the layers' activations dominate the step's memory).
#pragma once

#include <memory>

#include "core/factories.h"
#include "core/views.h"
#include "nn/dflash_drafter.h"

namespace cg::testing_checkpoint {

// Vocabulary 40 (MASK 39), two target features, sliding window `window`; the weights come
// from a fixed seed on the host, then move to `device`, so every device starts the same.
inline std::unique_ptr<nn::DFlashDrafter> small_drafter(int64_t hidden, int64_t mlp, int64_t window,
                                                        Device device = kCPU) {
  nn::DFlashDrafterConfig c;
  c.layers.vocab_size = 40;
  c.layers.hidden_size = hidden;
  c.layers.num_layers = 3;
  c.layers.num_heads = 4;
  c.layers.num_kv_heads = 2;
  c.layers.head_dim = 8;
  c.layers.intermediate_size = mlp;
  c.layers.rope_theta = 10000;
  c.target_layers = {0, 1};
  c.mask_token_id = 39;
  using A = nn::DrafterAttention;
  c.layer_types = {A::sliding, A::full, A::sliding};
  c.sliding_window = window;
  Generator gen(21);
  const Tensor embed = raw::to_device(randn({40, hidden}, {}, &gen, 0, 0.5), device);
  const Tensor head = raw::to_device(randn({40, hidden}, {}, &gen, 0, 0.5), device);
  auto d = std::make_unique<nn::DFlashDrafter>(c, embed, head, nn::InitOptions{.generator = &gen});
  d->to(device);
  return d;
}

}  // namespace cg::testing_checkpoint
