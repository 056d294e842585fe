// Why this file exists: the registry through which a device backend (cuda/, the test
// fake) makes itself known to core/ without core/ linking against it. Backends register
// from static initialisers of their own translation units, so the table is a
// function-local static (constructed on first use, whatever the initialisation order).
// The host backend itself is in host_backend.cpp.
#include "core/backend.h"

#include <array>
#include <atomic>
#include <string>

#include "core/error.h"

namespace cg {

namespace {

// One slot per device type (device_slot, core/device.h).
std::array<std::atomic<DeviceBackend*>, kDeviceTypeCount>& registry() {
  static std::array<std::atomic<DeviceBackend*>, kDeviceTypeCount> table{};  // C++20: nullptr
  static const bool host_registered = [] {
    table[device_slot(DeviceType::cpu)].store(&host_backend());
    return true;
  }();
  (void)host_registered;
  return table;
}

}  // namespace

void register_backend(DeviceBackend* backend) {
  CG_CHECK(backend != nullptr, "register_backend: the backend is null");
  registry()[device_slot(backend->type())].store(backend);
}

void unregister_backend(DeviceType type) {
  CG_CHECK(type != DeviceType::cpu, "unregister_backend: the host backend is built in");
  registry()[device_slot(type)].store(nullptr);
}

DeviceBackend* find_backend(DeviceType type) { return registry()[device_slot(type)].load(); }

DeviceBackend& backend_for(Device device) {
  DeviceBackend* backend = find_backend(device.type);
  const std::string name = device_type_name(device.type);
  CG_CHECK(backend != nullptr, "this build of chunkgrad has no ", name,
           " backend: ", device_type_build_hint(device.type), " (", device.str(),
           " was requested)");
  const int count = backend->device_count();
  if (device.index < 0 || device.index >= count) {
    const std::string reason = backend->unavailable_reason();
    CG_FAIL(device.str(), " requested but only ", count, " ", name, " device",
            count == 1 ? " is" : "s are", " visible",
            reason.empty() ? std::string() : " (" + reason + ")",
            count == 1  ? "; use " + name + ":0"
            : count > 1 ? "; use " + name + ":0.." + name + ":" + std::to_string(count - 1)
                        : std::string());
  }
  return *backend;
}

int device_count(DeviceType type) {
  DeviceBackend* backend = find_backend(type);
  return backend == nullptr ? 0 : backend->device_count();
}

bool cuda_available() { return device_count(DeviceType::cuda) > 0; }

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

}  // namespace cg
