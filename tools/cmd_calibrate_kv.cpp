// lowrank calibrate-kv: fit the SVDq key bases offline on calibration text
// and store them in a copy of the model (--svdq-basis calibrated reads them).
#include <chrono>
#include <cstdio>
#include <thread>

#include "common.h"
#include "core/error.h"
#include "kv/svdq.h"
#include "model/load.h"
#include "compress/calibrate_kv.h"

namespace lr::cli {

namespace {

struct CalibrateKvCli {
  std::string model, out, calib;
  int samples = 16, len = 2048, threads = 0;
  double energy = 0.95;
};

int run(const CalibrateKvCli& o) {
  const std::string in = o.model.empty() ? default_model_path() : o.model;
  Model m = load_model(in, kDefaultFastWeightType);
  CalibrateKvOptions opt;
  opt.calib_path = o.calib;
  opt.samples = o.samples;
  opt.len = o.len;
  opt.n_threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  auto t0 = std::chrono::steady_clock::now();
  Weights::KeyCalibration cal = calibrate_keys(m, opt, [](int done, int total) {
    std::fprintf(stderr, "\rcalibrating %d/%d ", done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  });
  // What the default rank rule would keep, per energy mode.
  const Config& c = m.weights->cfg;
  double r_sigma = 0, r_sigma2 = 0;
  const int streams = c.n_layers * c.n_kv_heads;
  for (int i = 0; i < streams; ++i) {
    std::vector<double> s(cal.sigma.begin() + ptrdiff_t(i) * c.head_dim,
                          cal.sigma.begin() + ptrdiff_t(i + 1) * c.head_dim);
    r_sigma += kv::rank_for_energy(s, o.energy, kv::EnergyMode::Sigma);
    r_sigma2 += kv::rank_for_energy(s, o.energy, kv::EnergyMode::Sigma2);
  }
  const std::string note = fmt::format("{}: {} windows x {} tokens", o.calib, o.samples, o.len);
  save_with_key_calibration(m, std::move(cal), o.out, note);
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: key bases of %d layers x %d KV heads (head_dim %d) fitted on %lld keys each (%s), "
              "%.1f s\n  mean rank at energy %.2f: %.1f (sigma), %.1f (sigma^2)\n",
              o.out.c_str(), c.n_layers, c.n_kv_heads, c.head_dim, (long long)(int64_t(o.samples) * o.len),
              note.c_str(), el, o.energy, r_sigma / streams, r_sigma2 / streams);
  return 0;
}

}  // namespace

Runner add_calibrate_kv_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateKvCli>();
  CLI::App* sub = app.add_subcommand("calibrate-kv", "fit per-(layer, KV head) key bases offline for --svdq-basis calibrated");
  sub->add_option("-m,--model", o->model, "GGUF model (default: the default model)");
  sub->add_option("-o,--output", o->out, "output GGUF: the model with its key bases")->required();
  sub->add_option("--calib", o->calib, "calibration text")->required();
  sub->add_option("--calib-samples", o->samples, "windows of calibration text")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--calib-len", o->len, "tokens per window: cover the positions you serve (a basis of post-RoPE keys fitted on positions < L fits later positions poorly)")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  sub->add_option("--energy", o->energy, "energy for the rank summary printed at the end")->capture_default_str();
  sub->add_option("-t,--threads", o->threads, "CPU threads (default: all cores)");
  return [o] { return run(*o); };
}

}  // namespace lr::cli
