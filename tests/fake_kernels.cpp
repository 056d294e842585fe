// Why this file exists: see fake_kernels.h. The memory is the fake device's of
// tests/fake_device.h: mapped PROT_NONE except while a DeviceMemoryAccessible guard is
// alive. Each entry opens it for exactly the CPU entry's run, so any host code outside a
// kernel entry that reads or writes device memory (an op file reading labels through a
// host pointer, say) crashes here as it would on a GPU. The fake IS the CPU table with a
// counter and the guard around each entry: op -> CountingKernels::x -> CpuKernels::x ->
// the CPU loop.
#include "fake_kernels.h"

#include <functional>
#include <vector>

#include "core/stream_guard.h"
#include "cpu/cpu_kernels.h"
#include "fake_device.h"

namespace cg {

namespace {

// Every entry: count it, then run the CPU's, inside the guard.
class CountingKernels final : public cpu::CpuKernels {
 public:
  DeviceType type() const override { return DeviceType::fake; }
  std::map<std::string, int> calls;

#define CG_FORWARD(entry, ...)       \
  ++calls[#entry];                   \
  fake::DeviceMemoryAccessible open; \
  return CpuKernels::entry(__VA_ARGS__)

  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override {
    CG_FORWARD(binary, op, a, b);
  }
  Tensor unary(UnaryOp op, const Tensor& a, double s) override { CG_FORWARD(unary, op, a, s); }
  Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) override {
    CG_FORWARD(where, c, a, b);
  }
  void inplace(InplaceOp op, const Tensor& d, const Tensor& s, double alpha) override {
    CG_FORWARD(inplace, op, d, s, alpha);
  }
  void inplace_scalar(UnaryOp op, const Tensor& d, double s) override {
    CG_FORWARD(inplace_scalar, op, d, s);
  }
  void addcmul(const Tensor& d, const Tensor& a, const Tensor& b, double v, bool div) override {
    CG_FORWARD(addcmul, d, a, b, v, div);
  }
  Tensor sum(const Tensor& a, const std::vector<bool>& r, bool keep, double s) override {
    CG_FORWARD(sum, a, r, keep, s);
  }
  Tensor sum_of_squares(const Tensor& a) override { CG_FORWARD(sum_of_squares, a); }
  Tensor max_along_dim(const Tensor& a, int64_t dim, Tensor* values) override {
    CG_FORWARD(max_along_dim, a, dim, values);
  }
  Tensor logsumexp_along_dim(const Tensor& a, int64_t dim) override {
    CG_FORWARD(logsumexp_along_dim, a, dim);
  }
  Tensor scatter_along_dim(const Tensor& s, const Tensor& i, int64_t dim,
                           const Shape& shape) override {
    CG_FORWARD(scatter_along_dim, s, i, dim, shape);
  }
  Tensor softmax(const Tensor& a, int64_t dim, bool log) override {
    CG_FORWARD(softmax, a, dim, log);
  }
  Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log) override {
    CG_FORWARD(softmax_backward, g, y, dim, log);
  }
  DType head_logits_dtype(DType input) const override {
    ++const_cast<CountingKernels*>(this)->calls["head_logits_dtype"];
    return CpuKernels::head_logits_dtype(input);
  }
  void head_loss_rows(const HeadRowsArgs& a) override {
    ++calls["head_loss_rows"];
    if (deferred(a.logits.device(), [this, a] { CpuKernels::head_loss_rows(a); })) return;
    fake::DeviceMemoryAccessible open;
    CpuKernels::head_loss_rows(a);
  }
  void check_labels(const Tensor& l, int64_t v, int64_t ignore) override {
    CG_FORWARD(check_labels, l, v, ignore);
  }
  void row_weights(const Tensor& l, const Tensor& w, int64_t ignore, bool norm,
                   const Tensor& out) override {
    CG_FORWARD(row_weights, l, w, ignore, norm, out);
  }
  Tensor matmul(const Tensor& a, const Tensor& b) override { CG_FORWARD(matmul, a, b); }
  void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
            double beta) override {
    ++calls["gemm"];
    if (deferred(out.device(), [=, this] { CpuKernels::gemm(a, b, out, alpha, beta); })) return;
    fake::DeviceMemoryAccessible open;
    CpuKernels::gemm(a, b, out, alpha, beta);
  }
  size_t gemm_scratch_bytes(const GemmDesc& d) const override {
    ++const_cast<CountingKernels*>(this)->calls["gemm_scratch_bytes"];
    return CpuKernels::gemm_scratch_bytes(d);
  }
  // One side stream, as a GPU has, so that CI runs the pipelined head-loss loop (Note
  // [Pipelined chunks], ops/fused_head_loop.cpp). The compute stream's calls run at once;
  // the side stream's gemm and head_loss_rows wait in a queue until the compute stream
  // waits for them: the latest order the waits allow, so that a missing wait lets the
  // compute stream overwrite what the side stream has yet to read, and the numbers change.
  int side_streams() const override {
    ++const_cast<CountingKernels*>(this)->calls["side_streams"];
    return 1;
  }
  void stream_wait(Device, StreamId waiter, StreamId producer) override {
    ++calls["stream_wait"];
    if (waiter != kDefaultStream || producer == kDefaultStream) return;
    std::vector<std::function<void()>> queued;
    queued.swap(side_queue);
    fake::DeviceMemoryAccessible open;
    for (auto& work : queued) work();
  }
  std::vector<std::function<void()>> side_queue;

