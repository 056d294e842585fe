// Why this file exists: the in-place updates of ops/inplace.h -- checks (no graph may
// be silently bypassed, dst must not have elements that share memory, a source may not
// partly overlap dst: Note [Memory overlap] in core/overlap.h), the version bump (Note
// [Version counter] in core/storage.h), then the device's kernel.
#include "ops/inplace.h"

#include <initializer_list>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/overlap.h"
#include "core/views.h"
#include "ops/kernels.h"
#include "ops/op_checks.h"

namespace cg {

namespace {

void check_no_graph(const char* op, const Tensor& t, const char* arg) {
  if (!GradMode::is_enabled() || !t.requires_grad()) return;
  if (t.is_leaf()) {
    CG_FAIL(op, ": ", arg,
            " is a leaf tensor that requires grad and grad mode is on; in-place "
            "updates are not recorded in the graph. Wrap the update in cg::NoGradGuard (as "
            "optimisers do)");
  }
  CG_FAIL(op, ": ", arg, " is part of an autograd graph (made by ", t.grad_fn()->name(),
          ") and grad mode is on; in-place updates are not recorded. Use the out-of-place op, "
          "or run under cg::NoGradGuard");
}

void check_dst(const char* op, const Tensor& dst) {
  check_defined(op, dst, "dst");
  check_floating(op, dst);
  check_no_graph(op, dst, "dst");
  check_no_internal_overlap(op, dst);
}

void check_src(const char* op, const Tensor& dst, const Tensor& src, const char* arg) {
  check_defined(op, src, arg);
  check_same_device(op, dst, src);
  check_same_dtype(op, dst, src);
  check_no_graph(op, src, arg);
  const Shape b = raw::broadcast_shapes(dst.shape(), src.shape(), op);
  CG_CHECK(b == dst.shape(), op, ": ", arg, " of shape ", shape_str(src.shape()),
           " does not broadcast to dst's shape ", shape_str(dst.shape()));
  // Exact aliasing (add_(x, x)) is fine: each element is read before it is written.
  check_no_partial_overlap(op, dst, src, arg);
}

struct Source {
  const Tensor& tensor;
  const char* arg;
};

// Every check of an in-place op.
void check_write(const char* op, const Tensor& dst, std::initializer_list<Source> sources) {
  check_dst(op, dst);
  for (const Source& s : sources) check_src(op, dst, s.tensor, s.arg);
}

// The checks, then the write is counted (Note [Version counter]). Each entry point calls
// this first, before its device dispatch (fill_ and zero_ only check: raw::fill_ counts).
void prepare_write(const char* op, const Tensor& dst, std::initializer_list<Source> sources) {
  check_write(op, dst, sources);
  dst.storage()->bump_version();
}

void run_inplace(const char* op, InplaceOp kind, const Tensor& dst, const Tensor& src,
                 double alpha) {
  kernels_for(dst.device(), op).inplace(kind, dst, src, alpha);
}

void run_inplace_scalar(const char* op, UnaryOp kind, const Tensor& dst, double s) {
  kernels_for(dst.device(), op).inplace_scalar(kind, dst, s);
}

void run_addc(const char* op, const Tensor& dst, const Tensor& a, const Tensor& b, double value,
              bool divide) {
  kernels_for(dst.device(), op).addcmul(dst, a, b, value, divide);
}

}  // namespace

void add_(const Tensor& dst, const Tensor& src, double alpha) {
  prepare_write("add_", dst, {{src, "src"}});
  run_inplace("add_", InplaceOp::add, dst, src, alpha);
}
void mul_(const Tensor& dst, const Tensor& src) {
  prepare_write("mul_", dst, {{src, "src"}});
  run_inplace("mul_", InplaceOp::mul, dst, src, 1.0);
}
void mul_(const Tensor& dst, double s) {
  prepare_write("mul_", dst, {});
  run_inplace_scalar("mul_", UnaryOp::scale, dst, s);
}
void add_scalar_(const Tensor& dst, double s) {
  prepare_write("add_scalar_", dst, {});
  run_inplace_scalar("add_scalar_", UnaryOp::add_scalar, dst, s);
}
void copy_(const Tensor& dst, const Tensor& src) {
  prepare_write("copy_", dst, {{src, "src"}});
  run_inplace("copy_", InplaceOp::copy, dst, src, 1.0);
}
void fill_(const Tensor& dst, double value) {
  check_write("fill_", dst, {});
  raw::fill_(dst, value);
}
void zero_(const Tensor& dst) {
  check_write("zero_", dst, {});
  raw::fill_(dst, 0.0);
}
void addcmul_(const Tensor& dst, const Tensor& a, const Tensor& b, double value) {
  prepare_write("addcmul_", dst, {{a, "the first operand"}, {b, "the second operand"}});
  run_addc("addcmul_", dst, a, b, value, false);
}
void addcdiv_(const Tensor& dst, const Tensor& a, const Tensor& b, double value) {
  prepare_write("addcdiv_", dst, {{a, "the first operand"}, {b, "the second operand"}});
  run_addc("addcdiv_", dst, a, b, value, true);
}

}  // namespace cg
