// A template, its context, and what jinja2 renders (or the error the engine
// must raise): the unit tests' table row and its runner.
#pragma once

#include <gtest/gtest.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "template/template.h"

namespace lr::jinja::test {

struct Case {
  const char* name;
  const char* source;
  const char* context;  // JSON
  const char* want;     // jinja2's render; null where jinja2 raised
  const char* error;    // a substring of the lr::Error the engine raises, or null
};

// 2026-12-05 12:00 local time, as the goldens fix strftime_now().
inline std::time_t fixed_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 11;
  tm.tm_mday = 5;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

inline void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  RenderOptions options;
  options.now = fixed_now();
  std::string got, error;
  bool raised = false;
  try {
    got = Template(c.source).render(nlohmann::ordered_json::parse(c.context), options);
  } catch (const lr::Error& e) {
    raised = true;
    error = e.what();
  }
  if (c.error) {
    EXPECT_TRUE(raised) << "rendered: " << got;
    EXPECT_NE(error.find(c.error), std::string::npos) << error;
  } else {
    EXPECT_FALSE(raised) << error;
    ASSERT_NE(c.want, nullptr);
    EXPECT_EQ(got, c.want);
  }
}

template <size_t N>
void run_cases(const Case (&cases)[N]) {
  for (const Case& c : cases) run_case(c);
}

}  // namespace lr::jinja::test
