// Why this file exists: the CPU's kernel table (ops/kernels.h). Each entry forwards to the
// CPU kernel of the same name in this folder; the table registers itself when the library
// loads, so the op layer finds it through kernels_for(kCPU) like any other device's.
// The CPU kernels allocate their outputs on their inputs' device (which lets a test's
// fake device run them on memory of its own).
#include "core/views.h"
#include "cpu/attention.h"
#include "cpu/gemm.h"
#include "cpu/head_loss_rows.h"
#include "cpu/index_kernels.h"
#include "cpu/kernels.h"
#include "cpu/nn_kernels.h"
#include "cpu/reduce.h"
#include "cpu/softmax.h"
#include "ops/kernels.h"

namespace cg {

namespace {

class CpuKernels final : public DeviceKernels {
 public:
  DeviceType type() const override { return DeviceType::cpu; }

  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override { return cpu::binary(op, a, b); }
  Tensor unary(UnaryOp op, const Tensor& a, double s) override { return cpu::unary(op, a, s); }
  Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) override { return cpu::where(c, a, b); }
  void inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha) override {
    cpu::inplace(op, dst, src, alpha);
  }
  void inplace_scalar(UnaryOp op, const Tensor& dst, double s) override {
    cpu::inplace_scalar(op, dst, s);
  }
  void addcmul(const Tensor& dst, const Tensor& a, const Tensor& b, double value, bool divide) override {
    cpu::addcmul_(dst, a, b, value, divide);
  }

  Tensor sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim, double scale) override {
    return cpu::sum(a, reduce, keepdim, scale);
  }
  Tensor max_along_dim(const Tensor& a, int64_t dim, Tensor* values) override {
    return cpu::max_along_dim(a, dim, values);
  }
  Tensor logsumexp_along_dim(const Tensor& a, int64_t dim) override {
    return cpu::logsumexp_along_dim(a, dim);
  }
  Tensor scatter_along_dim(const Tensor& src, const Tensor& index, int64_t dim,
                           const Shape& shape) override {
    return cpu::scatter_along_dim(src, index, dim, shape);
  }
  Tensor softmax(const Tensor& a, int64_t dim, bool log) override { return cpu::softmax(a, dim, log); }
  Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log) override {
    return cpu::softmax_backward(g, y, dim, log);
  }

  void head_loss_rows(const HeadRowsArgs& args) override { cpu::head_loss_rows(args); }
  void check_labels(const Tensor& labels, int64_t vocab, int64_t ignore_index) override {
    cpu::check_labels(labels, vocab, ignore_index);
  }
  void row_weights(const Tensor& labels, const Tensor& weights, int64_t ignore_index,
                   bool normalize, const Tensor& out) override {
    cpu::row_weights(labels, weights, ignore_index, normalize, out);
  }

  Tensor matmul(const Tensor& a, const Tensor& b) override { return cpu::matmul(a, b); }
  void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) override {
    cpu::gemm(a, b, out, alpha, beta);
  }
  size_t gemm_scratch_bytes(const GemmDesc& desc) const override {
    return cpu::gemm_scratch_bytes(desc);
  }

  RmsNormForward rms_norm_forward(const Tensor& x, const Tensor& w, double eps) override {
    return cpu::rms_norm_forward(x, w, eps);
  }
  RmsNormGrads rms_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& rstd,
                                 bool need_dx, bool need_dw) override {
    return cpu::rms_norm_backward(g, x, w, rstd, need_dx, need_dw);
  }
  Tensor rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse) override {
    return cpu::rotary(x, positions, theta, inverse);
  }
  Tensor swiglu_forward(const Tensor& gate, const Tensor& up) override {
    return cpu::swiglu_forward(gate, up);
  }
  SwigluGrads swiglu_backward(const Tensor& g, const Tensor& gate, const Tensor& up, bool need_dgate,
                              bool need_dup) override {
    return cpu::swiglu_backward(g, gate, up, need_dgate, need_dup);
  }
  AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const ResolvedAttentionMask& mask, double scale) override {
    return cpu::attention_forward(q, k, v, mask, scale);
  }
  AttentionGrads attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const ResolvedAttentionMask& mask,
                                    double scale, bool need_dq, bool need_dk, bool need_dv) override {
    return cpu::attention_backward(g, q, k, v, out, lse, mask, scale, need_dq, need_dk, need_dv);
  }

  Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx) override {
    return cpu::index_select(x, dim, idx);
  }
  void index_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                 int64_t skip) override {
    cpu::index_add_(dst, dim, idx, src, skip);
  }
  Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx) override {
    return cpu::gather(x, dim, idx);
  }
  void scatter_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src) override {
    cpu::scatter_add_(dst, dim, idx, src);
  }
  void check_indices(const char* op, const char* noun, const Tensor& idx, int64_t bound,
                     const std::string& what) override {
    cpu::check_indices(op, noun, idx, bound, what);
  }
  void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                  const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                  const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                  const AdamWArgs& args) override {
    cpu::adamw_step(params, masters, grads, exp_avgs, exp_avg_sqs, grad_scale, args);
  }
};

CpuKernels& cpu_table() {
  static CpuKernels table;
  return table;
}

const bool registered = [] {
  register_kernels(&cpu_table());
  return true;
}();

}  // namespace

}  // namespace cg
