#include "compress/synth_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "compress/factorize.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "model/load.h"
#include "model/weights.h"

namespace lr {

namespace {

struct Shape {
  const char* name;
  Config c;
  bool qkv_bias = false;  // q, k and v have biases (Qwen2; llama.cpp requires them there)
};

Config make(int layers, int dim, int ffn, int heads, int kv_heads, int vocab, int ctx, float theta,
            float eps, bool tied) {
  Config c;
  c.n_layers = layers;
  c.dim = dim;
  c.ffn_dim = ffn;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.vocab = vocab;
  c.ctx_train = ctx;
  c.rope_theta = theta;
  c.rms_eps = eps;
  c.tied_output = tied;
  return c;
}

Config with_arch(Config c, const char* arch) {
  set_architecture("synth", arch, c);
  return c;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {"tiny", make(2, 256, 384, 4, 2, 300, 1024, 10000.f, 1e-5f, false)},
      {"tiny-mha128", make(2, 256, 384, 2, 2, 300, 1024, 10000.f, 1e-6f, false)},  // 7B's heads
      // 8 layers whose rows hold whole K-quant super-blocks (FFN 512), with Qwen2's biases.
      {"tiny-k", with_arch(make(8, 256, 512, 4, 2, 512, 1024, 10000.f, 1e-6f, false), "qwen2"),
       true},
      {"smollm2-135m", make(30, 576, 1536, 9, 3, 49152, 8192, 100000.f, 1e-5f, true)},
      {"llama-7b", make(32, 4096, 11008, 32, 32, 32000, 4096, 10000.f, 1e-6f, false)},
      // Llama-3.2-3B without its llama3 RoPE scaling (the same work a token).
      {"llama3.2-3b", make(28, 3072, 8192, 24, 8, 128256, 131072, 500000.f, 1e-5f, true)},
      {"qwen2.5-7b",
       with_arch(make(28, 3584, 18944, 28, 4, 152064, 32768, 1000000.f, 1e-6f, false), "qwen2"),
       true},
  };
  return s;
}

// splitmix64: a counter-based generator, so any element can be made on any thread.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

const Shape& find_shape(const std::string& shape) {
  for (const Shape& s : shapes())
    if (shape == s.name) return s;
  std::string names;
  for (const Shape& s : shapes()) names += (names.empty() ? "" : ", ") + std::string(s.name);
  fail("unknown synthetic model shape '{}' (expected one of: {})", shape, names);
}

// llama.cpp's Q4_K_M gives these layers' value and FFN-down matrices 6 bits: the first and the
// last eighth of the layers and every third layer between.
bool more_bits_layer(int l, int n) {
  return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2;
}

// The stored type of a block matrix (or the embedding) under o: o.wtype, or with o.q4_k_m
// Q4_K but Q6_K for the output head (the embedding when tied) and the more-bits layers' value
// and FFN-down matrices, as llama.cpp's Q4_K_M mix.
DType matrix_type(const SynthOptions& o, const Config& c, Slot slot, int layer) {
  if (!o.q4_k_m) return o.wtype;
  const bool head = slot == Slot::Output || (slot == Slot::TokEmbd && c.tied_output);
  const bool more = (slot == Slot::V || slot == Slot::Down) && more_bits_layer(layer, c.n_layers);
  return head || more ? DType::Q6_K : DType::Q4_K;
}

}  // namespace

std::vector<std::string> synth_shapes() {
  std::vector<std::string> out;
  for (const Shape& s : shapes()) out.push_back(s.name);
  return out;
}

Config synth_config(const std::string& shape) {
  Config c = find_shape(shape).c;
  c.name = "synthetic " + shape;
  return c;
}

