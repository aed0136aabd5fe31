// --draft, --draft-model, --draft-self-type, --draft-max, --draft-p-min:
// where speculative decoding's drafts come from (run, chat, serve).
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "compress/quantize_model.h"
#include "core/error.h"
#include "core/system_memory.h"
#include "model/load.h"

namespace lr::cli {

DType parse_quant_type(const std::string& name, const char* flag);  // cmd_quantize.cpp

void DraftOptions::add_to(CLI::App& app, bool with_kind) {
  if (with_kind)
    app.add_option("--draft", kind,
                   "speculative decoding: none; ngram (drafts from the text's own repeats, prompt "
                   "lookup); self (the model requantized to --draft-self-type, made once into "
                   "the model cache). The output is plain decoding's (docs/server.md)")
        ->capture_default_str()
        ->check(CLI::IsMember({"none", "ngram", "self"}));
  app.add_option("--draft-model", model,
                 "speculative decoding: a smaller GGUF model with the same vocabulary drafts (e.g. "
                 "Qwen2.5-Coder-0.5B for the 1.5B)");
  app.add_option("--draft-self-type", self_type,
                 "--draft self: the block format of its layers and head (lowrank quantize --type)")
      ->capture_default_str();
  app.add_option("--draft-max", max,
                 "tokens drafted per step at most (fewer where drafts are rejected or cost more "
                 "than they give)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--draft-p-min", p_min,
                 "a draft model's drafting stops at a token whose probability under it is below "
                 "this")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--draft-cost", cost,
                 "a drafted token's cost in decode steps, for how many to draft (default: timed "
                 "as the engine runs; a fixed cost drafts the same tokens every run)")
      ->check(CLI::Range(0.0, 100.0));
}

namespace {

// A draft model and the drafter over its slots, kept together.
class OwnedDrafter final : public Drafter {
 public:
  OwnedDrafter(Model m, std::unique_ptr<Drafter> d) : m_(std::move(m)), d_(std::move(d)) {}
  void draft(const std::vector<Ask>& asks, std::vector<Draft>& out) override {
    d_->draft(asks, out);
  }
  double token_seconds() const override { return d_->token_seconds(); }

 private:
  Model m_;
  std::unique_ptr<Drafter> d_;
};

// --draft self: the target requantized by lowrank's quantizer, every
// per-layer map and the head in `type` (a row no block of it fits: in
// llama.cpp's substitute), written once into the model cache under a name
// of the target's file, size and time, and type.
std::string self_draft(const std::string& target, const std::string& type, int threads) {
  namespace fs = std::filesystem;
  const DType t = parse_quant_type(type, "--draft-self-type");
  std::error_code ec;
  const auto size = fs::file_size(target, ec);
  if (ec || !fs::is_regular_file(target))
    fail("--draft self: {} is not a GGUF file (a self-draft is made from one)", target);
  const auto when = fs::last_write_time(target).time_since_epoch().count();
  const fs::path dir = fs::path(model_cache_dir()) / "drafts";
  const fs::path out = dir / fmt::format("{}.{}.{:x}-{:x}.gguf", fs::path(target).stem().string(),
                                         dtype_name(t), uint64_t(size), uint64_t(when));
  if (fs::exists(out, ec)) return out.string();
  fs::create_directories(dir, ec);
  if (ec) fail("--draft self: cannot create {} ({})", dir.string(), ec.message());
  std::fprintf(stderr, "lowrank: --draft self: writing %s (%s; once)\n", out.c_str(),
               std::string(dtype_name(t)).c_str());
  QuantizeOptions qo;
  qo.kinds.push_back("output");
  qo.fallback = true;
  qo.n_threads = threads;
  const fs::path part = out.string() + ".part";
  try {
    quantize_model(target, {{t, part.string()}}, qo);
  } catch (const Error& e) {
    fail("--draft self: {}", e.what());
  }
  fs::rename(part, out, ec);
  if (ec) fail("--draft self: cannot write {} ({})", out.string(), ec.message());
  return out.string();
}

}  // namespace

void DraftOptions::configure(EngineOptions& eo, const Model& target, const ModelOptions& mo,
                             int slots, int step_tokens) const {
  eo.draft_max = draft_max();
  eo.draft_cost = cost;
  if (kind == "ngram" && !model.empty())
    fail("--draft ngram and --draft-model: choose one source of drafts");
  if (kind == "self" && !model.empty())
    fail("--draft self and --draft-model: choose one source of drafts");
  const std::string path =
      kind == "self" ? self_draft(mo.model_path(), self_type, mo.backend_options().cpu.n_threads)
                     : model;
  if (path.empty()) return;
  // Refused before loading where the draft's file does not fit in what the
  // host has left beside the target.
  std::error_code ec;
  const uint64_t bytes = uint64_t(std::filesystem::file_size(path, ec));
  if (ec) fail("--draft-model {}: cannot read it ({})", path, ec.message());
  if (const uint64_t avail = available_memory_bytes(); avail > 0 && bytes > avail)
    fail("--draft-model {}: {:.1f} MiB does not fit in the {:.1f} MiB available beside the model",
         path, double(bytes) / (1 << 20), double(avail) / (1 << 20));
  Model d = load_model(path, mo.weight_type());
  const Tokenizer &a = *target.tokenizer, &b = *d.tokenizer;
  if (a.n_vocab() != b.n_vocab())
    fail("--draft-model {}: its vocabulary has {} tokens, the model's ({}) {}", path, b.n_vocab(),
         mo.model_path(), a.n_vocab());
  for (int32_t id = 0; id < a.n_vocab(); ++id)
    if (a.token_text(id) != b.token_text(id))
      fail("--draft-model {}: token {} is '{}', in the model ({}) '{}': not the same vocabulary",
           path, id, b.token_text(id), mo.model_path(), a.token_text(id));
  std::unique_ptr<BatchBackend> slots_of_draft =
      make_slots(d, mo.path(), mo.backend_options(), slots, step_tokens);
  eo.drafter = std::make_shared<OwnedDrafter>(std::move(d),
                                              model_drafter(std::move(slots_of_draft), {p_min}));
}

}  // namespace lr::cli
