// Why this file exists: AdamW with its state sharded over the ranks (zero1_optimizer.h).
#include "train/zero1_optimizer.h"

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "ops/elementwise.h"
#include "ops/optim.h"

namespace cg::train {

ShardedAdamW::ShardedAdamW(std::vector<Tensor> params, AdamWOptions options,
                           dist::Communicator& comm)
    : params_(std::move(params)), options_(options), comm_(comm) {
  CG_CHECK(!params_.empty(), "ShardedAdamW: no parameters");
  for (const Tensor& p : params_) {
    CG_CHECK(p.defined() && p.requires_grad(),
             "ShardedAdamW: every parameter must be a leaf that requires grad");
    total_ += p.numel();
  }
  padded_ = dist::padded_numel(total_, comm_.world_size());
  shard_ = padded_ / comm_.world_size();
  CategoryGuard category(MemoryCategory::optimizer_state);
  const Device device = params_[0].device();
  Tensor flat = raw::empty({padded_}, DType::f32, device);
  raw::fill_(flat, 0.0);
  int64_t at = 0;
  for (const Tensor& p : params_) {
    raw::copy_(raw::view(raw::narrow(flat, 0, at, p.numel()), p.shape()), p.detach());
    at += p.numel();
  }
  master_ = raw::clone(raw::narrow(flat, 0, comm_.rank() * shard_, shard_));
  exp_avg_ = zeros({shard_}, {.dtype = DType::f32, .device = device});
  exp_avg_sq_ = zeros({shard_}, {.dtype = DType::f32, .device = device});
}

int64_t ShardedAdamW::unsharded_state_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& p : params_) bytes += p.numel() * 4 * (p.dtype() == DType::f32 ? 2 : 3);
  return bytes;
}

Tensor ShardedAdamW::gathered(const Tensor& shard) const {
  Tensor flat = raw::empty({padded_}, DType::f32, shard.device());
  comm_.all_gather(shard, flat);
  return flat;
}

void ShardedAdamW::step(double lr, double grad_multiplier) {
  NoGradGuard no_grad;
  ++step_;
  const Device device = params_[0].device();
  Tensor flat = raw::empty({padded_}, DType::f32, device);
  raw::fill_(flat, 0.0);  // padding, and parameters without a gradient this step
  int64_t at = 0;
  for (const Tensor& p : params_) {
    if (p.grad().defined())
      raw::copy_(raw::view(raw::narrow(flat, 0, at, p.numel()), p.shape()), p.grad());
    at += p.numel();
  }
  Tensor grad = raw::empty({shard_}, DType::f32, device);
  comm_.reduce_scatter(flat, grad, dist::ReduceOp::sum);
  flat = Tensor();
  Tensor scale = full({1}, grad_multiplier, {.dtype = DType::f32, .device = device});
  // The global norm: this slice's sum of squares, summed over the ranks (on the device).
  const Tensor local = global_grad_norm({grad}, scale);
  Tensor squares = raw::contiguous(mul(local, local));
  comm_.all_reduce(squares, dist::ReduceOp::sum);
  last_norm_ = sqrt(squares);
  if (options_.grad_clip > 0) scale = mul(scale, clip_coefficient(last_norm_, options_.grad_clip));
  adamw_step({master_}, {Tensor()}, {grad}, {exp_avg_}, {exp_avg_sq_}, scale,
             options_.args(lr, step_));
  const Tensor all = gathered(master_);  // every rank's updated slice
  at = 0;
  for (const Tensor& p : params_) {
    raw::copy_(p.detach(), raw::view(raw::narrow(all, 0, at, p.numel()), p.shape()));
    p.set_grad(Tensor());
    at += p.numel();
  }
}

