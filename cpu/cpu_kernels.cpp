// Why this file exists: the CPU table (cpu/cpu_kernels.h) registers itself here when the
// library loads, so the op layer finds it through kernels_for(kCPU) like any other
// device's; its entries are defined in the files of their families (the header lists them).
#include "cpu/cpu_kernels.h"

namespace cg::cpu {

DeviceType CpuKernels::type() const { return DeviceType::cpu; }

namespace {

const bool registered = [] {
  static CpuKernels table;
  register_kernels(&table);
  return true;
}();

}  // namespace

}  // namespace cg::cpu
