// lowrank compress: dense GGUF -> low-rank GGUF (plain SVD, whitened SVD,
// whitened basis sharing).
#include <sys/stat.h>

#include <cstdio>
#include <algorithm>
#include <map>
#include <sstream>
#include <thread>

#include "common.h"
#include "core/error.h"
#include "model/load.h"
#include "compress/compress_model.h"

namespace lr::cli {

namespace {

struct CompressCli {
  std::string model, out;
  std::string keep = "0.6";
  double remove = -1;
  std::string method = "whiten";
  int basis_sharing = 0;
  std::vector<std::string> ranks;
  std::string matrices;
  std::string factor_type = "f16";
  std::string calib;
  int calib_samples = 64, calib_len = 512;
  int64_t calib_memory_mb = 0;
  int threads = 0;
  bool sequential = false;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

double parse_number(const std::string& s, const char* flag) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  fail("{}: '{}' is not a number", flag, s);
}

int run(const CompressCli& o) {
  if (o.sequential)
    fail("--sequential is not supported yet: calibration inputs come from the dense model");
  CompressOptions opt;
  if (o.method == "svd") opt.method = CompressMethod::Svd;
  else if (o.method == "whiten") opt.method = CompressMethod::Whiten;
  else fail("unknown method '{}' (expected svd or whiten)", o.method);
  opt.basis_sharing = o.basis_sharing;
  if (o.basis_sharing >= 2 && opt.method != CompressMethod::Whiten)
    fail("--basis-sharing is whitened: use it with --method whiten");
  opt.calib_path = o.calib;
  opt.calib_samples = o.calib_samples;
  opt.calib_len = o.calib_len;
  opt.calib_memory = uint64_t(o.calib_memory_mb) << 20;
  opt.factor_type = parse_factor_type(o.factor_type);
  opt.n_threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  if (!o.matrices.empty()) opt.kinds = split(o.matrices, ',');
  for (const std::string& r : o.ranks) {
    auto eq = r.find('=');
    if (eq == std::string::npos) fail("--rank takes KIND=R (e.g. attn_q=64, all=max), got '{}'", r);
    std::string kind = r.substr(0, eq), val = r.substr(eq + 1);
    opt.ranks[kind] = val == "max" ? -1 : int64_t(parse_number(val, "--rank"));
  }

  std::vector<double> keeps;
  if (o.remove >= 0) {
    keeps.push_back(1.0 - o.remove);
  } else {
    for (const std::string& k : split(o.keep, ',')) keeps.push_back(parse_number(k, "--keep"));
  }
  if (keeps.empty()) fail("--keep: no value");
  std::vector<CompressJob> jobs;
  for (double k : keeps) {
    std::string path = o.out;
    auto at = path.find("{keep}");
    if (at != std::string::npos) path.replace(at, 6, fmt::format("{}", k));
    else if (keeps.size() > 1) fail("several --keep values need '{{keep}}' in the -o path");
    jobs.push_back({k, path});
  }
  std::string in = o.model.empty() ? default_model_path() : o.model;
  auto results = compress_model(in, jobs, opt, [](int done, int total, const char* phase) {
    std::fprintf(stderr, "\r%s %d/%d ", phase, done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  });
  for (size_t i = 0; i < jobs.size(); ++i) {
    const CompressResult& r = results[i];
    std::printf("%s (keep %.2f):\n", jobs[i].out_path.c_str(), jobs[i].keep);
    // Ranks per matrix type (first layer; differing ranks are listed in full).
    std::map<std::string, std::vector<int64_t>> by_kind;
    std::string notes;
    for (const MatrixReport& m : r.matrices) {
      by_kind[m.name.substr(m.name.find('.', 4) + 1)].push_back(m.rank);
      if (!m.note.empty()) notes += "  " + m.name + ": " + m.note + "\n";
    }
    for (const auto& [kind, ranks] : by_kind) {
      const int64_t first = ranks[0];
      bool same = std::all_of(ranks.begin(), ranks.end(), [first](int64_t x) { return x == first; });
      std::printf("  %-12s rank %s\n", kind.c_str(),
                  same ? (first == 0 ? "dense" : std::to_string(first).c_str())
                       : "varies per layer");
    }
    struct stat st {};
    stat(jobs[i].out_path.c_str(), &st);
    std::printf("  parameters %.2f M -> %.2f M (%.1f%%), file %.1f MiB%s\n", r.params_before / 1e6,
                r.params_after / 1e6, 100.0 * double(r.params_after) / double(r.params_before),
                double(st.st_size) / (1 << 20),
                r.calib_tokens ? fmt::format(", calibrated on {} tokens", r.calib_tokens).c_str() : "");
    std::string types;
    for (const auto& [t, count] : r.factor_types)
      types += fmt::format("{}{} {}", types.empty() ? "" : ", ", count, dtype_name(t));
    if (!types.empty()) std::printf("  factor tensors: %s\n", types.c_str());
    if (!notes.empty()) std::printf("  notes:\n%s", notes.c_str());
  }
  return 0;
}

}  // namespace

Runner add_compress_command(CLI::App& app) {
  auto o = std::make_shared<CompressCli>();
  CLI::App* sub = app.add_subcommand("compress", "factorize a dense model into low-rank matrices");
  sub->add_option("-m,--model", o->model, "dense GGUF model (default: the default model)");
  sub->add_option("-o,--output", o->out, "output GGUF ('{keep}' is replaced by the keep value)")->required();
  sub->add_option("--keep", o->keep, "fraction of each matrix's parameters kept, rank = floor(keep*m*n/(m+n)); a comma list compresses several")->capture_default_str();
  sub->add_option("--remove", o->remove, "1 - keep (SVD-LLM's 'compression ratio')");
  sub->add_option("--method", o->method, "svd | whiten (SVD-LLM closed form)")->capture_default_str();
  sub->add_option("--basis-sharing", o->basis_sharing, "groups of g consecutive layers share one input basis for q, k, v, gate, up");
  sub->add_option("--rank", o->ranks, "explicit rank per matrix type, KIND=R (attn_q=64, all=max)");
  sub->add_option("--matrices", o->matrices, "comma list of matrix types to compress (default: all seven per block)");
  sub->add_option("--factor-type", o->factor_type, "storage type of the factors: f16, bf16, f32, q8_0, q6_k, q5_k, q4_k (quantized: ranks rounded down to a multiple of 32; a row a K-quant's 256 does not divide is stored as q8_0)")->capture_default_str();
  sub->add_option("--calib", o->calib, "calibration text (whiten, basis sharing)");
  sub->add_option("--calib-samples", o->calib_samples, "calibration windows")->capture_default_str();
  sub->add_option("--calib-len", o->calib_len, "tokens per calibration window")->capture_default_str();
  sub->add_option("--calib-memory", o->calib_memory_mb, "MiB for the calibration statistics of the layers one pass collects; more layers than fit take several passes (default: half the available memory)")->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  sub->add_option("-t,--threads", o->threads, "threads for the calibration pass");
  sub->add_flag("--sequential", o->sequential, "calibrate each layer on the already-compressed earlier layers (not supported yet)");
  return [o] { return run(*o); };
}

}  // namespace lr::cli
