// Why this file exists: AdamW with masters, the schedule and clipping (optimizer.h).
#include "train/optimizer.h"

#include <cmath>
#include <numbers>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/elementwise.h"
#include "ops/optim.h"
#include "ops/shape_ops.h"

namespace cg::train {

double warmup_cosine_lr(int64_t step, int64_t total, int64_t warmup_steps, double base_lr,
                        double min_ratio) {
  if (warmup_steps > 0 && step <= warmup_steps) {
    return base_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  }
  const int64_t decay = total - warmup_steps;
  if (decay <= 1) return base_lr;
  const double t = static_cast<double>(step - warmup_steps - 1) / static_cast<double>(decay - 1);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(1.0, std::max(0.0, t))));
  return base_lr * (min_ratio + (1.0 - min_ratio) * cosine);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  CategoryGuard category(MemoryCategory::optimizer_state);
  for (const Tensor& p : params_) {
    CG_CHECK(p.defined() && p.requires_grad(),
             "AdamW: every parameter must be a leaf that requires grad");
    const TensorOptions f32{.dtype = DType::f32, .device = p.device()};
    masters_.push_back(p.dtype() == DType::f32
                           ? Tensor()
                           : raw::contiguous(raw::to_dtype(p.detach(), DType::f32)));
    exp_avg_.push_back(zeros(p.shape(), f32));
    exp_avg_sq_.push_back(zeros(p.shape(), f32));
  }
}

void AdamW::step(double lr, double grad_multiplier) {
  NoGradGuard no_grad;
  ++step_;
  std::vector<Tensor> p, m, g, a, v;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    p.push_back(params_[i]);
    m.push_back(masters_[i]);
    g.push_back(grad);
    a.push_back(exp_avg_[i]);
    v.push_back(exp_avg_sq_[i]);
  }
  if (p.empty()) return;
  const Device device = p[0].device();
  Tensor scale = full({1}, grad_multiplier, {.dtype = DType::f32, .device = device});
  last_norm_ = global_grad_norm(g, scale);
  if (options_.grad_clip > 0) scale = mul(scale, clip_coefficient(last_norm_, options_.grad_clip));
  adamw_step(p, m, g, a, v, scale, options_.args(lr, step_));
  for (const Tensor& t : params_) t.set_grad(Tensor());
}

double AdamW::last_grad_norm() const { return last_norm_.defined() ? last_norm_.item() : 0.0; }

std::vector<std::pair<std::string, Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + std::to_string(i), exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + std::to_string(i), exp_avg_sq_[i]);
    if (masters_[i].defined()) out.emplace_back("master." + std::to_string(i), masters_[i]);
  }
  return out;
}

void AdamW::load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t step) {
  const auto mine = this->state();
  CG_CHECK(state.size() == mine.size(), "AdamW: the saved state has ", state.size(),
           " tensors, this optimiser ", mine.size(), " (another model?)");
  for (size_t i = 0; i < mine.size(); ++i) {
    CG_CHECK(state[i].first == mine[i].first && state[i].second.shape() == mine[i].second.shape(),
             "AdamW: saved state '", state[i].first, "' does not match '", mine[i].first, "'");
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < mine.size(); ++i) raw::copy_(mine[i].second, state[i].second);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (masters_[i].defined()) raw::copy_(params_[i].detach(), masters_[i]);
  }
  step_ = step;
}

}  // namespace cg::train
