// Why this file exists: the shared input checks of ops (see op_checks.h).
#include "ops/op_checks.h"

#include "autograd/grad_mode.h"

namespace cg {

void check_defined(const char* op, const Tensor& t, const char* arg) {
  CG_CHECK(t.defined(), op, ": ", arg, " is an undefined tensor");
}

void check_floating(const char* op, const Tensor& t) {
  CG_CHECK(is_floating(t.dtype()), op, ": dtype ", dtype_name(t.dtype()),
           " is not supported; it computes on f32, f64, bf16 and f16 tensors (convert with "
           "cg::to(t, dtype))");
}

void check_no_grad(const char* op, const Tensor& t, const char* arg) {
  CG_CHECK(!(t.defined() && t.requires_grad() && GradMode::is_enabled()), op, ": ", arg,
           " requires grad, but ", op,
           " records no gradient: it runs frozen targets; call it under no-grad "
           "(cg::NoGradGuard) or detach the inputs");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  CG_CHECK(a.device() == b.device(), op, ": tensors are on different devices (", a.device().str(),
           " and ", b.device().str(), "); move one with cg::to(t, device)");
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  CG_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ (", dtype_name(a.dtype()), " and ",
           dtype_name(b.dtype()), "); convert one with cg::to(t, dtype)");
}

void check_binary(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "the first input");
  check_defined(op, b, "the second input");
  check_same_device(op, a, b);
  check_same_dtype(op, a, b);
  check_floating(op, a);
}

void check_index_dtype(const char* op, const Tensor& idx, const char* arg) {
  CG_CHECK(idx.dtype() == DType::i64 || idx.dtype() == DType::i32, op, ": ", arg, " has dtype ",
           dtype_name(idx.dtype()),
           "; indices must be i32 or i64 (convert with "
           "cg::to(t, DType::i64))");
}

void fail_not_implemented(const char* op, Device device) {
  CG_FAIL("op ", op, " is not implemented on ", device.str(),
          " yet; run it on the CPU "
          "(cg::to(t, cg::kCPU))");
}

}  // namespace cg
