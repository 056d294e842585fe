// Why this file exists: Tensor::str() and operator<<, a readable print after PyTorch's
// (torch/_tensor_str.py), so that numbers compare at a glance with a PyTorch session:
//   tensor([[1.0000, 2.0000],
//           [3.0000, 4.0000]], dtype=bf16)
// Differences from PyTorch, on purpose: floats always show 4 decimals (PyTorch prints
// integer-valued floats as "1."), every non-f32 dtype is named, bools print true/false.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype_dispatch.h"
#include "core/tensor.h"
#include "core/views.h"

namespace cg {

namespace {

constexpr int64_t kSummarizeThreshold = 1000;  // more elements than this: print the edges
constexpr int64_t kEdgeItems = 3;              // elements kept at each edge of a dim
constexpr int64_t kLineWidth = 80;

// Formats the elements of a contiguous host tensor, all padded to one width.
class Printer {
 public:
  explicit Printer(const Tensor& host)
      : host_(host),
        sizes_(host.shape()),
        strides_(contiguous_strides(host.shape())),
        summarize_(host.numel() > kSummarizeThreshold) {
    std::vector<int64_t> shown;
    collect(0, 0, shown);
    choose_float_style(shown);
    for (int64_t i : shown) width_ = std::max<int64_t>(width_, format_raw(i).size());
  }

  std::string render() const {
    return render(0, 0, static_cast<int64_t>(std::string("tensor(").size()));
  }

 private:
  // The linear indices (into the contiguous host tensor) of the elements that get printed.
  void collect(size_t dim, int64_t base, std::vector<int64_t>& out) const {
    if (dim == sizes_.size()) {
      out.push_back(base);
      return;
    }
    const int64_t n = sizes_[dim];
    for (int64_t i = 0; i < n; ++i) {
      if (summarize_ && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
      collect(dim + 1, base + i * strides_[dim], out);
    }
  }

  // PyTorch's rule: scientific notation when the nonzero finite magnitudes span more than
  // 1000x, or reach 1e8, or go below 1e-4 -- except that integer-valued data stays fixed
  // up to 1e8.
  void choose_float_style(const std::vector<int64_t>& shown) {
    if (!is_floating(host_.dtype())) return;
    double lo = INFINITY, hi = 0.0;
    bool all_integers = true;
    for (int64_t i : shown) {
      const double v = value(i);
      if (!std::isfinite(v) || v == 0.0) continue;
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
      all_integers = all_integers && v == std::nearbyint(v);
    }
    if (hi == 0.0) return;  // nothing nonzero and finite
    scientific_ = all_integers ? hi > 1e8 : (hi / lo > 1000.0 || hi > 1e8 || lo < 1e-4);
  }

  double value(int64_t i) const {
    const auto* base = static_cast<const char*>(host_.data_ptr());
    return raw::load_element(base + i * static_cast<int64_t>(element_size(host_.dtype())),
                             host_.dtype());
  }

  std::string format_raw(int64_t i) const {
    const char* base = static_cast<const char*>(host_.data_ptr());
    return visit_dtype(host_.dtype(), [&](auto tag) -> std::string {
      using T = typename decltype(tag)::type;
      const T x = reinterpret_cast<const T*>(base)[i];
      if constexpr (std::is_same_v<T, bool>) {
        return x ? "true" : "false";
      } else if constexpr (std::is_integral_v<T>) {
        return std::to_string(static_cast<long long>(x));
      } else {
        const double v = cast_element<double>(x);
        if (std::isnan(v)) return "nan";
        if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
        char buf[64];
        std::snprintf(buf, sizeof buf, scientific_ ? "%.4e" : "%.4f", v);
        return buf;
      }
    });
  }

  std::string format(int64_t i) const {
    std::string s = format_raw(i);
    return std::string(std::max<int64_t>(0, width_ - static_cast<int64_t>(s.size())), ' ') + s;
  }

  // The sub-tensor at dim `dim` starting at `base`; `indent` is the column of its '['.
  std::string render(size_t dim, int64_t base, int64_t indent) const {
    if (sizes_.empty()) return format(0);
    const int64_t n = sizes_[dim];
    const bool cut = summarize_ && n > 2 * kEdgeItems;
    std::vector<std::string> parts;
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == kEdgeItems) {
        parts.push_back(dim + 1 == sizes_.size() ? " ..." : "...");
        i = n - kEdgeItems;
      }
      const int64_t at = base + i * strides_[dim];
      parts.push_back(dim + 1 == sizes_.size() ? format(at) : render(dim + 1, at, indent + 1));
    }
    std::string out = "[";
    if (dim + 1 == sizes_.size()) {
      // A row: as many elements per line as fit in kLineWidth.
      const int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / (width_ + 2));
      for (size_t k = 0; k < parts.size(); ++k) {
        if (k > 0 && k % per_line == 0) {
          out.append(",\n").append(indent + 1, ' ');
        } else if (k > 0) {
          out.append(", ");
        }
        out.append(parts[k]);
      }
    } else {
      // Sub-tensors: one per line, separated by a blank line per extra dim below.
      const size_t sub_dims = sizes_.size() - dim;
      std::string sep(",");
      sep.append(sub_dims - 1, '\n').append(indent + 1, ' ');
      for (size_t k = 0; k < parts.size(); ++k) {
        if (k > 0) out.append(sep);
        out.append(parts[k]);
      }
    }
    out.push_back(']');
    return out;
  }

  const Tensor& host_;
  Shape sizes_;
  Shape strides_;
  bool summarize_;
  bool scientific_ = false;
  int64_t width_ = 0;
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::string out = "tensor(";
  if (numel() == 0) {
    out += "[]";
    if (dim() != 1) out += ", size=" + shape_str(shape());
  } else {
    const Tensor host = raw::contiguous(raw::to_device(*this, kCPU));
    out += Printer(host).render();
  }
  if (!device().is_cpu()) out += ", device=" + device().str();
  if (dtype() != DType::f32) out += std::string(", dtype=") + dtype_name(dtype());
  if (impl()->requires_grad) out += ", requires_grad=true";
  return out + ")";
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.str(); }

}  // namespace cg
