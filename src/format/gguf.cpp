// GGUF reader: maps (or takes) a file image and validates every field before
// anything else looks at it. See gguf.h for the checks and the message format.
#include "format/gguf.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>

#include "core/error.h"
#include "format/gguf_internal.h"

namespace lr::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
      return "UINT8";
    case ValueType::INT8:
      return "INT8";
    case ValueType::UINT16:
      return "UINT16";
    case ValueType::INT16:
      return "INT16";
    case ValueType::UINT32:
      return "UINT32";
    case ValueType::INT32:
      return "INT32";
    case ValueType::FLOAT32:
      return "FLOAT32";
    case ValueType::BOOL:
      return "BOOL";
    case ValueType::STRING:
      return "STRING";
    case ValueType::ARRAY:
      return "ARRAY";
    case ValueType::UINT64:
      return "UINT64";
    case ValueType::INT64:
      return "INT64";
    case ValueType::FLOAT64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

size_t Value::array_size() const {
  if (type != ValueType::ARRAY) return 0;
  switch (elem) {
    case ValueType::STRING:
      return strs.size();
    case ValueType::ARRAY:
      return items.size();
    case ValueType::FLOAT32:
    case ValueType::FLOAT64:
      return floats.size();
    default:
      return ints.size();
  }
}

uint64_t TensorInfo::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // validated by the reader not to overflow
  return n;
}

namespace detail {
std::string describe_type(const Value& v) {
  if (v.type == ValueType::ARRAY) return fmt::format("ARRAY[{}]", value_type_name(v.elem));
  return std::string(value_type_name(v.type));
}
}  // namespace detail

namespace {

using detail::min_encoded_size;

// GGML's names for type ids, for messages about types lowrank does not read.
std::string_view ggml_type_name(uint32_t id) {
  // Empty: ids that GGML has removed.
  static constexpr std::string_view names[] = {
      "F32",     "F16",   "Q4_0",   "Q4_1",  "",      "",       "Q5_0", "Q5_1",    "Q8_0",
      "Q8_1",    "Q2_K",  "Q3_K",   "Q4_K",  "Q5_K",  "Q6_K",   "Q8_K", "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",   "I16",     "I32",
      "I64",     "F64",   "IQ1_M",  "BF16",  "",      "",       "",     "TQ1_0",   "TQ2_0",
      "",        "",      "",       "MXFP4", "NVFP4", "Q1_0"};
  if (id < std::size(names)) return names[id];
  return {};
}

// File-supplied text (keys, tensor names) made safe for a one-line message:
// control bytes are escaped and very long text is cut.
std::string printable(std::string_view s) {
  constexpr size_t kMax = 120;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    auto ch = static_cast<unsigned char>(s[i]);
    if (ch < 0x20 || ch == 0x7f)
      out += fmt::format("\\x{:02x}", ch);
    else
      out += char(ch);
  }
  if (s.size() > kMax) out += fmt::format("...({} bytes)", s.size());
  return out;
}

std::string shape_str(const std::vector<uint64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Bounds-checked little-endian reads over the file image. `ctx` names what is
// being parsed (e.g. "metadata key 'general.name'") for error messages.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, uint64_t size)
      : path_(path), base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  void set_ctx(std::string ctx) { ctx_ = std::move(ctx); }
  const std::string& ctx() const { return ctx_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail(
          "{}: unexpected end of file reading {} ({}) at offset {}: need {} bytes, {} left "
          "(file size {})",
          path_, what, ctx_, pos_, n, remaining(), size_);
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_string(std::string_view what) {
    uint64_t n = read<uint64_t>(what);
    if (n > remaining())
      fail(
          "{}: {} length {} ({}) runs past end of file: {} bytes left at offset {} (file size "
          "{})",
          path_, what, n, ctx_, remaining(), pos_, size_);
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), size_t(n));
    pos_ += n;
    return s;
  }

  // Fails when `count` items of at least `min_size` bytes each could not fit
  // even in the whole file (a corrupt count, not a truncation: a truncated file
  // fails later, at the read that runs out, with a message naming the field).
  void check_count(uint64_t count, uint64_t min_size, std::string_view what) const {
    if (min_size != 0 && count > size_ / min_size)
      fail(
          "{}: {} {} ({}) is implausible: needs at least {} bytes each, but the file has only "
          "{} bytes",
          path_, what, count, ctx_, min_size, size_);
  }
  // How many items to reserve for `count` items of at least `min_size` bytes:
  // never more than what is left could hold.
  size_t reserve_for(uint64_t count, uint64_t min_size) const {
    return size_t(std::min(count, remaining() / min_size));
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string ctx_ = "header";
};

