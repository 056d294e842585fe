// Why this file exists: the one include for code that uses ops (nn/, train/, examples).
//
//   cg::Tensor w = cg::randn({4, 3}, {.dtype = cg::DType::f64}).requires_grad_();
//   cg::Tensor x = cg::randn({8, 4}, {.dtype = cg::DType::f64});
//   cg::Tensor loss = cg::mean(cg::relu(cg::matmul(x, w)));
//   cg::graph_retained_bytes(loss);   // what the graph keeps alive: x (for w's grad)
//                                     // and relu's output
//   loss.backward();                  // w.grad() is [4, 3]; saved tensors are freed
//
// Each op has one entry point that checks its inputs, calls an entry of its device's
// kernel table (ops/kernels.h: the CPU's in cpu/, CUDA's in cuda/), and records a node
// when grad mode is on and an input requires grad.
#pragma once

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/graph_bytes.h"
#include "autograd/node.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/index_ops.h"
#include "ops/inplace.h"
#include "ops/join_ops.h"
#include "ops/linalg.h"
#include "ops/norm.h"
#include "ops/reduce.h"
#include "ops/rotary.h"
#include "ops/shape_ops.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"
