// Why this file exists: a long run must say how it is doing -- a progress bar on stderr
// (phase, step/total, loss, tokens/s, ETA) redrawn in place -- and leave a record a script
// can read: one JSON object per line in metrics.jsonl.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace cg::train {

class ProgressBar {
 public:
  ProgressBar(std::string phase, int64_t total, bool enabled, int64_t first_step = 0);
  // Redraws after step `step` (1-based) with the step's loss and token count.
  void update(int64_t step, double loss, int64_t tokens);
  // A short text drawn after tok/s from the next update on ("812 ms  MFU 54%  peak 57 GiB").
  void set_detail(std::string detail) { detail_ = std::move(detail); }
  // The same for a stage without a loss (generation, evaluation): step `step` of the
  // total, with its token count; the line shows no loss.
  void update(int64_t step, int64_t tokens);
  void finish();  // ends the line
  double tokens_per_second() const;
  double seconds() const;

 private:
  void draw(int64_t step, const double* loss, int64_t tokens);

  std::string phase_;
  int64_t total_, first_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_draw_{};
  int64_t tokens_ = 0;
  // The ETA's clock starts at the first update, not at the bar's start: the first steps
  // carry one-time costs (warm-up, a batch of queued steps read at once) and made the ETA
  // at step 1 ten times too long (30:31 for a three-minute stage).
  std::chrono::steady_clock::time_point rate_start_{};
  int64_t rate_from_ = -1;  // the step of the first update (-1: none yet)
  bool drawn_ = false;
  std::string detail_;  // a line was drawn: finish() ends it (and prints nothing otherwise)
};

// Ends the progress line when a bar left one open (it redraws in place and ends its line
// in finish(); a stage that fails never gets there), so that the next line -- the
// program's one error line -- starts at the left margin instead of after "ETA 0:03".
// Does nothing when no line is open.
void end_open_progress_line();

// Appends JSON lines to `path` (created when missing); throws naming the path when it cannot.
class MetricsLog {
 public:
  MetricsLog() = default;
  // Opens `path` for appending. A last line that a killed run cut off (no newline at its
  // end, or not JSON) is dropped first, with a warning: appended to, it would leave a
  // line no reader can parse in the middle of the log.
  explicit MetricsLog(const std::string& path);
  void write(const nlohmann::json& record);
  // Drops the records of `phase` with a step above `step`, and every "summary" record: what a
  // killed run logged after its last checkpoint (a resume logs those steps again) or what an
  // earlier run logged (--fresh restarts at 0), so that each step appears once, this run's.
  void drop_after(const std::string& phase, int64_t step);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace cg::train
