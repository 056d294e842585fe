// Why this file exists: the tree walks behind Module (module.h): naming, deduplication of
// shared parameters, freezing, counting, and the checked state-dict load.
#include "nn/module.h"

#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "core/views.h"

namespace cg::nn {

namespace {

// "a, b, c and 7 more" -- keeps errors about big checkpoints readable.
std::string list_names(const std::vector<std::string>& names, size_t max_shown = 8) {
  std::ostringstream out;
  for (size_t i = 0; i < names.size() && i < max_shown; ++i) out << (i ? ", " : "") << names[i];
  if (names.size() > max_shown) out << " and " << names.size() - max_shown << " more";
  return out.str();
}

class MapSource : public StateSource {
 public:
  explicit MapSource(const StateDict& state) : state_(state) {}
  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    for (const auto& [k, v] : state_) out.push_back(k);
    return out;
  }
  Shape shape(const std::string& key) const override { return get(key).shape(); }
  DType dtype(const std::string& key) const override { return get(key).dtype(); }
  void copy_into(const std::string& key, const Tensor& dst) const override {
    raw::copy_(dst, get(key));
  }
  std::string describe() const override { return "the state dict"; }

 private:
  const Tensor& get(const std::string& key) const {
    const Tensor& t = state_.at(key);
    CG_CHECK(t.defined(), "load_state_dict: entry '", key, "' of the state dict is undefined");
    return t;
  }
  const StateDict& state_;
};

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}
Module::~Module() = default;

void Module::set_name(std::string name) {
  name_ = std::move(name);
  if (is_container()) {
    for (auto& [key, child] : children_) child->set_name(this->name() + "." + key);
  }
}

void Module::register_parameter(const std::string& name, Tensor* slot) {
  CG_CHECK(slot && slot->defined(), type_name_, ": parameter '", name,
           "' is undefined; create the tensor before registering it");
  CG_CHECK(name.find('.') == std::string::npos && !name.empty(), type_name_, ": parameter name '",
           name, "' must be non-empty and contain no '.'");
  for (const auto& [n, s] : params_) {
    CG_CHECK(n != name, type_name_, ": parameter '", name, "' is registered twice");
  }
  for (const auto& [n, c] : children_) {
    CG_CHECK(n != name, type_name_, ": '", name, "' is already a submodule");
  }
  if (slot->is_leaf() && is_floating(slot->dtype()) && !slot->requires_grad()) {
    slot->requires_grad_(true);
  }
  params_.emplace_back(name, slot);
}

void Module::add_child(const std::string& name, std::unique_ptr<Module> child) {
  CG_CHECK(child != nullptr, type_name_, ": submodule '", name, "' is null");
  CG_CHECK(name.find('.') == std::string::npos && !name.empty(), type_name_, ": submodule name '",
           name, "' must be non-empty and contain no '.'");
  for (const auto& [n, c] : children_) {
    CG_CHECK(n != name, type_name_, ": submodule '", name, "' is registered twice");
  }
  for (const auto& [n, s] : params_) {
    CG_CHECK(n != name, type_name_, ": '", name, "' is already a parameter");
  }
  child->set_name(is_container() ? this->name() + "." + name : name);
  children_.emplace_back(name, std::move(child));
}

// ---- the tree ------------------------------------------------------------------

void Module::collect(const std::string& prefix, NamedParameters& out) const {
  for (const auto& [name, slot] : params_) out.emplace_back(prefix + name, *slot);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedParameters Module::named_parameters_with_aliases() const {
  NamedParameters out;
  collect("", out);
  return out;
}

NamedParameters Module::named_parameters() const {
  NamedParameters out;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& entry : named_parameters_with_aliases()) {
    if (seen.insert(entry.second.impl()).second) out.push_back(std::move(entry));
  }
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const auto& [name, child] : children_) out.emplace_back(name, child.get());
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (const auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules()) {
      out.emplace_back(sub.empty() ? name : name + "." + sub, m);
    }
  }
  return out;
}

Module& Module::submodule(const std::string& path) {
  Module* m = this;
  std::stringstream parts(path);
  std::string part;
  while (std::getline(parts, part, '.')) {
    Module* next = nullptr;
    for (const auto& [name, child] : m->children_) {
      if (name == part) next = child.get();
    }
    CG_CHECK(next != nullptr, type_name_, ": no submodule at '", path, "' ('", part,
             "' is not a child of ", m->type_name_, ")");
    m = next;
  }
  return *m;
}

Tensor Module::parameter(const std::string& path) const {
  for (const auto& [name, t] : named_parameters_with_aliases()) {
    if (name == path) return t;
  }
  CG_FAIL(type_name_, ": no parameter named '", path, "'");
}

// ---- modes, gradients, freezing ---------------------------------------------------

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

void Module::requires_grad_(bool on) {
  for (Tensor& p : parameters()) p.requires_grad_(on);
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

int64_t Module::num_trainable_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.requires_grad() ? p.numel() : 0;
  return n;
}

// ---- state -----------------------------------------------------------------------

StateDict Module::state_dict() const {
  StateDict out;
  for (const auto& [name, p] : named_parameters()) out.emplace(name, p.detach());
  return out;
}

LoadResult Module::load_state_dict(const StateDict& state, bool strict, bool convert_dtype) {
  return load_state_dict(MapSource(state), strict, convert_dtype);
}

