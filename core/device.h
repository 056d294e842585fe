// Why this file exists: a Device says where a tensor's bytes live (host memory or one
// device of a backend). Every op checks that its inputs share one device and says so
// when they don't. This header also holds the one table of device types: their names,
// their registry slots, and resolve_device(), through which every program and the train
// config turn a device string into a device that is built in and present.
//
// Note [Device types]: the device types chunkgrad knows are the rows of one table
// (kDeviceTypeInfo in core/device.cpp): a name ("cpu", "cuda"), whether the type has
// numbered devices ("cuda:1"), whether users are offered it, and what to change when a
// build lacks it. Parsing, printing, the registries' slots (core/backend.cpp's backends,
// ops/kernels.cpp's kernel tables) and the error messages all read that table; nothing
// outside it and a device's own folder (cpu/, cuda/, tests/fake_device.*) spells a device
// name. What only some devices have (a queue to wait for, memory of their own, ...) is
// asked of the device's backend (DeviceBackend::capabilities(), core/backend.h), never of
// its type: ops/, nn/, train/ and examples/ name no device type (tests/layering_test.sh).
// A new device adds an enumerator here, a row in the table and its folder
// (docs/new_device.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace cg {

// `fake` is the test suite's stand-in device (tests/fake_device.h): a type of its own, so
// that it never hides a real backend, registering like any other device.
enum class DeviceType : int8_t { cpu = 0, cuda = 1, fake = 2 };
constexpr size_t kDeviceTypeCount = 3;

// The registry slot of `type`, in [0, kDeviceTypeCount); throws on a code outside the enum.
size_t device_slot(DeviceType type);
// The type's name in the table ("cpu", "cuda", "fake"): what messages call it.
const char* device_type_name(DeviceType type);
// What to change when this build has no backend for `type` ("reconfigure with ...").
const char* device_type_build_hint(DeviceType type);
// The spellings users may give, for help texts and errors: "cpu, cuda or cuda:N".
std::string device_names_help();

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // the device's ordinal within its type; always 0 for the host (cpu)

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::cpu ? 0 : i) {}
  // Parses a name of the table, with ":N" for a type with numbered devices ("cpu", "cuda",
  // "cuda:3"; the bare name is device 0). Throws cg::Error naming the accepted spellings.
  // Only parses: resolve_device() also checks the device is built in and present.
  static Device parse(const std::string& text);

  // The host: memory the process reads and writes directly. Every build has it.
  bool is_cpu() const { return type == DeviceType::cpu; }
  // For cuda/ and tests only: device-neutral code asks the backend's capabilities.
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;  // "cpu", "cuda:N"
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline Device kCPU{DeviceType::cpu, 0};

// The device `text` names, checked to be built into this build and present on this
// machine: what every program's --device and the train config's device go through, before
// any work. Throws cg::Error starting with `what` and the text ("--device cuda:3 ...") and
// saying what to change: the accepted spellings for a name the table lacks, the build
// option for a type this build has no backend for, the valid indices for an absent device.
Device resolve_device(const std::string& text, const std::string& what = "device");

// A device's queue of work (a CUDA stream): 0 is the device's compute stream, others are
// side streams (Note [Streams] in core/caching_allocator.h; a thread's current stream:
// core/stream_guard.h). The allocator and the memory trace carry the id.
using StreamId = uint32_t;
constexpr StreamId kDefaultStream = 0;
// For cuda/, its tests and its benches.
inline Device cuda_device(int index = 0) { return Device{DeviceType::cuda, index}; }

}  // namespace cg

template <>
struct std::hash<cg::Device> {
  size_t operator()(const cg::Device& d) const noexcept {
    return std::hash<int>()(static_cast<int>(d.type) * 1024 + d.index);
  }
};