  // Queues `work` when the calling thread is on a side stream of `device`.
  template <typename F>
  bool deferred(Device device, F&& work) {
    if (current_stream(device) == kDefaultStream) return false;
    side_queue.emplace_back(std::forward<F>(work));
    return true;
  }
  RmsNormForward rms_norm_forward(const Tensor& x, const Tensor& w, double eps) override {
    CG_FORWARD(rms_norm_forward, x, w, eps);
  }
  RmsNormGrads rms_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& r,
                                 bool dx, bool dw) override {
    CG_FORWARD(rms_norm_backward, g, x, w, r, dx, dw);
  }
  Tensor rotary(const Tensor& x, const Tensor& p, double theta, bool inv) override {
    CG_FORWARD(rotary, x, p, theta, inv);
  }
  Tensor swiglu_forward(const Tensor& g, const Tensor& u) override {
    CG_FORWARD(swiglu_forward, g, u);
  }
  SwigluGrads swiglu_backward(const Tensor& d, const Tensor& g, const Tensor& u, bool dg,
                              bool du) override {
    CG_FORWARD(swiglu_backward, d, g, u, dg, du);
  }
  Tensor gated_delta_rule(const GatedDeltaArgs& a) override { CG_FORWARD(gated_delta_rule, a); }
  Tensor causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& h, bool silu) override {
    CG_FORWARD(causal_conv1d, x, w, h, silu);
  }
  MoeRouting moe_route(const Tensor& l, int64_t k) override { CG_FORWARD(moe_route, l, k); }
  Tensor moe_experts(const Tensor& x, const Tensor& gu, const Tensor& d,
                     const MoeRouting& r) override {
    CG_FORWARD(moe_experts, x, gu, d, r);
  }
  AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const ResolvedAttentionMask& m, double s) override {
    CG_FORWARD(attention_forward, q, k, v, m, s);
  }
  AttentionGrads attention_backward(const Tensor& g, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& o, const Tensor& l,
                                    const ResolvedAttentionMask& m, double s, bool dq, bool dk,
                                    bool dv) override {
    CG_FORWARD(attention_backward, g, q, k, v, o, l, m, s, dq, dk, dv);
  }
  Tensor index_select(const Tensor& x, int64_t dim, const Tensor& i) override {
    CG_FORWARD(index_select, x, dim, i);
  }
  void index_add(const Tensor& d, int64_t dim, const Tensor& i, const Tensor& s,
                 int64_t skip) override {
    CG_FORWARD(index_add, d, dim, i, s, skip);
  }
  Tensor gather(const Tensor& x, int64_t dim, const Tensor& i) override {
    CG_FORWARD(gather, x, dim, i);
  }
  void scatter_add(const Tensor& d, int64_t dim, const Tensor& i, const Tensor& s) override {
    CG_FORWARD(scatter_add, d, dim, i, s);
  }
  void check_indices(const char* op, const char* noun, const Tensor& i, int64_t bound,
                     const std::string& what) override {
    CG_FORWARD(check_indices, op, noun, i, bound, what);
  }
  void adamw_step(const std::vector<Tensor>& p, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& g, const std::vector<Tensor>& a,
                  const std::vector<Tensor>& v, const Tensor& scale,
                  const AdamWArgs& args) override {
    CG_FORWARD(adamw_step, p, m, g, a, v, scale, args);
  }
#undef CG_FORWARD
};

}  // namespace

struct FakeKernelDevice::Impl {
  fake::FakeDeviceScope memory;
  CountingKernels kernels;
  DeviceKernels* previous_kernels = nullptr;
};

FakeKernelDevice::FakeKernelDevice() : impl_(std::make_unique<Impl>()) {
  impl_->previous_kernels = replace_kernels(DeviceType::fake, &impl_->kernels);
}

FakeKernelDevice::~FakeKernelDevice() {
  impl_->kernels.side_queue.clear();  // work never joined (a test failed): dropped
  replace_kernels(DeviceType::fake, impl_->previous_kernels);
}

Device FakeKernelDevice::device() const { return fake::fake_device(); }

int FakeKernelDevice::calls(const std::string& entry) const {
  auto it = impl_->kernels.calls.find(entry);
  return it == impl_->kernels.calls.end() ? 0 : it->second;
}

void FakeKernelDevice::reset_calls() { impl_->kernels.calls.clear(); }

}  // namespace cg
