// lowrank bench --spec: speculative decoding against plain decoding on sets
// of prompts (bench/prompts/spec-code.txt; scripts/spec-prose.py writes the
// prose set from wiki.eval.raw). In each round every prompt is answered,
// greedily, by every variant in turn: plain decoding (the one-slot session,
// as `run --draft none`), prompt lookup (ngram), a draft model (model:
// --draft-model) and the self-draft (self). Per set and variant: decode
// tok/s (the tokens after each answer's first over the seconds from its first
// to its last, summed over the set; the median of the rounds), drafted and
// taken tokens, tokens per step. The drafting variants run on the CPU batch
// and must give one text; plain decoding's is compared with it and the
// prompts where it parts are named (docs/results/speculative.md: at 2
// threads the session can round a near-tie otherwise).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "answer.h"
#include "bench_spec.h"
#include "core/error.h"
#include "runtime/chat.h"

namespace lr::cli {

std::vector<SpecPrompt> parse_prompt_set(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("--prompts {}: cannot open the file", path);
  std::vector<SpecPrompt> out;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.rfind("@@@ ", 0) == 0) {
      std::string name = line.substr(4);
      if (name.empty()) fail("--prompts {}:{}: a prompt header '@@@ ' needs a name", path, line_no);
      for (const SpecPrompt& p : out)
        if (p.name == name)
          fail("--prompts {}:{}: a second prompt named '{}'", path, line_no, name);
      out.push_back({std::move(name), ""});
    } else if (!out.empty()) {
      out.back().text += line + "\n";
    }
  }
  if (out.empty())
    fail(
        "--prompts {}: no prompts (each begins with a line '@@@ NAME'; lines before the first "
        "are comments)",
        path);
  for (SpecPrompt& p : out) {
    while (!p.text.empty() && (p.text.back() == '\n' || p.text.back() == '\r')) p.text.pop_back();
    if (p.text.find_first_not_of(" \t\r\n") == std::string::npos)
      fail("--prompts {}: prompt '{}' is empty", path, p.name);
  }
  return out;
}

