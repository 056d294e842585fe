// Why this file exists: ops record an autograd graph only while grad mode is on. The
// engine turns it off while it runs backward (no graph of the backward pass), and
// optimisers turn it off around their in-place updates with NoGradGuard. The flag is
// per thread, so a data-loading thread never affects the training thread.
#pragma once

namespace cg {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// RAII: sets grad mode to `enabled` while alive, restores the previous mode on exit.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : previous_(GradMode::is_enabled()) {
    GradMode::set_enabled(enabled);
  }
  ~AutoGradMode() { GradMode::set_enabled(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

// RAII: no graph is recorded while alive (nests; restores on exit).
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

}  // namespace cg
