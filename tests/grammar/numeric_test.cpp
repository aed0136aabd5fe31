// minimum / maximum / exclusiveMinimum / exclusiveMaximum: the grammar of a
// bounded integer or number against exact arithmetic, for every combination
// of bounds from a list (integral and fractional, negative, zero, multi-digit)
// over texts around them. schema_test.cpp checks a few schemas against
// jsonschema itself.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace lr::grammar {
namespace {

constexpr int64_t kScale = 10000;  // values in units of 1e-4: exact for every text and bound here

// A JSON number text without exponent -> value * kScale (at most 4 fraction digits).
int64_t scaled(const std::string& t) {
  bool neg = t[0] == '-';
  size_t dot = t.find('.');
  std::string ip = t.substr(neg, dot == std::string::npos ? std::string::npos : dot - neg);
  std::string fp = dot == std::string::npos ? "" : t.substr(dot + 1);
  fp.resize(4, '0');
  int64_t v = std::stoll(ip) * kScale + std::stoll(fp);
  return neg ? -v : v;
}

struct Bound {
  const char* key;
  std::string text;  // a JSON number
};

bool sentence(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

bool in_bounds(int64_t v, const std::vector<Bound>& bounds) {
  for (const auto& b : bounds) {
    int64_t x = scaled(b.text);
    std::string k = b.key;
    if ((k == "minimum" && v < x) || (k == "exclusiveMinimum" && v <= x) ||
        (k == "maximum" && v > x) || (k == "exclusiveMaximum" && v >= x))
      return false;
  }
  return true;
}

std::vector<std::string> number_texts() {
  std::vector<std::string> out;
  std::vector<int> ints;
  for (int i = 0; i <= 12; ++i) ints.push_back(i);
  for (int i : {19, 20, 21, 99, 100, 101, 999, 1000, 1001, 1999, 2000, 2001, 12345})
    ints.push_back(i);
  for (int i : ints)
    for (const char* f : {"", ".0", ".00", ".5", ".50", ".05", ".25", ".26", ".24", ".99", ".999",
                          ".001", ".0001", ".9999"})
      for (const char* sign : {"", "-"}) out.push_back(sign + std::to_string(i) + f);
  return out;
}

std::vector<std::string> integer_texts() {
  std::vector<std::string> out{"-0"};
  for (int i = -25; i <= 25; ++i) out.push_back(std::to_string(i));
  for (int i :
       {99, 100, 101, 109, 110, 111, 199, 200, 999, 1000, 1001, 1999, 2000, 2001, 12345, 100000})
    for (int s : {1, -1}) out.push_back(std::to_string(s * i));
  return out;
}

std::vector<std::vector<Bound>> bound_sets(const std::vector<std::string>& values) {
  std::vector<std::vector<Bound>> out;
  std::vector<std::optional<Bound>> lows{std::nullopt}, highs{std::nullopt};
  for (const auto& v : values) {
    lows.push_back(Bound{"minimum", v});
    lows.push_back(Bound{"exclusiveMinimum", v});
    highs.push_back(Bound{"maximum", v});
    highs.push_back(Bound{"exclusiveMaximum", v});
  }
  for (const auto& lo : lows)
    for (const auto& hi : highs) {
      std::vector<Bound> set;
      if (lo) set.push_back(*lo);
      if (hi) set.push_back(*hi);
      if (!set.empty()) out.push_back(set);
    }
  return out;
}

void check(const std::string& type, const std::vector<std::string>& values,
           const std::vector<std::string>& texts) {
  size_t accepted = 0, rejected = 0;
  for (const auto& bounds : bound_sets(values)) {
    std::string schema = R"({"type": ")" + type + "\"";
    for (const auto& b : bounds) schema += fmt::format(R"(, "{}": {})", b.key, b.text);
    schema += "}";
    // Empty exactly when no multiple of 1e-4 (integer: of 1) is in it; the
    // bounds here are 1e-4 apart or equal, so that is also the real answer.
    int64_t lo = INT64_MIN / 2, hi = INT64_MAX / 2;
    for (const auto& b : bounds) {
      std::string k = b.key;
      if (k.find("inimum") != std::string::npos)
        lo = scaled(b.text) + (k[0] == 'e');
      else
        hi = scaled(b.text) - (k[0] == 'e');
    }
    auto floor_div = [](int64_t a, int64_t d) { return a >= 0 ? a / d : -((-a + d - 1) / d); };
    bool empty = type == "integer" ? -floor_div(-lo, kScale) > floor_div(hi, kScale) : lo > hi;
    std::string gbnf;
    try {
      gbnf = schema_to_gbnf(std::string_view(schema));
    } catch (const Error& e) {
      EXPECT_TRUE(empty) << schema << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("unsatisfiable schema"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bounds[0].key), std::string::npos) << e.what();
      continue;
    }
    EXPECT_FALSE(empty) << schema << "\n" << gbnf;
    auto g = Grammar::parse_shared(gbnf);
    for (const auto& t : texts) {
      bool want = in_bounds(scaled(t), bounds);
      EXPECT_EQ(sentence(g, t), want) << schema << ": " << t << "\n" << gbnf;
      ++(want ? accepted : rejected);
      if (::testing::Test::HasFailure()) return;  // one grammar's failure is enough to read
    }
  }
  EXPECT_GT(accepted, 3000u);  // the texts reach both sides of the bounds
  EXPECT_GT(rejected, 3000u);
}

