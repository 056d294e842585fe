// Why this file exists: see stream_guard.h. One thread-local (device, stream) pair: a loop
// guards one device at a time (an inner guard for another device puts the outer one's
// device back on its compute stream until the inner guard ends).
#include "core/stream_guard.h"

namespace cg {

namespace {
thread_local Device t_device{DeviceType::cpu, 0};
thread_local StreamId t_stream = kDefaultStream;
}  // namespace

StreamId current_stream(Device device) {
  return t_stream != kDefaultStream && device == t_device ? t_stream : kDefaultStream;
}

StreamGuard::StreamGuard(Device device, StreamId stream)
    : previous_device_(t_device), previous_stream_(t_stream) {
  t_device = device;
  t_stream = stream;
}

StreamGuard::~StreamGuard() {
  t_device = previous_device_;
  t_stream = previous_stream_;
}

}  // namespace cg
