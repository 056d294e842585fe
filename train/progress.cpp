// Why this file exists: the progress bar and metrics log (progress.h).
#include "train/progress.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_input.h"

namespace cg::train {

namespace {
// Whether a bar's line is open on stderr (drawn, not yet ended); the bars run on one
// thread, the flag is atomic for the error path that may read it from another.
std::atomic<bool> g_line_open{false};

std::string clock_str(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                static_cast<long long>(s % 60));
  return buf;
}
}  // namespace

ProgressBar::ProgressBar(std::string phase, int64_t total, bool enabled, int64_t first_step)
    : phase_(std::move(phase)),
      total_(total),
      first_(first_step),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()) {}

double ProgressBar::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double ProgressBar::tokens_per_second() const {
  const double s = seconds();
  return s > 0 ? static_cast<double>(tokens_) / s : 0.0;
}

void ProgressBar::update(int64_t step, double loss, int64_t tokens) { draw(step, &loss, tokens); }

void ProgressBar::update(int64_t step, int64_t tokens) { draw(step, nullptr, tokens); }

void ProgressBar::draw(int64_t step, const double* loss, int64_t tokens) {
  tokens_ += tokens;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (rate_from_ < 0) {
    rate_from_ = step;
    rate_start_ = now;
  }
  if (step != total_ && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  const int64_t done = step - rate_from_;
  const double elapsed = std::chrono::duration<double>(now - rate_start_).count();
  const std::string eta =
      done > 0 && elapsed > 0
          ? clock_str(elapsed / static_cast<double>(done) * static_cast<double>(total_ - step))
          : (step == total_ ? clock_str(0) : std::string("--:--"));
  constexpr int kWidth = 24;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * step / total_) : kWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  char loss_text[32] = "";
  if (loss != nullptr) std::snprintf(loss_text, sizeof loss_text, " loss %.4f", *loss);
  std::fprintf(stderr, "\r%-8s [%s] %lld/%lld%s  %.0f tok/s%s%s  ETA %s ", phase_.c_str(),
               bar.c_str(), static_cast<long long>(step), static_cast<long long>(total_), loss_text,
               tokens_per_second(), detail_.empty() ? "" : "  ", detail_.c_str(), eta.c_str());
  std::fflush(stderr);
  g_line_open = true;
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!enabled_ || !drawn_)
    return;  // nothing drawn (a resume with nothing to train): no stray " 0:00" line
  drawn_ = false;
  std::fprintf(stderr, " %s\n", clock_str(seconds()).c_str());
  std::fflush(stderr);
  g_line_open = false;
}

void end_open_progress_line() {
  if (g_line_open.exchange(false)) {
    std::fputc('\n', stderr);
    std::fflush(stderr);
  }
}

namespace {
std::string system_reason() {
  return errno ? std::string(std::strerror(errno)) : std::string("unknown reason");
}

// The text of a metrics log without a last line that was cut off ("" when it is whole).
std::string cut_off_last_line(const std::string& text) {
  if (text.empty()) return std::string();
  const size_t end = text.back() == '\n' ? text.size() - 1 : text.size();
  const size_t begin = text.rfind('\n', end == 0 ? 0 : end - 1);
  const std::string last = text.substr(begin == std::string::npos ? 0 : begin + 1,
                                       end - (begin == std::string::npos ? 0 : begin + 1));
  if (text.back() != '\n') return last;
  try {
    check_json_depth(last, "a metrics line");  // a hand-edited deep line stays, unparsed
  } catch (const Error&) { return std::string(); }
  const bool json =
      !nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false).is_discarded();
  return json ? std::string() : last;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    const std::string cut = cut_off_last_line(all);
    if (!cut.empty()) {
      const size_t keep = all.size() - cut.size() - (all.back() == '\n' ? 1 : 0);
      write_file_atomically(path, all.substr(0, keep), "the metrics log");
      std::fprintf(stderr,
                   "chunkgrad train: warning: %s: dropped its last line, cut off by a run that "
                   "was killed while writing it (%zu bytes)\n",
                   path.c_str(), cut.size());
      std::fflush(stderr);
    }
  }
  errno = 0;
  out_.open(path, std::ios::app);
  CG_CHECK(out_.good(), "metrics log '", path, "' cannot be opened for writing: ", system_reason());
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << "\n";
  out_.flush();
  CG_CHECK(out_.good(), "writing the metrics log '", path_, "' failed (disk full?)");
}

void MetricsLog::drop_after(const std::string& phase, int64_t step) {
  if (!out_.is_open()) return;
  out_.close();
  std::string kept;
  {
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      bool shallow =
          true;  // a hand-edited line nested too deep is kept, never parsed (core/json_input.h)
      try {
        check_json_depth(line, "a metrics line");
      } catch (const Error&) { shallow = false; }
      const nlohmann::json r =
          shallow ? nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false)
                  : nlohmann::json();
      const bool drop = r.is_object() && r.contains("phase") &&
                        (r["phase"] == "summary" ||
                         (r["phase"] == phase && r.contains("step") &&
                          r["step"].is_number_integer() && r["step"].get<int64_t>() > step));
      if (!drop) kept += line + "\n";  // lines it cannot read stay as they were
    }
  }
  write_file_atomically(path_, kept, "the metrics log");
  errno = 0;
  out_.open(path_, std::ios::app);
  CG_CHECK(out_.good(), "metrics log '", path_,
           "' cannot be opened for writing: ", system_reason());
}

}  // namespace cg::train
