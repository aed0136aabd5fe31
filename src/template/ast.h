// The parsed template: expressions and statements, as jinja2's parser builds them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace lr::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  Const,     // value
  Name,      // name
  List,      // kids
  Tuple,     // kids
  Dict,      // kids: key0, value0, key1, value1, ...
  GetAttr,   // kids[0].name
  GetItem,   // kids[0][kids[1]]
  Slice,     // kids[0][kids[1]:kids[2]:kids[3]], omitted parts null
  Call,      // kids[0](kids[1:], kwargs)
  Filter,    // kids[0] | name(kids[1:], kwargs); kids[0] null: the filter block's body
  Test,      // kids[0] is [not] name(kids[1:], kwargs)
  Not,       // not kids[0]
  Neg,       // -kids[0]
  Pos,       // +kids[0]
  Binary,    // kids[0] name kids[1], name one of + - * / // % ** ~
  And,       // kids[0] and kids[1]
  Or,        // kids[0] or kids[1]
  Compare,   // kids[0] ops[0] kids[1] ops[1] kids[2] ... (ops: == != < <= > >= in notin)
  CondExpr,  // kids[0] if kids[1] else kids[2] (kids[2] null without else)
};

struct Expr {
  ExprKind kind = ExprKind::Const;
  int line = 0;
  std::string name;
  Value value;
  std::vector<ExprPtr> kids;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;  // Test: `is not`
  // Made of constants only: jinja2 folds it when it compiles the template,
  // where a slice goes through getitem (so what Python cannot slice is
  // undefined rather than an error); the fold stands when the value has a
  // literal repr, or is all of a {{ }}.
  bool constant = false;
  // A filter or test jinja2 lacks, inside an `if` (jinja2 defers the error to
  // when the branch runs): the message to raise then.
  std::string error;
};

// An assignment target: a name, a tuple of targets, or namespace.attribute.
struct Target {
  enum class Kind : uint8_t { Name, Tuple, NsAttr } kind = Kind::Name;
  std::string name;
  std::string attr;  // NsAttr
  std::vector<Target> items;
};

struct MacroDef {
  std::string name;
  int line = 0;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool catch_varargs = false;  // the body reads varargs / kwargs / caller
  bool catch_kwargs = false;
  bool caller = false;
};

enum class StmtKind : uint8_t {
  Text,         // text
  Output,       // {{ expr }}
  If,           // expr, body, orelse (elif: a nested If in orelse)
  For,          // target, expr (the iterable), cond (inline if), body, orelse
  Set,          // target = expr
  SetBlock,     // {% set target | filters %}body{% endset %}; expr: the filter chain or null
  Macro,        // macro
  CallBlock,    // {% call(macro params) expr %}body{% endcall %}
  FilterBlock,  // expr: the filter chain applied to body's output
  Break,
  Continue,
  Scope,  // body rendered in place ({% generation %})
};

struct Stmt {
  StmtKind kind = StmtKind::Text;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  Target target;
  Body body;
  Body orelse;
  std::shared_ptr<MacroDef> macro;  // Macro, CallBlock (the caller's signature and body)
};

struct Program {
  Body body;
};

}  // namespace lr::jinja
