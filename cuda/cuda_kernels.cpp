// Why this file exists: the CUDA column of the kernel table (ops/kernels.h). It registers
// when libchunkgrad loads, as cuda_backend.cpp does for memory; each entry forwards to its
// tensor-level half (cuda/table_*.cpp, cuda/lt_gemm.cpp), which launches kernels of
// cuda/*.cu on the device's one compute stream (attention: cuda/cuda_attention.h; AdamW:
// cuda/cuda_adamw.h). Filling in the CUDA backend changes
// this folder and its CMake lines only: no op file knows which devices exist.
#include "cuda/cuda_adamw.h"
#include "cuda/cuda_attention.h"
#include "cuda/lt_gemm.h"
#include "cuda/table_entries.h"
#include "ops/kernels.h"

namespace cg::cuda {
namespace {

class CudaKernels final : public DeviceKernels {
 public:
  DeviceType type() const override { return DeviceType::cuda; }

  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override { return cuda::binary(op, a, b); }
  Tensor unary(UnaryOp op, const Tensor& a, double s) override { return cuda::unary(op, a, s); }
  Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) override { return cuda::where(c, a, b); }
  void inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha) override {
    cuda::inplace(op, dst, src, alpha);
  }
  void inplace_scalar(UnaryOp op, const Tensor& dst, double s) override {
    cuda::inplace_scalar(op, dst, s);
  }
  void addcmul(const Tensor& dst, const Tensor& a, const Tensor& b, double value, bool divide) override {
    cuda::addcmul(dst, a, b, value, divide);
  }

  Tensor sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim, double scale) override {
    return cuda::sum(a, reduce, keepdim, scale);
  }
  Tensor max_along_dim(const Tensor& a, int64_t dim, Tensor* values) override {
    return cuda::max_along_dim(a, dim, values);
  }
  Tensor logsumexp_along_dim(const Tensor& a, int64_t dim) override {
    return cuda::logsumexp_along_dim(a, dim);
  }
  Tensor scatter_along_dim(const Tensor& src, const Tensor& index, int64_t dim,
                           const Shape& shape) override {
    return cuda::scatter_along_dim(src, index, dim, shape);
  }
  Tensor softmax(const Tensor& a, int64_t dim, bool log) override { return cuda::softmax(a, dim, log); }
  Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log) override {
    return cuda::softmax_backward(g, y, dim, log);
  }

  // Note [16-bit logits on the GPU]: the fused head loss keeps a chunk's logits in the
  // inputs' 16-bit dtype there (the row kernel computes in fp32), half the bytes of the
  // CPU's fp32 chunk; the CPU keeps fp32 because it has no fast 16-bit GEMM output.
  DType head_logits_dtype(DType input) const override { return input; }
  void head_loss_rows(const HeadRowsArgs& args) override { cuda::head_loss_rows(args); }
  void check_labels(const Tensor& labels, int64_t vocab, int64_t ignore_index) override {
    cuda::check_labels(labels, vocab, ignore_index);
  }
  void row_weights(const Tensor& labels, const Tensor& weights, int64_t ignore_index,
                   bool normalize, const Tensor& out) override {
    cuda::row_weights(labels, weights, ignore_index, normalize, out);
  }

  Tensor matmul(const Tensor& a, const Tensor& b) override { return lt_matmul(a, b); }
  void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) override {
    lt_gemm(a, b, out, alpha, beta);
  }
  size_t gemm_scratch_bytes(const GemmDesc& desc) const override {
    return lt_gemm_scratch_bytes(desc);
  }

  RmsNormForward rms_norm_forward(const Tensor& x, const Tensor& w, double eps) override {
    return cuda::rms_norm_forward(x, w, eps);
  }
  RmsNormGrads rms_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w,
                                 const Tensor& rstd, bool need_dx, bool need_dw) override {
    return cuda::rms_norm_backward(g, x, w, rstd, need_dx, need_dw);
  }
  Tensor rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse) override {
    return cuda::rotary(x, positions, theta, inverse);
  }
  Tensor swiglu_forward(const Tensor& gate, const Tensor& up) override {
    return cuda::swiglu_forward(gate, up);
  }
  SwigluGrads swiglu_backward(const Tensor& g, const Tensor& gate, const Tensor& up,
                              bool need_dgate, bool need_dup) override {
    return cuda::swiglu_backward(g, gate, up, need_dgate, need_dup);
  }

  Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx) override {
    return cuda::index_select(x, dim, idx);
  }
  void index_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                 int64_t skip) override {
    cuda::index_add(dst, dim, idx, src, skip);
  }
  Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx) override {
    return cuda::gather(x, dim, idx);
  }
  void scatter_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src) override {
    cuda::scatter_add(dst, dim, idx, src);
  }
  void check_indices(const char* op, const char* noun, const Tensor& idx, int64_t bound,
                     const std::string& what) override {
    cuda::check_indices(op, noun, idx, bound, what);
  }

  AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const ResolvedAttentionMask& mask, double scale) override {
    return cuda_attention_forward(q, k, v, mask, scale);
  }
  AttentionGrads attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const ResolvedAttentionMask& mask,
                                    double scale, bool need_dq, bool need_dk, bool need_dv) override {
    return cuda_attention_backward(g, q, k, v, out, lse, mask, scale, need_dq, need_dk, need_dv);
  }

  void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                  const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                  const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                  const AdamWArgs& a) override {
    cuda_adamw_step(params, masters, grads, exp_avgs, exp_avg_sqs, grad_scale,
                    {a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step});
  }
};

const bool registered = [] {
  static CudaKernels table;
  register_kernels(&table);
  return true;
}();

}  // namespace
}  // namespace cg::cuda
