// The public API and the bounds that keep any template from running away:
// nesting, recursion, loop steps, output size, value depth.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "../error_of.h"
#include "core/error.h"
#include "jinja2_case.h"
#include "template/template.h"

namespace {

using lr::jinja::RenderOptions;
using lr::jinja::Template;
using lr::test::error_of;
using nlohmann::ordered_json;

std::string render(const std::string& source, const ordered_json& ctx = ordered_json::object(),
                   const RenderOptions& options = {}) {
  return Template(source).render(ctx, options);
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int k = 0; k < n; ++k) out += s;
  return out;
}

TEST(TemplateApi, RendersTheContextInOrder) {
  const ordered_json ctx = ordered_json::parse(R"({"z": 1, "a": {"y": 2, "b": 3}})");
  EXPECT_EQ(render("{{ a|tojson }} {% for k in a %}{{ k }}{% endfor %} {{ z }}", ctx),
            "{\"y\": 2, \"b\": 3} yb 1");
}

TEST(TemplateApi, TemplateIsReusableAndMovable) {
  Template t("{{ x * 2 }}");
  EXPECT_EQ(t.render({{"x", 2}}), "4");
  EXPECT_EQ(t.render({{"x", 3}}), "6");
  Template moved = std::move(t);
  EXPECT_EQ(moved.render({{"x", 5}}), "10");
}

TEST(TemplateApi, RendersConcurrently) {
  const Template t(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m|length %}"
      "{% endfor %}{{ ns.n }}");
  const ordered_json ctx = {{"messages", {"ab", "cde", "f"}}};
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < got.size(); ++k)
    threads.emplace_back([&, k] {
      for (int r = 0; r < 200; ++r) got[k] = t.render(ctx);
    });
  for (std::thread& th : threads) th.join();
  for (const std::string& g : got) EXPECT_EQ(g, "6");
}

TEST(TemplateApi, StrftimeNowUsesTheGivenTime) {
  RenderOptions o;
  o.now = lr::jinja::test::fixed_now();  // 2026-12-05 12:00
  EXPECT_EQ(render("{{ strftime_now('%d %B %Y') }}", ordered_json::object(), o),
            "05 December 2026");
  // Without a time: today's.
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
}

TEST(TemplateApi, ContextMustBeAnObject) {
  LR_EXPECT_ERROR_HAS(error_of([] { render("x", ordered_json::array()); }),
                      "context must be a JSON object");
}

TEST(TemplateApi, InvalidUtf8PassesThrough) {
  const std::string bad = "a\xff\xfe b\xc3";
  EXPECT_EQ(render(bad), bad);
  EXPECT_EQ(render("{{ s }}|{{ s|length }}", {{"s", "\xc3\xa9"}}), "\xc3\xa9|1");
}

TEST(TemplateLimits, DeepNestingIsRefusedWhenParsed) {
  LR_EXPECT_ERROR_HAS(
      error_of([] { Template("{{ " + repeat("(", 500) + "1" + repeat(")", 500) + " }}"); }),
      "nested more than");
  LR_EXPECT_ERROR_HAS(error_of([] { Template(repeat("{% if true %}", 300)); }), "nested more than");
  LR_EXPECT_ERROR_HAS(error_of([] { Template("{{ " + repeat("-", 5000) + "1 }}"); }),
                      "nested more than");
  LR_EXPECT_ERROR_HAS(
      error_of([] { Template("{{ " + repeat("[", 400) + repeat("]", 400) + " }}"); }),
      "nested more than");
}

TEST(TemplateLimits, InfiniteRecursionFails) {
  LR_EXPECT_ERROR_HAS(
      error_of([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); }),
      "recursion deeper than");
}

TEST(TemplateLimits, StepsAreBounded) {
  RenderOptions o;
  o.max_steps = 100'000;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        render(
                            "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}"
                            "{% endfor %}",
                            ordered_json::object(), o);
                      }),
                      "more than the limit of 100000 steps");
  LR_EXPECT_ERROR_HAS(error_of([] { render("{% for i in range(10**12) %}{% endfor %}"); }),
                      "more than the limit of");
}

TEST(TemplateLimits, OutputIsBounded) {
  RenderOptions o;
  o.max_output_bytes = 1 << 20;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        render("{% for i in range(1000) %}{{ 'x' * 10000 }}{% endfor %}",
                               ordered_json::object(), o);
                      }),
                      "longer than the limit of 1048576 bytes");
  LR_EXPECT_ERROR_HAS(error_of([] { render("{{ 'ab' * 10**12 }}"); }), "longer than the limit");
  LR_EXPECT_ERROR_HAS(error_of([] {
                        render(
                            "{% set ns = namespace(s='x') %}{% for i in range(100) %}"
                            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
                      }),
                      "longer than the limit");
  LR_EXPECT_ERROR_HAS(error_of([] { render("{{ [0] * 10**12 }}"); }), "more than the limit of");
}

TEST(TemplateLimits, ValueDepthIsBounded) {
  LR_EXPECT_ERROR_HAS(error_of([] {
                        render(
                            "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                            "{% set ns.l = [ns.l] %}{% endfor %}");
                      }),
                      "nested more than");
  // A namespace holding itself: printing it fails (no crash, no leak).
  LR_EXPECT_ERROR_HAS(
      error_of([] { render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"); }),
      "nested more than");
  ordered_json deep = 1;
  for (int k = 0; k < 300; ++k) deep = ordered_json::array({deep});
  LR_EXPECT_ERROR_HAS(error_of([&] { render("{{ x }}", {{"x", deep}}); }), "nested more than");
}

TEST(TemplateLimits, IntegerOverflowFails) {
  LR_EXPECT_ERROR_HAS(error_of([] { render("{{ 2 ** 64 }}"); }), "integer overflow");
  LR_EXPECT_ERROR_HAS(error_of([] { render("{{ 9223372036854775807 + 1 }}"); }),
                      "integer overflow");
  LR_EXPECT_ERROR_HAS(error_of([] { Template("{{ 99999999999999999999 }}"); }), "too large");
}

}  // namespace
