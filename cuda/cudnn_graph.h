// Why this file exists: a small builder over cuDNN's backend descriptors (cudnn_graph.h)
// -- tensors, pointwise / matmul / reduction / reshape operations, the operation graph --
// so that cuda/cudnn_sdpa.cpp reads as the attention graphs it writes, plus the check
// macro every cuDNN call goes through. Only for .cpp files of the library (cuDNN's headers
// are the library's private include).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace cg::cuda {

// cudnnGetLastErrorString(): what cuDNN logged about its last failure.
std::string last_cudnn_error();

}  // namespace cg::cuda

// Every cuDNN call: a failure names the call, cuDNN's status string and its last error log.
#define CG_CUDNN_CHECK(expr)                                                                  \
  do {                                                                                        \
    const cudnnStatus_t cg_cudnn_st_ = (expr);                                                \
    if (cg_cudnn_st_ != CUDNN_STATUS_SUCCESS) {                                               \
      throw ::cg::Error(::cg::detail::concat("cuDNN call `", #expr,                           \
                                             "` failed: ", cudnnGetErrorString(cg_cudnn_st_), \
                                             ": ", ::cg::cuda::last_cudnn_error()),           \
                        __FILE__, __LINE__);                                                  \
    }                                                                                         \
  } while (0)

namespace cg::cuda::cudnn_graph {

using Desc = cudnnBackendDescriptor_t;

// Element dims and strides of a 4-d tensor.
struct Layout {
  int64_t dim[4];
  int64_t stride[4];
};

inline Layout contiguous(int64_t a, int64_t b, int64_t c, int64_t d) {
  return Layout{{a, b, c, d}, {b * c * d, c * d, d, 1}};
}

inline cudnnDataType_t cudnn_dtype(DType dt) {
  return dt == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}
// d.attr = n values of `type` at v; a failure names the attribute (cuDNN's enum value).
inline void set(Desc d, cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
                int64_t n, const void* v) {
  const cudnnStatus_t st = cudnnBackendSetAttribute(d, attr, type, n, v);
  CG_CHECK(st == CUDNN_STATUS_SUCCESS, "cuDNN call cudnnBackendSetAttribute(attribute ",
           static_cast<int>(attr), ") failed: ", cudnnGetErrorString(st), ": ", last_cudnn_error());
}
inline void set_desc(Desc d, cudnnBackendAttributeName_t attr, Desc value) {
  set(d, attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}

// One operation graph under construction; owns every descriptor it creates (a finalized
// plan keeps them alive with it, Note [cuDNN state]).
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}
  ~GraphBuilder() {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  Desc create(cudnnBackendDescriptorType_t type) {
    Desc d = nullptr;
    CG_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
    owned_.push_back(d);
    return d;
  }

  Desc tensor(int64_t uid, cudnnDataType_t dt, const Layout& l, bool is_virtual,
              bool by_value = false) {
    Desc t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    const bool virt = is_virtual, byval = by_value;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, l.dim);
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, l.stride);
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (byval) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval);
    CG_CUDNN_CHECK(cudnnBackendFinalize(t));
    return t;
  }
  Desc virt(cudnnDataType_t dt, const Layout& l) { return tensor(next_virtual_++, dt, l, true); }
  Desc scalar(int64_t uid, cudnnDataType_t dt) {
    return tensor(uid, dt, Layout{{1, 1, 1, 1}, {1, 1, 1, 1}}, false, true);
  }

  // y = mode(x[, b[, t]]), computed in `prec`; axis only for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc t, Desc y,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc pw = create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    CG_CUDNN_CHECK(cudnnBackendFinalize(pw));
    Desc op = create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    const float one = 1.0f;
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t != nullptr) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    CG_CUDNN_CHECK(cudnnBackendFinalize(op));
    ops_.push_back(op);
  }
  // A fresh f32 virtual tensor shaped like `l` holding mode(x[, b]).
  Desc pw(cudnnPointwiseMode_t mode, Desc x, Desc b, const Layout& l) {
    Desc y = virt(CUDNN_DATA_FLOAT, l);
    pointwise(mode, x, b, nullptr, y);
    return y;
  }

  void matmul(Desc a, Desc b, Desc c) {
    Desc mm = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    CG_CUDNN_CHECK(cudnnBackendFinalize(mm));
    Desc op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    CG_CUDNN_CHECK(cudnnBackendFinalize(op));
    ops_.push_back(op);
  }

  void reduction(cudnnReduceTensorOp_t mode, Desc x, Desc y) {
    Desc red = create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    CG_CUDNN_CHECK(cudnnBackendFinalize(red));
    Desc op = create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, red);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    CG_CUDNN_CHECK(cudnnBackendFinalize(op));
    ops_.push_back(op);
  }

  void reshape(Desc x, Desc y) {
    Desc op = create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    CG_CUDNN_CHECK(cudnnBackendFinalize(op));
    ops_.push_back(op);
  }

  // The operation graph of every op added so far.
  Desc finalize_graph() {
    Desc g = create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
    set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(ops_.size()), ops_.data());
    CG_CUDNN_CHECK(cudnnBackendFinalize(g));
    return g;
  }

  cudnnHandle_t handle() const { return handle_; }

 private:
  cudnnHandle_t handle_;
  std::vector<Desc> owned_;
  std::vector<Desc> ops_;
  int64_t next_virtual_ = 1000;
};

}  // namespace cg::cuda::cudnn_graph
