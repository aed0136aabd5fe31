// The expression half of the evaluator.
#include <fmt/format.h>

#include "core/error.h"
#include "template/builtins.h"
#include "template/interp.h"

namespace lr::jinja {

Value Interp::eval(const Expr& e) {
  if (++depth_ > kMaxEvalDepth) {
    --depth_;
    throw LocatedError(fmt::format("chat template line {}: template recursion deeper than {}",
                                   e.line, kMaxEvalDepth));
  }
  try {
    if (e.constant && folding_ == 0) {
      if (std::optional<Value> v = try_fold(e, false)) {
        --depth_;
        return std::move(*v);
      }
    }
    Value v = eval_expr(e);
    --depth_;
    return v;
  } catch (const LocatedError&) {
    --depth_;
    throw;
  } catch (const lr::Error& err) {
    --depth_;
    throw LocatedError(fmt::format("chat template line {}: {}", e.line, err.what()));
  }
}

CallArgs Interp::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t k = first; k < e.kids.size(); ++k) args.pos.push_back(eval(*e.kids[k]));
  for (const auto& [key, value] : e.kwargs) args.kw.emplace_back(key, eval(*value));
  return args;
}

Value Interp::eval_expr(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Const:
      return e.value;
    case ExprKind::Name:
      return lookup(e.name);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.kids.size());
      for (const ExprPtr& k : e.kids) items.push_back(eval(*k));
      return e.kind == ExprKind::List ? Value::list(std::move(items))
                                      : Value::tuple(std::move(items));
    }
    case ExprKind::Dict: {
      auto d = std::make_shared<Dict>();
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
        Value key = eval(*e.kids[k]);
        d->set(key, eval(*e.kids[k + 1]));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::GetAttr:
      return get_attr(eval(*e.kids[0]), e.name);
    case ExprKind::GetItem: {
      const Value obj = eval(*e.kids[0]);
      return get_item(obj, eval(*e.kids[1]));
    }
    case ExprKind::Slice: {
      const Value obj = eval(*e.kids[0]);
      Value part[3];
      for (int k = 0; k < 3; ++k) part[k] = e.kids[k + 1] ? eval(*e.kids[k + 1]) : Value::none();
      if (folding_ > 0 && !obj.is_string() && !obj.is_seq() && !obj.is_undefined()) {
        if (part[2].is_int() && part[2].integer() == 0) lr::fail("slice step cannot be zero");
        return Value::undefined(fmt::format("'{}' has no element slice", type_repr(obj)));
      }
      return get_slice(obj, part[0], part[1], part[2]);
    }
    case ExprKind::Call:
      return eval_call(e);
    case ExprKind::Filter:
      return eval_filter(e, nullptr);
    case ExprKind::Test: {
      if (!e.error.empty()) throw LocatedError(e.error);
      const Value v = eval(*e.kids[0]);
      const bool r = call_test(*this, e.name, v, eval_args(e, 1));
      return Value(r != e.negated);
    }
    case ExprKind::Not:
      return Value(!eval(*e.kids[0]).truthy());
    case ExprKind::Neg:
    case ExprKind::Pos:
      return negate(eval(*e.kids[0]), e.kind == ExprKind::Neg);
    case ExprKind::Binary: {
      const Value a = eval(*e.kids[0]);
      return binary_op(e.name, a, eval(*e.kids[1]));
    }
    case ExprKind::And: {
      Value a = eval(*e.kids[0]);
      return a.truthy() ? eval(*e.kids[1]) : a;
    }
    case ExprKind::Or: {
      Value a = eval(*e.kids[0]);
      return a.truthy() ? a : eval(*e.kids[1]);
    }
    case ExprKind::Compare:
      return eval_compare(e);
    case ExprKind::CondExpr:
      if (eval(*e.kids[1]).truthy()) return eval(*e.kids[0]);
      if (e.kids[2]) return eval(*e.kids[2]);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was "
          "defined.",
          e.line));
  }
  return Value();
}

namespace {

// jinja2's has_safe_repr: what its optimizer may fold into the compiled template.
bool has_safe_repr(const Value& v) {
  switch (v.kind()) {
    case Kind::None:
    case Kind::Bool:
    case Kind::Int:
    case Kind::Float:
    case Kind::String:
      return true;
    case Kind::List:
    case Kind::Tuple:
      for (const Value& x : v.items())
        if (!has_safe_repr(x)) return false;
      return true;
    case Kind::Dict:
      for (const auto& [k, x] : v.dict().entries())
        if (!has_safe_repr(k) || !has_safe_repr(x)) return false;
      return true;
    default:
      return false;
  }
}

}  // namespace

std::optional<Value> Interp::try_fold(const Expr& e, bool whole_output) {
  ++folding_;
  Value v;
  try {
    v = eval_expr(e);
  } catch (const lr::Error&) {  // jinja2: Impossible, evaluated when run instead
    --folding_;
    return std::nullopt;
  }
  --folding_;
  if (whole_output || has_safe_repr(v)) return v;
  return std::nullopt;
}

Value Interp::eval_call(const Expr& e) {
  const Value callee = eval(*e.kids[0]);
  return call(callee, eval_args(e, 1));
}

Value Interp::eval_filter(const Expr& e, const Value* input) {
  if (!e.error.empty()) throw LocatedError(e.error);
  // In a filter block or set block the innermost filter's input is the body.
  Value v;
  if (e.kids[0]) {
    v = e.kids[0]->kind == ExprKind::Filter && input ? eval_filter(*e.kids[0], input)
                                                     : eval(*e.kids[0]);
  } else {
    v = *input;
  }
  return call_filter(*this, e.name, v, eval_args(e, 1));
}

Value Interp::eval_compare(const Expr& e) {
  Value left = eval(*e.kids[0]);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.kids[k + 1]);
    if (!compare_op(e.ops[k], left, right)) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace lr::jinja
