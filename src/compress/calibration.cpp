#include "compress/calibration.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "backend/cpu/cpu.h"
#include "core/error.h"

namespace lr::compress {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open calibration text", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Site input_site(Slot s) {
  switch (s) {
    case Slot::Q:
    case Slot::K:
    case Slot::V:
      return Site::AttnIn;
    case Slot::O:
      return Site::AttnOut;
    case Slot::Gate:
    case Slot::Up:
      return Site::MlpIn;
    default:
      return Site::MlpMid;
  }
}

std::vector<int32_t> calibration_tokens(const Model& m, const CalibrationText& text) {
  if (text.path.empty()) fail("this method needs calibration text: pass --calib FILE");
  if (text.samples <= 0 || text.len <= 1)
    fail("--calib-samples must be >= 1 and --calib-len >= 2 (got {} and {})", text.samples,
         text.len);
  const std::vector<int32_t> toks =
      m.tokenizer->encode(read_text(text.path), m.tokenizer->add_bos());
  const int64_t need = int64_t(text.samples) * text.len;
  if (int64_t(toks.size()) < need)
    fail(
        "{}: calibration text has {} tokens, fewer than --calib-samples x --calib-len = {} x {} = "
        "{}",
        text.path, toks.size(), text.samples, text.len, need);
  return toks;
}

int64_t run_calibration(const Model& m, const CalibrationText& text, ActivationObserver* obs,
                        const std::string& phase, const CalibrationProgress& progress) {
  const std::vector<int32_t> toks = calibration_tokens(m, text);
  const int64_t need = int64_t(text.samples) * text.len;
  BackendOptions bo;
  bo.ctx = text.len;
  bo.cpu.n_threads = text.n_threads;
  bo.cpu.observer = obs;
  auto backend = make_cpu_backend(m.weights, bo);
  std::vector<float> logits(static_cast<size_t>(m.weights->cfg.vocab));
  for (int s = 0; s < text.samples; ++s) {
    backend->rewind(0);
    backend->forward(&toks[size_t(s) * size_t(text.len)], text.len, logits.data(), false);
    if (progress) progress(s + 1, text.samples, phase.c_str());
  }
  return need;
}

}  // namespace lr::compress
