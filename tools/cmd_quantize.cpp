// lowrank quantize: re-encodes a dense GGUF's per-layer linear maps in one
// block format with lowrank's own quantizers (plain or activation-weighted).
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>

#include "common.h"
#include "compress/quantize_model.h"
#include "core/error.h"
#include "model/load.h"

namespace lr::cli {

namespace {

struct QuantizeCli {
  std::string model, out, type;
  std::string matrices;
  std::string calib;
  int calib_samples = 64, calib_len = 512;
  int threads = 0;
  bool fallback = false;
};

}  // namespace

DType parse_quant_type(const std::string& name, const char* flag) {
  static const std::pair<const char*, DType> kTypes[] = {
      {"q8_0", DType::Q8_0}, {"q4_0", DType::Q4_0}, {"q4_1", DType::Q4_1}, {"q5_0", DType::Q5_0},
      {"q5_1", DType::Q5_1}, {"q2_k", DType::Q2_K}, {"q3_k", DType::Q3_K}, {"q4_k", DType::Q4_K},
      {"q5_k", DType::Q5_K}, {"q6_k", DType::Q6_K}};
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  for (const auto& [n, t] : kTypes)
    if (lower == n) return t;
  fail("unknown {} '{}' (expected q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0, q3_k or q2_k)",
       flag, name);
}

namespace {

int run(const QuantizeCli& o) {
  QuantizeOptions opt;
  opt.fallback = o.fallback;
  opt.n_threads =
      o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  opt.calib = {o.calib, o.calib_samples, o.calib_len, opt.n_threads};
  auto split = [](const std::string& list) {
    std::vector<std::string> out;
    std::stringstream ss(list);
    for (std::string k; std::getline(ss, k, ',');)
      if (!k.empty()) out.push_back(k);
    return out;
  };
  if (!o.matrices.empty()) opt.kinds = split(o.matrices);
  std::vector<QuantizeJob> jobs;
  const std::vector<std::string> types = split(o.type);
  if (types.empty()) fail("--type: no value");
  for (const std::string& t : types) {
    std::string path = o.out;
    const auto at = path.find("{type}");
    if (at != std::string::npos)
      path.replace(at, 6, t);
    else if (types.size() > 1)
      fail("several --type values need '{{type}}' in the -o path");
    jobs.push_back({parse_quant_type(t, "--type"), path});
  }
  const std::string in = o.model.empty() ? default_model_path() : o.model;
  const std::vector<QuantizeReport> reports =
      quantize_model(in, jobs, opt, [](int done, int total, const char* phase) {
        std::fprintf(stderr, "\r%s %d/%d ", phase, done, total);
        if (done == total) std::fprintf(stderr, "\n");
        std::fflush(stderr);
      });
  for (size_t i = 0; i < jobs.size(); ++i) {
    const QuantizeReport& r = reports[i];
    struct stat st {};
    stat(jobs[i].out_path.c_str(), &st);
    std::string written;
    for (const auto& [t, count] : r.types)
      written += fmt::format("{}{} {}", written.empty() ? "" : ", ", count, dtype_name(t));
    std::printf("%s: %s; matrices %.1f MiB -> %.1f MiB, file %.1f MiB%s\n",
                jobs[i].out_path.c_str(), written.c_str(), double(r.bytes_before) / (1 << 20),
                double(r.bytes_after) / (1 << 20), double(st.st_size) / (1 << 20),
                r.calib_tokens
                    ? fmt::format(", activation-weighted on {} tokens", r.calib_tokens).c_str()
                    : "");
    if (!r.fell_back.empty())
      std::printf("  %zu matrices in their fallback type (rows the format does not fit), e.g. %s\n",
                  r.fell_back.size(), r.fell_back[0].c_str());
  }
  return 0;
}

}  // namespace

Runner add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<QuantizeCli>();
  CLI::App* sub = app.add_subcommand(
      "quantize",
      "re-encode a dense model's linear maps in a block format (lowrank's own quantizers)");
  sub->add_option("-m,--model", o->model, "dense GGUF model (default: the default model)");
  sub->add_option("-o,--output", o->out, "output GGUF ('{type}' is replaced by the type)")
      ->required();
  sub->add_option("--type", o->type,
                  "q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0, q3_k or q2_k; a comma list "
                  "writes several (one calibration)")
      ->required();
  sub->add_option("--matrices", o->matrices,
                  "comma list of matrix types to re-encode (default: all seven per block; "
                  "embeddings and the output head are copied), and output: the output head "
                  "(tied: the embeddings)");
  sub->add_option("--calib", o->calib,
                  "calibration text: weight each column's error by its input's mean square "
                  "(activation-weighted)");
  sub->add_option("--calib-samples", o->calib_samples, "calibration windows")
      ->capture_default_str();
  sub->add_option("--calib-len", o->calib_len, "tokens per calibration window")
      ->capture_default_str();
  sub->add_flag("--fallback", o->fallback,
                "store matrices whose rows the format does not fit as llama.cpp does (q2_k, q3_k "
                "-> q4_0; q4_k -> q5_0; q5_k -> q5_1; q6_k -> q8_0) instead of failing");
  sub->add_option("-t,--threads", o->threads, "threads");
  return [o] { return run(*o); };
}

}  // namespace lr::cli
