#include "format/pickle.h"

#include <cstring>
#include <unordered_map>

#include "core/error.h"

namespace lr::pickle {

ValuePtr Value::get(const std::string& key) const {
  if (kind != Kind::Dict) return nullptr;
  for (size_t i = 0; i + 1 < items.size(); i += 2)
    if (items[i]->kind == Kind::String && items[i]->s == key) return items[i + 1];
  return nullptr;
}

ValuePtr Document::make(Kind k) {
  arena.push_back(std::make_unique<Value>());
  arena.back()->kind = k;
  return arena.back().get();
}

namespace {

// Caps that keep a hostile pickle from exhausting memory: the stack and the
// memo can only grow by one entry per opcode byte anyway, and strings are
// bounded by the input.
constexpr size_t kMaxStack = size_t(1) << 24;

class Machine {
 public:
  Machine(const uint8_t* d, uint64_t n, const std::string& what, const Hooks& h, Document& doc)
      : d_(d), n_(n), what_(what), hooks_(h), doc_(doc) {}

  ValuePtr run() {
    for (;;) {
      const uint64_t at = pos_;
      const uint8_t op = byte();
      if (op == '.') {  // STOP
        if (stack_.size() != 1 || !marks_.empty())
          fail("{}: pickle STOP at offset {} with {} values on the stack", what_, at,
               stack_.size());
        return stack_.back();
      }
      if (!literal_op(op, at) && !container_op(op, at) && !object_op(op, at) && !stack_op(op, at))
        fail(
            "{}: unsupported pickle opcode 0x{:02x} at offset {} (only the opcodes of tensor "
            "checkpoints are read)",
            what_, op, at);
    }
  }

  // Each family of opcodes: true when op is one of them (and was run).
  // Protocol and frame markers, and the opcodes that push a literal.
  bool literal_op(uint8_t op, uint64_t at) {
    switch (op) {
      case 0x80:
        byte();
        break;  // PROTO
      case 0x95:
        uint(8);
        break;  // FRAME (framing is informational)
      case '}':
        push(doc_.make(Kind::Dict));
        break;
      case ']':
        push(doc_.make(Kind::List));
        break;
      case ')':
        push(doc_.make(Kind::Tuple));
        break;
      case 0x8f:
        push(doc_.make(Kind::Set));
        break;  // EMPTY_SET
      case 'N':
        push(doc_.make(Kind::None));
        break;
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        auto v = doc_.make(Kind::Bool);
        v->i = op == 0x88;
        push(v);
        break;
      }
      case 'J':
        push_int(int32_t(uint32_t(uint(4))));
        break;  // BININT
      case 'K':
        push_int(int64_t(uint(1)));
        break;  // BININT1
      case 'M':
        push_int(int64_t(uint(2)));
        break;      // BININT2
      case 0x8a: {  // LONG1
        const uint64_t len = uint(1);
        if (len > 8)
          fail("{}: pickle LONG1 of {} bytes at offset {} (at most 8 are read)", what_, len, at);
        const uint8_t* b = bytes(len);
        uint64_t v = 0;
        for (uint64_t i = len; i-- > 0;) v = v << 8 | b[i];
        if (len > 0 && len < 8 && (b[len - 1] & 0x80))
          v |= ~uint64_t(0) << (8 * len);  // sign-extend
        push_int(int64_t(v));
        break;
      }
      case 'G': {  // BINFLOAT (big-endian double)
        uint64_t v = 0;
        const uint8_t* b = bytes(8);
        for (int i = 0; i < 8; ++i) v = v << 8 | b[i];
        auto f = doc_.make(Kind::Float);
        std::memcpy(&f->f, &v, 8);
        push(f);
        break;
      }
      case 'X':
        push_str(Kind::String, uint(4));
        break;  // BINUNICODE
      case 0x8c:
        push_str(Kind::String, uint(1));
        break;  // SHORT_BINUNICODE
      case 0x8d:
        push_str(Kind::String, uint(8));
        break;  // BINUNICODE8
      case 'B':
        push_str(Kind::Bytes, uint(4));
        break;  // BINBYTES
      case 'C':
        push_str(Kind::Bytes, uint(1));
        break;  // SHORT_BINBYTES
      case 0x8e:
        push_str(Kind::Bytes, uint(8));
        break;  // BINBYTES8
      default:
        return false;
    }
    return true;
  }