void read_array(Cursor& c, const std::string& path, Value& v, int depth);

void read_scalar(Cursor& c, const std::string& path, ValueType t, Value& v) {
  switch (t) {
    case ValueType::UINT8:
      v.i = c.read<uint8_t>("UINT8 value");
      break;
    case ValueType::INT8:
      v.i = c.read<int8_t>("INT8 value");
      break;
    case ValueType::UINT16:
      v.i = c.read<uint16_t>("UINT16 value");
      break;
    case ValueType::INT16:
      v.i = c.read<int16_t>("INT16 value");
      break;
    case ValueType::UINT32:
      v.i = c.read<uint32_t>("UINT32 value");
      break;
    case ValueType::INT32:
      v.i = c.read<int32_t>("INT32 value");
      break;
    case ValueType::UINT64:
      v.i = int64_t(c.read<uint64_t>("UINT64 value"));
      break;
    case ValueType::INT64:
      v.i = c.read<int64_t>("INT64 value");
      break;
    case ValueType::FLOAT32:
      v.f = detail::f32_bits_to_double(c.read<uint32_t>("FLOAT32 value"));
      break;
    case ValueType::FLOAT64:
      v.f = c.read<double>("FLOAT64 value");
      break;
    case ValueType::BOOL: {
      uint8_t b = c.read<uint8_t>("BOOL value");
      if (b > 1) fail("{}: {}: BOOL value is {}, expected 0 or 1", path, c.ctx(), b);
      v.i = b;
      break;
    }
    case ValueType::STRING:
      v.s = std::string(c.read_string("string"));
      break;
    case ValueType::ARRAY:
      read_array(c, path, v, 1);
      break;
  }
}

void read_array(Cursor& c, const std::string& path, Value& v, int depth) {
  if (depth > kMaxArrayDepth)
    fail("{}: {}: arrays nested deeper than {} levels", path, c.ctx(), kMaxArrayDepth);
  uint32_t et = c.read<uint32_t>("array element type");
  if (!detail::known_value_type(et))
    fail("{}: {}: array has unknown element type {}", path, c.ctx(), et);
  v.elem = ValueType(et);
  uint64_t n = c.read<uint64_t>("array length");
  uint64_t min_size = min_encoded_size(v.elem);
  c.check_count(n, min_size, "array length");
  size_t reserve = c.reserve_for(n, min_size);
  switch (v.elem) {
    case ValueType::STRING:
      v.strs.reserve(reserve);
      for (uint64_t k = 0; k < n; ++k) v.strs.emplace_back(c.read_string("array string"));
      break;
    case ValueType::ARRAY:
      v.items.reserve(reserve);
      for (uint64_t k = 0; k < n; ++k) {
        Value& item = v.items.emplace_back();
        item.type = ValueType::ARRAY;
        read_array(c, path, item, depth + 1);
      }
      break;
    case ValueType::FLOAT32:
    case ValueType::FLOAT64: {
      v.floats.reserve(reserve);
      Value tmp;
      for (uint64_t k = 0; k < n; ++k) {
        read_scalar(c, path, v.elem, tmp);
        v.floats.push_back(tmp.f);
      }
      break;
    }
    default: {
      v.ints.reserve(reserve);
      Value tmp;
      for (uint64_t k = 0; k < n; ++k) {
        read_scalar(c, path, v.elem, tmp);
        v.ints.push_back(tmp.i);
      }
      break;
    }
  }
}

// One tensor info after its name: dimensions, type, byte size and data
// offset, each checked (shown: the name as messages print it).
TensorInfo read_tensor_info(Cursor& c, const std::string& path, uint64_t alignment,
                            std::string_view tname, const std::string& shown) {
  TensorInfo ti;
  ti.name = std::string(tname);
  uint32_t n_dims = c.read<uint32_t>("dimension count");
  if (n_dims < 1 || n_dims > kMaxDims)
    fail("{}: tensor '{}' has {} dimensions, expected 1 to {}", path, shown, n_dims, kMaxDims);
  uint64_t elems = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t dim = c.read<uint64_t>("dimension");
    if (dim == 0) fail("{}: tensor '{}' dimension {} is 0", path, shown, d);
    ti.shape.push_back(dim);
    if (__builtin_mul_overflow(elems, dim, &elems) ||
        elems > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("{}: tensor '{}' shape {}... has too many elements (overflows int64)", path, shown,
           shape_str(ti.shape));
  }
  uint32_t type_id = c.read<uint32_t>("type");
  if (!dtype_info(type_id)) {
    std::string_view gname = ggml_type_name(type_id);
    if (gname.empty()) fail("{}: tensor '{}' has unknown ggml type id {}", path, shown, type_id);
    fail("{}: tensor '{}' has type {} (ggml type id {}), which is not supported", path, shown,
         gname, type_id);
  }
  ti.dtype = DType(type_id);
  DTypeInfo info = dtype_info(ti.dtype);
  auto row = row_bytes(ti.dtype, ti.shape[0]);
  if (!row)
    fail(
        "{}: tensor '{}' shape {}: row of {} elements is not a multiple of the {} block "
        "size {}",
        path, shown, shape_str(ti.shape), ti.shape[0], info.name, info.block_elems);
  uint64_t nbytes = *row;
  for (size_t d = 1; d < ti.shape.size(); ++d)
    if (__builtin_mul_overflow(nbytes, ti.shape[d], &nbytes))
      fail("{}: tensor '{}' shape {} of {}: byte size overflows", path, shown, shape_str(ti.shape),
           info.name);
  ti.nbytes = nbytes;
  ti.offset = c.read<uint64_t>("data offset");
  if (ti.offset % alignment != 0)
    fail("{}: tensor '{}' data offset {} is misaligned (not a multiple of alignment {})", path,
         shown, ti.offset, alignment);
  return ti;
}

}  // namespace

