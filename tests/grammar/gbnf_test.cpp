// The GBNF parser and the matcher on hand-written grammars.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace lr::grammar {
namespace {

bool matches(const std::string& gbnf, std::string_view text) {
  Matcher m(Grammar::parse_shared(gbnf));
  return m.accept_bytes(text) && m.can_end();
}

TEST(Gbnf, LiteralsAndAlternatives) {
  const std::string g = R"(root ::= "ab" | "c" d
d ::= "d"+)";
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "cd"));
  EXPECT_TRUE(matches(g, "cddd"));
  EXPECT_FALSE(matches(g, "c"));
  EXPECT_FALSE(matches(g, "abd"));
}

}  // namespace
}  // namespace lr::grammar

namespace lr::grammar {
namespace {

std::string parse_error(const std::string& gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Gbnf, ErrorsNameTheProblemAndPlace) {
  EXPECT_EQ(parse_error("root ::= a"), "grammar: undefined rule 'a' at line 1, column 10");
  EXPECT_EQ(parse_error("x ::= \"a\""), "grammar: no rule named 'root' (the root)");
  EXPECT_EQ(parse_error("root ::= (\"a\"\n"),
            "grammar: unbalanced '(': missing ')' at line 1, column 10");
  EXPECT_EQ(parse_error("root ::= \"a\")"), "grammar: unbalanced ')' at line 1, column 13");
  EXPECT_EQ(parse_error("root ::= [a-z"),
            "grammar: unterminated character class (missing ']') at line 1, column 10");
  EXPECT_EQ(parse_error("root ::= \"abc"),
            "grammar: unterminated string literal at line 1, column 10");
  EXPECT_EQ(parse_error("root ::= \"\\q\""), "grammar: bad escape '\\q' at line 1, column 11");
  EXPECT_EQ(parse_error("root ::= \"\\x4\""),
            "grammar: bad escape: expected 2 hex digits at line 1, column 14");
  EXPECT_NE(parse_error("root ::= \"\\U00110000\"").find("beyond U+10FFFF"), std::string::npos);
  EXPECT_EQ(parse_error("root ::= \"a\"{2001}"),
            "grammar: repetition bound too large (limit 2000) at line 1, column 13");
  EXPECT_EQ(parse_error("root ::= \"a\"{3,2}"),
            "grammar: repetition {m,n} has n < m at line 1, column 13");
  EXPECT_EQ(parse_error("root ::= *"), "grammar: '*' has no item to repeat at line 1, column 10");
  EXPECT_EQ(parse_error("root ::= [z-a]"),
            "grammar: character range is reversed at line 1, column 13");
  EXPECT_EQ(parse_error("root ::= \"a\"\nroot ::= \"b\""),
            "grammar: rule 'root' is defined twice at line 2, column 1");
  EXPECT_EQ(parse_error("root ::= <[12]>"),
            "grammar: token references ('<[id]>') are not supported at line 1, column 10");
  EXPECT_EQ(parse_error("root ::= @"), "grammar: unexpected character '@' at line 1, column 10");
  EXPECT_EQ(parse_error("root \"a\""),
            "grammar: expected '::=' after rule name 'root' at line 1, column 6");
  EXPECT_EQ(parse_error("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""),
            "grammar: left recursion: rule 'expr' can reach itself before matching a character at "
            "line 2, column 1");
  EXPECT_NE(parse_error("root ::= a\na ::= \"x\"? root").find("left recursion: rule 'root'"),
            std::string::npos);
  EXPECT_NE(parse_error("root ::= (\"a\"?)*").find("left recursion"), std::string::npos);
  EXPECT_NE(
      parse_error(fmt::format("root ::= {}\"a\"{}", std::string(100, '('), std::string(100, ')')))
          .find("nested too deep (limit 64)"),
      std::string::npos);
}

TEST(Gbnf, Syntax) {
  const std::string g = R"(# a comment
root ::= item{2,3} tail? # trailing
item ::= [a-c] | "\x41" | "\u00e9" | "\U0001F600" | [^\x00-\x7F\u00e9\U0001F600]
tail ::= "!"{1,} ("." | [0-9])*
)";
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "Aé😀"));
  EXPECT_TRUE(matches(g, "abc!!.9"));
  EXPECT_TRUE(matches(g, "aж"));
  EXPECT_FALSE(matches(g, "a"));
  EXPECT_FALSE(matches(g, "abcd"));
  EXPECT_FALSE(matches(g, "ab."));
  EXPECT_TRUE(matches("root ::= . . ", "x\xE2\x82\xAC"));
  EXPECT_TRUE(matches("root ::= \"x\"{,2}", ""));
  EXPECT_FALSE(matches("root ::= \"x\"{,2}", "xxx"));
}

