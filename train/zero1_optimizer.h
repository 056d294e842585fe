// Why this file exists: ZeRO-1 (dist.zero1): AdamW whose fp32 masters and moments are
// sharded across the ranks, so each rank keeps 1/N of the optimizer state (12 bytes per
// parameter for a bf16 drafter: master, exp_avg, exp_avg_sq) instead of all of it.
//
//   flat_grad [P_pad] f32 = every parameter's gradient, in parameter order, zero-padded
//   shard_grad [P_pad/N] = reduce_scatter(flat_grad, sum)      this rank's slice of the sum
//   norm = sqrt(all_reduce(sum(shard_grad^2)))                  the global norm, for clipping
//   shard_master, exp_avg, exp_avg_sq [P_pad/N]: AdamW on the slice (ops/optim.h)
//   flat_master [P_pad] = all_gather(shard_master); each parameter = its slice (its dtype)
//
// Note [ZeRO-1 equals plain DP]: AdamW is elementwise, so updating slices of one flat
// vector does to every element what AdamW of train/optimizer.h does to it, given the same
// gradient and the same clip coefficient. Both are sums over the ranks (the same sums in
// another order: fp32 rounding apart) and the norm is the global one. A checkpoint holds
// the optimizer state gathered back per parameter, under AdamW's names, so it is a plain
// checkpoint (Note [World-size-free checkpoints], data_parallel.h) and loads on any number
// of ranks, sharded or not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"
#include "train/optimizer.h"

namespace cg::train {

class ShardedAdamW {
 public:
  ShardedAdamW(std::vector<Tensor> params, AdamWOptions options, dist::Communicator& comm);

  // As AdamW::step, but the gradients are this rank's own (not yet summed over the ranks):
  // the reduce-scatter is part of the step.
  void step(double lr, double grad_multiplier = 1.0);
  int64_t steps_taken() const { return step_; }
  Tensor last_grad_norm_tensor() const { return last_norm_; }
  // AdamW::state()'s names and shapes, gathered from every rank (a collective: every rank
  // calls it); load_state takes AdamW's state and keeps this rank's slice.
  std::vector<std::pair<std::string, Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t step);
  const std::vector<Tensor>& params() const { return params_; }
  // Bytes of optimizer state this rank holds, and what one unsharded AdamW holds.
  int64_t state_bytes() const { return 3 * shard_ * 4; }
  int64_t unsharded_state_bytes() const;

 private:
  Tensor gathered(const Tensor& shard) const;  // [P_pad] f32 from every rank's [P_pad/N]
  std::vector<Tensor> params_;
  AdamWOptions options_;
  dist::Communicator& comm_;
  int64_t total_ = 0, padded_ = 0, shard_ = 0;  // P, P_pad, P_pad / N
  Tensor master_, exp_avg_, exp_avg_sq_;        // [P_pad / N] f32, this rank's slice
  int64_t step_ = 0;
  Tensor last_norm_;
};

// The drafter trainer's optimizer: AdamW, or ShardedAdamW when dist.zero1 is set under
// mpirun (`zero1_comm` not null). state() is a collective when sharded: every rank calls it.
class TrainerAdamW {
 public:
  TrainerAdamW(std::vector<Tensor> params, AdamWOptions options, dist::Communicator* zero1_comm);
  void step(double lr, double grad_multiplier);
  int64_t steps_taken() const;
  Tensor last_grad_norm_tensor() const;
  std::vector<std::pair<std::string, Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t step);
  const std::vector<Tensor>& params() const;
  const ShardedAdamW* sharded() const { return sharded_.get(); }

 private:
  std::unique_ptr<AdamW> plain_;
  std::unique_ptr<ShardedAdamW> sharded_;
};

}  // namespace cg::train