File::~File() = default;

std::shared_ptr<File> File::from_file(std::unique_ptr<MappedFile> image) {
  std::shared_ptr<File> f(new File());
  f->path_ = image->path();
  f->base_ = image->data();
  f->size_ = image->size();
  f->image_ = std::move(image);
  f->parse();
  return f;
}

std::shared_ptr<File> File::open(const std::string& path) {
  return from_file(MappedFile::open(path));
}

std::shared_ptr<File> File::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  return from_file(MappedFile::from_bytes(std::move(bytes), std::move(name)));
}

void File::parse() {
  try {
    Cursor c(path_, base_, size_);
    if (size_ < 4) fail("{}: not a GGUF file (only {} bytes)", path_, size_);
    uint32_t magic = c.read<uint32_t>("magic");
    if (magic != detail::kMagic)
      fail("{}: not a GGUF file (bad magic 0x{:08x}, expected 0x{:08x} \"GGUF\")", path_, magic,
           detail::kMagic);
    version_ = c.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3) {
      uint32_t swapped = __builtin_bswap32(version_);
      if (swapped == 2 || swapped == 3)
        fail(
            "{}: unsupported GGUF version {} (a big-endian GGUF v{}; only little-endian files "
            "are supported)",
            path_, version_, swapped);
      fail("{}: unsupported GGUF version {} (supported: 2, 3)", path_, version_);
    }
    uint64_t n_tensors = c.read<uint64_t>("tensor count");
    uint64_t n_kv = c.read<uint64_t>("metadata count");
    // Smallest key/value: 8-byte key length + 4-byte type + 1-byte value.
    c.check_count(n_kv, 8 + 4 + 1, "metadata count");

    for (uint64_t k = 0; k < n_kv; ++k) {
      c.set_ctx(fmt::format("metadata entry #{}", k));
      std::string_view key = c.read_string("key");
      std::string shown = printable(key);
      c.set_ctx(fmt::format("metadata key '{}'", shown));
      auto [it, inserted] = kv_index_.emplace(key, size_t(k));
      if (!inserted)
        fail("{}: duplicate metadata key '{}' (entries #{} and #{})", path_, shown, it->second, k);
      uint32_t t = c.read<uint32_t>("value type");
      if (!detail::known_value_type(t))
        fail("{}: metadata key '{}' has unknown value type {}", path_, shown, t);
      auto& [name, value] = kv_.emplace_back(std::string(key), Value{});
      value.type = ValueType(t);
      read_scalar(c, path_, value.type, value);
    }

    if (const Value* a = find("general.alignment")) {
      if (a->type != ValueType::UINT32)
        fail("{}: metadata key 'general.alignment' has type {}, expected UINT32", path_,
             detail::describe_type(*a));
      uint64_t al = uint64_t(a->i);
      if (al == 0 || (al & (al - 1)) != 0)
        fail("{}: general.alignment must be a nonzero power of two, got {}", path_, al);
      alignment_ = al;
    }

    // Checked here so that a file cut inside its metadata reports that first.
    // Smallest tensor info: name length + n_dims + one dim + type + offset.
    c.set_ctx("header");
    c.check_count(n_tensors, 8 + 4 + 8 + 4 + 8, "tensor count");
    for (uint64_t k = 0; k < n_tensors; ++k) {
      c.set_ctx(fmt::format("tensor info #{}", k));
      std::string_view tname = c.read_string("name");
      std::string shown = printable(tname);
      c.set_ctx(fmt::format("tensor '{}'", shown));
      auto [it, inserted] = tensor_index_.emplace(tname, size_t(k));
      if (!inserted)
        fail("{}: duplicate tensor name '{}' (tensor infos #{} and #{})", path_, shown, it->second,
             k);
      tensors_.push_back(read_tensor_info(c, path_, alignment_, tname, shown));
    }

    // The data section starts at the next multiple of the alignment. A file
    // without tensors may end before it.
    uint64_t pos = c.pos();
    uint64_t pad = (alignment_ - pos % alignment_) % alignment_;
    data_offset_ = pos + pad;  // pos <= size_ < 2^63 and pad < 2^32: no overflow
    for (TensorInfo& ti : tensors_) {
      if (data_offset_ > size_ || ti.offset > size_ - data_offset_ ||
          ti.nbytes > size_ - data_offset_ - ti.offset)
        fail(
            "{}: tensor '{}' data [offset {}, {} bytes] extends past end of file (data section "
            "starts at {}, file size {})",
            path_, printable(ti.name), ti.offset, ti.nbytes, data_offset_, size_);
      ti.data = base_ + data_offset_ + ti.offset;
    }
  } catch (const std::bad_alloc&) {
    fail("{}: out of memory while parsing ({} bytes)", path_, size_);
  } catch (const std::length_error&) {
    fail("{}: out of memory while parsing ({} bytes)", path_, size_);
  }
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("{}: missing tensor '{}'", path_, printable(name));
  return *t;
}

