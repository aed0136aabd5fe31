// A small random LLaMA built in memory as a GGUF image, for tests that need a
// whole model but not a download.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
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
  int exact_rank = 0;        // > 0: every block matrix is a product of rank exact_rank
  bool tokenizer = false;    // add a byte-fallback SentencePiece vocab (vocab becomes 259)
  int head_dim = 0;          // > 0: heads of this width (q_dim need not be dim), else dim / n_heads
};

// The GGUF image; `skip` names a tensor to leave out, `arch` overrides the architecture.
inline std::vector<uint8_t> make_tiny_gguf(const TinySpec& spec_in, const std::string& skip = "",
                                           const std::string& arch = "llama") {
  TinySpec s = spec_in;
  if (s.tokenizer) s.vocab = 259;
  gguf::Writer w;
  Config c;
  c.name = "tiny";
  c.n_layers = s.n_layers;
  c.dim = s.dim;
  c.ffn_dim = s.ffn_dim;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.ctx_train = s.ctx_train;
  c.vocab = s.vocab;
  c.rope_theta = s.rope_theta;
  c.arch = arch;
  c.head_dim = s.head_dim > 0 ? s.head_dim : s.dim / s.n_heads;
  config_to_gguf(c, w);
  if (s.tokenizer) byte_vocab_to_gguf(259, w);
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, float scale, float offset,
                 DType dt) {
    if (name == skip) return;
    std::vector<float> v(size_t(rows * cols));
    for (float& x : v) x = offset + scale * nd(rng);
    if (s.exact_rank > 0 && rows > 1 && name.rfind("blk.", 0) == 0) {
      // W = A B with A [rows, k], B [k, cols], scaled like the full-rank case.
      int k = s.exact_rank;
      std::vector<float> a(size_t(rows) * k), b(size_t(k) * cols);
      for (float& x : a) x = nd(rng);
      for (float& x : b) x = nd(rng);
      float norm = scale / std::sqrt(float(k));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          float acc = 0;
          for (int j = 0; j < k; ++j) acc += a[size_t(r) * k + j] * b[size_t(j) * cols + c];
          v[size_t(r * cols + c)] = acc * norm;
        }
    }
    std::vector<uint8_t> bytes(*row_bytes(dt, uint64_t(cols)) * uint64_t(rows));
    quantize(dt, v.data(), bytes.data(), rows * cols);
    std::vector<uint64_t> shape = rows == 1 ? std::vector<uint64_t>{uint64_t(cols)}
                                            : std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)};
    w.add_tensor(name, dt, shape, bytes.data(), bytes.size());
  };
  int hd = c.head_dim, q = s.n_heads * hd, kv = s.n_kv_heads * hd;
  float ws = 1.f / std::sqrt(float(s.dim));
  add("token_embd.weight", s.vocab, s.dim, 1.f, 0.f, s.wtype);
  add("output_norm.weight", 1, s.dim, 0.1f, 1.f, DType::F32);
  if (!s.tied) add("output.weight", s.vocab, s.dim, ws, 0.f, s.wtype);
  for (int l = 0; l < s.n_layers; ++l) {
    auto n = [&](const char* t) { return "blk." + std::to_string(l) + "." + t + ".weight"; };
    add(n("attn_norm"), 1, s.dim, 0.1f, 1.f, DType::F32);
    if (arch == "qwen3") {  // each q and k head's RMSNorm (Qwen3)
      add(n("attn_q_norm"), 1, hd, 0.3f, 1.f, DType::F32);
      add(n("attn_k_norm"), 1, hd, 0.3f, 1.f, DType::F32);
    }
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

// max |a - b| / max(1, max |b|)
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return d / m;
}

inline std::shared_ptr<gguf::File> make_tiny_file(const TinySpec& s) {
  return gguf::File::from_bytes(make_tiny_gguf(s), "tiny.gguf");
}

}  // namespace lr::test
