// Why this file exists: the autograd methods declared on Tensor in core/tensor.h.
// core/ holds the metadata as plain fields; their meaning lives here.
#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/tensor.h"
#include "core/views.h"

namespace cg {

namespace {
const std::shared_ptr<Node> kNoNode;

TensorImpl& checked_impl(const Tensor& t, const char* what) {
  CG_CHECK(t.defined(), what, ": the tensor is undefined");
  return *t.impl();
}
}  // namespace

bool Tensor::requires_grad() const { return defined() && impl_->requires_grad; }

Tensor& Tensor::requires_grad_(bool on) {
  TensorImpl& impl = checked_impl(*this, "requires_grad_");
  CG_CHECK(impl.grad_fn == nullptr,
           "requires_grad_: only leaf tensors can change requires_grad, "
           "but this tensor was made by ",
           impl.grad_fn->name(), "; call .detach() first to get a leaf that shares its storage");
  CG_CHECK(!on || is_floating(impl.dtype),
           "requires_grad_: only floating-point tensors (f32, f64, "
           "bf16, f16) can require grad, but this tensor is ",
           dtype_name(impl.dtype));
  impl.requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return checked_impl(*this, "grad").grad; }

void Tensor::set_grad(const Tensor& grad) const {
  TensorImpl& impl = checked_impl(*this, "set_grad");
  if (grad.defined()) {
    CG_CHECK(grad.shape() == shape(), "set_grad: the gradient has shape ", shape_str(grad.shape()),
             " but the tensor has shape ", shape_str(shape()));
    CG_CHECK(grad.dtype() == dtype(), "set_grad: the gradient is ", dtype_name(grad.dtype()),
             " but the tensor is ", dtype_name(dtype()), "; convert it with cg::to(grad, dtype)");
    CG_CHECK(grad.device() == device(), "set_grad: the gradient is on ", grad.device().str(),
             " but the tensor is on ", device().str(), "; move it with cg::to(grad, device)");
  }
  impl.grad = grad;
}

bool Tensor::is_leaf() const { return checked_impl(*this, "is_leaf").grad_fn == nullptr; }

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  return defined() ? impl_->grad_fn : kNoNode;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  checked_impl(*this, "backward");
  cg::backward({*this}, {gradient}, retain_graph);
}

Tensor Tensor::detach() const {
  checked_impl(*this, "detach");
  return raw::as_strided(*this, shape(), strides(), offset());
}

}  // namespace cg
