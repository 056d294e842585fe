// Why this file exists: the world-size-1 communicator (single_communicator.h).
#include "dist/single_communicator.h"

#include "core/views.h"
#include "dist/collective_checks.h"

namespace cg::dist::detail {

namespace {

class SingleCommunicator final : public Communicator {
 public:
  explicit SingleCommunicator(Device device) : device_(device) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  Device device() const override { return device_; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    check_tensor(Collective::all_reduce, t, "tensor", device_, &op);
    t.storage()->bump_version();  // written in place, as on every backend
  }
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    check_pair(Collective::reduce_scatter, input, output, 1, device_, &op);
    copy_flat(input, output);
  }
  void all_gather(const Tensor& input, Tensor& output) override {
    check_pair(Collective::all_gather, input, output, 1, device_);
    copy_flat(input, output);
  }
  void broadcast(Tensor& t, int root) override {
    check_tensor(Collective::broadcast, t, "tensor", device_);
    check_root(root, 1);
  }
  void barrier() override {}

 private:
  // Same element count, possibly different shapes: copy as flat vectors.
  static void copy_flat(const Tensor& input, const Tensor& output) {
    if (input.is_same(output) || input.numel() == 0) return;
    raw::copy_(raw::view(output, {output.numel()}), raw::view(input, {input.numel()}));
  }

  Device device_;
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator(const CommOptions& options) {
  return std::make_unique<SingleCommunicator>(options.device);
}

}  // namespace cg::dist::detail
