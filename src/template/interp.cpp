// The statement half of the evaluator, with the macro and loop objects.
#include "template/interp.h"

#include <fmt/format.h>

#include <memory>

#include "template/builtins.h"

namespace lr::jinja {

namespace {

class MacroObject : public Object {
 public:
  MacroObject(const MacroDef* def, const std::shared_ptr<Scope>& closure)
      : def_(def), closure_(closure) {}
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return fmt::format("<Macro '{}'>", def_->name); }
  bool callable() const override { return true; }
  Value attr(const std::string& name) const override {
    if (name == "name") return Value(def_->name);
    if (name == "arguments") {
      std::vector<Value> params(def_->params.begin(), def_->params.end());
      return Value::tuple(std::move(params));
    }
    if (name == "catch_varargs") return Value(def_->catch_varargs);
    if (name == "catch_kwargs") return Value(def_->catch_kwargs);
    if (name == "caller") return Value(def_->caller);
    return Object::attr(name);
  }
  Value call(Interp& in, CallArgs args) override {
    std::shared_ptr<Scope> closure = closure_.lock();
    if (!closure) lr::fail("macro '{}' called after the block that defined it ended", def_->name);
    return in.call_macro(*def_, std::move(args), std::move(closure));
  }

 private:
  const MacroDef* def_;
  std::weak_ptr<Scope> closure_;  // the scope the body sees (weak: no reference cycle)
};

// jinja2's LoopContext: the `loop` variable.
class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  explicit LoopObject(std::vector<Value> items) : items_(std::move(items)) {}
  const std::vector<Value>& items() const { return items_; }
  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override {
    return fmt::format("<LoopContext {}/{}>", index_ + 1, items_.size());
  }
  Value attr(const std::string& name) const override;
  void set_index(size_t i) { index_ = i; }
  Value cycle(const CallArgs& args) const {
    if (args.pos.empty()) lr::fail("no items for cycling given");
    if (!args.kw.empty()) lr::fail("loop.cycle() takes no keyword arguments");
    return args.pos[index_ % args.pos.size()];
  }
  Value changed(const CallArgs& args) {
    Value now = Value::list(args.pos);
    if (has_last_ && equal(now, last_)) return Value(false);
    last_ = std::move(now);
    has_last_ = true;
    return Value(true);
  }

 private:
  std::vector<Value> items_;  // owned: the loop variable may outlive the loop
  size_t index_ = 0;
  Value last_;
  bool has_last_ = false;
};

class LoopMethod : public Object {
 public:
  LoopMethod(std::shared_ptr<LoopObject> loop, bool cycle)
      : loop_(std::move(loop)), cycle_(cycle) {}
  std::string type_name() const override { return "method"; }
  bool callable() const override { return true; }
  Value call(Interp&, CallArgs args) override {
    return cycle_ ? loop_->cycle(args) : loop_->changed(args);
  }

 private:
  std::shared_ptr<LoopObject> loop_;
  bool cycle_;
};

Value LoopObject::attr(const std::string& name) const {
  const auto n = static_cast<int64_t>(items_.size());
  const auto i = static_cast<int64_t>(index_);
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(1);
  if (name == "depth0") return Value(0);
  if (name == "previtem")
    return i > 0 ? items_[index_ - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? items_[index_ + 1] : Value::undefined("there is no next item");
  auto self = std::const_pointer_cast<LoopObject>(shared_from_this());
  if (name == "cycle") return Value::object(std::make_shared<LoopMethod>(self, true));
  if (name == "changed") return Value::object(std::make_shared<LoopMethod>(self, false));
  return Object::attr(name);
}

}  // namespace

ScopeGuard::ScopeGuard(Interp& in, std::shared_ptr<Scope> parent)
    : in_(in), scope_(std::make_shared<Scope>()), saved_(in.scope_) {
  scope_->parent = parent ? std::move(parent) : in.scope_;
  in.scope_ = scope_;
}

ScopeGuard::~ScopeGuard() {
  in_.scope_ = saved_;
}

