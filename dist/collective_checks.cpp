// Why this file exists: the shared argument checks of the collectives (collective_checks.h).
#include "dist/collective_checks.h"

#include "core/error.h"

namespace cg::dist {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_gather: return "all_gather";
    case Collective::broadcast: return "broadcast";
  }
  CG_FAIL("collective code ", static_cast<int>(c), " is not a Collective");
}

namespace {
bool is_reduction(Collective c) {
  return c == Collective::all_reduce || c == Collective::reduce_scatter;
}
}  // namespace

void check_tensor(Collective c, const Tensor& t, const char* role, Device device,
                  const ReduceOp* op) {
  const char* name = collective_name(c);
  CG_CHECK(t.defined(), name, ": the ", role, " tensor is undefined: pass a tensor with storage");
  CG_CHECK(
      t.is_contiguous(), name, ": the ", role, " tensor ", shape_str(t.shape()),
      " is not contiguous: pass cg::contiguous(x) (and copy the result back) or a fresh buffer");
  CG_CHECK(
      t.device() == kCPU || t.device() == device, name, ": the ", role, " tensor is on ",
      t.device().str(), " but this communicator takes host tensors",
      device == kCPU ? std::string() : " and " + device.str() + " tensors",
      ": move it there, or make the communicator with CommOptions::device = ", t.device().str());
  const DType dt = t.dtype();
  if (is_reduction(c)) {
    CG_CHECK(dt != DType::boolean, name, ": cannot reduce a bool tensor: convert it to i32 first");
    CG_CHECK(
        !(op && *op == ReduceOp::average && (dt == DType::i32 || dt == DType::i64)), name,
        ": average of an integer (", dtype_name(dt),
        ") tensor would truncate: reduce with ReduceOp::sum and divide, or convert to f32/f64");
  }
}

void check_pair(Collective c, const Tensor& input, const Tensor& output, int world_size,
                Device device, const ReduceOp* op) {
  const char* name = collective_name(c);
  check_tensor(c, input, "input", device, op);
  check_tensor(c, output, "output", device, op);
  CG_CHECK(input.dtype() == output.dtype(), name, ": input is ", dtype_name(input.dtype()),
           " but output is ", dtype_name(output.dtype()), ": give both the same dtype");
  CG_CHECK(input.device() == output.device(), name, ": input is on ", input.device().str(),
           " but output on ", output.device().str(), ": put both on one device");
  const bool scatter = c == Collective::reduce_scatter;
  const Tensor& big = scatter ? input : output;
  const Tensor& small = scatter ? output : input;
  CG_CHECK(
      big.numel() == small.numel() * world_size, name, ": ", scatter ? "input" : "output", " has ",
      big.numel(), " elements but must have world_size (", world_size, ") x ",
      scatter ? "output" : "input", "'s ", small.numel(), " = ", small.numel() * world_size,
      ": pad the flat buffer to a multiple of the world size (padded_numel) and split it evenly");
}

void check_root(int root, int world_size) {
  CG_CHECK(root >= 0 && root < world_size, "broadcast: root ", root,
           " is not a rank: ranks are 0 .. ", world_size - 1);
}

}  // namespace cg::dist