std::vector<std::pair<std::string, Tensor>> ShardedAdamW::state() const {
  const Tensor avg = gathered(exp_avg_), avg_sq = gathered(exp_avg_sq_), master = gathered(master_);
  std::vector<std::pair<std::string, Tensor>> out;
  int64_t at = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    auto part = [&](const Tensor& flat) {
      return raw::clone(raw::view(raw::narrow(flat, 0, at, p.numel()), p.shape()));
    };
    out.emplace_back("exp_avg." + std::to_string(i), part(avg));
    out.emplace_back("exp_avg_sq." + std::to_string(i), part(avg_sq));
    if (p.dtype() != DType::f32) out.emplace_back("master." + std::to_string(i), part(master));
    at += p.numel();
  }
  return out;
}

void ShardedAdamW::load_state(const std::vector<std::pair<std::string, Tensor>>& state,
                              int64_t step) {
  NoGradGuard no_grad;
  const Device device = params_[0].device();
  Tensor avg = zeros({padded_}, {.dtype = DType::f32, .device = device});
  Tensor avg_sq = zeros({padded_}, {.dtype = DType::f32, .device = device});
  Tensor master = zeros({padded_}, {.dtype = DType::f32, .device = device});
  auto find = [&](const std::string& name) -> const Tensor* {
    for (const auto& [n, t] : state)
      if (n == name) return &t;
    return nullptr;
  };
  int64_t at = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    auto into = [&](const Tensor& flat, const std::string& name, const Tensor& fallback) {
      const Tensor* t = find(name);
      CG_CHECK(t != nullptr || fallback.defined(), "ShardedAdamW: the saved state has no '", name,
               "' (another model?)");
      const Tensor& src = t ? *t : fallback;
      CG_CHECK(src.shape() == p.shape(), "ShardedAdamW: saved state '", name,
               "' does not match parameter ", i);
      raw::copy_(raw::view(raw::narrow(flat, 0, at, p.numel()), p.shape()), src);
    };
    into(avg, "exp_avg." + std::to_string(i), Tensor());
    into(avg_sq, "exp_avg_sq." + std::to_string(i), Tensor());
    // An f32 parameter is its own master (AdamW keeps none for it).
    into(master, "master." + std::to_string(i), p.dtype() == DType::f32 ? p.detach() : Tensor());
    at += p.numel();
  }
  const int64_t first = comm_.rank() * shard_;
  raw::copy_(exp_avg_, raw::narrow(avg, 0, first, shard_));
  raw::copy_(exp_avg_sq_, raw::narrow(avg_sq, 0, first, shard_));
  raw::copy_(master_, raw::narrow(master, 0, first, shard_));
  // The parameters from the masters, as AdamW::load_state does.
  at = 0;
  for (const Tensor& p : params_) {
    if (p.dtype() != DType::f32)
      raw::copy_(p.detach(), raw::view(raw::narrow(master, 0, at, p.numel()), p.shape()));
    at += p.numel();
  }
  step_ = step;
}

TrainerAdamW::TrainerAdamW(std::vector<Tensor> params, AdamWOptions options,
                           dist::Communicator* zero1_comm) {
  if (zero1_comm != nullptr) {
    sharded_ = std::make_unique<ShardedAdamW>(std::move(params), options, *zero1_comm);
  } else {
    plain_ = std::make_unique<AdamW>(std::move(params), options);
  }
}

void TrainerAdamW::step(double lr, double grad_multiplier) {
  if (sharded_) return sharded_->step(lr, grad_multiplier);
  plain_->step(lr, grad_multiplier);
}
int64_t TrainerAdamW::steps_taken() const {
  return sharded_ ? sharded_->steps_taken() : plain_->steps_taken();
}
Tensor TrainerAdamW::last_grad_norm_tensor() const {
  return sharded_ ? sharded_->last_grad_norm_tensor() : plain_->last_grad_norm_tensor();
}
std::vector<std::pair<std::string, Tensor>> TrainerAdamW::state() const {
  return sharded_ ? sharded_->state() : plain_->state();
}
void TrainerAdamW::load_state(const std::vector<std::pair<std::string, Tensor>>& state,
                              int64_t step) {
  if (sharded_) return sharded_->load_state(state, step);
  plain_->load_state(state, step);
}
const std::vector<Tensor>& TrainerAdamW::params() const {
  return sharded_ ? sharded_->params() : plain_->params();
}

}  // namespace cg::train
