// A restricted unpickler: Python pickle data (protocols 2 to 5, the opcodes
// torch.save and HuggingFace state dicts use) decoded into a tree of plain
// values. Nothing is ever imported or executed: GLOBAL yields a Global value
// (its dotted name), NEWOBJ an opaque Object, BUILD records state on it, and
// every REDUCE (a call) goes to the caller's `call` hook, which either returns
// a value for an allowed callable or refuses (throws). Persistent ids
// (BINPERSID: torch storages) go to the `persistent` hook. A checkpoint is
// untrusted input: bad opcodes, a stack or memo underflow, truncation and
// oversized inputs are lr::Error naming the offset.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lr::pickle {

struct Value;
// Values live in their Document's arena (pickles may build cycles through the
// memo; raw pointers into an arena cannot leak them).
using ValuePtr = Value*;

enum class Kind { None, Bool, Int, Float, String, Bytes, Tuple, List, Dict, Set, Global, Object, Opaque };

struct Value {
  Kind kind = Kind::None;
  int64_t i = 0;                 // Bool, Int
  double f = 0;                  // Float
  std::string s;                 // String, Bytes; Global: "module.name"; Object: class name
  std::vector<ValuePtr> items;   // Tuple, List, Set; Dict: key, value, key, value, ...; Object: NEWOBJ args
  ValuePtr state;                // Object: BUILD state
  std::shared_ptr<void> opaque;  // Opaque: a value a hook made (a tensor, a storage)
  int tag = 0;                   // Opaque: the hook's type tag

  // The value of `key` in a Dict (string keys), or null.
  ValuePtr get(const std::string& key) const;
};

// The decoded pickle: every value it made, and the one STOP returned.
struct Document {
  std::vector<std::unique_ptr<Value>> arena;
  ValuePtr root = nullptr;
  ValuePtr make(Kind k);
};

struct Hooks {
  // REDUCE: `callable` is the Global value's dotted name; return the result
  // or throw lr::Error to refuse.
  // New values are made with doc.make().
  std::function<ValuePtr(Document& doc, const std::string& callable, ValuePtr args)> call;
  // BINPERSID: the persistent id (a Tuple for torch storages).
  std::function<ValuePtr(Document& doc, ValuePtr pid)> persistent;
};

// Decodes one pickle (up to STOP). `what` names the data in messages.
std::unique_ptr<Document> load(const uint8_t* data, uint64_t size, const std::string& what,
                               const Hooks& hooks);

}  // namespace lr::pickle
