// The expression half of the parser: jinja2's parse_tuple ... parse_primary.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "template/builtins.h"
#include "template/parser.h"
#include "template/parser_impl.h"

namespace lr::jinja {

DepthGuard::DepthGuard(Parser& p, const Token& at) : p_(p) {
  if (++p_.depth_ > kMaxNesting) {
    --p_.depth_;
    p_.fail(at, fmt::format("template nested more than {} levels deep", kMaxNesting));
  }
}

const Token& Parser::next() {
  const Token& t = toks_[pos_];
  if (pos_ + 1 < toks_.size()) ++pos_;
  return t;
}

bool Parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view n) {
  if (!is_name(n)) return false;
  next();
  return true;
}

void Parser::expect_op(std::string_view op) {
  if (!is_op(op)) {
    const std::string after = pos_ > 0 ? " after " + describe(toks_[pos_ - 1]) : "";
    fail(cur(), fmt::format("expected '{}'{}, found {}", op, after, describe(cur())));
  }
  next();
}

void Parser::expect(Tok type, std::string_view what) {
  if (cur().type != type) {
    const std::string after = pos_ > 0 ? " after " + describe(toks_[pos_ - 1]) : "";
    fail(cur(), fmt::format("expected {}{}, found {}", what, after, describe(cur())));
  }
  next();
}

std::string Parser::expect_name() {
  if (cur().type != Tok::Name)
    fail(cur(), fmt::format("expected a name, found {}", describe(cur())));
  return next().text;
}

void Parser::fail(const Token& at, const std::string& msg) const {
  lr::fail("chat template line {}: {}", at.line, msg);
}

ExprPtr Parser::node(ExprKind kind, int line) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr,
                            const std::vector<std::string>& extra_end, bool explicit_parentheses) {
  const int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  auto at_end = [&] {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof || is_op(")"))
      return true;
    return t.type == Tok::Name &&
           std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
  };
  while (true) {
    if (!args.empty()) expect_op(",");
    if (at_end()) break;
    args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses)
      fail(cur(), fmt::format("expected an expression, found {}", describe(cur())));
  }
  auto t = node(ExprKind::Tuple, line);
  t->kids = std::move(args);
  return t;
}

ExprPtr Parser::parse_condexpr() {
  DepthGuard guard(*this, cur());
  const size_t mark = pending_.size();
  ExprPtr expr1 = parse_or();
  while (is_name("if")) {
    const int line = next().line;
    ExprPtr test = parse_or();
    ExprPtr expr3 = skip_name("else") ? parse_condexpr() : nullptr;
    auto c = node(ExprKind::CondExpr, line);
    c->kids.push_back(std::move(expr1));
    c->kids.push_back(std::move(test));
    c->kids.push_back(std::move(expr3));
    expr1 = std::move(c);
    pending_.resize(std::min(pending_.size(), mark));  // inside a conditional: deferred
  }
  return expr1;
}

namespace {

ExprPtr binary(ExprKind kind, std::string op, ExprPtr a, ExprPtr b, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  e->name = std::move(op);
  e->kids.push_back(std::move(a));
  e->kids.push_back(std::move(b));
  return e;
}

}  // namespace

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const int line = next().line;
    left = binary(ExprKind::Or, "or", std::move(left), parse_and(), line);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const int line = next().line;
    left = binary(ExprKind::And, "and", std::move(left), parse_not(), line);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this, cur());
    auto e = node(ExprKind::Not, next().line);
    e->kids.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr expr = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                  cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      op = next().text;
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = node(ExprKind::Compare, line);
      cmp->kids.push_back(std::move(expr));
    }
    cmp->ops.push_back(op);
    cmp->kids.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(expr);
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = next();
    left = binary(ExprKind::Binary, t.text, std::move(left), parse_concat(), t.line);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const int line = next().line;
    left = binary(ExprKind::Binary, "~", std::move(left), parse_math2(), line);
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = next();
    left = binary(ExprKind::Binary, t.text, std::move(left), parse_pow(), t.line);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary();
  while (is_op("**")) {
    const int line = next().line;
    left = binary(ExprKind::Binary, "**", std::move(left), parse_unary(), line);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this, cur());
  ExprPtr n;
  if (is_op("-") || is_op("+")) {
    const Token& t = next();
    n = node(t.text == "-" ? ExprKind::Neg : ExprKind::Pos, t.line);
    n->kids.push_back(parse_unary(false));
  } else {
    n = parse_primary();
  }
  n = parse_postfix(std::move(n));
  if (with_filter) n = parse_filter_expr(std::move(n));
  return n;
}

