// The globals a chat template sees: jinja2's (range, dict, namespace, ...)
// and transformers' (raise_exception, strftime_now).
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <memory>
#include <vector>

#include "template/builtins.h"
#include "template/interp.h"

namespace lr::jinja {

namespace {

using GlobalFn = Value (*)(Interp& in, const CallArgs& args);

class Builtin : public Object {
 public:
  Builtin(std::string name, GlobalFn fn) : name_(std::move(name)), fn_(fn) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  Value call(Interp& in, CallArgs args) override {
    if (!fn_) lr::fail("unsupported global function '{}'", name_);
    return fn_(in, args);
  }

 private:
  std::string name_;
  GlobalFn fn_;
};

thread_local std::vector<std::weak_ptr<Dict>> tl_namespaces;

Value g_range(Interp&, const CallArgs& a) {
  if (!a.kw.empty()) lr::fail("range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3)
    lr::fail("range expected 1 to 3 arguments, got {}", a.pos.size());
  int64_t r[3] = {0, 0, 1};
  for (size_t k = 0; k < a.pos.size(); ++k) {
    if (!a.pos[k].is_int())
      lr::fail("'{}' object cannot be interpreted as an integer", type_name(a.pos[k]));
  }
  if (a.pos.size() == 1) {
    r[1] = a.pos[0].integer();
  } else {
    r[0] = a.pos[0].integer();
    r[1] = a.pos[1].integer();
    if (a.pos.size() == 3) r[2] = a.pos[2].integer();
  }
  if (r[2] == 0) lr::fail("range() arg 3 must not be zero");
  const long double span = static_cast<long double>(r[1]) - static_cast<long double>(r[0]);
  const long double n = span / r[2];
  if (n > static_cast<long double>(limits().max_items)) check_items(limits().max_items + 1);
  std::vector<Value> items;
  for (int64_t i = r[0]; r[2] > 0 ? i < r[1] : i > r[1];) {
    items.emplace_back(i);
    if (__builtin_add_overflow(i, r[2], &i)) break;
  }
  tick(items.size());
  Value v = Value::list(std::move(items));
  v.seq().type = "range";
  std::copy(r, r + 3, v.seq().range);
  return v;
}

// dict(*args, **kwargs), as dict() and namespace() take them.
std::shared_ptr<Dict> make_dict(const CallArgs& a, const char* what) {
  if (a.pos.size() > 1) lr::fail("{} expected at most 1 argument, got {}", what, a.pos.size());
  auto d = std::make_shared<Dict>();
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict() || src.kind() == Kind::Namespace) {
      for (const auto& [k, v] : src.dict().entries()) d->set(k, v);
    } else {
      size_t k = 0;
      for (const Value& pair : iterate(defined(src))) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2)
          lr::fail("dictionary update sequence element #{} has length {}; 2 is required", k,
                   kv.size());
        d->set(kv[0], kv[1]);
        ++k;
      }
    }
  }
  for (const auto& [k, v] : a.kw) d->set(Value(k), v);
  return d;
}

Value g_dict(Interp&, const CallArgs& a) {
  return Value::dict(make_dict(a, "dict"));
}

Value g_namespace(Interp&, const CallArgs& a) {
  auto d = make_dict(a, "namespace");
  const size_t n = tl_namespaces.size();
  if (n >= 1024 && (n & (n - 1)) == 0)  // now and then, forget the ones gone
    std::erase_if(tl_namespaces, [](const std::weak_ptr<Dict>& w) { return w.expired(); });
  tl_namespaces.push_back(d);
  return Value::ns(std::move(d));
}

Value g_raise_exception(Interp&, const CallArgs& a) {
  ArgBinder b("raise_exception()", a, {"message"});
  if (!b.has(0)) lr::fail("raise_exception() missing 1 required positional argument: 'message'");
  throw LocatedError("chat template raised: " + to_str(b.get(0)));
}

Value g_strftime_now(Interp& in, const CallArgs& a) {
  ArgBinder b("strftime_now()", a, {"format"});
  const std::string f = b.get_str(0, "");
  if (!b.has(0)) lr::fail("strftime_now() missing 1 required positional argument: 'format'");
  check_size(f.size() * 64);
  const std::time_t t = in.now();
  std::tm tm{};
  localtime_r(&t, &tm);
  // A trailing character tells an empty result from a too-small buffer.
  const std::string fmt_marked = f + "\x01";
  std::vector<char> buf(f.size() * 8 + 64);
  while (true) {
    const size_t n = std::strftime(buf.data(), buf.size(), fmt_marked.c_str(), &tm);
    if (n > 0) return Value(std::string(buf.data(), n - 1));
    if (buf.size() > (size_t{1} << 20)) lr::fail("strftime_now(): result too long");
    buf.resize(buf.size() * 4);
  }
}

struct Entry {
  const char* name;
  GlobalFn fn;
};
constexpr Entry kGlobals[] = {
    {"range", g_range},
    {"dict", g_dict},
    {"namespace", g_namespace},
    {"raise_exception", g_raise_exception},
    {"strftime_now", g_strftime_now},
    {"lipsum", nullptr},
    {"cycler", nullptr},
    {"joiner", nullptr},
};

}  // namespace

Value global(std::string_view name) {
  for (const Entry& e : kGlobals) {
    if (name == e.name) return Value::object(std::make_shared<Builtin>(e.name, e.fn));
  }
  return Value();
}

void clear_namespaces() {
  // Hold every namespace first, so clearing one frees nothing recursively.
  std::vector<std::shared_ptr<Dict>> alive;
  for (auto& w : tl_namespaces)
    if (auto d = w.lock()) alive.push_back(std::move(d));
  tl_namespaces.clear();
  for (auto& d : alive) d->clear();
}

}  // namespace lr::jinja
