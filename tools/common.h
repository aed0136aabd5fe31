// Pieces shared by the lowrank subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "runtime/model.h"

namespace lr::cli {

struct ModelOptions {
  std::string model;       // -m; empty: the default model
  int threads = 0;         // -t; 0: all cores
  int ctx = 2048;          // -c
  bool reference = false;  // --ref: the scalar f32 reference path
  std::string wtype = "f16";  // --wtype: fast path weight type
  std::string kv = "dense";       // --kv: decode KV mode
  std::string unit = "per-token"; // --unit: decode execution unit
  bool no_pack = false, no_fuse = false;

  void add_to(CLI::App& app, int default_ctx);
  std::string model_path() const;
  ExecPath path() const { return reference ? ExecPath::Reference : ExecPath::Fast; }
  BackendOptions backend_options() const;
  DType weight_type() const { return reference ? DType::F32 : parse_weight_type(wtype); }
};

// Each subcommand registers itself and returns the function that runs it.
using Runner = std::function<int()>;
Runner add_run_command(CLI::App& app);
Runner add_perplexity_command(CLI::App& app);
Runner add_inspect_command(CLI::App& app);
Runner add_compress_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_import_command(CLI::App& app);

}  // namespace lr::cli
