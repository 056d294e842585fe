// Why this file exists: the table of device types (Note [Device types], core/device.h)
// and everything read off it: parsing and printing of Device, the registry slots, the
// names in messages, and resolve_device().
#include "core/device.h"

#include <iterator>
#include <vector>

#include "core/backend.h"
#include "core/error.h"

namespace cg {

namespace {

struct DeviceTypeInfo {
  DeviceType type;
  const char* name;
  bool numbered;           // devices name:0, name:1, ... (the host has one, unnumbered)
  bool offered;            // listed in help texts and errors (false: for tests only)
  const char* build_hint;  // what to change when this build has no backend for the type
};

constexpr DeviceTypeInfo kDeviceTypeInfo[] = {
    {DeviceType::cpu, "cpu", false, true, "the host backend is always built in"},
    {DeviceType::cuda, "cuda", true, true,
     "reconfigure with -DCHUNKGRAD_CUDA=ON (needs the CUDA toolkit and cuDNN 9)"},
    {DeviceType::fake, "fake", true, false,
     "it is the test suite's stand-in device, installed by tests/fake_device.h"},
};
static_assert(std::size(kDeviceTypeInfo) == kDeviceTypeCount,
              "every DeviceType needs a row in kDeviceTypeInfo");

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kDeviceTypeCount; ++i) {
    if (static_cast<size_t>(kDeviceTypeInfo[i].type) != i) return false;
  }
  return true;
}
static_assert(rows_in_enum_order(), "kDeviceTypeInfo's rows follow DeviceType's codes");

const DeviceTypeInfo& info(DeviceType type) { return kDeviceTypeInfo[device_slot(type)]; }

// "a, b or c"
std::string join_alternatives(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

}  // namespace

size_t device_slot(DeviceType type) {
  const auto i = static_cast<size_t>(type);
  CG_CHECK(i < kDeviceTypeCount, "unknown device type code ", static_cast<int>(type));
  return i;
}

const char* device_type_name(DeviceType type) { return info(type).name; }

const char* device_type_build_hint(DeviceType type) { return info(type).build_hint; }

std::string device_names_help() {
  std::vector<std::string> words;
  for (const DeviceTypeInfo& row : kDeviceTypeInfo) {
    if (!row.offered) continue;
    words.emplace_back(row.name);
    if (row.numbered) words.push_back(std::string(row.name) + ":N");
  }
  return join_alternatives(words);
}

namespace {
// A device string in a message: control characters as '?' (an outside tester's
// --device $'c\x1bpu' reached the terminal as an escape sequence).
std::string shown(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = '?';
  }
  return text;
}
}  // namespace

Device Device::parse(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  for (const DeviceTypeInfo& row : kDeviceTypeInfo) {
    if (name != row.name) continue;
    if (colon == std::string::npos) return Device{row.type, 0};
    const std::string digits = text.substr(colon + 1);
    bool ok = row.numbered && !digits.empty() && digits.size() < 5;
    for (char c : digits) ok = ok && c >= '0' && c <= '9';
    if (ok) return Device{row.type, std::stoi(digits)};
    break;
  }
  CG_FAIL("bad device string '", shown(text), "': give ", device_names_help());
}

std::string Device::str() const {
  const DeviceTypeInfo& row = info(type);
  return row.numbered ? std::string(row.name) + ":" + std::to_string(index) : row.name;
}

Device resolve_device(const std::string& text, const std::string& what) {
  Device device;
  try {
    device = Device::parse(text);
  } catch (const Error& e) { CG_FAIL(what, " ", shown(text), ": ", e.message()); }
  try {
    backend_for(device);  // throws naming why: not built in, no driver, no such index
  } catch (const Error& e) { CG_FAIL(what, " ", text, " is not available: ", e.message()); }
  return device;
}

}  // namespace cg
