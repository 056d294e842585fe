// Why this file exists: drafter data from the target's own generations (drafter_data.h).
#include "train/drafter_data.h"

#include <map>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "ops/join_ops.h"
#include "ops/reduce.h"
#include "ops/shape_ops.h"
#include "train/tokenizer.h"

namespace cg::train {

GenerateFn default_generate_fn() {
  // Until the KV-cache generation lands: prompts of one length go as one batch, and each
  // new token reruns the prefix (quadratic; fine for CI-sized runs only).
  return [](const nn::Qwen3ForCausalLM& lm, const std::vector<std::vector<int64_t>>& prompts,
            int64_t max_new) {
    NoGradGuard no_grad;
    std::vector<std::vector<int64_t>> out(prompts.size());
    std::map<size_t, std::vector<size_t>> by_length;
    for (size_t i = 0; i < prompts.size(); ++i) by_length[prompts[i].size()].push_back(i);
    for (const auto& [len, rows] : by_length) {
      const int64_t B = static_cast<int64_t>(rows.size());
      std::vector<std::vector<int64_t>> seqs;
      for (size_t r : rows) seqs.push_back(prompts[r]);
      for (int64_t t = 0; t < max_new; ++t) {
        const int64_t S = static_cast<int64_t>(seqs[0].size());
        std::vector<int64_t> flat;
        for (const auto& s : seqs) flat.insert(flat.end(), s.begin(), s.end());
        nn::DecoderOutput o = lm.forward(from_ints(flat, {B, S}));
        const Tensor next = argmax(narrow(o.logits, 1, S - 1, 1), -1);
        const std::vector<double> v = next.to_vector();
        for (int64_t b = 0; b < B; ++b) seqs[static_cast<size_t>(b)].push_back(static_cast<int64_t>(v[static_cast<size_t>(b)]));
      }
      for (size_t k = 0; k < rows.size(); ++k) out[rows[k]].assign(seqs[k].begin() + static_cast<int64_t>(len), seqs[k].end());
    }
    return out;
  };
}

std::vector<DrafterSequence> make_drafter_sequences(const nn::Qwen3ForCausalLM& lm,
                                                    const std::vector<std::string>& prompts,
                                                    int64_t max_new_tokens, const GenerateFn& generate) {
  ByteTokenizer tok;
  std::vector<std::vector<int64_t>> ids;
  for (const auto& p : prompts) ids.push_back(tok.encode(p, {.bos = true}));
  const auto generated = generate(lm, ids, max_new_tokens);
  CG_CHECK(generated.size() == ids.size(), "drafter data: the generator returned ", generated.size(),
           " continuations for ", ids.size(), " prompts");
  std::vector<DrafterSequence> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    DrafterSequence s;
    s.ids = ids[i];
    s.loss_mask.assign(ids[i].size(), 0);
    s.ids.insert(s.ids.end(), generated[i].begin(), generated[i].end());
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
  for (const auto& s : sequences) tf.seq_len = std::max(tf.seq_len, static_cast<int64_t>(s.ids.size()));
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
    nn::DecoderOutput out = lm.forward(from_ints(ids, {g, S}), {.capture_layers = layers, .logits = false});
    feats.push_back(cat(out.layer_hidden, 2));
    if (final_hidden) finals.push_back(out.hidden);
  }
  tf.features = feats.size() == 1 ? feats[0] : cat(feats, 0);
  if (final_hidden) tf.final_hidden = finals.size() == 1 ? finals[0] : cat(finals, 0);
  return tf;
}

}  // namespace cg::train
