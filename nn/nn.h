// Why this file exists: the one include for code that builds models (train/, examples):
// the Module base, the layers, the Qwen3-style decoder and checkpoints.
//
//   auto config = cg::nn::Qwen3Config::from_hf_file("/models/Qwen3-8B/config.json");
//   cg::nn::Qwen3ForCausalLM target(config, {.dtype = cg::DType::bf16});
//   cg::nn::load_checkpoint(target, "/models/Qwen3-8B");
//   target.freeze();
//   auto out = target.forward(ids, {.capture_layers = {1, 9, 17, 25, 33}, .logits = false});
#pragma once

#include "nn/attention.h"
#include "nn/checkpoint.h"
#include "nn/config.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/qwen3.h"
#include "nn/safetensors.h"
