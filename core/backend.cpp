// Why this file exists: the registry through which a device backend (cuda/) makes itself
// known to core/ without core/ linking against it. Backends register from static
// initialisers of their own translation units, so the table is a function-local static
// (constructed on first use, whatever the initialisation order).
#include "core/backend.h"

#include <array>
#include <atomic>
#include <cstring>

#include "core/error.h"

namespace cg {

namespace {

// Host memory as a backend: lets code treat "cpu" like any other device (copies are a
// memcpy, segments come from the host segment source). Registered by default.
class HostBackend final : public DeviceBackend {
 public:
  DeviceType type() const override { return DeviceType::cpu; }
  int device_count() const override { return 1; }
  std::string unavailable_reason() const override { return ""; }
  std::unique_ptr<SegmentSource> make_segment_source(int index) override {
    CG_CHECK(index == 0, "the cpu device has only index 0, not ", index);
    return make_host_segment_source();
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t nbytes) override {
    CG_CHECK(dst_device.is_cpu() && src_device.is_cpu(), "the cpu backend cannot copy ",
             src_device.str(), " -> ", dst_device.str(), ": that needs the CUDA backend");
    if (nbytes > 0) std::memcpy(dst, src, nbytes);
  }
  void synchronize(int) override {}
};

constexpr size_t kDeviceTypes = 2;  // cpu, cuda

std::array<std::atomic<DeviceBackend*>, kDeviceTypes>& registry() {
  static HostBackend host;
  static std::array<std::atomic<DeviceBackend*>, kDeviceTypes> table{};  // C++20: nullptr
  static const bool host_registered = [] {
    table[static_cast<size_t>(DeviceType::cpu)].store(&host);
    return true;
  }();
  (void)host_registered;
  return table;
}

size_t slot_of(DeviceType type) {
  const auto i = static_cast<size_t>(type);
  CG_CHECK(i < kDeviceTypes, "unknown device type code ", static_cast<int>(type));
  return i;
}

}  // namespace

void register_backend(DeviceBackend* backend) {
  CG_CHECK(backend != nullptr, "register_backend: the backend is null");
  registry()[slot_of(backend->type())].store(backend);
}

void unregister_backend(DeviceType type) {
  CG_CHECK(type != DeviceType::cpu, "unregister_backend: the cpu backend is built in");
  registry()[slot_of(type)].store(nullptr);
}

DeviceBackend* find_backend(DeviceType type) { return registry()[slot_of(type)].load(); }

DeviceBackend& backend_for(Device device) {
  DeviceBackend* backend = find_backend(device.type);
  if (backend == nullptr) {
    CG_CHECK(!device.is_cuda(), "this build of chunkgrad has no CUDA backend: reconfigure with "
             "-DCHUNKGRAD_CUDA=ON (", device.str(), " was requested)");
    CG_FAIL("no backend is registered for device ", device.str());
  }
  if (device.is_cuda()) {
    const int count = backend->device_count();
    if (device.index < 0 || device.index >= count) {
      const std::string reason = backend->unavailable_reason();
      CG_FAIL(device.str(), " requested but only ", count, " CUDA device",
              count == 1 ? " is" : "s are", " visible",
              reason.empty() ? std::string() : " (" + reason + ")",
              count == 1 ? std::string("; use cuda:0")
              : count > 1 ? "; use cuda:0..cuda:" + std::to_string(count - 1)
                          : std::string());
    }
  }
  return *backend;
}

bool cuda_available() {
  DeviceBackend* backend = find_backend(DeviceType::cuda);
  return backend != nullptr && backend->device_count() > 0;
}

}  // namespace cg
