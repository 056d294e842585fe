// Why this file exists: every op validates its inputs the same way and says what to
// change in the same words. Ops call these before touching data.
// Internal to ops/: not a public header.
#pragma once

#include "core/tensor.h"

namespace cg {

// "add: argument b is an undefined tensor"
void check_defined(const char* op, const Tensor& t, const char* arg = "the input");
// "add: dtype i64 is not supported; it computes on f32, f64, bf16 and f16 tensors"
void check_floating(const char* op, const Tensor& t);
// "add: tensors are on different devices (cpu and cuda:0); move one with cg::to(t, device)"
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// "add: dtypes differ (f32 and bf16); convert one with cg::to(t, dtype)"
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
// All of the above for a two-input floating op.
void check_binary(const char* op, const Tensor& a, const Tensor& b);
// "gather: index has dtype f32; indices must be i32 or i64 (convert with cg::to(t, DType::i64))"
void check_index_dtype(const char* op, const Tensor& idx, const char* arg = "index");
// Refuses an input that would record a graph (grad mode on and t needs a grad) in an op that
// records none (the frozen-target ops: gated_delta_rule, moe_experts, ...).
void check_no_grad(const char* op, const Tensor& t, const char* arg);
// "op add is not implemented on cuda yet"
[[noreturn]] void fail_not_implemented(const char* op, Device device);

}  // namespace cg