TEST(Matcher, Utf8SplitAcrossCalls) {
  Matcher m(Grammar::parse_shared("root ::= \"\xE2\x82\xAC\" [a]"));  // the euro sign, then 'a'
  EXPECT_TRUE(m.accept_bytes("\xE2"));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_bytes("\xE2"));  // not a continuation byte: refused, state kept
  EXPECT_TRUE(m.accept_bytes("\x82"));
  EXPECT_FALSE(m.accept_bytes("\xAD"));  // completes to U+20AD, not the euro sign
  EXPECT_TRUE(m.accept_bytes("\xAC"));
  EXPECT_TRUE(m.accept_bytes("a"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.dead());
  EXPECT_FALSE(m.accept_bytes("a"));
  Matcher other(Grammar::parse_shared("root ::= [^a]"));
  EXPECT_FALSE(other.accept_bytes("\x80"));      // a continuation byte cannot start a code point
  EXPECT_FALSE(other.accept_bytes("\xC0\x80"));  // overlong
  EXPECT_FALSE(other.accept_bytes("\xED\xA0\x80\xF5"));
  EXPECT_TRUE(other.accept_bytes(""));
}

TEST(Matcher, CopiesAreIndependent) {
  Matcher a(Grammar::parse_shared("root ::= \"x\" (\"y\" | \"z\")"));
  ASSERT_TRUE(a.accept_bytes("x"));
  Matcher b = a;
  EXPECT_TRUE(a.accept_bytes("y"));
  EXPECT_FALSE(a.accept_bytes("z"));
  EXPECT_TRUE(b.accept_bytes("z"));
  EXPECT_TRUE(a.can_end() && b.can_end());
}

TEST(Matcher, NestingDepthLimit) {
  // Each '(' opens a frame that ')' closes: past kMaxStackDepth frames the
  // path ends and the byte is refused, instead of the state growing forever.
  auto g = Grammar::parse_shared("root ::= \"(\" root \")\" | \"x\"");
  Matcher m(g);
  size_t accepted = 0;
  while (accepted < kMaxStackDepth + 10 && m.accept_bytes("(")) ++accepted;
  EXPECT_GT(accepted, kMaxStackDepth / 2);
  EXPECT_LE(accepted, kMaxStackDepth);
  EXPECT_TRUE(m.accept_bytes("x"));
}

TEST(Matcher, PathologicalGrammarsStayBounded) {
  // 1000 nested optional, nullable items: hash-consed stacks merge the paths.
  Matcher m(Grammar::parse_shared("root ::= (\"a\"?){0,1000}"));
  EXPECT_LE(m.stack_count(), 1002u);
  EXPECT_TRUE(m.accept_bytes(std::string(500, 'a')));
  EXPECT_TRUE(m.can_end());
  // Exponentially many derivations (2^8 ways to be empty) expand in linear
  // time; at 2^20 the distinct stacks pass kMaxStacks and the matcher says so.
  auto doubling = [](int levels) {
    std::string g = "root ::= r0 \"z\"\n";
    for (int i = 0; i < levels; ++i) g += fmt::format("r{} ::= r{} r{}\n", i, i + 1, i + 1);
    return g + fmt::format("r{} ::= \"a\"?\n", levels);
  };
  Matcher e(Grammar::parse_shared(doubling(8)));
  EXPECT_TRUE(e.accept_bytes("aaaz"));
  EXPECT_TRUE(e.can_end());
  EXPECT_THROW(Matcher(Grammar::parse_shared(doubling(20))), Error);
  // More live alternatives than kMaxStacks: the start state is refused.
  std::string wide = "root ::= w0\n";
  for (int i = 0; i < 13; ++i)
    wide += fmt::format("w{} ::= w{} \"a\" | w{} \"b\"\n", i, i + 1, i + 1);
  wide += "w13 ::= [a-z] \"q\"\n";
  try {
    Matcher w(Grammar::parse_shared(wide));
    ADD_FAILURE() << "expected the matcher limit";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("exceeds the matcher limits"), std::string::npos)
        << err.what();
  }
}

TEST(Matcher, HugeGrammarIsRefused) {
  std::string g = "root ::= x0\n";
  for (int i = 0; i < 70000; ++i) g += fmt::format("x{} ::= \"a\" x{}\n", i, i + 1);
  std::string err = parse_error(g);
  EXPECT_TRUE(err.find("too many rules (limit 65536)") != std::string::npos ||
              err.find("text too large") != std::string::npos)
      << err;
}

}  // namespace
}  // namespace lr::grammar
