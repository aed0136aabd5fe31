// `lowrank synth`: random-weight GGUF models of a real model's shape, dense or
// low-rank at a keep fraction, for benchmarks on machines that have no model
// files (the GPU check). Values are deterministic in the seed; the matrices
// are scaled so activations stay bounded through the layers (W entries with
// standard deviation 1/sqrt(in), for low-rank U V as well), norms are 1, and
// a byte-level tokenizer padded with filler pieces covers the vocabulary.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace lr {

// "tiny" (2 layers, dim 256, head_dim 64, GQA 4/2), "tiny-mha128" (tiny with LLaMA-7B's
// attention: head_dim 128, as many KV heads as query heads), "tiny-k" (8 qwen2 layers, FFN
// 512: whole K-quant super-blocks in every row), "smollm2-135m" (the default
// model's shape), "llama-7b", "llama3.2-3b" (tied embeddings; no RoPE scaling) and
// "qwen2.5-7b" (qwen2: q/k/v biases, NEOX RoPE). Throws lr::Error naming the accepted shapes.
Config synth_config(const std::string& shape);
std::vector<std::string> synth_shapes();

struct SynthOptions {
  std::string shape = "smollm2-135m";
  double keep = 1.0;  // 1: dense; else every block matrix low-rank at rank_for_keep(keep, out, in)
  // F32, F16 or BF16; for dense models also Q8_0, Q4_K or Q6_K (round to nearest: the
  // values are random, there is nothing to search for), every matrix and the embedding.
  DType wtype = DType::BF16;
  // llama.cpp's Q4_K_M mix instead of wtype: Q4_K, with Q6_K for the output head (the
  // embedding when tied) and for the value and FFN-down matrices of half the layers.
  bool q4_k_m = false;
  uint64_t seed = 1;
  int threads = 0;  // 0: all cores
};

// Writes the model to `path`; returns its parameter count.
uint64_t write_synthetic_model(const std::string& path, const SynthOptions& o);

}  // namespace lr