ExprPtr Parser::parse_primary() {
  DepthGuard guard(*this, cur());
  const Token& t = cur();
  ExprPtr n;
  if (t.type == Tok::Name) {
    n = node(ExprKind::Const, t.line);
    if (t.text == "true" || t.text == "True") {
      n->value = Value(true);
    } else if (t.text == "false" || t.text == "False") {
      n->value = Value(false);
    } else if (t.text == "none" || t.text == "None") {
      n->value = Value::none();
    } else {
      n->kind = ExprKind::Name;
      n->name = t.text;
    }
    next();
  } else if (t.type == Tok::String) {
    n = node(ExprKind::Const, t.line);
    std::string s;
    while (cur().type == Tok::String) s += next().text;  // adjacent literals concatenate
    n->value = Value(std::move(s));
  } else if (t.type == Tok::Int) {
    n = node(ExprKind::Const, t.line);
    n->value = Value(t.integer);
    next();
  } else if (t.type == Tok::Float) {
    n = node(ExprKind::Const, t.line);
    n->value = Value(t.number);
    next();
  } else if (is_op("(")) {
    next();
    n = parse_tuple(false, true, {}, true);
    expect_op(")");
  } else if (is_op("[")) {
    n = parse_list();
  } else if (is_op("{")) {
    n = parse_dict();
  } else {
    fail(t, fmt::format("unexpected {}", describe(t)));
  }
  return n;
}

ExprPtr Parser::parse_list() {
  auto n = node(ExprKind::List, next().line);
  while (!is_op("]")) {
    if (!n->kids.empty()) expect_op(",");
    if (is_op("]")) break;
    n->kids.push_back(parse_expression());
  }
  expect_op("]");
  return n;
}

ExprPtr Parser::parse_dict() {
  auto n = node(ExprKind::Dict, next().line);
  while (!is_op("}")) {
    if (!n->kids.empty()) expect_op(",");
    if (is_op("}")) break;
    n->kids.push_back(parse_expression());
    expect_op(":");
    n->kids.push_back(parse_expression());
  }
  expect_op("}");
  return n;
}

ExprPtr Parser::parse_postfix(ExprPtr n) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      n = parse_subscript(std::move(n));
    } else if (is_op("(")) {
      n = parse_call(std::move(n));
    } else {
      return n;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr n) {
  while (true) {
    if (is_op("|")) {
      n = parse_filter(std::move(n), false);
    } else if (is_name("is")) {
      n = parse_test(std::move(n));
    } else if (is_op("(")) {
      n = parse_call(std::move(n));
    } else {
      return n;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr obj) {
  DepthGuard guard(*this, cur());
  const Token& t = next();
  if (t.text == ".") {
    const Token& a = next();
    if (a.type == Tok::Name) {
      auto n = node(ExprKind::GetAttr, t.line);
      n->name = a.text;
      n->kids.push_back(std::move(obj));
      return n;
    }
    if (a.type == Tok::Int) {
      auto n = node(ExprKind::GetItem, t.line);
      n->kids.push_back(std::move(obj));
      auto k = node(ExprKind::Const, a.line);
      k->value = Value(a.integer);
      n->kids.push_back(std::move(k));
      return n;
    }
    fail(a, fmt::format("expected a name or number after '.', found {}", describe(a)));
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.size() != 1) fail(t, "subscripts with several indices are not supported");
  ExprPtr arg = std::move(args[0]);
  if (arg->kind == ExprKind::Slice) {
    arg->kids[0] = std::move(obj);
    return arg;
  }
  auto n = node(ExprKind::GetItem, t.line);
  n->kids.push_back(std::move(obj));
  n->kids.push_back(std::move(arg));
  return n;
}

ExprPtr Parser::parse_subscribed() {
  const int line = cur().line;
  std::vector<ExprPtr> parts;  // start, stop, step
  if (skip_op(":")) {
    parts.push_back(nullptr);
  } else {
    ExprPtr e = parse_expression();
    if (!skip_op(":")) return e;
    parts.push_back(std::move(e));
  }
  if (is_op(":") || is_op("]") || is_op(",")) {
    parts.push_back(nullptr);
  } else {
    parts.push_back(parse_expression());
  }
  if (skip_op(":") && !is_op("]") && !is_op(",")) {
    parts.push_back(parse_expression());
  } else {
    parts.push_back(nullptr);
  }
  auto n = node(ExprKind::Slice, line);
  n->kids.push_back(nullptr);  // the object, set by parse_subscript
  for (ExprPtr& p : parts) n->kids.push_back(std::move(p));
  return n;
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  DepthGuard guard(*this, cur());
  auto n = node(ExprKind::Call, cur().line);
  n->kids.push_back(std::move(callee));
  parse_call_args(*n);
  return n;
}

void Parser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) {
      expect_op(",");
      if (is_op(")")) break;
    }
    first = false;
    if (is_op("*") || is_op("**")) fail(cur(), "*args and **kwargs in calls are not supported");
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
      std::string key = next().text;
      next();
      call.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      if (!call.kwargs.empty()) fail(cur(), "positional argument after a keyword argument");
      call.kids.push_back(parse_expression());
    }
  }
  expect_op(")");
}

