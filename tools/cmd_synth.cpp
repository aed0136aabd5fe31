// lowrank synth: a random-weight GGUF of a real model's shape (dense or
// low-rank at --keep), for benchmarks where no model file may be fetched.
#include <cstdio>

#include "common.h"
#include "core/error.h"
#include "compress/synth_model.h"

namespace lr::cli {

namespace {

struct SynthCli {
  SynthOptions o;
  std::string wtype = "bf16";
  std::string out;
};

int run(SynthCli& s) {
  s.o.q4_k_m = s.wtype == "q4_k_m";
  s.o.wtype = s.o.q4_k_m ? DType::Q4_K : parse_factor_type(s.wtype);
  const uint64_t params = write_synthetic_model(s.out, s.o);
  std::printf("%s: synthetic %s, keep %.2f, %s, %.1f M parameters, seed %llu\n", s.out.c_str(),
              s.o.shape.c_str(), s.o.keep, s.wtype.c_str(), double(params) / 1e6,
              (unsigned long long)s.o.seed);
  return 0;
}

}  // namespace

Runner add_synth_command(CLI::App& app) {
  auto s = std::make_shared<SynthCli>();
  std::string shapes;
  for (const std::string& n : synth_shapes()) shapes += (shapes.empty() ? "" : ", ") + n;
  CLI::App* sub = app.add_subcommand(
      "synth", "write a random-weight model of a real model's shape (for benchmarks)");
  sub->add_option("--shape", s->o.shape, "model shape: " + shapes)->capture_default_str();
  sub->add_option("--keep", s->o.keep,
                  "fraction of each block matrix's parameters kept as low-rank factors (1: dense)")
      ->capture_default_str();
  sub->add_option("--wtype", s->wtype,
                  "weight type: f32, f16 or bf16; for dense models also q8_0, q4_k, q6_k or "
                  "q4_k_m (llama.cpp's Q4_K_M mix)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_k", "q6_k", "q4_k_m"}));
  sub->add_option("--seed", s->o.seed, "random seed")->capture_default_str();
  sub->add_option("-t,--threads", s->o.threads, "threads generating values (default: all cores)")
      ->check(CLI::Range(0, 1024));
  sub->add_option("-o,--output", s->out, "output GGUF file")->required();
  return [s] { return run(*s); };
}

}  // namespace lr::cli
