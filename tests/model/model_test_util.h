// Helpers of the model tests: a temporary directory, tiny models and
// calibration text written into it.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "../kernels/isa_util.h"
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/ref/ref.h"
#include "compress/calibrate_kv.h"
#include "compress/synth_model.h"
#include "format/gguf.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "tiny_model.h"

namespace lr::test {

// Options of a session of ctx positions on `threads` CPU threads.
inline BackendOptions backend_options(int ctx, int threads) {
  BackendOptions o;
  o.ctx = ctx;
  o.cpu.n_threads = threads;
  return o;
}

struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    dir = std::filesystem::temp_directory_path() /
          fmt::format("lowrank-test-{}-{}", ::getpid(), counter()++);
    std::filesystem::create_directories(dir);
  }
  ~TempDir() { std::filesystem::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

inline std::string write_tiny(const TempDir& t, const TinySpec& s, const std::string& name,
                              const std::string& arch = "llama") {
  std::string path = t.file(name);
  auto bytes = make_tiny_gguf(s, "", arch);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), long(bytes.size()));
  return path;
}

// A random-weight model of `shape` at `keep` (lowrank synth), written into t.
inline std::string write_synth(const TempDir& t, double keep, const std::string& shape = "tiny",
                               uint64_t seed = 1) {
  SynthOptions o;
  o.shape = shape;
  o.keep = keep;
  o.seed = seed;
  o.threads = 2;
  const std::string path = t.file(fmt::format("synth-{}-{}-{}.gguf", shape, keep, seed));
  write_synthetic_model(path, o);
  return path;
}

// A synthetic model that owns its temporary directory.
struct Synth {
  TempDir t;
  std::string path;
  explicit Synth(double keep, const std::string& shape = "tiny", uint64_t seed = 1)
      : path(write_synth(t, keep, shape, seed)) {}
};

// A tiny model whose rows are 256 or 512 values (dim 256, ffn 512), so every
// K-quant block fits them, with a byte-fallback tokenizer.
inline TinySpec k_quant_spec() {
  TinySpec s;
  s.tokenizer = true;
  s.dim = 256;
  s.ffn_dim = 512;
  return s;
}

// A tiny model for the key caches: head_dim 32 (q8_0 and q4_0 blocks), GQA
// 3 (6 query heads, 2 KV heads), with a byte-fallback tokenizer.
inline TinySpec key_cache_spec() {
  TinySpec s;
  s.dim = 192;
  s.n_heads = 6;
  s.n_kv_heads = 2;
  s.ffn_dim = 256;
  s.tokenizer = true;
  return s;
}

// A file's bytes (to compare two files).
inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string write_calib(const TempDir& t) {
  std::string path = t.file("calib.txt");
  std::ofstream out(path);
  for (int i = 0; i < 40; ++i)
    out << "The river runs past the mill and the old stone bridge, " << i * 7919
        << " times a day.\n";
  return path;
}

// The keys of `m` calibrated on a small text (lowrank calibrate-kv's
// pass: 4 windows of 64 tokens).
inline Weights::KeyCalibration calibrate_tiny_keys(const Model& m, const TempDir& t) {
  CalibrateKvOptions opt;
  opt.calib_path = write_calib(t);
  opt.samples = 4;
  opt.len = 64;
  return calibrate_keys(m, opt);
}

// Logits [toks, vocab] of `w` from the fast CPU backend (how 0) or the
// scalar plan executor of the CPU (1) or GPU (2) target, 2 threads: the
// prompt at once, or (one_by_one) a token per call.
inline std::vector<float> plan_logits(std::shared_ptr<const Weights> w,
                                      const std::vector<int32_t>& toks, int how,
                                      bool one_by_one = false) {
  BackendOptions o;
  o.ctx = 64;
  o.cpu.n_threads = 2;
  std::unique_ptr<Backend> b =
      how == 0 ? make_cpu_backend(w, o)
               : make_scalar_plan_backend(w, o, how == 1 ? Target::Cpu : Target::Gpu);
  const size_t V = size_t(w->cfg.vocab);
  std::vector<float> out(toks.size() * V);
  if (!one_by_one) {
    b->forward(toks.data(), int(toks.size()), out.data(), true);
  } else {
    for (size_t i = 0; i < toks.size(); ++i) b->forward(&toks[i], 1, out.data() + i * V, false);
  }
  return out;
}

// Logits [toks, vocab] of the model at `path` from the reference forward (f32).
inline std::vector<float> reference_logits(const std::string& path,
                                           const std::vector<int32_t>& toks) {
  Model m = load_model(path, DType::F32);
  BackendOptions o;
  o.ctx = 64;
  auto b = make_session(m, ExecPath::Reference, o);
  std::vector<float> out(toks.size() * size_t(m.weights->cfg.vocab));
  b->forward(toks.data(), int(toks.size()), out.data(), true);
  return out;
}

// The synth model at `path` as a qwen2 GGUF with random q/k/v biases.
inline std::string as_qwen2(const test::TempDir& t, const std::string& path,
                            const std::string& name) {
  auto f = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& [key, value] : f->metadata()) {
    std::string k = key;
    if (k.rfind("llama.", 0) == 0) k = "qwen2." + k.substr(6);
    if (k == "general.architecture") {
      w.set_string(k, "qwen2");
      continue;
    }
    w.set(k, value);
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 0.5f);
  for (const auto& ti : f->tensors()) {
    w.add_tensor(ti.name, ti.dtype, ti.shape, ti.data, ti.nbytes);
    for (const char* kind : {"attn_q", "attn_k", "attn_v"}) {
      const auto dot = ti.name.find('.', 4);
      if (ti.name.rfind("blk.", 0) != 0 || dot == std::string::npos) continue;
      const std::string base = ti.name.substr(0, dot) + "." + kind;
      // One bias per map, added next to its dense weight or its output factor.
      if (ti.name != base + ".weight" && ti.name != base + ".lr_out") continue;
      const uint64_t rows = ti.shape[1];
      std::vector<float> b(rows);
      for (auto& v : b) v = nd(rng);
      w.add_tensor(base + ".bias", DType::F32, {rows}, b.data(), rows * 4);
    }
  }
  const std::string out = t.file(name);
  w.write(out);
  return out;
}

// A prompt's logits (fn()) against an f32 reference on every kernel path this
// CPU has: the block formats' prompt products take exact f32 inputs on AVX2
// (within 1e-3) and 8-bit inputs, as decode's do, on AVX-512 VNNI
// (matmul_blocks_int8: within 5e-2, decode's tolerance in these tests).
template <class Fn>
void expect_prompt_close(Fn&& fn, const std::vector<float>& ref) {
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    EXPECT_LT(rel_err(fn(), ref), isa == Isa::Avx512Vnni ? 5e-2 : 1e-3) << isa_name(isa);
  }
}

}  // namespace lr::test
