// Why this file exists: the per-thread hook AccumulateGrad calls (grad_hook.h).
#include "autograd/grad_hook.h"

namespace cg {
namespace {
thread_local GradAccumulatedHook current_hook;
}

GradAccumulatedHookGuard::GradAccumulatedHookGuard(GradAccumulatedHook hook)
    : previous_(std::move(current_hook)) {
  current_hook = std::move(hook);
}

GradAccumulatedHookGuard::~GradAccumulatedHookGuard() { current_hook = std::move(previous_); }

void run_grad_accumulated_hook(const std::shared_ptr<TensorImpl>& leaf) {
  if (current_hook) current_hook(leaf);
}

}  // namespace cg
