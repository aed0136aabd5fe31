// lowrank import: a checkpoint of a published SVD-compression method
// (SVD-LLM, ASVD, Dobi-SVD, Basis Sharing) -> lowrank's low-rank GGUF.
#include <cstdio>
#include <map>

#include "common.h"
#include "core/error.h"
#include "model/load.h"
#include "import/import_model.h"

namespace lr::cli {

namespace {

struct ImportCli {
  std::string in, out, from = "auto", base, factor_type = "f16";
};

int run(const ImportCli& o) {
  ImportOptions opt;
  opt.from = o.from;
  opt.base = o.base.empty() ? default_model_path() : o.base;
  opt.factor_type = parse_factor_type(o.factor_type);
  ImportReport r = import_checkpoint(o.in, o.out, opt);
  std::printf("%s: family %s%s%s\n", o.in.c_str(), r.family.c_str(), r.detected_by.empty() ? "" : " (detected by ",
              r.detected_by.empty() ? "" : (r.detected_by + ")").c_str());
  // Ranks per matrix kind: the distinct values over the layers.
  std::map<std::string, std::map<int64_t, int>> ranks;
  int low = 0, dense = 0, shared = 0;
  for (const MatrixReport& m : r.matrices) {
    const std::string kind = m.name.substr(m.name.find('.', 4) + 1);
    ++ranks[kind][m.rank];
    m.rank ? ++low : ++dense;
    shared += m.shared;
  }
  std::printf("  %d low-rank matrices, %d dense, %d reading a shared basis\n", low, dense, shared);
  for (const auto& [kind, rs] : ranks) {
    std::printf("  %-12s", kind.c_str());
    for (const auto& [rank, n] : rs) std::printf(" rank %lld x%d", (long long)rank, n);
    std::printf("\n");
  }
  for (const MatrixReport& m : r.matrices)
    if (!m.note.empty()) std::printf("  %s: %s\n", m.name.c_str(), m.note.c_str());
  if (!r.from_base.empty()) {
    std::printf("  from --base %s:", opt.base.c_str());
    for (const std::string& n : r.from_base) std::printf(" %s", n.c_str());
    std::printf("\n");
  }
  std::printf("  parameters %.2f M -> %.2f M (%.1f%% kept), written to %s\n", double(r.params_before) / 1e6,
              double(r.params_after) / 1e6, 100.0 * double(r.params_after) / double(r.params_before), o.out.c_str());
  return 0;
}

}  // namespace

Runner add_import_command(CLI::App& app) {
  auto o = std::make_shared<ImportCli>();
  CLI::App* sub = app.add_subcommand("import", "checkpoint of SVD-LLM, ASVD, Dobi-SVD or Basis Sharing -> low-rank GGUF");
  sub->add_option("checkpoint", o->in, "a .pt/.bin/.safetensors file or a directory of shards")->required();
  sub->add_option("-o,--output", o->out, "output GGUF file")->required();
  sub->add_option("--from", o->from, "auto, svdllm, asvd, dobi, basis-sharing or palu")->capture_default_str();
  sub->add_option("--base", o->base, "the dense GGUF model it was compressed from (default: the default model)");
  sub->add_option("--factor-type", o->factor_type, "storage of the factors: f16, bf16, f32, q8_0, q6_k, q5_k, q4_k (a row the type's block does not divide: q8_0, else f16)")->capture_default_str();
  return [o] { return run(*o); };
}

}  // namespace lr::cli