  // The opcodes that build tuples, lists and dicts.
  bool container_op(uint8_t op, uint64_t at) {
    switch (op) {
      case 't': {  // TUPLE
        auto v = doc_.make(Kind::Tuple);
        v->items = pop_mark(at);
        push(v);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        auto v = doc_.make(Kind::Tuple);
        v->items.resize(size_t(op - 0x84));
        for (size_t i = v->items.size(); i-- > 0;) v->items[i] = pop(at);
        push(v);
        break;
      }
      case 'a': {  // APPEND
        ValuePtr x = pop(at);
        list_at(at)->items.push_back(x);
        break;
      }
      case 'e':
      case 0x90: {  // APPENDS, ADDITEMS
        std::vector<ValuePtr> xs = pop_mark(at);
        ValuePtr l = list_at(at);
        l->items.insert(l->items.end(), xs.begin(), xs.end());
        break;
      }
      case 's': {  // SETITEM
        ValuePtr v = pop(at), k = pop(at);
        dict_at(at)->items.insert(dict_at(at)->items.end(), {k, v});
        break;
      }
      case 'u': {  // SETITEMS
        std::vector<ValuePtr> kv = pop_mark(at);
        if (kv.size() % 2)
          fail("{}: pickle SETITEMS at offset {} with an odd number of values", what_, at);
        ValuePtr dct = dict_at(at);
        dct->items.insert(dct->items.end(), kv.begin(), kv.end());
        break;
      }
      default:
        return false;
    }
    return true;
  }

  // Marks, the memo and plain stack moves.
  bool stack_op(uint8_t op, uint64_t at) {
    switch (op) {
      case '(':
        marks_.push_back(stack_.size());
        break;  // MARK
      case 'q':
        memo_put(uint(1));
        break;  // BINPUT
      case 'r':
        memo_put(uint(4));
        break;  // LONG_BINPUT
      case 0x94:
        memo_put(memo_.size());
        break;  // MEMOIZE
      case 'h':
        memo_get(uint(1), at);
        break;  // BINGET
      case 'j':
        memo_get(uint(4), at);
        break;  // LONG_BINGET
      case '0':
        pop(at);
        break;  // POP
      case '1':
        pop_mark(at);
        break;  // POP_MARK
      case '2':
        push(top(at));
        break;  // DUP
      default:
        return false;
    }
    return true;
  }

  // The opcodes that name globals, call them (through the hooks) and build objects.
  bool object_op(uint8_t op, uint64_t at) {
    switch (op) {
      case 'c': {  // GLOBAL "module\nname\n"
        std::string mod = line(at), name = line(at);
        push_global(mod + "." + name);
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        ValuePtr name = pop(at), mod = pop(at);
        if (mod->kind != Kind::String || name->kind != Kind::String)
          fail("{}: pickle STACK_GLOBAL at offset {} needs two strings", what_, at);
        push_global(mod->s + "." + name->s);
        break;
      }
      case 'R': {  // REDUCE: a call
        ValuePtr args = pop(at), fn = pop(at);
        if (fn->kind != Kind::Global)
          fail("{}: pickle REDUCE at offset {} calls something that is not a global", what_, at);
        if (args->kind != Kind::Tuple)
          fail("{}: pickle REDUCE at offset {} without an argument tuple", what_, at);
        if (!hooks_.call) fail("{}: refusing to call {} (offset {})", what_, fn->s, at);
        push(hooks_.call(doc_, fn->s, args));
        break;
      }
      case 0x81: {  // NEWOBJ: cls.__new__(cls, *args), not run
        ValuePtr args = pop(at), cls = pop(at);
        if (cls->kind != Kind::Global)
          fail("{}: pickle NEWOBJ at offset {} of a non-class", what_, at);
        auto o = doc_.make(Kind::Object);
        o->s = cls->s;
        if (args->kind == Kind::Tuple) o->items = args->items;
        push(o);
        break;
      }
      case 'b': {  // BUILD: record the state
        ValuePtr st = pop(at);
        ValuePtr& target = top(at);
        if (target->kind == Kind::Object) target->state = st;
        // On dicts (OrderedDict._metadata) and hook values the state is ignored.
        break;
      }
      case 'Q': {  // BINPERSID
        ValuePtr pid = pop(at);
        if (!hooks_.persistent)
          fail("{}: pickle persistent id at offset {} is not allowed here", what_, at);
        push(hooks_.persistent(doc_, pid));
        break;
      }
      default:
        return false;
    }
    return true;
  }