TEST(NumericBounds, IntegerMatchesArithmetic) {
  check("integer", {"-101", "-3", "-1.5", "0", "0.5", "1", "7", "10", "99.99", "100", "2000"},
        integer_texts());
}

TEST(NumericBounds, NumberMatchesArithmetic) {
  check("number", {"-100", "-1.5", "-1", "0", "0.25", "0.5", "1", "10", "99.99", "100", "1000.001"},
        number_texts());
}

TEST(NumericBounds, NoExponentOrSign) {
  auto g = Grammar::parse_shared(
      schema_to_gbnf(std::string_view(R"({"type": "number", "minimum": 0})")));
  EXPECT_TRUE(sentence(g, "12345678901234567890.5"));
  EXPECT_FALSE(sentence(g, "1e5"));
  EXPECT_FALSE(sentence(g, "+1"));
  EXPECT_FALSE(sentence(g, "01"));
  EXPECT_FALSE(sentence(g, "1."));
  EXPECT_TRUE(sentence(g, "-0.000"));
}

TEST(NumericBounds, HugeAndTinyBounds) {
  // 1e300 as a double is an integer of 301 digits; 1e-300 a fraction of 300.
  auto g = Grammar::parse_shared(schema_to_gbnf(
      std::string_view(R"({"type": "number", "exclusiveMinimum": 1e-300, "maximum": 1e300})")));
  EXPECT_TRUE(sentence(g, "1" + std::string(300, '0')));
  EXPECT_FALSE(sentence(g, "1" + std::string(300, '0') + ".1"));
  EXPECT_TRUE(sentence(g, "0." + std::string(299, '0') + "11"));
  EXPECT_FALSE(sentence(g, "0." + std::string(299, '0') + "1"));  // 1e-300 itself
  EXPECT_FALSE(sentence(g, "0." + std::string(300, '0') + "1"));
  EXPECT_FALSE(sentence(g, "0"));
  auto gi = Grammar::parse_shared(
      schema_to_gbnf(std::string_view(R"({"type": "integer", "minimum": 18446744073709551615})")));
  EXPECT_TRUE(sentence(gi, "18446744073709551615"));
  EXPECT_TRUE(sentence(gi, "100000000000000000000000"));
  EXPECT_FALSE(sentence(gi, "18446744073709551614"));
  EXPECT_THROW(schema_to_gbnf(std::string_view(R"({"type": "number", "maximum": 1e400})")), Error);
}

TEST(NumericBounds, EnumAndConstAreFiltered) {
  auto g = Grammar::parse_shared(schema_to_gbnf(
      std::string_view(R"({"enum": [1, 5, 10, "x"], "minimum": 2, "exclusiveMaximum": 10})")));
  EXPECT_FALSE(sentence(g, "1"));
  EXPECT_TRUE(sentence(g, "5"));
  EXPECT_FALSE(sentence(g, "10"));
  EXPECT_TRUE(sentence(g, "\"x\""));
  try {
    schema_to_gbnf(std::string_view(R"({"const": 3, "maximum": 2})"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsatisfiable"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lr::grammar
