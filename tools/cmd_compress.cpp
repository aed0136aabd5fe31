// lowrank compress: dense GGUF -> low-rank GGUF (plain SVD, whitened SVD,
// whitened basis sharing).
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "common.h"
#include "compress/compress_model.h"
#include "core/error.h"
#include "model/load.h"

namespace lr::cli {

namespace {

struct CompressCli {
  std::string model, out;
  std::string keep = "0.6";
  double remove = -1;
  std::string method = "whiten";
  std::string whitening = "auto";
  std::string budget;
  std::string allocate;  // empty: each matrix keeps its own share
  std::string allocate_loss = "relative";
  int basis_sharing = 0;
  std::vector<std::string> ranks;
  std::string matrices;
  std::string factor_type = "auto";
  std::string storage;  // plain, pivoted, or both (a list); empty: --pivoted decides
  std::string residual;
  int residual_rounds = 1;
  std::string calib;
  int calib_samples = 64, calib_len = 512;
  int64_t calib_memory_mb = 0;
  int threads = 0;
  bool sequential = false;
  bool pivoted = false;
  bool refit = false;
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

// --factor-type and --storage may list several: one output per combination
// (with each keep), all from one calibration and one decomposition.
struct Dimensions {
  std::vector<DType> factor_types;
  std::vector<bool> storages;  // pivoted
  std::vector<double> keeps;
  bool bytes = false;  // --budget (else --keep)
  const char* flag = "--keep";
};

Dimensions dimensions_of(const CompressCli& o) {
  Dimensions dm;
  for (const std::string& f : split(o.factor_type, ','))
    dm.factor_types.push_back(
        parse_factor_type(f == "auto" ? (o.residual.empty() ? "f16" : "q8_0") : f));
  if (dm.factor_types.empty()) fail("--factor-type: no value");
  if (!o.storage.empty() && o.pivoted) fail("--pivoted is --storage pivoted: pass one of them");
  for (const std::string& st :
       split(o.storage.empty() ? (o.pivoted ? "pivoted" : "plain") : o.storage, ',')) {
    if (st != "plain" && st != "pivoted")
      fail("unknown --storage '{}' (expected plain or pivoted)", st);
    dm.storages.push_back(st == "pivoted");
  }
  if (dm.storages.empty()) fail("--storage: no value");
  dm.bytes = !o.budget.empty();
  dm.flag = dm.bytes ? "--budget" : "--keep";
  if (o.remove >= 0) {
    dm.keeps.push_back(1.0 - o.remove);
  } else {
    for (const std::string& k : split(dm.bytes ? o.budget : o.keep, ','))
      dm.keeps.push_back(parse_number(k, dm.flag));
  }
  if (dm.keeps.empty()) fail("{}: no value", dm.flag);
  for (double k : dm.keeps)
    if (!(k > 0 && k <= 1)) fail("{} must be in (0, 1], got {}", dm.flag, k);
  return dm;
}

// The options every output shares (the first factor type and storage stand
// for the rest).
CompressOptions options_of(const CompressCli& o, const Dimensions& dm) {
  CompressOptions opt;
  if (o.method == "svd")
    opt.method = CompressMethod::Svd;
  else if (o.method == "whiten")
    opt.method = CompressMethod::Whiten;
  else
    fail("unknown method '{}' (expected svd or whiten)", o.method);
  if (o.whitening == "auto")
    opt.whitening = compress::Whitening::Auto;
  else if (o.whitening == "eigen")
    opt.whitening = compress::Whitening::Eigen;
  else if (o.whitening == "cholesky")
    opt.whitening = compress::Whitening::Cholesky;
  else
    fail("unknown --whitening '{}' (expected auto, eigen or cholesky)", o.whitening);
  if (!o.budget.empty() && o.remove >= 0)
    fail("--budget is a byte budget; --remove goes with --keep");
  if (!o.budget.empty())
    opt.budget = RankBudget::Bytes;
  else if (!o.allocate.empty())
    opt.budget = RankBudget::Parameters;
  if (o.allocate.empty() || o.allocate == "matrix")
    opt.allocate_scope = AllocateScope::Matrix;
  else if (o.allocate == "type")
    opt.allocate_scope = AllocateScope::Type;
  else if (o.allocate == "all")
    opt.allocate_scope = AllocateScope::All;
  else
    fail("unknown --allocate '{}' (expected matrix, type or all)", o.allocate);
  if (o.allocate_loss != "relative" && o.allocate_loss != "absolute")
    fail("unknown --allocate-loss '{}' (expected relative or absolute)", o.allocate_loss);
  opt.relative_loss = o.allocate_loss == "relative";
  opt.basis_sharing = o.basis_sharing;
  if (o.basis_sharing >= 2 && opt.method != CompressMethod::Whiten)
    fail("--basis-sharing is whitened: use it with --method whiten");
  opt.calib_path = o.calib;
  opt.calib_samples = o.calib_samples;
  opt.calib_len = o.calib_len;
  opt.calib_memory = uint64_t(o.calib_memory_mb) << 20;
  opt.factor_type = dm.factor_types[0];
  opt.pivoted = dm.storages[0];
  if (!o.residual.empty()) opt.residual = parse_quant_type(o.residual, "--residual");
  opt.residual_rounds = o.residual_rounds;
  opt.sequential = o.sequential;
  opt.refit = o.refit;
  opt.n_threads =
      o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  if (!o.matrices.empty()) opt.kinds = split(o.matrices, ',');
  for (const std::string& r : o.ranks) {
    auto eq = r.find('=');
    if (eq == std::string::npos) fail("--rank takes KIND=R (e.g. attn_q=64, all=max), got '{}'", r);
    std::string kind = r.substr(0, eq), val = r.substr(eq + 1);
    opt.ranks[kind] = val == "max" ? -1 : int64_t(parse_number(val, "--rank"));
  }
  return opt;
}

// One output per combination, each listed dimension's value put into the
// -o path at its mark.
std::vector<CompressJob> jobs_of(const CompressCli& o, const Dimensions& dm) {
  std::vector<CompressJob> jobs;
  auto place = [&](std::string& path, const std::string& mark, const std::string& value,
                   size_t count, const char* what) {
    auto at = path.find(mark);
    if (at != std::string::npos)
      path.replace(at, mark.size(), value);
    else if (count > 1)
      fail("several {} values need '{}' in the -o path", what, mark);
  };
  for (bool piv : dm.storages)
    for (DType ft : dm.factor_types)
      for (double k : dm.keeps) {
        std::string path = o.out;
        place(path, dm.bytes ? "{budget}" : "{keep}", fmt::format("{}", k), dm.keeps.size(),
              dm.flag);
        std::string name(dtype_name(ft));
        for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        place(path, "{factor}", name, dm.factor_types.size(), "--factor-type");
        place(path, "{storage}", piv ? "pivoted" : "plain", dm.storages.size(), "--storage");
        jobs.push_back({k, path, ft, piv});
      }
  return jobs;
}

// What an output got: ranks per matrix type, the loss a budget traded,
// parameters and file size, factor types, notes.
void print_result(const CompressJob& job, const CompressResult& r, const CompressOptions& opt,
                  bool bytes) {
  std::printf("%s (%s %g, %s factors%s%s):\n", job.out_path.c_str(), bytes ? "budget" : "keep",
              job.keep, std::string(dtype_name(*job.factor_type)).c_str(),
              *job.pivoted ? ", pivoted" : "",
              opt.allocate_scope == AllocateScope::Matrix ? ""
              : opt.allocate_scope == AllocateScope::Type ? ", ranks moved between layers"
                                                          : ", ranks moved between all matrices");
  // Ranks per matrix type (first layer; differing ranks are listed in full).
  std::map<std::string, std::vector<int64_t>> by_kind;
  std::string notes;
  for (const MatrixReport& m : r.matrices) {
    by_kind[m.name.substr(m.name.find('.', 4) + 1)].push_back(m.rank);
    if (!m.note.empty()) notes += "  " + m.name + ": " + m.note + "\n";
  }
  // Rank 0: the matrix left dense, or (the residual form) left uncorrected.
  const char* zero = opt.residual ? "none" : "dense";
  auto rank_str = [zero](int64_t r) { return r == 0 ? std::string(zero) : std::to_string(r); };
  for (const auto& [kind, ranks] : by_kind) {
    const int64_t first = ranks[0];
    bool same = std::all_of(ranks.begin(), ranks.end(), [first](int64_t x) { return x == first; });
    std::string list;
    for (int64_t x : ranks) {
      if (!list.empty()) list += ' ';
      list += rank_str(x);
    }
    std::printf("  %-12s rank %s\n", kind.c_str(),
                same ? rank_str(first).c_str()
                     : (opt.budget == RankBudget::PerMatrix ? std::string("varies per layer")
                                                            : "by layer: " + list)
                           .c_str());
  }
  if (opt.budget != RankBudget::PerMatrix) {
    double loss = 0;
    for (const MatrixReport& m : r.matrices) loss += m.loss;
    std::printf("  whitened truncation loss, summed over matrices: %.4f\n", loss);
  }
  struct stat st {};
  stat(job.out_path.c_str(), &st);
  std::printf(
      "  parameters %.2f M -> %.2f M (%.1f%%), file %.1f MiB%s\n", r.params_before / 1e6,
      r.params_after / 1e6, 100.0 * double(r.params_after) / double(r.params_before),
      double(st.st_size) / (1 << 20),
      r.calib_tokens ? fmt::format(", calibrated on {} tokens", r.calib_tokens).c_str() : "");
  std::string types;
  for (const auto& [t, count] : r.factor_types)
    types += fmt::format("{}{} {}", types.empty() ? "" : ", ", count, dtype_name(t));
  if (!types.empty()) std::printf("  factor tensors: %s\n", types.c_str());
  if (!notes.empty()) std::printf("  notes:\n%s", notes.c_str());
}

int run(const CompressCli& o) {
  const Dimensions dm = dimensions_of(o);
  const CompressOptions opt = options_of(o, dm);
  const std::vector<CompressJob> jobs = jobs_of(o, dm);
  std::string in = o.model.empty() ? default_model_path() : o.model;
  auto results = compress_model(in, jobs, opt, [](int done, int total, const char* phase) {
    std::fprintf(stderr, "\r%s %d/%d ", phase, done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  });
  for (size_t i = 0; i < jobs.size(); ++i) print_result(jobs[i], results[i], opt, dm.bytes);
  return 0;
}

}  // namespace

Runner add_compress_command(CLI::App& app) {
  auto o = std::make_shared<CompressCli>();
  CLI::App* sub = app.add_subcommand("compress", "factorize a dense model into low-rank matrices");
  sub->add_option("-m,--model", o->model, "dense GGUF model (default: the default model)");
  sub->add_option("-o,--output", o->out,
                  "output GGUF ('{keep}', '{budget}', '{factor}' and '{storage}' are replaced by "
                  "each output's values)")
      ->required();
  sub->add_option("--keep", o->keep,
                  "fraction of each matrix's parameters kept, rank = floor(keep*m*n/(m+n)); a "
                  "comma list compresses several")
      ->capture_default_str();
  sub->add_option("--remove", o->remove, "1 - keep (SVD-LLM's 'compression ratio')");
  sub->add_option("--method", o->method, "svd | whiten (SVD-LLM closed form)")
      ->capture_default_str();
  sub->add_option(
         "--whitening", o->whitening,
         "how whiten factors the calibration Gram: auto (out <= in: the leading eigenvectors of W "
         "G W^T, no factor of G; else Cholesky where it holds without a ridge, else eigen) | eigen "
         "(SVD-LLM v2; never fails, ~10x the time) | cholesky (v1, with a ridge when needed)")
      ->capture_default_str();
  sub->add_option("--budget", o->budget,
                  "byte budget: the fraction of each compressed matrix's bytes in the source file "
                  "its factors may take as written (with --allocate: of all of them); a comma list "
                  "compresses several ('{budget}' in -o)");
  sub->add_option(
      "--allocate", o->allocate,
      "move ranks between matrices by their whitened truncation loss, spending --keep of the "
      "parameters (or --budget of the bytes) over each matrix type's layers (type) or over every "
      "matrix (all); matrix = each its own share. Measured worse than the uniform keep on SmolLM2 "
      "(docs/results/compression.md). With --residual it spreads the correction: --keep of the "
      "parameters (--budget: of the source's bytes) goes to the matrices whose quantization error "
      "costs their output most, others get none");
  sub->add_option("--allocate-loss", o->allocate_loss,
                  "with --allocate: relative (each matrix's truncated energy over its own) or "
                  "absolute (the activation error as is)")
      ->capture_default_str();
  sub->add_option("--residual", o->residual,
                  "the residual form W ~ Q(W) + U V: quantize W to this block format (q2_k, q3_k, "
                  "q4_k, ...; activation-weighted when calibrated), then fit the factors to its "
                  "error; --keep sizes the correction");
  sub->add_option("--basis-sharing", o->basis_sharing,
                  "groups of g consecutive layers share one input basis for q, k, v, gate, up");
  sub->add_option("--rank", o->ranks, "explicit rank per matrix type, KIND=R (attn_q=64, all=max)");
  sub->add_option("--matrices", o->matrices,
                  "comma list of matrix types to compress (default: all seven per block)");
  sub->add_option("--residual-rounds", o->residual_rounds,
                  "rounds of the residual form's fit: after the first, W - U V is quantized again "
                  "and the factors refitted to its error (one --keep)")
      ->capture_default_str();
  sub->add_option("--factor-type", o->factor_type,
                  "storage type of the factors: auto (f16; q8_0 with --residual), f16, bf16, f32, "
                  "q8_0, q6_k, q5_k, q4_k (quantized: ranks rounded down to a multiple of 32; a "
                  "row a K-quant's 256 does not divide is stored as q8_0); a comma list writes one "
                  "file per type ('{factor}' in -o)")
      ->capture_default_str();
  sub->add_option("--storage", o->storage,
                  "plain | pivoted (the same as --pivoted) | plain,pivoted: one file per storage "
                  "('{storage}' in -o), from one calibration and decomposition");
  sub->add_option("--calib", o->calib, "calibration text (whiten, basis sharing)");
  sub->add_option("--calib-samples", o->calib_samples, "calibration windows")
      ->capture_default_str();
  sub->add_option("--calib-len", o->calib_len, "tokens per calibration window")
      ->capture_default_str();
  sub->add_option("--calib-memory", o->calib_memory_mb,
                  "MiB for the calibration statistics of the layers one pass collects; more layers "
                  "than fit take several passes (default: half the available memory)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  sub->add_option("-t,--threads", o->threads, "threads for the calibration pass");
  sub->add_flag(
      "--pivoted", o->pivoted,
      "pivoted storage (PIFA): each matrix's factors stored as r of its rows plus coefficients for "
      "the others, r*(m+n-r) values, so --keep buys a higher rank; CPU only");
  sub->add_flag(
      "--sequential", o->sequential,
      "calibrate layer by layer: each layer whitened with the inputs the already-compressed layers "
      "before it produce (about three calibration passes; one --keep, --method whiten)");
  sub->add_flag(
      "--refit", o->refit,
      "with --sequential: refit each output factor by least squares to the dense layer's outputs "
      "from its dense inputs (measured worse on SmolLM2: docs/results/compression.md)");
  return [o] { return run(*o); };
}

}  // namespace lr::cli
