#include "format/torch_checkpoint.h"

#include <algorithm>

#include "core/error.h"

namespace lr {

using pickle::Kind;
using pickle::Value;
using pickle::ValuePtr;

struct TorchCheckpoint::Storage {
  std::string type;  // "FloatStorage"
  std::optional<DType> dtype;
  uint64_t elem = 0;  // bytes per element
  uint64_t numel = 0;
  const uint8_t* data = nullptr;
};

struct TorchCheckpoint::Tensor {
  std::shared_ptr<const Storage> storage;
  std::vector<uint64_t> shape;  // GGML order
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
};

namespace {

constexpr int kTagStorage = 1, kTagTensor = 2;
constexpr int kMaxDepth = 64;
constexpr size_t kMaxDims = 8;

struct StorageType {
  const char* name;
  std::optional<DType> dtype;
  uint64_t elem;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", DType::F32, 4},     {"HalfStorage", DType::F16, 2},
    {"BFloat16Storage", DType::BF16, 2}, {"DoubleStorage", std::nullopt, 8},
    {"LongStorage", std::nullopt, 8},    {"IntStorage", std::nullopt, 4},
    {"ShortStorage", std::nullopt, 2},   {"CharStorage", std::nullopt, 1},
    {"ByteStorage", std::nullopt, 1},    {"BoolStorage", std::nullopt, 1},
};

const Value* arg(const std::string& p, const ValuePtr args, size_t i, Kind k, const char* fn) {
  if (args->items.size() <= i || args->items[i]->kind != k)
    fail("{}: malformed call of {}: argument {} missing or of the wrong type", p, fn, i);
  return args->items[i];
}

int64_t int_of(const std::string& p, const Value* v, const char* what) {
  if (v->kind != Kind::Int && v->kind != Kind::Bool) fail("{}: {} is not an integer", p, what);
  return v->i;
}

// Latin-1 bytes of a pickled str (UTF-8 of code points below 256), as
// protocol 2 writes bytes: _codecs.encode(s, "latin1").
std::string latin1(const std::string& p, const std::string& utf8) {
  std::string out;
  for (size_t i = 0; i < utf8.size(); ++i) {
    const uint8_t c = uint8_t(utf8[i]);
    if (c < 0x80) {
      out += char(c);
    } else if ((c & 0xe0) == 0xc0 && i + 1 < utf8.size() && c <= 0xc3) {
      out += char(((c & 0x1f) << 6) | (uint8_t(utf8[++i]) & 0x3f));
    } else {
      fail("{}: _codecs.encode of a string with characters beyond latin-1", p);
    }
  }
  return out;
}

}  // namespace

TorchCheckpoint::TorchCheckpoint(std::unique_ptr<ZipArchive> z) : zip_(std::move(z)) {}

std::unique_ptr<TorchCheckpoint> TorchCheckpoint::from_file(std::unique_ptr<MappedFile> f) {
  if (f->size() < 2 || f->data()[0] != 'P' || f->data()[1] != 'K')
    fail(
        "{}: not a zip-format PyTorch checkpoint (the legacy pre-1.6 torch.save format and other "
        "files are not read)",
        f->path());
  std::unique_ptr<TorchCheckpoint> c(new TorchCheckpoint(ZipArchive::from_file(std::move(f))));
  c->load();
  return c;
}

std::unique_ptr<TorchCheckpoint> TorchCheckpoint::open(const std::string& path) {
  return from_file(MappedFile::open(path));
}

std::unique_ptr<TorchCheckpoint> TorchCheckpoint::from_bytes(std::vector<uint8_t> bytes,
                                                             std::string name) {
  return from_file(MappedFile::from_bytes(std::move(bytes), std::move(name)));
}

// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...): a
// contiguous tensor's view of its storage, checked against the storage's size.
ValuePtr TorchCheckpoint::rebuild_tensor(const std::string& p, pickle::Document& doc,
                                         ValuePtr args) {
  const Value* sv = arg(p, args, 0, Kind::Opaque, "_rebuild_tensor_v2");
  if (sv->tag != kTagStorage) fail("{}: _rebuild_tensor_v2 of something that is not a storage", p);
  auto storage = std::static_pointer_cast<const Storage>(sv->opaque);
  const int64_t offset =
      int_of(p, arg(p, args, 1, Kind::Int, "_rebuild_tensor_v2"), "storage offset");
  const Value* size = arg(p, args, 2, Kind::Tuple, "_rebuild_tensor_v2");
  const Value* stride = arg(p, args, 3, Kind::Tuple, "_rebuild_tensor_v2");
  if (size->items.size() != stride->items.size() || size->items.size() > kMaxDims)
    fail("{}: tensor with {} sizes and {} strides (at most {} dimensions)", p, size->items.size(),
         stride->items.size(), kMaxDims);
  auto t = std::make_shared<Tensor>();
  t->storage = storage;
  uint64_t numel = 1, expect = 1;
  for (size_t d = size->items.size(); d-- > 0;) {
    const int64_t n = int_of(p, size->items[d], "tensor size");
    const int64_t s = int_of(p, stride->items[d], "tensor stride");
    if (n < 0 || s < 0) fail("{}: negative tensor size or stride", p);
    if (n != 1 && uint64_t(s) != expect)
      fail("{}: a non-contiguous tensor (size {} with stride {} in dimension {}) is not supported",
           p, n, s, d);
    if (n != 0 && numel > UINT64_MAX / uint64_t(n)) fail("{}: tensor size overflows", p);
    numel *= uint64_t(n);
    expect = numel;
    t->shape.push_back(uint64_t(n));  // reversed: GGML order
  }
  if (offset < 0 || uint64_t(offset) > storage->numel || numel > storage->numel - uint64_t(offset))
    fail("{}: tensor of {} elements at offset {} exceeds its {} of {} elements", p, numel, offset,
         storage->type, storage->numel);
  t->data = storage->data + uint64_t(offset) * storage->elem;
  t->nbytes = numel * storage->elem;
  ValuePtr v = doc.make(Kind::Opaque);
  v->tag = kTagTensor;
  v->opaque = t;
  return v;
}

void TorchCheckpoint::load() {
  const std::string& p = path();
  const ZipArchive::Entry* pkl = nullptr;
  for (const ZipArchive::Entry& e : zip_->entries()) {
    const std::string& n = e.name;
    if (n == "data.pkl" || (n.size() > 9 && n.compare(n.size() - 9, 9, "/data.pkl") == 0 &&
                            n.find('/') == n.size() - 9)) {
      if (pkl) fail("{}: two pickles ('{}' and '{}') in one checkpoint", p, pkl->name, n);
      pkl = &e;
    }
  }
  if (!pkl) fail("{}: no data.pkl: not a torch.save checkpoint", p);
  prefix_ = pkl->name.substr(0, pkl->name.size() - 8);
  if (const ZipArchive::Entry* bo = zip_->find(prefix_ + "byteorder")) {
    std::string order(reinterpret_cast<const char*>(zip_->data(*bo)), size_t(bo->size));
    if (order != "little")
      fail("{}: byte order '{}' is not supported (only little-endian)", p, order);
  }
  pickle::Hooks hooks;
  hooks.persistent = [&](pickle::Document& doc, ValuePtr pid) -> ValuePtr {
    if (pid->kind != Kind::Tuple || pid->items.size() < 5 || pid->items[0]->kind != Kind::String ||
        pid->items[0]->s != "storage" || pid->items[1]->kind != Kind::Global ||
        pid->items[2]->kind != Kind::String)
      fail("{}: a persistent id that is not a torch storage reference", p);
    const std::string& cls = pid->items[1]->s;
    const std::string type = cls.substr(cls.rfind('.') + 1);
    auto st =
        std::find_if(std::begin(kStorageTypes), std::end(kStorageTypes),
                     [&](const StorageType& t) { return cls == std::string("torch.") + t.name; });
    if (st == std::end(kStorageTypes)) fail("{}: unknown storage type {}", p, cls);
    const int64_t numel = int_of(p, pid->items[4], "storage size");
    const std::string rec = prefix_ + "data/" + pid->items[2]->s;
    const ZipArchive::Entry* e = zip_->find(rec);
    if (!e) fail("{}: storage record '{}' is missing", p, rec);
    if (numel < 0 || uint64_t(numel) > e->size / st->elem || uint64_t(numel) * st->elem != e->size)
      fail("{}: storage '{}' holds {} bytes, expected {} {}s of {} bytes", p, rec, e->size, numel,
           type, st->elem);
    auto s = std::make_shared<Storage>();
    s->type = type;
    s->dtype = st->dtype;
    s->elem = st->elem;
    s->numel = uint64_t(numel);
    s->data = zip_->data(*e);
    ValuePtr v = doc.make(Kind::Opaque);
    v->tag = kTagStorage;
    v->opaque = s;
    return v;
  };
  std::function<ValuePtr(pickle::Document&, const std::string&, ValuePtr)> call;
  call = [&](pickle::Document& doc, const std::string& fn, ValuePtr args) -> ValuePtr {
    if (fn == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(p, doc, args);
    if (fn == "torch._utils._rebuild_parameter" ||
        fn == "torch._utils._rebuild_parameter_with_state") {
      const Value* t = arg(p, args, 0, Kind::Opaque, "_rebuild_parameter");
      return const_cast<Value*>(t);
    }
    if (fn == "torch._tensor._rebuild_from_type_v2") {
      const Value* f = arg(p, args, 0, Kind::Global, "_rebuild_from_type_v2");
      const Value* inner = arg(p, args, 2, Kind::Tuple, "_rebuild_from_type_v2");
      if (f->s != "torch._utils._rebuild_tensor_v2")
        fail("{}: refusing to call {} (through _rebuild_from_type_v2)", p, f->s);
      return call(doc, f->s, const_cast<Value*>(inner));
    }
    if (fn == "collections.OrderedDict") return doc.make(Kind::Dict);
    // torch.device('cpu'), which transformers attaches to a model loaded with a
    // device_map (hf_device_map): kept as an inert object, like PyTorch's
    // weights-only loader allows it. Nothing reads it.
    if (fn == "torch.device") {
      ValuePtr d = doc.make(Kind::Object);
      d->s = fn;
      d->items = args->items;
      return d;
    }
    if (fn == "torch.Size") {
      const Value* t = arg(p, args, 0, Kind::Tuple, "torch.Size");
      return const_cast<Value*>(t);
    }
    if (fn == "builtins.set" || fn == "__builtin__.set") {
      ValuePtr s = doc.make(Kind::Set);
      if (!args->items.empty() &&
          (args->items[0]->kind == Kind::List || args->items[0]->kind == Kind::Set))
        s->items = args->items[0]->items;
      return s;
    }
    if (fn == "_codecs.encode") {
      ValuePtr b = doc.make(Kind::Bytes);
      b->s = latin1(p, arg(p, args, 0, Kind::String, "_codecs.encode")->s);
      return b;
    }
    fail(
        "{}: refusing to call {}: the checkpoint asks to run a function that does not rebuild "
        "tensors or containers (loading it with PyTorch could run arbitrary code)",
        p, fn);
  };
  hooks.call = call;
  const std::string what = p + ":" + pkl->name;
  doc_ = pickle::load(zip_->data(*pkl), pkl->size, what, hooks);
  for (const auto& v : doc_->arena)
    if (v->kind == Kind::Global || v->kind == Kind::Object) globals_.insert(v->s);
  walk(doc_->root, "", 0);
}

// A tensor, a dict (keys joined with dots) or a module object.
void TorchCheckpoint::walk(const Value* v, const std::string& prefix, int depth) {
  if (depth > kMaxDepth) fail("{}: checkpoint nested more than {} levels deep", path(), kMaxDepth);
  // Containers reached through the memo more than a few times over (a pickle
  // whose lists refer to themselves) would make the walk exponential.
  if (++walked_ > 4 * doc_->arena.size() + 1024)
    fail(
        "{}: the checkpoint's containers refer to each other too many times over to be a state "
        "dict",
        path());
  if (v->kind == Kind::Opaque && v->tag == kTagTensor) {
    if (prefix.empty()) fail("{}: the checkpoint is a bare tensor, not a state dict", path());
    tensors_[prefix.substr(0, prefix.size() - 1)] =
        std::static_pointer_cast<const Tensor>(v->opaque);
  } else if (v->kind == Kind::Dict) {
    for (size_t i = 0; i + 1 < v->items.size(); i += 2) {
      const Value* k = v->items[i];
      if (k->kind != Kind::String) continue;
      const Value* x = v->items[i + 1];
      // A module stored under "model" of the top dict ({'model': m, 'tokenizer': t})
      // is named from its own root, like model.state_dict().
      const bool root_module = depth == 0 && x->kind == Kind::Object && k->s == "model";
      walk(x, root_module ? prefix : prefix + k->s + ".", depth + 1);
    }
  } else if (v->kind == Kind::Tuple || v->kind == Kind::List) {
    for (size_t i = 0; i < v->items.size(); ++i)
      walk(v->items[i], prefix + std::to_string(i) + ".", depth + 1);
  } else if (v->kind == Kind::String && !prefix.empty()) {
    strings_[prefix.substr(0, prefix.size() - 1)] = v->s;
  } else if (v->kind == Kind::Object) {
    walk_module(v, prefix, depth + 1);
  }
}

// An nn.Module: _parameters, persistent _buffers, then _modules.
void TorchCheckpoint::walk_module(const Value* m, const std::string& prefix, int depth) {
  if (depth > kMaxDepth) fail("{}: module tree deeper than {} levels", path(), kMaxDepth);
  if (++walked_ > 4 * doc_->arena.size() + 1024)
    fail("{}: the checkpoint's modules refer to each other too many times over to be a model",
         path());
  const Value* st = m->state;
  if (!st || st->kind != Kind::Dict) return;  // not a module (e.g. a tokenizer's helper object)
  std::set<std::string> skip;
  if (const Value* np = st->get("_non_persistent_buffers_set"))
    for (const Value* x : np->items)
      if (x->kind == Kind::String) skip.insert(x->s);
  for (const char* field : {"_parameters", "_buffers"}) {
    const Value* d = st->get(field);
    if (!d || d->kind != Kind::Dict) continue;
    for (size_t i = 0; i + 1 < d->items.size(); i += 2) {
      const Value* k = d->items[i];
      const Value* t = d->items[i + 1];
      if (k->kind != Kind::String || t->kind != Kind::Opaque || t->tag != kTagTensor) continue;
      if (std::string(field) == "_buffers" && skip.count(k->s)) continue;
      tensors_[prefix + k->s] = std::static_pointer_cast<const Tensor>(t->opaque);
    }
  }
  if (const Value* mods = st->get("_modules"); mods && mods->kind == Kind::Dict)
    for (size_t i = 0; i + 1 < mods->items.size(); i += 2) {
      const Value* k = mods->items[i];
      const Value* c = mods->items[i + 1];
      if (k->kind == Kind::String && c->kind == Kind::Object)
        walk_module(c, prefix + k->s + ".", depth + 1);
    }
}

std::optional<TensorView> TorchCheckpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  const Tensor& t = *it->second;
  if (!t.storage->dtype)
    fail("{}: tensor '{}' is stored as {}, not a float type lowrank reads (F32, F16, BF16)", path(),
         name, t.storage->type);
  TensorView v;
  v.dtype = *t.storage->dtype;
  v.shape = t.shape;
  v.data = t.data;
  v.nbytes = t.nbytes;
  return v;
}

std::optional<TorchCheckpoint::Raw> TorchCheckpoint::find_raw(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  const Tensor& t = *it->second;
  return Raw{t.storage->type, t.storage->elem, t.shape, t.data, t.nbytes};
}

std::optional<std::string> TorchCheckpoint::find_string(const std::string& name) const {
  auto it = strings_.find(name);
  if (it == strings_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> TorchCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : tensors_) out.push_back(n);
  return out;
}

std::optional<std::string> TorchCheckpoint::storage_type(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  return it->second->storage->type;
}

}  // namespace lr
