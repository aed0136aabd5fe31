// The real-world chat templates in tests/fixtures/templates/ rendered by this
// engine and compared byte for byte with Python jinja2's renders
// (golden.json, written by scripts/make_template_fixtures.py with jinja2
// set up exactly as transformers sets it up).
//
// A template passes when every case matches: the same output, or an error
// where jinja2 raised one (raise_exception's message included). A template
// the engine cannot render must be refused (an lr::Error naming what it
// lacks) and be listed in kRefused; rendering anything different fails.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "core/error.h"
#include "jinja2_case.h"
#include "template/template.h"

namespace {

using nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kDir = std::string(LOWRANK_SOURCE_DIR) + "/tests/fixtures/templates/";

// Templates the engine refuses, with what its error says (none at present:
// every template renders as jinja2 does).
const std::map<std::string, std::string> kRefused = {};

// How many templates render byte-identical to jinja2 (a regression lowers it).
constexpr int kExpectedPassing = 72;

enum class Outcome { Pass, Refused, Mismatch };

struct Result {
  Outcome outcome = Outcome::Pass;
  std::string detail;  // the refusal's message, or what differed
};

Result check_template(const std::string& name, const std::vector<const ordered_json*>& cases) {
  const std::string source = read_file(kDir + name);
  std::optional<lr::jinja::Template> tpl;
  std::string parse_error;
  try {
    tpl.emplace(source);
  } catch (const lr::Error& e) {
    parse_error = e.what();
  }
  lr::jinja::RenderOptions options;
  options.now = lr::jinja::test::fixed_now();  // as make_template_fixtures.py fixes strftime_now()
  Result result;
  for (const ordered_json* c : cases) {
    const std::string case_name = (*c)["case"].get<std::string>();
    const bool want_error = c->contains("error");
    std::optional<std::string> got;
    std::string error = parse_error;
    if (tpl) {
      try {
        got = tpl->render((*c)["context"], options);
      } catch (const lr::Error& e) {
        error = e.what();
      }
    }
    if (want_error) {
      const std::string type = (*c)["error_type"].get<std::string>();
      const std::string msg = (*c)["error"].get<std::string>();
      if (got) {
        return {Outcome::Mismatch,
                case_name + ": jinja2 raised " + type + " (" + msg + ") but the engine rendered"};
      }
      if (type == "TemplateError" &&
          error.find("chat template raised: " + msg) == std::string::npos) {
        return {Outcome::Mismatch,
                case_name + ": jinja2 raised '" + msg + "', the engine: " + error};
      }
      continue;
    }
    if (!got) {
      if (result.outcome == Outcome::Pass) result = {Outcome::Refused, case_name + ": " + error};
      continue;
    }
    const std::string want = (*c)["output"].get<std::string>();
    if (*got != want) {
      size_t at = 0;
      while (at < want.size() && at < got->size() && want[at] == (*got)[at]) ++at;
      const size_t from = at > 60 ? at - 60 : 0;
      return {Outcome::Mismatch, case_name + ": differs at byte " + std::to_string(at) +
                                     "\n  want: " + ordered_json(want.substr(from, 160)).dump() +
                                     "\n  got:  " + ordered_json(got->substr(from, 160)).dump()};
    }
  }
  return result;
}

TEST(TemplateGolden, RealTemplatesMatchJinja2) {
  const ordered_json golden = ordered_json::parse(read_file(kDir + "golden.json"));
  std::map<std::string, std::vector<const ordered_json*>> by_template;
  for (const ordered_json& entry : golden)
    by_template[entry["template"].get<std::string>()].push_back(&entry);
  ASSERT_GE(by_template.size(), 70u);

  int passing = 0;
  std::map<std::string, std::string> refused;
  for (const auto& [name, cases] : by_template) {
    const Result r = check_template(name, cases);
    switch (r.outcome) {
      case Outcome::Pass:
        ++passing;
        break;
      case Outcome::Refused:
        refused[name] = r.detail;
        break;
      case Outcome::Mismatch:
        ADD_FAILURE() << name << " renders differently from jinja2: " << r.detail;
    }
  }
  std::printf("[ golden   ] %d of %zu templates render byte-identical to jinja2\n", passing,
              by_template.size());
  for (const auto& [name, detail] : refused)
    std::printf("[ refused  ] %s: %s\n", name.c_str(), detail.c_str());

  for (const auto& [name, detail] : refused) {
    auto it = kRefused.find(name);
    if (it == kRefused.end()) {
      ADD_FAILURE() << name << " is refused but not listed in kRefused: " << detail;
    } else {
      EXPECT_NE(detail.find(it->second), std::string::npos) << name << ": " << detail;
    }
  }
  for (const auto& [name, substring] : kRefused)
    EXPECT_TRUE(refused.count(name)) << name << " is listed in kRefused but no longer refused";
  EXPECT_EQ(passing, kExpectedPassing);
  EXPECT_GE(passing * 10, static_cast<int>(by_template.size()) * 9) << "below 90% byte-identical";
}

}  // namespace