namespace {

[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const Value& v,
                             std::string_view expected) {
  fail("{}: metadata key '{}' has type {}, expected {}", path, printable(key),
       detail::describe_type(v), expected);
}

int64_t as_int(const std::string& path, std::string_view key, const Value& v) {
  if (!detail::is_integer(v.type)) wrong_type(path, key, v, "integer");
  if (v.type == ValueType::UINT64 && v.i < 0)
    fail("{}: metadata key '{}' value {} does not fit in int64", path, printable(key),
         uint64_t(v.i));
  return v.i;
}

double as_float(const std::string& path, std::string_view key, const Value& v) {
  if (!detail::is_float(v.type)) wrong_type(path, key, v, "float");
  return v.f;
}

bool as_bool(const std::string& path, std::string_view key, const Value& v) {
  if (v.type != ValueType::BOOL) wrong_type(path, key, v, "BOOL");
  return v.i != 0;
}

const std::string& as_string(const std::string& path, std::string_view key, const Value& v) {
  if (v.type != ValueType::STRING) wrong_type(path, key, v, "STRING");
  return v.s;
}

}  // namespace

namespace {
const Value& require(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (!v) fail("{}: missing metadata key '{}'", f.path(), printable(key));
  return *v;
}
}  // namespace

std::string File::get_string(std::string_view key) const {
  return as_string(path_, key, require(*this, key));
}
int64_t File::get_int(std::string_view key) const {
  return as_int(path_, key, require(*this, key));
}
double File::get_float(std::string_view key) const {
  return as_float(path_, key, require(*this, key));
}
bool File::get_bool(std::string_view key) const {
  return as_bool(path_, key, require(*this, key));
}

std::string File::get_string(std::string_view key, std::string def) const {
  const Value* v = find(key);
  return v ? as_string(path_, key, *v) : def;
}
int64_t File::get_int(std::string_view key, int64_t def) const {
  const Value* v = find(key);
  return v ? as_int(path_, key, *v) : def;
}
double File::get_float(std::string_view key, double def) const {
  const Value* v = find(key);
  return v ? as_float(path_, key, *v) : def;
}
bool File::get_bool(std::string_view key, bool def) const {
  const Value* v = find(key);
  return v ? as_bool(path_, key, *v) : def;
}

const std::vector<std::string>& File::get_strings(std::string_view key) const {
  const Value* v = &require(*this, key);
  if (v->type != ValueType::ARRAY || v->elem != ValueType::STRING)
    wrong_type(path_, key, *v, "ARRAY[STRING]");
  return v->strs;
}
const std::vector<int64_t>& File::get_ints(std::string_view key) const {
  const Value* v = &require(*this, key);
  if (v->type != ValueType::ARRAY || !detail::is_integer(v->elem))
    wrong_type(path_, key, *v, "array of integers");
  return v->ints;
}
const std::vector<double>& File::get_floats(std::string_view key) const {
  const Value* v = &require(*this, key);
  if (v->type != ValueType::ARRAY || !detail::is_float(v->elem))
    wrong_type(path_, key, *v, "array of floats");
  return v->floats;
}

}  // namespace lr::gguf
