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

namespace {

// The magnitude in the largest unit below it, with the sign in front: 2^63 bytes is
// "8.00 EiB" (not a negative TiB count), INT64_MIN formats as "-8.00 EiB".
std::string format_magnitude(uint64_t bytes, bool negative) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const char* sign = negative ? "-" : "";
  char buf[40];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%s%llu B", sign, static_cast<unsigned long long>(bytes));
    return buf;
  }
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  std::snprintf(buf, sizeof buf, "%s%.2f %s", sign, v, units[u]);
  return buf;
}

}  // namespace

std::string format_bytes(uint64_t bytes) { return format_magnitude(bytes, false); }

std::string format_bytes(int64_t bytes) {
  // -(INT64_MIN) does not fit an int64; its magnitude does fit a uint64.
  const uint64_t magnitude =
      bytes < 0 ? uint64_t{0} - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  return format_magnitude(magnitude, bytes < 0);
}

}  // namespace cg
