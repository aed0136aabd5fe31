// A small random LLaMA built in memory as a GGUF image, for tests that need a
// whole model but not a download.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/config.h"

namespace lr::test {

struct TinySpec {
  int n_layers = 2;
  int dim = 64;
  int ffn_dim = 96;
  int n_heads = 4;
  int n_kv_heads = 2;
  int vocab = 50;
  int ctx_train = 256;
  bool tied = false;
  DType wtype = DType::F32;  // storage type of the matrices in the file
  float rope_theta = 10000.f;
  uint64_t seed = 1;
};

// The GGUF image; `skip` names a tensor to leave out, `arch` overrides the architecture.
inline std::vector<uint8_t> make_tiny_gguf(const TinySpec& s, const std::string& skip = "",
                                           const std::string& arch = "llama") {
  gguf::Writer w;
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "tiny");
  w.set_u32(arch + ".block_count", uint32_t(s.n_layers));
  w.set_u32(arch + ".embedding_length", uint32_t(s.dim));
  w.set_u32(arch + ".feed_forward_length", uint32_t(s.ffn_dim));
  w.set_u32(arch + ".attention.head_count", uint32_t(s.n_heads));
  w.set_u32(arch + ".attention.head_count_kv", uint32_t(s.n_kv_heads));
  w.set_u32(arch + ".context_length", uint32_t(s.ctx_train));
  w.set_u32(arch + ".vocab_size", uint32_t(s.vocab));
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32(arch + ".rope.freq_base", s.rope_theta);

  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, float scale, float offset,
                 DType dt) {
    if (name == skip) return;
    std::vector<float> v(size_t(rows * cols));
    for (float& x : v) x = offset + scale * nd(rng);
    std::vector<uint8_t> bytes(*row_bytes(dt, uint64_t(cols)) * uint64_t(rows));
    quantize(dt, v.data(), bytes.data(), rows * cols);
    std::vector<uint64_t> shape = rows == 1 ? std::vector<uint64_t>{uint64_t(cols)}
                                            : std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)};
    w.add_tensor(name, dt, shape, bytes.data(), bytes.size());
  };
  int hd = s.dim / s.n_heads, q = s.n_heads * hd, kv = s.n_kv_heads * hd;
  float ws = 1.f / std::sqrt(float(s.dim));
  add("token_embd.weight", s.vocab, s.dim, 1.f, 0.f, s.wtype);
  add("output_norm.weight", 1, s.dim, 0.1f, 1.f, DType::F32);
  if (!s.tied) add("output.weight", s.vocab, s.dim, ws, 0.f, s.wtype);
  for (int l = 0; l < s.n_layers; ++l) {
    auto n = [&](const char* t) { return "blk." + std::to_string(l) + "." + t + ".weight"; };
    add(n("attn_norm"), 1, s.dim, 0.1f, 1.f, DType::F32);
    add(n("attn_q"), q, s.dim, ws, 0.f, s.wtype);
    add(n("attn_k"), kv, s.dim, ws, 0.f, s.wtype);
    add(n("attn_v"), kv, s.dim, ws, 0.f, s.wtype);
    add(n("attn_output"), s.dim, q, 1.f / std::sqrt(float(q)), 0.f, s.wtype);
    add(n("ffn_norm"), 1, s.dim, 0.1f, 1.f, DType::F32);
    add(n("ffn_gate"), s.ffn_dim, s.dim, ws, 0.f, s.wtype);
    add(n("ffn_up"), s.ffn_dim, s.dim, ws, 0.f, s.wtype);
    add(n("ffn_down"), s.dim, s.ffn_dim, 1.f / std::sqrt(float(s.ffn_dim)), 0.f, s.wtype);
  }
  return w.to_bytes();
}

inline std::shared_ptr<gguf::File> make_tiny_file(const TinySpec& s) {
  return gguf::File::from_bytes(make_tiny_gguf(s), "tiny.gguf");
}

}  // namespace lr::test