Interp::Interp(const Dict& context, const RenderOptions& options)
    : context_(context), options_(options), root_(std::make_shared<Scope>()), scope_(root_) {}

std::time_t Interp::now() const {
  return options_.now ? *options_.now : std::time(nullptr);
}

std::string Interp::render(const Body& body) {
  std::string out;
  out_ = &out;
  exec(body);
  out_ = nullptr;
  return out;
}

Value Interp::lookup(const std::string& name) const {
  for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (const Value* v = context_.find(name)) return *v;
  Value g = global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Interp::Flow Interp::exec(const Body& body) {
  for (const StmtPtr& s : body) {
    const Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interp::Flow Interp::exec(const Stmt& s) {
  if (++depth_ > kMaxEvalDepth) {
    --depth_;
    throw LocatedError(fmt::format("chat template line {}: template recursion deeper than {}",
                                   s.line, kMaxEvalDepth));
  }
  tick();
  try {
    const Flow f = exec_stmt(s);
    --depth_;
    return f;
  } catch (const LocatedError&) {
    --depth_;
    throw;
  } catch (const lr::Error& e) {
    --depth_;
    throw LocatedError(fmt::format("chat template line {}: {}", s.line, e.what()));
  }
}

Interp::Flow Interp::exec_stmt(const Stmt& s) {
  switch (s.kind) {
    case StmtKind::Text:
      *out_ += s.text;
      check_size(out_->size());
      return Flow::Normal;
    case StmtKind::Output:
      if (s.expr->constant) {  // jinja2 folds a constant {{ }} whole
        if (std::optional<Value> v = try_fold(*s.expr, true)) {
          append_str(*out_, *v);
          return Flow::Normal;
        }
      }
      append_str(*out_, eval(*s.expr));
      return Flow::Normal;
    case StmtKind::If:
      return eval(*s.expr).truthy() ? exec(s.body) : exec(s.orelse);
    case StmtKind::For:
      return exec_for(s);
    case StmtKind::Set:
      assign(s.target, eval(*s.expr));
      return Flow::Normal;
    case StmtKind::SetBlock: {
      Value v(capture(s.body));
      if (s.expr) v = eval_filter(*s.expr, &v);
      assign(s.target, v);
      return Flow::Normal;
    }
    case StmtKind::Macro:
      scope_->vars[s.macro->name] =
          Value::object(std::make_shared<MacroObject>(s.macro.get(), scope_));
      return Flow::Normal;
    case StmtKind::CallBlock:
      exec_call_block(s);
      return Flow::Normal;
    case StmtKind::FilterBlock: {
      const Value body(capture(s.body));
      const Value v = eval_filter(*s.expr, &body);
      // jinja2 joins its output list, so a filter block must give a string.
      if (!v.is_string())
        lr::fail("filter block output: expected str instance, {} found", type_name(v));
      *out_ += v.str();
      check_size(out_->size());
      return Flow::Normal;
    }
    case StmtKind::Break:
      return Flow::Break;
    case StmtKind::Continue:
      return Flow::Continue;
    case StmtKind::Scope: {
      ScopeGuard guard(*this);
      return exec(s.body);
    }
  }
  return Flow::Normal;
}

Interp::Flow Interp::exec_for(const Stmt& s) {
  std::vector<Value> items = iterate(eval(*s.expr));
  if (s.cond) {
    std::vector<Value> kept;
    for (Value& item : items) {
      tick();
      ScopeGuard guard(*this);
      assign(s.target, item);
      if (eval(*s.cond).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    ScopeGuard guard(*this);
    return exec(s.orelse);
  }
  auto loop = std::make_shared<LoopObject>(std::move(items));
  const Value loop_value = Value::object(loop);
  const std::vector<Value>& all = loop->items();
  for (size_t k = 0; k < all.size(); ++k) {
    tick();
    ScopeGuard guard(*this);
    loop->set_index(k);
    assign(s.target, all[k]);
    guard.scope().vars["loop"] = loop_value;
    if (exec(s.body) == Flow::Break) break;
  }
  return Flow::Normal;
}

void Interp::exec_call_block(const Stmt& s) {
  auto caller = std::make_shared<MacroObject>(s.macro.get(), scope_);
  const Expr& call_expr = *s.expr;
  const Value callee = eval(*call_expr.kids[0]);
  CallArgs args = eval_args(call_expr, 1);
  args.kw.emplace_back("caller", Value::object(caller));
  append_str(*out_, call(callee, std::move(args)));
}

std::string Interp::capture(const Body& body) {
  ScopeGuard guard(*this);
  return output_of(body);
}

std::string Interp::output_of(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  struct Restore {
    std::string*& out;
    std::string* saved;
    ~Restore() { out = saved; }
  } restore{out_, saved};
  exec(body);
  return buf;
}

void Interp::assign(const Target& t, const Value& v) {
  switch (t.kind) {
    case Target::Kind::Name:
      scope_->vars[t.name] = v;
      return;
    case Target::Kind::Tuple: {
      const std::vector<Value> items = iterate(v);
      if (items.size() < t.items.size())
        lr::fail("not enough values to unpack (expected {}, got {})", t.items.size(), items.size());
      if (items.size() > t.items.size())
        lr::fail("too many values to unpack (expected {})", t.items.size());
      for (size_t k = 0; k < items.size(); ++k) assign(t.items[k], items[k]);
      return;
    }
    case Target::Kind::NsAttr: {
      const Value ns = lookup(t.name);
      if (ns.kind() != Kind::Namespace)
        lr::fail("cannot assign attribute '{}' on '{}': not a namespace", t.attr, t.name);
      ns.dict().set(Value(t.attr), v);
      return;
    }
  }
}

Value Interp::call(const Value& callee, CallArgs args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (callee.kind() != Kind::Object || !callee.object().callable())
    lr::fail("'{}' object is not callable", type_name(callee));
  return callee.object().call(*this, std::move(args));
}

Value Interp::call_macro(const MacroDef& m, CallArgs args, std::shared_ptr<Scope> closure) {
  ScopeGuard guard(*this, std::move(closure));
  auto& vars = guard.scope().vars;
  const size_t np = m.params.size();
  if (args.pos.size() > np && !m.catch_varargs)
    lr::fail("macro '{}' takes not more than {} argument(s)", m.name, np);
  std::vector<bool> given(np, false);
  for (size_t k = 0; k < args.pos.size() && k < np; ++k) {
    vars[m.params[k]] = args.pos[k];
    given[k] = true;
  }
  auto kwargs = std::make_shared<Dict>();
  Value caller;
  for (auto& [key, value] : args.kw) {
    size_t k = 0;
    while (k < np && m.params[k] != key) ++k;
    if (k < np) {
      if (given[k]) lr::fail("macro '{}' got multiple values for argument '{}'", m.name, key);
      vars[key] = value;
      given[k] = true;
    } else if (key == "caller" && m.caller) {
      caller = value;
    } else if (m.catch_kwargs) {
      kwargs->set(Value(key), value);
    } else {
      lr::fail("macro '{}' takes no keyword argument '{}'", m.name, key);
    }
  }
  // Defaults see the macro's parameters: the given ones, those defaulted
  // before them, and the rest undefined.
  for (size_t k = 0; k < np; ++k) {
    if (!given[k])
      vars[m.params[k]] =
          Value::undefined(fmt::format("parameter '{}' was not provided", m.params[k]));
  }
  const size_t first_default = np - m.defaults.size();
  for (size_t k = first_default; k < np; ++k) {
    if (!given[k]) vars[m.params[k]] = eval(*m.defaults[k - first_default]);
  }
  std::vector<Value> extra;
  for (size_t k = np; k < args.pos.size(); ++k) extra.push_back(args.pos[k]);
  vars["varargs"] = Value::tuple(std::move(extra));
  vars["kwargs"] = Value::dict(std::move(kwargs));
  if (m.caller) vars["caller"] = caller;
  return Value(output_of(m.body));
}

}  // namespace lr::jinja
