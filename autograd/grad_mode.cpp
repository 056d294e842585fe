// Why this file exists: the storage of the thread-local grad-mode flag (see grad_mode.h).
#include "autograd/grad_mode.h"

namespace cg {

namespace {
thread_local bool grad_mode_enabled = true;
}

bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

}  // namespace cg