namespace {

constexpr int kStepTokens = 512;  // as run's

struct Variant {
  std::string name;  // none, ngram, model, self
  std::unique_ptr<Engine> engine;
};

struct Tally {  // a set's answers by one variant in one round
  int tokens = 0, decodes = 0, drafted = 0, taken = 0, steps = 0;
  double decode_s = 0;
};

std::vector<Variant> make_variants(const SpecBenchOptions& o, const Model& m) {
  std::vector<Variant> out;
  for (const std::string& name : o.variants) {
    if (name != "none" && name != "ngram" && name != "model" && name != "self")
      fail("--spec: unknown variant '{}' (none, ngram, model, self)", name);
    if (name == "model" && o.draft.model.empty())
      fail("--spec model: give the draft model with --draft-model FILE");
    DraftOptions d = o.draft;
    d.kind = name == "ngram" || name == "self" ? name : "none";
    if (name != "model") d.model.clear();
    EngineOptions eo;
    d.configure(eo, m, o.model, 1, kStepTokens);
    out.push_back(
        {name, std::make_unique<Engine>(make_slots(m, o.model.path(), o.model.backend_options(), 1,
                                                   kStepTokens, eo.draft_max > 0),
                                        *m.tokenizer, eo)});
  }
  return out;
}

// A set's name in the table: its file's name without folder and extension.
std::string set_name(const std::string& path) {
  std::string n = path.substr(path.find_last_of('/') + 1);
  return n.substr(0, n.rfind('.'));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The index of plain decoding among the variants; -1 when not measured.
int plain_index(const std::vector<Variant>& variants) {
  for (size_t v = 0; v < variants.size(); ++v)
    if (variants[v].name == "none") return int(v);
  return -1;
}

// tallies[set][variant][round]: per set and variant the median round's
// decode tok/s, against plain decoding's, and the last round's counts.
void print_table(const SpecBenchOptions& o, const std::vector<std::vector<SpecPrompt>>& sets,
                 const std::vector<Variant>& variants,
                 const std::vector<std::vector<std::vector<Tally>>>& tallies) {
  const int plain = plain_index(variants);
  std::printf(
      "\n| set | variant | answers | tokens | decode tok/s | vs none | drafted | taken | "
      "tokens per step |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (size_t s = 0; s < sets.size(); ++s) {
    std::vector<double> tps(variants.size());
    for (size_t v = 0; v < variants.size(); ++v) {
      std::vector<double> per_round;
      for (const Tally& a : tallies[s][v])
        per_round.push_back(a.decodes / std::max(a.decode_s, 1e-9));
      tps[v] = median(per_round);
    }
    const double base = plain >= 0 ? tps[size_t(plain)] : 0;
    for (size_t v = 0; v < variants.size(); ++v) {
      const Tally& a = tallies[s][v].back();
      std::printf("| %s | %s | %zu | %d | %.1f | %s | %d | %d (%.0f%%) | %.2f |\n",
                  set_name(o.prompt_files[s]).c_str(), variants[v].name.c_str(), sets[s].size(),
                  a.tokens, tps[v], base > 0 ? fmt::format("{:.2f}x", tps[v] / base).c_str() : "-",
                  a.drafted, a.taken, a.drafted ? 100.0 * a.taken / a.drafted : 0.0,
                  double(a.tokens) / std::max(a.steps, 1));
    }
  }
}

// texts[set][prompt][variant]: prints whether the drafting variants gave
// one text per prompt and where plain decoding parts from it; true when
// the drafting variants differ.
bool check_texts(const std::vector<std::vector<SpecPrompt>>& sets,
                 const std::vector<Variant>& variants,
                 const std::vector<std::vector<std::vector<std::string>>>& texts) {
  const int plain = plain_index(variants);
  int drafting_differ = 0, plain_differ = 0, answers = 0;
  std::vector<std::string> parted;
  for (size_t s = 0; s < sets.size(); ++s)
    for (size_t p = 0; p < sets[s].size(); ++p) {
      ++answers;
      const std::string* ref = nullptr;
      for (size_t v = 0; v < variants.size(); ++v) {
        if (int(v) == plain) continue;
        if (!ref)
          ref = &texts[s][p][v];
        else if (texts[s][p][v] != *ref)
          ++drafting_differ;
      }
      if (ref && plain >= 0 && texts[s][p][size_t(plain)] != *ref)
        ++plain_differ, parted.push_back(sets[s][p].name);
    }
  std::printf(
      "\ntexts: %s; plain decoding %s",
      drafting_differ ? fmt::format("{} drafting answers DIFFER", drafting_differ).c_str()
                      : "the drafting variants gave one text for every prompt",
      plain < 0 ? "not run"
      : plain_differ
          ? fmt::format("parted from it on {} of {} prompts:", plain_differ, answers).c_str()
          : "gave the same texts");
  for (const std::string& n : parted) std::printf(" %s", n.c_str());
  std::printf("\n");
  return drafting_differ > 0;
}

}  // namespace

int run_spec_bench(const SpecBenchOptions& o) {
  if (o.prompt_files.empty())
    fail("--spec: give the prompt sets with --prompts FILE (e.g. bench/prompts/spec-code.txt)");
  std::vector<std::vector<SpecPrompt>> sets;
  for (const std::string& f : o.prompt_files) sets.push_back(parse_prompt_set(f));
  Model m = load_model(o.model.model_path(), o.model.weight_type());
  const Tokenizer& tok = *m.tokenizer;
  const bool chat = !tok.chat_template().empty();
  const ChatTemplate t = chat ? ChatTemplate::of(tok, "") : ChatTemplate{};
  std::vector<Variant> variants = make_variants(o, m);
  std::string names;
  for (const Variant& v : variants) names += (names.empty() ? "" : ", ") + v.name;
  std::printf(
      "lowrank bench --spec: %s, %s; variants %s (none: the one-slot session; drafts: the CPU "
      "batch, --draft-max %d); %d tokens greedy per prompt%s; %d rounds interleaved\n",
      o.model.model_path().c_str(), describe(o.model.path(), o.model.backend_options()).c_str(),
      names.c_str(), o.draft.max, o.gen, chat ? " (chat template)" : " (plain text)", o.rounds);
  if (!o.draft.model.empty()) std::printf("draft model: %s\n", o.draft.model.c_str());

  // tallies[set][variant][round]; texts[set][prompt][variant] of the first round.
  std::vector<std::vector<std::vector<Tally>>> tallies(sets.size());
  std::vector<std::vector<std::vector<std::string>>> texts(sets.size());
  int mismatched = 0;
  for (size_t s = 0; s < sets.size(); ++s) {
    tallies[s].assign(variants.size(), std::vector<Tally>(size_t(o.rounds)));
    texts[s].assign(sets[s].size(), std::vector<std::string>(variants.size()));
  }
  for (int r = 0; r < o.rounds; ++r)
    for (size_t s = 0; s < sets.size(); ++s)
      for (size_t p = 0; p < sets[s].size(); ++p) {
        const PromptTokens pt = chat ? chat_prompt(tok, t, {{"user", sets[s][p].text}})
                                     : text_prompt(tok, sets[s][p].text);
        GenParams g;
        g.sampling.temperature = 0;
        g.max_tokens = o.gen;
        g.stop_tokens = pt.stop;
        for (size_t v = 0; v < variants.size(); ++v) {
          std::fprintf(stderr, "\rbench --spec: round %d, %s, %-8s", r + 1, sets[s][p].name.c_str(),
                       variants[v].name.c_str());
          Answer ans = stream_answer(*variants[v].engine, pt.ids, g, nullptr);
          const Usage& u = ans.usage;
          std::string& text = ans.text;
          Tally& a = tallies[s][v][size_t(r)];
          a.tokens += u.completion_tokens;
          a.decodes += std::max(0, u.completion_tokens - 1);
          a.decode_s += u.decode_s;
          a.drafted += u.drafted;
          a.taken += u.draft_taken;
          a.steps += u.steps;
          if (r == 0)
            texts[s][p][v] = std::move(text);
          else if (text != texts[s][p][v])
            ++mismatched;  // a variant against itself
        }
      }
  std::fprintf(stderr, "\n");

  print_table(o, sets, variants, tallies);
  if (mismatched) std::printf("rounds: %d answers differ from their own first round\n", mismatched);
  return check_texts(sets, variants, texts) || mismatched ? 1 : 0;
}

}  // namespace lr::cli