 private:
  uint8_t byte() {
    if (pos_ >= n_) fail("{}: pickle data truncated at offset {} (no STOP)", what_, pos_);
    return d_[pos_++];
  }
  const uint8_t* bytes(uint64_t k) {
    if (k > n_ - pos_)
      fail("{}: pickle data truncated: {} bytes needed at offset {}, {} left", what_, k, pos_,
           n_ - pos_);
    const uint8_t* p = d_ + pos_;
    pos_ += k;
    return p;
  }
  uint64_t uint(int k) {
    const uint8_t* b = bytes(uint64_t(k));
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; --i) v = v << 8 | b[i];
    return v;
  }
  std::string line(uint64_t at) {
    const uint8_t* start = d_ + pos_;
    const void* nl = std::memchr(start, '\n', size_t(n_ - pos_));
    if (!nl) fail("{}: pickle GLOBAL at offset {} is not terminated", what_, at);
    const uint64_t len = uint64_t(static_cast<const uint8_t*>(nl) - start);
    pos_ += len + 1;
    return std::string(reinterpret_cast<const char*>(start), size_t(len));
  }
  void push(ValuePtr v) {
    if (stack_.size() >= kMaxStack) fail("{}: pickle stack deeper than {}", what_, kMaxStack);
    stack_.push_back(std::move(v));
  }
  void push_int(int64_t i) {
    auto v = doc_.make(Kind::Int);
    v->i = i;
    push(v);
  }
  void push_str(Kind k, uint64_t len) {
    const uint8_t* b = bytes(len);
    auto v = doc_.make(k);
    v->s.assign(reinterpret_cast<const char*>(b), size_t(len));
    push(v);
  }
  void push_global(std::string name) {
    auto v = doc_.make(Kind::Global);
    v->s = std::move(name);
    push(v);
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  ValuePtr pop(uint64_t at) {
    if (stack_.size() <= floor()) fail("{}: pickle stack underflow at offset {}", what_, at);
    ValuePtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  ValuePtr& top(uint64_t at) {
    if (stack_.size() <= floor()) fail("{}: pickle stack underflow at offset {}", what_, at);
    return stack_.back();
  }
  std::vector<ValuePtr> pop_mark(uint64_t at) {
    if (marks_.empty()) fail("{}: pickle opcode at offset {} needs a MARK", what_, at);
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> out(stack_.begin() + long(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  ValuePtr list_at(uint64_t at) {
    ValuePtr& l = top(at);
    if (l->kind != Kind::List && l->kind != Kind::Set)
      fail("{}: pickle append at offset {} to something that is not a list", what_, at);
    return l;
  }
  ValuePtr dict_at(uint64_t at) {
    ValuePtr& d = top(at);
    if (d->kind != Kind::Dict)
      fail("{}: pickle setitem at offset {} on something that is not a dict", what_, at);
    return d;
  }
  void memo_put(uint64_t key) {
    if (stack_.empty()) fail("{}: pickle memo put with an empty stack at offset {}", what_, pos_);
    memo_[key] = stack_.back();
  }
  void memo_get(uint64_t key, uint64_t at) {
    auto it = memo_.find(key);
    if (it == memo_.end())
      fail("{}: pickle memo key {} read at offset {} was never stored", what_, key, at);
    push(it->second);
  }

  const uint8_t* d_;
  uint64_t n_;
  uint64_t pos_ = 0;
  const std::string& what_;
  const Hooks& hooks_;
  Document& doc_;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, ValuePtr> memo_;
};

}  // namespace

std::unique_ptr<Document> load(const uint8_t* data, uint64_t size, const std::string& what,
                               const Hooks& hooks) {
  auto doc = std::make_unique<Document>();
  doc->root = Machine(data, size, what, hooks, *doc).run();
  return doc;
}

}  // namespace lr::pickle
