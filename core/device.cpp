// Why this file exists: parsing and printing of Device ("cpu", "cuda:N").
#include "core/device.h"

#include "core/error.h"

namespace cg {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return Device{DeviceType::cpu, 0};
  if (text == "cuda") return Device{DeviceType::cuda, 0};
  if (text.rfind("cuda:", 0) == 0) {
    const std::string digits = text.substr(5);
    bool ok = !digits.empty() && digits.size() < 5;
    for (char c : digits) ok = ok && c >= '0' && c <= '9';
    CG_CHECK(ok, "bad device string '", text, "': expected 'cpu', 'cuda' or 'cuda:N'");
    return Device{DeviceType::cuda, std::stoi(digits)};
  }
  CG_FAIL("bad device string '", text, "': expected 'cpu', 'cuda' or 'cuda:N'");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace cg
