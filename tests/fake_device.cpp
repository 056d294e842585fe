// Why this file exists: the fake device of fake_device.h -- PROT_NONE segments, the
// backend that opens them only inside its own calls, and install/uninstall.
#include "fake_device.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/caching_allocator.h"
#include "core/error.h"

namespace cg::fake {

namespace {

std::map<char*, size_t>& segment_map() {
  static std::map<char*, size_t> map;
  return map;
}

int& open_depth() {
  static int depth = 0;
  return depth;
}

void protect_all(int protection) {
  for (const auto& [p, bytes] : segment_map()) {
    CG_CHECK(mprotect(p, bytes, protection) == 0, "fake device: mprotect failed");
  }
}

class NoAccessSegments final : public SegmentSource {
 public:
  Device device() const override { return fake_device(); }
  void* allocate_segment(size_t bytes) override {
    const int protection = open_depth() > 0 ? PROT_READ | PROT_WRITE : PROT_NONE;
    void* p = mmap(nullptr, bytes, protection, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    segment_map()[static_cast<char*>(p)] = bytes;
    return p;
  }
  void free_segment(void* p, size_t bytes) override {
    segment_map().erase(static_cast<char*>(p));
    munmap(p, bytes);
  }
  std::string name() const override { return "fake-device"; }
};

// Bytes from an operand's first element to one past the furthest one its geometry reaches.
size_t span_bytes(const DeviceBackend::Dims& sizes, const DeviceBackend::Dims& strides,
                  DType dtype) {
  int64_t last = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    last += (sizes[i] - 1) * strides[i];
  }
  return static_cast<size_t>(last + 1) * element_size(dtype);
}

void check_on_device(Device device, const void* p, size_t nbytes, const char* what) {
  CG_CHECK(device == fake_device(), "fake backend: ", what, " was asked to run on ", device.str(),
           ", not ", fake_device().str());
  CG_CHECK(nbytes == 0 || is_device_memory(p, nbytes), "fake backend: ", what, ": ", nbytes,
           " bytes at ", p, " are not device memory");
}

bool& is_installed() {
  static bool on = false;
  return on;
}

}  // namespace

// ---- memory ----------------------------------------------------------------------------

const std::map<char*, size_t>& segments() { return segment_map(); }

bool is_device_memory(const void* p, size_t nbytes) {
  const auto& map = segment_map();
  auto it = map.upper_bound(static_cast<char*>(const_cast<void*>(p)));
  if (it == map.begin()) return false;
  --it;
  const char* c = static_cast<const char*>(p);
  return c >= it->first && c + nbytes <= it->first + it->second;
}

DeviceMemoryAccessible::DeviceMemoryAccessible() {
  if (open_depth()++ == 0) protect_all(PROT_READ | PROT_WRITE);
}

DeviceMemoryAccessible::~DeviceMemoryAccessible() {
  if (--open_depth() == 0) protect_all(PROT_NONE);
}

// ---- backend ---------------------------------------------------------------------------

std::unique_ptr<SegmentSource> FakeDeviceBackend::make_segment_source(int index) {
  CG_CHECK(index == 0, "the fake backend only serves ", fake_device().str());
  return std::make_unique<NoAccessSegments>();
}

void FakeDeviceBackend::copy(void* dst, Device dst_device, const void* src, Device src_device,
                             size_t nbytes) {
  ++counts.transfers;
  for (auto [p, device] : {std::pair<const void*, Device>{dst, dst_device}, {src, src_device}}) {
    if (device.type == DeviceType::fake) {
      check_on_device(device, p, nbytes, "copy");
    } else {
      CG_CHECK(nbytes == 0 || !is_device_memory(p, 1),
               "fake backend: a 'host' pointer is device memory");
    }
  }
  DeviceMemoryAccessible open;
  if (nbytes > 0) std::memmove(dst, src, nbytes);
}

void FakeDeviceBackend::fill(Device device, void* dst, DType dtype, const Dims& sizes,
                             const Dims& strides, double value, double step) {
  ++counts.fills;
  check_on_device(device, dst, span_bytes(sizes, strides, dtype), "fill");
  DeviceMemoryAccessible open;
  host_backend().fill(kCPU, dst, dtype, sizes, strides, value, step);
}

void* FakeDeviceBackend::allocate_pinned_host(size_t nbytes) {
  ++counts.pinned_buffers;
  return std::malloc(nbytes);
}

void FakeDeviceBackend::free_pinned_host(void* ptr) { std::free(ptr); }

uint64_t FakeDeviceBackend::upload_pinned(void* dst, Device dst_device, const void* src,
                                          size_t nbytes, uint64_t after) {
  (void)after;  // the fake's compute work runs at once: it is always done
  std::lock_guard<std::mutex> lock(uploads_mutex_);
  ++counts.pinned_uploads;
  uploads_.emplace(++last_ticket_, Upload{dst, dst_device, src, nbytes});
  return last_ticket_;
}

// The upload stream runs in order: the uploads up to `ticket` are copied now.
void FakeDeviceBackend::run_uploads_through(uint64_t ticket) {
  while (true) {
    Upload u{};
    {
      std::lock_guard<std::mutex> lock(uploads_mutex_);
      if (uploads_.empty() || uploads_.begin()->first > ticket) return;
      u = uploads_.begin()->second;
    }
    copy(u.dst, u.device, u.src, kCPU, u.nbytes);
    std::lock_guard<std::mutex> lock(uploads_mutex_);
    uploads_.erase(uploads_.begin());  // after the copy: the source is in use until then
  }
}

void FakeDeviceBackend::wait_for(Device, uint64_t ticket) { run_uploads_through(ticket); }

void FakeDeviceBackend::run_uploads() { run_uploads_through(UINT64_MAX); }

bool FakeDeviceBackend::upload_done(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(uploads_mutex_);
  return uploads_.empty() || uploads_.begin()->first > ticket;
}

int FakeDeviceBackend::pending_uploads() {
  std::lock_guard<std::mutex> lock(uploads_mutex_);
  return static_cast<int>(uploads_.size());
}

void FakeDeviceBackend::copy_strided(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                                     const Dims& dst_strides, const void* src, DType src_dtype,
                                     const Dims& src_strides) {
  ++counts.strided_copies;
  check_on_device(device, dst, span_bytes(sizes, dst_strides, dst_dtype), "copy_strided");
  check_on_device(device, src, span_bytes(sizes, src_strides, src_dtype), "copy_strided");
  DeviceMemoryAccessible open;
  host_backend().copy_strided(kCPU, dst, dst_dtype, sizes, dst_strides, src, src_dtype,
                              src_strides);
}

void FakeDeviceBackend::accumulate(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                                   const Dims& dst_strides, const void* src, DType src_dtype,
                                   const Dims& src_strides) {
  ++counts.accumulates;
  check_on_device(device, dst, span_bytes(sizes, dst_strides, dst_dtype), "accumulate");
  check_on_device(device, src, span_bytes(sizes, src_strides, src_dtype), "accumulate");
  DeviceMemoryAccessible open;
  host_backend().accumulate(kCPU, dst, dst_dtype, sizes, dst_strides, src, src_dtype, src_strides);
}

void FakeDeviceBackend::random_uniform(Device device, void* dst, DType dtype, const Dims& sizes,
                                       const Dims& strides, uint64_t seed, uint64_t offset,
                                       double low, double high) {
  ++counts.random_fills;
  check_on_device(device, dst, span_bytes(sizes, strides, dtype), "random_uniform");
  DeviceMemoryAccessible open;
  host_backend().random_uniform(kCPU, dst, dtype, sizes, strides, seed, offset, low, high);
}

void FakeDeviceBackend::random_normal(Device device, void* dst, DType dtype, const Dims& sizes,
                                      const Dims& strides, uint64_t seed, uint64_t offset,
                                      double mean, double std) {
  ++counts.random_fills;
  check_on_device(device, dst, span_bytes(sizes, strides, dtype), "random_normal");
  DeviceMemoryAccessible open;
  host_backend().random_normal(kCPU, dst, dtype, sizes, strides, seed, offset, mean, std);
}

// ---- install ---------------------------------------------------------------------------

namespace {
FakeDeviceBackend& the_backend() {
  static FakeDeviceBackend backend;  // registered by address: never destroyed before use ends
  return backend;
}
}  // namespace

FakeDeviceBackend& install() {
  CG_CHECK(!is_installed(), "fake::install: the fake device is already installed");
  register_backend(&the_backend());
  the_backend().counts = Counts{};
  is_installed() = true;
  return the_backend();
}

void uninstall() {
  if (!is_installed()) return;
  drop_device_allocator(fake_device());
  unregister_backend(DeviceType::fake);
  is_installed() = false;
}

bool installed() { return is_installed(); }

}  // namespace cg::fake
