// Why this file exists: the registry through which a device backend (cuda/) makes itself
// known to core/ without core/ linking against it. Backends register from static
// initialisers of their own translation units, so the table is a function-local static
// (constructed on first use, whatever the initialisation order). The host backend
// itself is in host_backend.cpp.
#include "core/backend.h"

#include <array>
#include <atomic>

#include "core/error.h"

namespace cg {

namespace {

constexpr size_t kDeviceTypes = 2;  // cpu, cuda

std::array<std::atomic<DeviceBackend*>, kDeviceTypes>& registry() {
  static std::array<std::atomic<DeviceBackend*>, kDeviceTypes> table{};  // C++20: nullptr
  static const bool host_registered = [] {
    table[static_cast<size_t>(DeviceType::cpu)].store(&host_backend());
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

namespace {
std::atomic<uint64_t> host_syncs{0};
std::atomic<HostSyncHook> sync_hook{nullptr};
}  // namespace

void note_host_sync() {
  host_syncs.fetch_add(1, std::memory_order_relaxed);
  if (HostSyncHook hook = sync_hook.load(std::memory_order_relaxed)) hook();
}
void set_host_sync_hook(HostSyncHook hook) { sync_hook.store(hook, std::memory_order_relaxed); }
uint64_t host_sync_count() { return host_syncs.load(std::memory_order_relaxed); }

bool cuda_available() {
  DeviceBackend* backend = find_backend(DeviceType::cuda);
  return backend != nullptr && backend->device_count() > 0;
}

}  // namespace cg
