// The evaluator: runs a parsed template against a context. Internal to the
// template engine (the public API is template.h).
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "template/ast.h"
#include "template/template.h"
#include "template/value.h"

namespace lr::jinja {

// An error whose message already says where it happened; the evaluator's
// handlers pass it on as it is (others get "chat template line N: " first).
struct LocatedError : lr::Error {
  using lr::Error::Error;
};

// Variables: a for loop iteration, a macro call, a block's body. Shared, so
// that a macro can see the scope it was defined in (a closure, as in jinja2).
struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
};

// Deeper than this (macro recursion, mostly) fails instead of exhausting the stack.
constexpr int kMaxEvalDepth = 400;

class Interp {
 public:
  Interp(const Dict& context, const RenderOptions& options);
  std::string render(const Body& body);

  Value eval(const Expr& e);
  Value call(const Value& callee, CallArgs args);
  Value call_macro(const MacroDef& m, CallArgs args, std::shared_ptr<Scope> closure);
  std::time_t now() const;

 private:
  enum class Flow { Normal, Break, Continue };
  friend struct ScopeGuard;

  Flow exec(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_stmt(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void exec_call_block(const Stmt& s);
  std::string capture(const Body& body);    // body's output, run in a scope of its own
  std::string output_of(const Body& body);  // body's output, in the current scope
  void assign(const Target& t, const Value& v);
  Value lookup(const std::string& name) const;

  Value eval_expr(const Expr& e);
  std::optional<Value> try_fold(const Expr& e, bool whole_output);
  Value eval_call(const Expr& e);
  Value eval_filter(const Expr& e, const Value* input);
  Value eval_compare(const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first);

  const Dict& context_;
  RenderOptions options_;
  std::shared_ptr<Scope> root_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  int depth_ = 0;
  int folding_ = 0;  // > 0 while evaluating as jinja2's optimizer does
};

// Enters a child scope of `parent` (the current scope by default) for as long as it lives.
struct ScopeGuard {
  explicit ScopeGuard(Interp& in, std::shared_ptr<Scope> parent = nullptr);
  ~ScopeGuard();
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  Scope& scope() { return *scope_; }

 private:
  Interp& in_;
  std::shared_ptr<Scope> scope_;
  std::shared_ptr<Scope> saved_;
};

}  // namespace lr::jinja
