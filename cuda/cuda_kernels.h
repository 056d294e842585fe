// Why this file exists: the CUDA column of the kernel table (ops/kernels.h's
// DeviceKernels), declared once so that each entry can be defined in the file of its
// family: CudaKernels::binary in cuda/elementwise.cpp, CudaKernels::sum in cuda/reduce.cpp,
// and so on (the list below says where). An entry checks nothing the op layer already
// checked, allocates its outputs through the caching allocator, builds the launch geometry
// and calls the launcher that sits beside its kernel in cuda/*.cu (llm.c's layout: kernel,
// then launcher, in one file), on the calling thread's current stream (the compute stream
// unless a StreamGuard names a side stream: cuda/compute_stream.h):
//   op -> CudaKernels::x -> launch_x -> kernel
// (gemm and matmul call cuBLASLt where the others call a launcher; attention picks among
// cuDNN's graph, the flash and the rows launchers). cuda/cuda_kernels.cpp registers one
// instance when libchunkgrad loads, as cuda_backend.cpp does for memory. Filling in the
// CUDA backend changes this folder and its CMake lines only: no op file knows which
// devices exist.
// Internal to the CUDA device: not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "cuda/cuda_attention.h"
#include "ops/kernels.h"

namespace cg::cuda {

class CudaKernels final : public DeviceKernels {
 public:
  // The registered table takes the automatic attention path; tests and benchmarks make
  // one of their own to force a path (Note [Which attention path runs on cuda]).
  explicit CudaKernels(AttentionPath attention_path = AttentionPath::automatic)
      : attention_path_(attention_path) {}

  DeviceType type() const override { return DeviceType::cuda; }

  // ---- elementwise and swiglu (cuda/elementwise.cpp -> cuda/elementwise_kernels.cu) ----
  // Any strides, broadcasting through zero strides: no contiguous copy.
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override;
  Tensor unary(UnaryOp op, const Tensor& a, double s) override;
  Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha) override;
  void inplace_scalar(UnaryOp op, const Tensor& dst, double s) override;
  void addcmul(const Tensor& dst, const Tensor& a, const Tensor& b, double value,
               bool divide) override;
  Tensor swiglu_forward(const Tensor& gate, const Tensor& up) override;
  SwigluGrads swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                              bool need_dgate, bool need_dup) override;

  // ---- reductions and rows (cuda/reduce.cpp -> cuda/reduce_kernels.cu, norm_kernels.cu) --
  Tensor sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim, double scale) override;
  Tensor sum_of_squares(const Tensor& a) override;
  Tensor max_along_dim(const Tensor& a, int64_t dim, Tensor* values) override;
  Tensor logsumexp_along_dim(const Tensor& a, int64_t dim) override;
  Tensor scatter_along_dim(const Tensor& src, const Tensor& index, int64_t dim,
                           const Shape& shape) override;
  Tensor softmax(const Tensor& a, int64_t dim, bool log) override;
  Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log) override;
  RmsNormForward rms_norm_forward(const Tensor& x, const Tensor& weight, double eps) override;
  RmsNormGrads rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                 const Tensor& rstd, bool need_dx, bool need_dweight) override;
  Tensor rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse) override;

  // ---- Gated DeltaNet (cuda/cuda_gated_delta.cpp -> cuda/gated_delta_kernels.cu) ----------
  // Chunked for prefill, the recurrence for a few tokens (run_gated_delta_rule forces one).
  Tensor gated_delta_rule(const GatedDeltaArgs& args) override;
  Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& history,
                       bool silu) override;

  // ---- mixture of experts (cuda/cuda_moe.cpp -> cuda/moe_kernels.cu, cuBLAS grouped GEMM) --
  // moe_experts waits for the host once per call (the experts' row counts: Note [MoE
  // grouped GEMM]); run_moe_experts (moe_kernels.h) forces its GEMM path.
  MoeRouting moe_route(const Tensor& router_logits, int64_t top_k) override;
  Tensor moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                     const MoeRouting& routing) override;

  // ---- lm_head loss rows and indexing (cuda/head_loss_and_index.cpp ->
  //      cuda/head_loss_kernels.cu, index_kernels.cu) ----
  // Note [16-bit logits on the GPU]: the fused head loss keeps a chunk's logits in bf16
  // for bf16 inputs here (the row kernel computes in fp32), half the bytes of the CPU's
  // fp32 chunk; the CPU keeps fp32 because it has no fast 16-bit GEMM output. f16 inputs
  // get fp32 logits: the row kernel writes each row's gradient scaled by its weight
  // (1/N for a mean), and f16's five exponent bits flush such values to zero as N grows
  // (a 16384-row mean lost 12% of dh; issue 18 item 28). bf16 has fp32's exponent range.
  DType head_logits_dtype(DType input) const override {
    return input == DType::f16 ? DType::f32 : input;
  }
  void head_loss_rows(const HeadRowsArgs& args) override;
  void check_labels(const Tensor& labels, int64_t vocab, int64_t ignore_index) override;
  void row_weights(const Tensor& labels, const Tensor& weights, int64_t ignore_index,
                   bool normalize, const Tensor& out) override;
  Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx) override;
  void index_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                 int64_t skip) override;
  Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx) override;
  void scatter_add(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src) override;
  void check_indices(const char* op, const char* noun, const Tensor& idx, int64_t bound,
                     const std::string& what) override;

  // ---- matrix products through cuBLASLt (cuda/lt_gemm.cpp; what they take: lt_gemm.h) ---
  Tensor matmul(const Tensor& a, const Tensor& b) override;
  void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
            double beta) override;
  size_t gemm_scratch_bytes(const GemmDesc& desc) const override;

  // ---- streams (cuda/cuda_kernels.cpp -> cuda/compute_stream.cpp) ------------------------
  // The side streams of compute_stream.h, ordered by events (Note [Side streams]).
  int side_streams() const override;
  void stream_wait(Device device, StreamId waiter, StreamId producer) override;

  // ---- attention (cuda/cuda_attention.cpp -> cuDNN's graph, cuda/attention_*.cu) ----------
  // The path: attention_path() of the constructor (Note [Which attention path runs on
  // cuda], cuda_attention.h); flash throws when the arguments don't fit it.
  AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const ResolvedAttentionMask& mask, double scale) override;
  AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const ResolvedAttentionMask& mask, double scale, bool need_dq,
                                    bool need_dk, bool need_dv) override;
  AttentionPath attention_path() const { return attention_path_; }

  // ---- optimiser (cuda/cuda_adamw.cpp -> cuda/adamw_kernels.cu) ----------------------------
  // Fused AdamW over many tensors, few multi-tensor launches, never synchronising. Checks
  // the lists itself (a mistake names the tensor and what to change): tests call it too.
  void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                  const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                  const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                  const AdamWArgs& args) override;

 private:
  AttentionPath attention_path_;
};

}  // namespace cg::cuda
