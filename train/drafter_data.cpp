// Why this file exists: drafter data from the target's own generations (drafter_data.h).
#include "train/drafter_data.h"

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "ops/join_ops.h"
#include "ops/reduce.h"
#include "ops/shape_ops.h"
#include "train/generate.h"
#include "train/tokenizer.h"

namespace cg::train {

std::vector<DrafterSequence> make_drafter_sequences(const nn::Qwen3ForCausalLM& lm,
                                                    const std::vector<std::string>& prompts,
                                                    int64_t max_new_tokens,
                                                    const GenerateProgress& on_progress) {
  ByteTokenizer tok;
  std::vector<std::vector<int64_t>> ids;
  for (const auto& p : prompts) ids.push_back(tok.encode(p, {.bos = true}));
  const std::vector<Generation> generated =
      generate_all(lm, ids, {.max_new_tokens = max_new_tokens}, on_progress);
  std::vector<DrafterSequence> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    DrafterSequence s;
    s.ids = ids[i];
    s.loss_mask.assign(ids[i].size(), 0);
    const std::vector<int64_t> fresh = generated[i].new_tokens();
    s.ids.insert(s.ids.end(), fresh.begin(), fresh.end());
    s.loss_mask.resize(s.ids.size(), 1);
    out.push_back(std::move(s));
  }
  return out;
}

TargetFeatures compute_target_features(const nn::Qwen3ForCausalLM& lm,
                                       const std::vector<DrafterSequence>& sequences,
                                       const std::vector<int64_t>& layers, bool final_hidden,
                                       int64_t pad_id) {
  NoGradGuard no_grad;
  TargetFeatures tf;
  for (const auto& s : sequences)
    tf.seq_len = std::max(tf.seq_len, static_cast<int64_t>(s.ids.size()));
  const int64_t S = tf.seq_len, N = static_cast<int64_t>(sequences.size());
  constexpr int64_t kGroup = 32;  // sequences per forward (bounds the activations)
  std::vector<Tensor> feats, finals;
  for (int64_t g0 = 0; g0 < N; g0 += kGroup) {
    const int64_t g = std::min(kGroup, N - g0);
    std::vector<int64_t> ids(static_cast<size_t>(g * S), pad_id);
    for (int64_t r = 0; r < g; ++r) {
      const auto& s = sequences[static_cast<size_t>(g0 + r)].ids;
      std::copy(s.begin(), s.end(), ids.begin() + r * S);
    }
    nn::DecoderOutput out = lm.forward(
        from_ints(ids, {g, S}, {.dtype = DType::i64, .device = lm.lm_head->weight.device()}),
        {.capture_layers = layers, .logits = false});
    feats.push_back(cat(out.layer_hidden, 2));
    if (final_hidden) finals.push_back(out.hidden);
  }
  tf.features = feats.size() == 1 ? feats[0] : cat(feats, 0);
  if (final_hidden) tf.final_hidden = finals.size() == 1 ? finals[0] : cat(finals, 0);
  return tf;
}

}  // namespace cg::train
