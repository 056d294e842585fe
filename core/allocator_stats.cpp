// Why this file exists: resetting and printing the allocator's statistics.
#include "core/allocator_stats.h"

#include <cstdio>
#include <sstream>

namespace cg {

void AllocatorStats::reset_peak() {
  for (Stat* s : {&allocation, &segment, &active, &inactive_split, &allocated_bytes,
                  &reserved_bytes, &active_bytes, &inactive_split_bytes, &requested_bytes}) {
    s->reset_peak();
  }
}

std::string AllocatorStats::str() const {
  std::ostringstream out;
  auto row = [&](const char* name, const Stat& s, bool bytes) {
    char line[160];
    if (bytes) {
      std::snprintf(line, sizeof line, "  %-22s current %12s  peak %12s\n", name,
                    format_bytes(s.current).c_str(), format_bytes(s.peak).c_str());
    } else {
      std::snprintf(line, sizeof line, "  %-22s current %12lld  peak %12lld\n", name,
                    static_cast<long long>(s.current), static_cast<long long>(s.peak));
    }
    out << line;
  };
  row("allocated", allocated_bytes, true);
  row("reserved", reserved_bytes, true);
  row("requested", requested_bytes, true);
  row("inactive split", inactive_split_bytes, true);
  row("allocations", allocation, false);
  row("segments", segment, false);
  out << "  alloc retries " << num_alloc_retries << ", OOMs " << num_ooms << "\n";
  return out.str();
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace cg
