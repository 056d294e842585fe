// Why this file exists: data-parallel training sends each gradient to the other ranks as
// soon as backward has finished it, while backward goes on with the layers below
// (train/grad_reducer.h). This is the one place backward says "this leaf's .grad is now
// complete": AccumulateGrad calls the calling thread's hook after it has written the
// leaf's gradient. A leaf's AccumulateGrad runs once per backward (the engine sums every
// path into a node before running it), so the hook fires once per leaf per backward.
//
//   GradAccumulatedHookGuard guard([&](const std::shared_ptr<TensorImpl>& leaf) { ... });
//   loss.backward();   // the hook runs for each leaf whose .grad was written
#pragma once

#include <functional>
#include <memory>

#include "core/tensor.h"

namespace cg {

using GradAccumulatedHook = std::function<void(const std::shared_ptr<TensorImpl>& leaf)>;

// Installs `hook` for the calling thread for the guard's lifetime (the previous one comes
// back when it ends).
class GradAccumulatedHookGuard {
 public:
  explicit GradAccumulatedHookGuard(GradAccumulatedHook hook);
  ~GradAccumulatedHookGuard();
  GradAccumulatedHookGuard(const GradAccumulatedHookGuard&) = delete;
  GradAccumulatedHookGuard& operator=(const GradAccumulatedHookGuard&) = delete;

 private:
  GradAccumulatedHook previous_;
};

// Runs the calling thread's hook, if any (AccumulateGrad, after writing leaf->grad).
void run_grad_accumulated_hook(const std::shared_ptr<TensorImpl>& leaf);

}  // namespace cg