std::string Parser::parse_dotted_name() {
  std::string name = expect_name();
  while (is_op(".")) {
    next();
    name += '.';
    name += expect_name();
  }
  return name;
}

void Parser::check_builtin(Expr& e, bool filter) {
  const char* what = filter ? "filter" : "test";
  const bool known = filter ? is_filter(e.name) : is_test(e.name);
  if (known) return;
  const bool jinja2 = filter ? is_jinja2_filter(e.name) : is_jinja2_test(e.name);
  e.error = fmt::format("chat template line {}: {} {} '{}'", e.line,
                        jinja2 ? "unsupported" : "unknown", what, e.name);
  if (!soft_) pending_.push_back(&e);
}

ExprPtr Parser::parse_filter(ExprPtr n, bool start_inline) {
  while (is_op("|") || start_inline) {
    DepthGuard guard(*this, cur());
    if (!start_inline) next();
    start_inline = false;
    auto f = node(ExprKind::Filter, cur().line);
    f->name = parse_dotted_name();
    f->kids.push_back(std::move(n));
    if (is_op("(")) parse_call_args(*f);
    check_builtin(*f, true);
    n = std::move(f);
  }
  return n;
}

ExprPtr Parser::parse_test(ExprPtr n) {
  DepthGuard guard(*this, cur());
  auto t = node(ExprKind::Test, next().line);
  t->negated = skip_name("not");
  t->name = parse_dotted_name();
  t->kids.push_back(std::move(n));
  const Token& c = cur();
  if (is_op("(")) {
    parse_call_args(*t);
  } else if ((c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int ||
              c.type == Tok::Float || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail(c, "you cannot chain multiple tests with 'is'");
    t->kids.push_back(parse_postfix(parse_primary()));
  }
  check_builtin(*t, false);
  return t;
}

bool mark_constants(Expr* e) {
  if (!e) return true;  // an omitted slice part
  bool all = true;
  for (const ExprPtr& k : e->kids) all = mark_constants(k.get()) && all;
  for (const auto& kw : e->kwargs) all = mark_constants(kw.second.get()) && all;
  bool foldable = true;
  switch (e->kind) {
    case ExprKind::Name:
    case ExprKind::Call:
      foldable = false;
      break;
    case ExprKind::Filter:  // jinja2 cannot fold the filters that take the context
      foldable = e->error.empty() && e->kids[0] && e->name != "map" && e->name != "select" &&
                 e->name != "reject" && e->name != "selectattr" && e->name != "rejectattr";
      break;
    case ExprKind::Test:
      foldable = e->error.empty();
      break;
    default:
      break;
  }
  e->constant = all && foldable && e->kind != ExprKind::Const;
  return all && foldable;
}

Target Parser::to_target(const Expr& e) {
  Target t;
  if (e.kind == ExprKind::Name) {
    t.name = e.name;
    return t;
  }
  if (e.kind == ExprKind::Tuple) {
    t.kind = Target::Kind::Tuple;
    for (const ExprPtr& k : e.kids) t.items.push_back(to_target(*k));
    return t;
  }
  fail(toks_[pos_ > 0 ? pos_ - 1 : 0], "can't assign to this expression");
}

Target Parser::parse_assign_target(bool with_tuple, bool name_only,
                                   const std::vector<std::string>& extra_end, bool with_namespace) {
  if (with_namespace && cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
    Target t;
    t.kind = Target::Kind::NsAttr;
    t.name = next().text;
    next();
    t.attr = expect_name();
    return t;
  }
  if (name_only) {
    Target t;
    t.name = expect_name();
    return t;
  }
  const Token& at = cur();
  ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end) : parse_primary();
  if (e->kind != ExprKind::Name && e->kind != ExprKind::Tuple)
    fail(at, fmt::format("can't assign to {}", describe(at)));
  return to_target(*e);
}

}  // namespace lr::jinja
