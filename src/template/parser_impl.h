// The parser's state, shared by its statement half (parser.cpp) and its
// expression half (parser_expr.cpp). Internal to the template engine.
#pragma once

#include <string>
#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace lr::jinja {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}
  Body parse_template();

  // ---- expressions (parser_expr.cpp) ----
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_tuple(bool simplified = false, bool with_condexpr = true,
                      const std::vector<std::string>& extra_end = {},
                      bool explicit_parentheses = false);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  Target parse_assign_target(bool with_tuple, bool name_only,
                             const std::vector<std::string>& extra_end, bool with_namespace);

 private:
  friend struct DepthGuard;
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_call(ExprPtr node);
  void parse_call_args(Expr& call);
  ExprPtr parse_test(ExprPtr node);
  std::string parse_dotted_name();
  void check_builtin(Expr& e, bool filter);
  Target to_target(const Expr& e);

  // ---- statements (parser.cpp) ----
  Body subparse(const std::vector<std::string>& end_tokens);
  Body parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle);
  StmtPtr parse_statement();
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_body_block(StmtKind kind, const char* tag, const char* end);
  void parse_signature(MacroDef& m);
  void check_pending();
  [[noreturn]] void fail_eof(const std::vector<std::string>& end_tokens);
  [[noreturn]] void fail_unknown_tag(const std::string& name);

  // ---- tokens ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek() const { return toks_[pos_ + 1 < toks_.size() ? pos_ + 1 : pos_]; }
  const Token& next();
  bool is_op(std::string_view op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view n);
  void expect_op(std::string_view op);
  void expect(Tok type, std::string_view what);
  std::string expect_name();
  [[noreturn]] void fail(const Token& at, const std::string& msg) const;
  ExprPtr node(ExprKind kind, int line) const;

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool soft_ = false;           // directly inside an `if`: unknown filters fail only when run
  int loops_ = 0;               // enclosing for loops (break/continue need one)
  std::vector<Expr*> pending_;  // unknown filters/tests not (yet) inside an if
  struct Open {
    std::string tag;
    int line;
  };
  std::vector<Open> open_;  // the blocks being parsed, innermost last
};

// Marks the expressions jinja2's optimizer would try to fold (Expr::constant);
// returns whether e is made of constants.
bool mark_constants(Expr* e);

// Counts one level of nesting for as long as it lives.
struct DepthGuard {
  DepthGuard(Parser& p, const Token& at);
  ~DepthGuard() { --p_.depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Parser& p_;
};

}  // namespace lr::jinja
