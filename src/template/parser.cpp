// The statement half of the parser: jinja2's subparse and its tags.
#include "template/parser.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "template/parser_impl.h"

namespace lr::jinja {

namespace {

// Tags jinja2 has that this engine does not implement.
constexpr const char* kUnsupportedTags[] = {"block",   "extends", "include",    "import",
                                            "from",    "with",    "autoescape", "do",
                                            "endwith", "trans",   "pluralize",  "debug"};
constexpr const char* kEndTags[] = {"endif",   "endfor", "endmacro", "endset", "endfilter",
                                    "endcall", "else",   "elif",     "endraw", "endgeneration"};

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t k = 0; k < names.size(); ++k) {
    if (k) s += k + 1 == names.size() ? " or " : ", ";
    s += "'" + names[k] + "'";
  }
  return s;
}

// Whether the body reads the name (varargs, kwargs, caller), nested macros aside.
bool reads_name(const Expr* e, const std::string& name);
bool reads_name(const Body& body, const std::string& name);

bool reads_name(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == ExprKind::Name && e->name == name) return true;
  for (const ExprPtr& k : e->kids)
    if (reads_name(k.get(), name)) return true;
  for (const auto& kw : e->kwargs)
    if (reads_name(kw.second.get(), name)) return true;
  return false;
}

void mark_all_constants(const Body& body) {
  for (const StmtPtr& s : body) {
    mark_constants(s->expr.get());
    mark_constants(s->cond.get());
    mark_all_constants(s->body);
    mark_all_constants(s->orelse);
    if (s->macro) {
      for (const ExprPtr& d : s->macro->defaults) mark_constants(d.get());
      mark_all_constants(s->macro->body);
    }
  }
}

bool reads_name(const Body& body, const std::string& name) {
  for (const StmtPtr& s : body) {
    if (s->kind == StmtKind::Macro) continue;
    if (reads_name(s->expr.get(), name) || reads_name(s->cond.get(), name) ||
        reads_name(s->body, name) || reads_name(s->orelse, name))
      return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<Program> parse(std::string_view source) {
  auto program = std::make_unique<Program>();
  program->body = Parser(tokenize(source)).parse_template();
  mark_all_constants(program->body);
  return program;
}

Body Parser::parse_template() {
  return subparse({});
}

void Parser::check_pending() {
  if (!pending_.empty()) lr::fail("{}", pending_.front()->error);
}

Body Parser::subparse(const std::vector<std::string>& end_tokens) {
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == Tok::Eof) {
      if (!end_tokens.empty()) fail_eof(end_tokens);
      return body;
    }
    if (t.type == Tok::Data) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::Text;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.type == Tok::VarBegin) {
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::Output;
      s->line = t.line;
      s->expr = parse_tuple();
      check_pending();
      expect(Tok::VarEnd, "'}}'");
      body.push_back(std::move(s));
    } else if (t.type == Tok::BlockBegin) {
      next();
      if (cur().type == Tok::Name &&
          std::find(end_tokens.begin(), end_tokens.end(), cur().text) != end_tokens.end())
        return body;
      body.push_back(parse_statement());
      check_pending();
      expect(Tok::BlockEnd, "'%}'");
    } else {
      fail(t, fmt::format("unexpected {}", describe(t)));
    }
  }
}

Body Parser::parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle) {
  skip_op(":");
  check_pending();
  expect(Tok::BlockEnd, "'%}'");
  Body body = subparse(end_tokens);
  if (cur().type == Tok::Eof) fail_eof(end_tokens);
  if (drop_needle) next();
  return body;
}

void Parser::fail_eof(const std::vector<std::string>& end_tokens) {
  std::string msg = "unexpected end of template";
  if (!open_.empty()) {
    msg += fmt::format(": expected {} to close the '{}' on line {}", quoted_list(end_tokens),
                       open_.back().tag, open_.back().line);
  }
  fail(cur(), msg);
}

void Parser::fail_unknown_tag(const std::string& name) {
  const Token& t = toks_[pos_];
  if (std::find(std::begin(kEndTags), std::end(kEndTags), name) != std::end(kEndTags)) {
    std::string msg = fmt::format("unexpected '{}'", name);
    if (!open_.empty()) {
      msg += fmt::format(" (the innermost open block is the '{}' on line {})", open_.back().tag,
                         open_.back().line);
    } else {
      msg += " with no open block to close";
    }
    fail(t, msg);
  }
  if (std::find_if(std::begin(kUnsupportedTags), std::end(kUnsupportedTags),
                   [&](const char* u) { return name == u; }) != std::end(kUnsupportedTags))
    fail(t, fmt::format("unsupported tag '{}'", name));
  fail(t, fmt::format("unknown tag '{}'", name));
}

