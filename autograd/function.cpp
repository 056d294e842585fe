// Why this file exists: the helpers ops use to record history (see function.h).
#include "autograd/function.h"

namespace cg {

bool should_record(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

namespace {
void connect_one(Node& node, const Tensor* t) {
  if (t && t->defined()) {
    node.next_edges.push_back(gradient_edge(*t));
    node.input_meta.push_back(TensorMeta::of(*t));
  } else {
    node.next_edges.push_back(Edge{});
    node.input_meta.push_back(TensorMeta{});
  }
}
}  // namespace

void connect_inputs(Node& node, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) connect_one(node, t);
}

void connect_inputs(Node& node, const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs) connect_one(node, &t);
}

void set_history(const std::shared_ptr<Node>& node, const std::vector<Tensor>& outputs) {
  for (const Tensor& out : outputs) {
    TensorImpl* impl = out.impl();
    CG_CHECK(impl != nullptr, node->name(), ": an output is undefined");
    CG_CHECK(impl->grad_fn == nullptr && !impl->requires_grad, node->name(),
             ": an output already has autograd history (an op returned its input as is; "
             "return a fresh view instead)");
    impl->grad_fn = node;
    impl->output_nr = node->num_outputs();
    impl->requires_grad = true;
    node->output_meta.push_back(TensorMeta::of(out));
  }
}

void set_history(const std::shared_ptr<Node>& node, const Tensor& output) {
  set_history(node, std::vector<Tensor>{output});
}

}  // namespace cg
