// Why this file exists: a Device says where a tensor's bytes live (host memory or one
// GPU). Every op checks that its inputs share one device and says so when they don't.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace cg {

enum class DeviceType : int8_t { cpu = 0, cuda = 1 };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // GPU ordinal for cuda; always 0 for cpu

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::cpu ? 0 : i) {}
  // Parses "cpu", "cuda", "cuda:3". Throws cg::Error on anything else.
  static Device parse(const std::string& text);

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;  // "cpu" or "cuda:N"
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline Device kCPU{DeviceType::cpu, 0};

// A device's queue of work (a CUDA stream). chunkgrad runs one compute stream per device
// for now (Note [Streams] in core/caching_allocator.h); the allocator and the memory trace
// already carry the id, so that a second stream is a change in one place.
using StreamId = uint32_t;
constexpr StreamId kDefaultStream = 0;
inline Device cuda_device(int index = 0) { return Device{DeviceType::cuda, index}; }

}  // namespace cg

template <>
struct std::hash<cg::Device> {
  size_t operator()(const cg::Device& d) const noexcept {
    return std::hash<int>()(static_cast<int>(d.type) * 1024 + d.index);
  }
};
