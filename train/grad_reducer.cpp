// Why this file exists: bucketed all-reduce of the gradients during backward
// (grad_reducer.h).
#include "train/grad_reducer.h"

#include "autograd/grad_hook.h"
#include "core/error.h"
#include "core/stream_guard.h"
#include "core/views.h"
#include "ops/kernels.h"

namespace cg::train {

struct GradReducer::Armed::Hook {
  explicit Hook(GradReducer& r)
      : guard([&r](const std::shared_ptr<TensorImpl>& leaf) { r.ready(leaf.get()); }) {}
  GradAccumulatedHookGuard guard;
};

GradReducer::Armed::Armed(GradReducer& r) : hook_(std::make_unique<Hook>(r)) {}

GradReducer::Armed::~Armed() = default;

GradReducer::GradReducer(std::vector<Tensor> params, dist::Communicator& comm, int64_t bucket_bytes)
    : params_(std::move(params)), comm_(comm) {
  CG_CHECK(!params_.empty(), "GradReducer: no parameters");
  bucket_of_.resize(params_.size());
  int64_t bytes = bucket_bytes;                // starts "full": the first parameter opens a bucket
  for (size_t k = params_.size(); k-- > 0;) {  // Note [Bucket order]
    if (bytes >= bucket_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += params_[k].numel() * 4;  // reduced in fp32
    index_[params_[k].impl()] = k;
  }
  missing_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    missing_[b] = static_cast<int64_t>(buckets_[b].size());
  const Device device = params_[0].device();
  if (device != kCPU) {  // Note [Reduce on a side stream]: the last but one, where there is one
    const int n = kernels_for(device, "GradReducer").side_streams();
    side_stream_ = n > 1 ? n - 1 : n;
  }
}

void GradReducer::ready(const TensorImpl* leaf) {
  auto it = index_.find(leaf);
  if (it == index_.end()) return;  // a leaf that is not a trained parameter
  const size_t b = bucket_of_[it->second];
  if (--missing_[b] > 0) return;
  while (next_ < buckets_.size() && missing_[next_] <= 0) reduce(next_++);
}

void GradReducer::reduce(size_t bucket) {
  const Device device = params_[0].device();
  int64_t numel = 0;
  for (size_t k : buckets_[bucket]) numel += params_[k].numel();
  auto run = [&] {
    // One fp32 buffer per bucket: the gradients copied in, summed over the ranks, copied back.
    Tensor flat = raw::empty({numel}, DType::f32, device);
    int64_t at = 0;
    for (size_t k : buckets_[bucket]) {
      const Tensor& p = params_[k];
      Tensor part = raw::view(raw::narrow(flat, 0, at, p.numel()), p.shape());
      if (p.grad().defined()) {
        raw::copy_(part, p.grad());
      } else {
        raw::fill_(part, 0.0);  // no gradient here: zeros (Note [Bucket order])
      }
      at += p.numel();
    }
    comm_.all_reduce(flat, dist::ReduceOp::sum);
    at = 0;
    for (size_t k : buckets_[bucket]) {
      const Tensor& p = params_[k];
      Tensor part = raw::view(raw::narrow(flat, 0, at, p.numel()), p.shape());
      if (p.grad().defined()) {
        raw::copy_(p.grad(), part);
      } else {
        p.set_grad(raw::to_dtype(raw::clone(part), p.dtype()));
      }
      at += p.numel();
    }
  };
  if (side_stream_ > 0) {  // Note [Reduce on a side stream]
    const StreamId side = static_cast<StreamId>(side_stream_);
    kernels_for(device, "GradReducer").stream_wait(device, side, kDefaultStream);
    StreamGuard guard(device, side);
    run();
  } else {
    run();
  }
}

void GradReducer::finish() {
  for (; next_ < buckets_.size(); ++next_) reduce(next_);
  if (side_stream_ > 0) {
    const Device device = params_[0].device();
    kernels_for(device, "GradReducer")
        .stream_wait(device, kDefaultStream, static_cast<StreamId>(side_stream_));
  }
  next_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b)
    missing_[b] = static_cast<int64_t>(buckets_[b].size());
}

}  // namespace cg::train