uint64_t write_synthetic_model(const std::string& path, const SynthOptions& o) {
  const Config c = synth_config(o.shape);
  if (!(o.keep > 0 && o.keep <= 1)) fail("synth: --keep must be in (0, 1] (got {})", o.keep);
  const bool block = o.q4_k_m || is_block_format(o.wtype);
  if (!block && o.wtype != DType::F32 && o.wtype != DType::F16 && o.wtype != DType::BF16)
    fail("synth: weights can be f32, f16, bf16, q8_0, q4_k, q6_k or q4_k_m, not {}",
         dtype_name(o.wtype));
  if (block && o.wtype != DType::Q8_0 && o.wtype != DType::Q4_K && o.wtype != DType::Q6_K)
    fail("synth: the block formats it writes are q8_0, q4_k, q6_k and q4_k_m, not {}",
         dtype_name(o.wtype));
  if (block && o.keep < 1)
    fail(
        "synth: block formats are written for dense models (--keep 1; got {}): quantize or "
        "compress the dense file for quantized factors",
        o.keep);
  const int threads =
      o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  auto pool = std::make_shared<ThreadPool>(threads);

  gguf::Writer w;
  config_to_gguf(c, w);
  byte_vocab_to_gguf(c.vocab, w);
  if (o.keep < 1) {
    w.set_u32("lowrank.format_version", 1);
    w.set_string("lowrank.method", "synthetic");
    w.set_f32("lowrank.keep", float(o.keep));
  }

  uint64_t params = 0, id = 0;
  // A [rows, cols] tensor of uniform values with standard deviation `sd` around `mean`.
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, double sd, double mean,
                 DType dt) {
    const uint64_t tid = ++id, seed = o.seed;
    params += uint64_t(rows) * uint64_t(cols);
    const std::vector<uint64_t> shape = rows == 1
                                            ? std::vector<uint64_t>{uint64_t(cols)}
                                            : std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)};
    w.add_tensor_generated(name, dt, shape, [=](uint8_t* dst, uint64_t) {
      const int64_t n = rows * cols;
      const double half_width = sd * std::sqrt(3.0);
      pool->parallel_for((n + 4095) / 4096, [&](int64_t b, int64_t e) {
        std::vector<float> v(4096);
        for (int64_t blk = b; blk < e; ++blk) {
          const int64_t i0 = blk * 4096, m = std::min<int64_t>(4096, n - i0);
          for (int64_t i = 0; i < m; ++i) {
            const double u =
                double(mix(seed * 0x100000001b3ull ^ (tid << 40) ^ uint64_t(i0 + i)) >> 11) *
                0x1p-53;
            v[size_t(i)] = float(mean + (2 * u - 1) * half_width);
          }
          // i0 is a multiple of 4096, so of every block size; rows hold whole blocks (the
          // writer checked), so the blocks of the flattened values are the rows' blocks.
          quantize(dt, v.data(), dst + *row_bytes(dt, uint64_t(i0)), m);
        }
      });
    });
  };
  const bool qkv_bias = find_shape(o.shape).qkv_bias;
  std::map<std::string, std::vector<int32_t>> ranks;
  for_each_tensor(c, [&](const WeightSpec& spec, int l) {
    const std::string name = spec.per_layer ? fmt::format(fmt::runtime(spec.gguf), l) : spec.gguf;
    const auto [out, in] = slot_shape(c, spec.slot);
    const DType wt = matrix_type(o, c, spec.slot, l);
    if (spec.is_norm) return add(name, 1, in, 0.0, 1.0, DType::F32);
    if (spec.slot == Slot::TokEmbd) return add(name, out, in, 1.0, 0.0, wt);
    const double sd = 1.0 / std::sqrt(double(in));
    if (spec.slot == Slot::Output) {  // dense (or the embedding's, tied)
      if (!c.tied_output) add(name, out, in, sd, 0.0, wt);
      return;
    }
    const bool biased =
        qkv_bias && (spec.slot == Slot::Q || spec.slot == Slot::K || spec.slot == Slot::V);
    if (biased) add(fmt::format("blk.{}.{}.bias", l, spec.kind), 1, out, sd, 0.0, DType::F32);
    if (o.keep >= 1) return add(name, out, in, sd, 0.0, wt);
    const int64_t r = compress::rank_for_keep(o.keep, out, in);
    ranks[spec.kind].push_back(int32_t(r));
    // W = U V: V [r, in] with sd 1/sqrt(in), U [out, r] with sd 1/sqrt(r).
    add(lowrank_in_name(spec, l), r, in, sd, 0.0, o.wtype);
    add(lowrank_out_name(spec, l), out, r, 1.0 / std::sqrt(double(r)), 0.0, o.wtype);
  });
  for (auto& [kind, rs] : ranks) w.set_i32s("lowrank.rank." + kind, rs);
  w.write(path);
  return params;
}

}  // namespace lr
