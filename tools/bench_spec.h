// lowrank bench --spec (tools/cmd_bench_spec.cpp): speculative decoding
// against plain decoding on sets of prompts.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace lr::cli {

struct SpecPrompt {
  std::string name, text;
};
// A prompt set: each prompt begins with a line "@@@ NAME" and runs to the
// next (its last line breaks dropped); lines before the first are comments.
// Throws lr::Error naming the file (and line) for no prompts, an empty or
// unnamed one, or a name given twice.
std::vector<SpecPrompt> parse_prompt_set(const std::string& path);

struct SpecBenchOptions {
  ModelOptions model;                     // the target
  DraftOptions draft;                     // --draft-model, --draft-max, ...
  std::vector<std::string> variants;      // none (plain decoding, the baseline), ngram, model, self
  std::vector<std::string> prompt_files;  // the sets
  int gen = 128;                          // tokens per answer at most
  int rounds = 1;
};
// Prints the table; 1 when the drafting variants' texts differ (or a
// variant's from round to round), else 0.
int run_spec_bench(const SpecBenchOptions& o);

}  // namespace lr::cli