StmtPtr Parser::parse_statement() {
  const Token& t = cur();
  DepthGuard guard(*this, t);
  if (t.type != Tok::Name) fail(t, fmt::format("expected a tag name, found {}", describe(t)));
  const std::string& name = t.text;
  if (name == "for") return parse_for();
  if (name == "if") return parse_if();
  if (name == "set") return parse_set();
  if (name == "macro") return parse_macro();
  if (name == "call") return parse_call_block();
  if (name == "filter") return parse_filter_block();
  if (name == "generation") return parse_body_block(StmtKind::Scope, "generation", "endgeneration");
  if (name == "break" || name == "continue") {
    next();
    if (loops_ == 0) fail(t, fmt::format("'{}' outside of a for loop", name));
    auto s = std::make_unique<Stmt>();
    s->kind = name == "break" ? StmtKind::Break : StmtKind::Continue;
    s->line = t.line;
    return s;
  }
  if (name == "print") {  // {% print a, b %}: the expressions' output, one after another
    next();
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::Scope;
    s->line = t.line;
    while (cur().type != Tok::BlockEnd) {
      if (!s->body.empty()) expect_op(",");
      auto out = std::make_unique<Stmt>();
      out->kind = StmtKind::Output;
      out->line = cur().line;
      out->expr = parse_expression();
      s->body.push_back(std::move(out));
    }
    return s;
  }
  fail_unknown_tag(name);
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::For;
  s->line = next().line;
  open_.push_back({"for", s->line});
  s->target = parse_assign_target(true, false, {"in"}, false);
  if (!skip_name("in")) fail(cur(), fmt::format("expected 'in', found {}", describe(cur())));
  s->expr = parse_tuple(false, false, {"recursive"});
  const bool soft = soft_;
  soft_ = false;  // the loop's test and body are frames of their own
  if (skip_name("if")) s->cond = parse_expression();
  if (is_name("recursive")) fail(cur(), "recursive for loops are not supported");
  ++loops_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loops_;
  if (next().text == "else") s->orelse = parse_statements({"endfor"}, true);
  soft_ = soft;
  open_.pop_back();
  return s;
}

StmtPtr Parser::parse_if() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::If;
  s->line = next().line;
  open_.push_back({"if", s->line});
  const bool soft = soft_;
  soft_ = true;
  s->expr = parse_tuple(false, false);
  s->body = parse_statements({"elif", "else", "endif"}, false);
  Stmt* last = s.get();
  while (true) {
    const Token& t = next();
    if (t.text == "elif") {
      auto e = std::make_unique<Stmt>();
      e->kind = StmtKind::If;
      e->line = t.line;
      e->expr = parse_tuple(false, false);
      e->body = parse_statements({"elif", "else", "endif"}, false);
      Stmt* raw = e.get();
      last->orelse.push_back(std::move(e));
      last = raw;
    } else if (t.text == "else") {
      last->orelse = parse_statements({"endif"}, true);
      break;
    } else {
      break;
    }
  }
  soft_ = soft;
  open_.pop_back();
  return s;
}

StmtPtr Parser::parse_set() {
  auto s = std::make_unique<Stmt>();
  s->line = next().line;
  s->target = parse_assign_target(true, false, {}, true);
  if (skip_op("=")) {
    s->kind = StmtKind::Set;
    s->expr = parse_tuple();
    return s;
  }
  s->kind = StmtKind::SetBlock;
  if (s->target.kind == Target::Kind::Tuple) fail(cur(), "a block set takes a single name");
  open_.push_back({"set", s->line});
  const bool soft = soft_;
  soft_ = false;
  if (is_op("|")) s->expr = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true);
  soft_ = soft;
  open_.pop_back();
  return s;
}

void Parser::parse_signature(MacroDef& m) {
  expect_op("(");
  while (!is_op(")")) {
    if (!m.params.empty()) expect_op(",");
    const Token& at = cur();
    std::string param = expect_name();
    if (std::find(m.params.begin(), m.params.end(), param) != m.params.end())
      fail(at, fmt::format("duplicate parameter '{}'", param));
    if (skip_op("=")) {
      m.defaults.push_back(parse_expression());
    } else if (!m.defaults.empty()) {
      fail(at, "non-default parameter follows a default parameter");
    }
    m.params.push_back(std::move(param));
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::Macro;
  s->line = next().line;
  auto m = std::make_shared<MacroDef>();
  m->line = s->line;
  m->name = expect_name();
  parse_signature(*m);
  open_.push_back({"macro", s->line});
  const bool soft = soft_;
  const int loops = loops_;
  soft_ = false;
  loops_ = 0;
  m->body = parse_statements({"endmacro"}, true);
  soft_ = soft;
  loops_ = loops;
  open_.pop_back();
  m->catch_varargs = reads_name(m->body, "varargs");
  m->catch_kwargs = reads_name(m->body, "kwargs");
  m->caller = reads_name(m->body, "caller");
  s->macro = std::move(m);
  return s;
}

StmtPtr Parser::parse_call_block() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::CallBlock;
  s->line = next().line;
  auto m = std::make_shared<MacroDef>();
  m->name = "caller";
  m->line = s->line;
  if (is_op("(")) parse_signature(*m);
  const Token& at = cur();
  s->expr = parse_expression();
  if (s->expr->kind != ExprKind::Call) fail(at, "expected a macro call after 'call'");
  open_.push_back({"call", s->line});
  const bool soft = soft_;
  const int loops = loops_;
  soft_ = false;
  loops_ = 0;
  m->body = parse_statements({"endcall"}, true);
  soft_ = soft;
  loops_ = loops;
  open_.pop_back();
  m->catch_varargs = reads_name(m->body, "varargs");
  m->catch_kwargs = reads_name(m->body, "kwargs");
  s->macro = std::move(m);
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::FilterBlock;
  s->line = next().line;
  const bool soft = soft_;
  soft_ = false;
  s->expr = parse_filter(nullptr, true);
  open_.push_back({"filter", s->line});
  s->body = parse_statements({"endfilter"}, true);
  soft_ = soft;
  open_.pop_back();
  return s;
}

StmtPtr Parser::parse_body_block(StmtKind kind, const char* tag, const char* end) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = next().line;
  open_.push_back({tag, s->line});
  const bool soft = soft_;
  soft_ = false;
  s->body = parse_statements({end}, true);
  soft_ = soft;
  open_.pop_back();
  return s;
}

}  // namespace lr::jinja
