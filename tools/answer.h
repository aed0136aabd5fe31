// An answer streamed to the terminal, for run and chat: a request of the
// one-slot engine (runtime/engine.h) whose text is written as it comes.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "runtime/engine.h"

namespace lr::cli {

struct Answer {
  std::string text;
  Finish finish = Finish::None;
  Usage usage;
};

// Submits `prompt` and writes the answer's text to `out` (null: nowhere; the
// text is in the Answer either way) until it ends. When
// *interrupt turns true the request is cancelled (its text so far is kept).
// Throws lr::Error when the engine's step failed.
Answer stream_answer(Engine& engine, std::vector<int32_t> prompt, const GenParams& p, FILE* out,
                     const std::atomic<bool>* interrupt = nullptr);

// "[cpu path, 2 threads] prompt: 12 tokens in 0.041 s (292.7 tok/s) | generated: ..." to `f`.
void print_answer_stats(FILE* f, const std::string& where, const Answer& a);

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, -s/--seed.
void add_sampling_options(CLI::App& sub, SamplerParams& p);
// The seed: --seed when given, else a random one.
void seed_unless_given(const CLI::App& sub, SamplerParams& p);

// --grammar GBNF, --grammar-file FILE, --json-schema SCHEMA (llama.cpp's CLI
// flags): the answer is a sentence of the grammar (runtime/sequence.h).
struct ConstraintOptions {
  std::string grammar, grammar_file, json_schema;
  void add_to(CLI::App& sub);
  // The grammar asked for, or null; throws lr::Error naming the flag and the problem.
  std::shared_ptr<const grammar::Grammar> compile() const;
};

}  // namespace lr::cli
