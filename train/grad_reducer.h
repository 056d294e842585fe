// Why this file exists: data-parallel training sums every parameter's gradient over the
// ranks before the optimizer step. Waiting until backward is over would leave the
// network idle during backward and the GPU idle during the reduction; instead the
// gradients go in buckets of about dist.bucket_mb MiB, each all-reduced (summed, in fp32)
// as soon as backward has finished every gradient in it (autograd/grad_hook.h), while
// backward goes on with the layers below.
//
//   GradReducer reducer(optimizer.params(), comm, bucket_bytes);
//   for (micro-batch m) {
//     std::optional<GradReducer::Armed> armed;
//     if (m is the last) armed.emplace(reducer);   // only the last backward reduces
//     loss_m.backward();
//   }
//   reducer.finish();   // the last buckets; the grads are now sums over the ranks
//
// Note [Bucket order]: buckets are made once, from the parameters in reverse order (the
// order backward tends to finish them: the last layer first), and are reduced strictly in
// bucket order: a complete bucket waits for the ones before it. Every rank runs the same
// graph, but the rule does not rely on that: the collectives' order is the same on every
// rank whatever order the hooks fire in (Note [Collective contract], dist/communicator.h).
// A parameter that got no gradient in the last backward is reduced by finish() with the
// rest of its bucket (zeros where this rank has no gradient, so every rank sends the same
// element count).
//
// Note [Reduce on a side stream]: on a device with side streams the bucket's copy into an
// fp32 buffer, the all-reduce and the copy back run on a side stream -- the last but one
// (the only one where there is just one), since the CUDA backend's last carries the
// offline features' uploads (Note [Pinned uploads], core/backend.h), which a reduction
// should not queue behind -- after a
// stream_wait for the compute stream (the bucket's gradients are complete there); finish()
// makes the compute stream wait for the side stream before the optimizer reads a
// gradient. The host never waits. On the host (MPI) each all-reduce is blocking.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"

namespace cg::train {

class GradReducer {
 public:
  GradReducer(std::vector<Tensor> params, dist::Communicator& comm, int64_t bucket_bytes);

  // While an Armed lives, each gradient backward completes is marked ready on this thread.
  class Armed {
   public:
    explicit Armed(GradReducer& reducer);
    ~Armed();
    Armed(const Armed&) = delete;
    Armed& operator=(const Armed&) = delete;

   private:
    struct Hook;
    std::unique_ptr<Hook> hook_;
  };

  // Reduces the buckets not reduced yet (in order) and joins the side stream; then every
  // parameter's .grad holds the sum over the ranks. Resets for the next step.
  void finish();
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  void ready(const TensorImpl* leaf);
  void reduce(size_t bucket);
  std::vector<Tensor> params_;
  dist::Communicator& comm_;
  std::vector<std::vector<size_t>> buckets_;  // parameter indices, in reduction order
  std::vector<size_t> bucket_of_;             // per parameter
  std::vector<int64_t> missing_;              // per bucket: gradients not ready yet
  std::unordered_map<const TensorImpl*, size_t> index_;
  size_t next_ = 0;  // the next bucket to reduce
  int side_stream_ = 0;
};

}  // namespace cg::train
