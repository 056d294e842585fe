// Why this file exists: the per-thread flag and the process-wide count behind
// SkipParameterInit (init_mode.h).
#include "nn/init_mode.h"

#include <atomic>

namespace cg::nn {

namespace {
thread_local bool t_skip_init = false;
std::atomic<int64_t> g_parameter_inits{0};
}  // namespace

SkipParameterInit::SkipParameterInit() : previous_(t_skip_init) { t_skip_init = true; }
SkipParameterInit::~SkipParameterInit() { t_skip_init = previous_; }
bool SkipParameterInit::active() { return t_skip_init; }

int64_t parameter_inits() { return g_parameter_inits.load(); }
void count_parameter_init() { g_parameter_inits.fetch_add(1); }

}  // namespace cg::nn