LoadResult Module::load_state_dict(const StateSource& source, bool strict, bool convert_dtype) {
  const NamedParameters all = named_parameters_with_aliases();
  std::unordered_map<std::string, Tensor> by_name(all.begin(), all.end());
  const std::vector<std::string> keys = source.keys();
  const std::set<std::string> key_set(keys.begin(), keys.end());

  LoadResult result;
  for (const std::string& key : keys) {
    if (!by_name.count(key)) result.unexpected.push_back(source.name_in_source(key));
  }
  // Which key fills each parameter: its first name that the source has.
  std::vector<std::pair<std::string, Tensor>> plan;
  std::unordered_set<const TensorImpl*> planned;
  for (const auto& [primary, p] : named_parameters()) {
    for (const auto& [name, q] : all) {
      if (q.impl() == p.impl() && key_set.count(name)) {
        plan.emplace_back(name, p);
        planned.insert(p.impl());
        break;
      }
    }
    if (!planned.count(p.impl())) result.missing.push_back(primary);
  }
  if (strict && (!result.missing.empty() || !result.unexpected.empty())) {
    std::ostringstream msg;
    msg << "load_state_dict into " << type_name_ << " from " << source.describe() << ":";
    if (!result.missing.empty()) {
      // Named as the source would name them: the user looks for them in the files given
      // (model.language_model.norm.weight), not under the module's name (model.norm.weight).
      std::vector<std::string> in_source;
      for (const std::string& key : result.missing) in_source.push_back(source.name_in_source(key));
      msg << " missing " << result.missing.size() << " key(s): " << list_names(in_source);
      if (in_source != result.missing) msg << " (the model's " << list_names(result.missing) << ")";
      msg << ";";
    }
    if (!result.unexpected.empty()) {
      msg << " unexpected " << result.unexpected.size()
          << " key(s): " << list_names(result.unexpected) << ";";
    }
    // (a checkpoint saved with tied weights has no lm_head.weight of its own). Where the
    // field counts: transformers ties by the model's own config, the outer one of a wrapper
    // (Qwen3_5ForConditionalGeneration), whose text_config may say otherwise unheard (Note
    // [Qwen3.5 config], nn/config.cpp); an outside tester's text_config said true.
    if (result.unexpected.empty() && result.missing.size() == 1 && result.missing[0].size() >= 14 &&
        result.missing[0].compare(result.missing[0].size() - 14, 14, "lm_head.weight") == 0) {
      msg << " a checkpoint without lm_head.weight ties it to the input embedding: its "
             "config.json then says \"tie_word_embeddings\": true at the top level (a wrapper "
             "model, Qwen3_5ForConditionalGeneration style, ties by its top-level field; "
             "text_config's is not used, as in transformers);";
    }
    msg << " check that the checkpoint matches this model's config (config.json) and tensor "
           "names";
    CG_FAIL(msg.str());
  }
  // Check every key that names a parameter (aliases included) before writing anything.
  for (const std::string& key : keys) {
    auto it = by_name.find(key);
    if (it == by_name.end()) continue;
    const Tensor& p = it->second;
    const Shape shape = source.shape(key);
    const std::string in_source = source.name_in_source(key);
    CG_CHECK(shape == p.shape(), "load_state_dict into ", type_name_, ": '", key, "' is ",
             shape_str(shape), " in ", source.describe(),
             in_source == key ? std::string() : " (as '" + in_source + "')",
             " but the parameter is ", shape_str(p.shape()),
             "; the checkpoint was made for another config");
    const DType dtype = source.dtype(key);
    CG_CHECK(convert_dtype || dtype == p.dtype(), "load_state_dict into ", type_name_, ": '", key,
             "' is ", dtype_name(dtype), " in ", source.describe(), " but the parameter is ",
             dtype_name(p.dtype()),
             "; cast the model with to(dtype) first or load with convert_dtype = true");
    // Converting integers into a floating parameter turns bytes into garbage weights (a
    // mis-labelled or mis-converted file): never a conversion to make silently.
    CG_CHECK(!is_floating(p.dtype()) || is_floating(dtype), "load_state_dict into ", type_name_,
             ": '", key, "' is ", dtype_name(dtype), " in ", source.describe(),
             in_source == key ? std::string() : " (as '" + in_source + "')",
             " but the parameter is floating point (", dtype_name(p.dtype()),
             "); the checkpoint is damaged or mis-converted: use one with floating weights");
  }
  NoGradGuard no_grad;
  for (const auto& [key, p] : plan) source.copy_into(key, p);
  return result;
}

namespace {

// Replaces every parameter p (and its grad) by convert(p) in place: same TensorImpl, new
// storage, so every holder of p (a tied module, an optimiser) sees the change. `skip`
// parameters are left as they are.
template <typename Skip, typename Convert>
void replace_parameters(const std::vector<Tensor>& params, Skip&& skip, Convert&& convert) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (skip(p)) continue;
    Tensor grad = p.grad();
    if (grad.defined()) {
      CategoryGuard category(MemoryCategory::gradient);
      grad = convert(grad);
    }
    Tensor converted;
    {
      CategoryGuard category(MemoryCategory::parameter);
      converted = convert(p);
    }
    TensorImpl& impl = *p.impl();
    impl.storage = converted.storage();
    impl.sizes = converted.shape();
    impl.strides = converted.strides();
    impl.offset = converted.offset();
    impl.dtype = converted.dtype();
    impl.grad = grad;
  }
}

}  // namespace

void Module::to(Device device) {
  replace_parameters(
      parameters(), [&](const Tensor& p) { return p.device() == device; },
      [&](const Tensor& t) { return raw::to_device(raw::contiguous(t), device); });
}

void Module::to(DType dtype) {
  CG_CHECK(is_floating(dtype), type_name_, ".to(", dtype_name(dtype),
           "): parameters can only be cast to a floating dtype (f32, f64, bf16, f16)");
  replace_parameters(
      parameters(), [&](const Tensor& p) { return !is_floating(p.dtype()) || p.dtype() == dtype; },
      [&](const Tensor& t) { return raw::to_dtype(t, dtype); });
}

}  // namespace cg::nn
