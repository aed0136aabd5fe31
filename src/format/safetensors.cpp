// Safetensors reader and writer. The reader maps (or takes) file images and
// validates every header field before anything looks at the data. See
// safetensors.h for the checks and the message format.
#include "format/safetensors.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"
#include "format/mapped_file.h"

namespace lr {

using json = nlohmann::json;

namespace {

std::string quote(std::string_view s) {
  constexpr size_t kMaxShown = 200;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\\' || c == '\'')
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  }
  if (s.size() > kMaxShown)
    out += fmt::format("...' ({} bytes)", s.size());
  else
    out += "'";
  return out;
}

std::optional<DType> dtype_from_string(std::string_view s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  return std::nullopt;
}

const char* dtype_to_string(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    default:
      return nullptr;
  }
}

uint64_t dtype_size(std::string_view s) {
  static constexpr std::pair<std::string_view, uint64_t> sizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},
  };
  for (const auto& [name, size] : sizes)
    if (name == s) return size;
  return 0;
}

// A short, one-line description of a JSON value for messages.
std::string describe(const json& v) {
  if (v.is_number()) return fmt::format("number {}", v.dump());
  if (v.is_array()) return fmt::format("array of {}", v.size());
  return v.type_name();
}

bool as_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = uint64_t(v.get<int64_t>());
    return true;
  }
  return false;
}

std::string shape_str(const std::vector<uint64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Parse errors of nlohmann::json are one line already; keep them that way.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Parses JSON, rejecting duplicate keys in an object (nlohmann would silently
// keep the last one) and nesting deeper than any valid header or index needs.
json parse_json(const std::string& path, const char* what, const char* begin, const char* end) {
  constexpr int kMaxDepth = 16;
  std::vector<std::unordered_set<std::string>> keys;  // one set per open object
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth > kMaxDepth) fail("{}: {} nests deeper than {} levels", path, what, kMaxDepth);
        if (ev == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second)
          fail("{}: duplicate key {} in {}", path, quote(parsed.get<std::string>()), what);
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(begin, end, cb);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON in {}: {}", path, what, one_line(e.what()));
  }
}

// A shard name from an index must name a file inside the model directory.
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

// A tensor's bytes in a shard's data buffer.
struct ByteSpan {
  uint64_t begin, end;
  const std::string* name;
};

// Tensors must not share bytes (empty tensors take none).
void check_no_overlap(const std::string& p, std::vector<ByteSpan>& spans) {
  std::sort(spans.begin(), spans.end(), [](const ByteSpan& a, const ByteSpan& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const ByteSpan* prev = nullptr;  // the non-empty span reaching furthest so far
  for (const ByteSpan& s : spans) {
    if (s.begin == s.end) continue;
    if (prev && s.begin < prev->end)
      fail("{}: tensors {} (data_offsets [{}, {}]) and {} (data_offsets [{}, {}]) overlap", p,
           quote(*prev->name), prev->begin, prev->end, quote(*s.name), s.begin, s.end);
    if (!prev || s.end > prev->end) prev = &s;
  }
}

}  // namespace

// One file image: mmap'd (open_file / open_dir) or owned (from_bytes).
struct SafetensorsSource::Shard {
  std::string path;  // for messages
  std::string file;  // name within the model directory (sharded sources)
  std::unique_ptr<MappedFile> image;
  const uint8_t* base = nullptr;  // image->data()
  uint64_t size = 0;              // image->size()

  static std::unique_ptr<Shard> of(std::unique_ptr<MappedFile> image) {
    auto sh = std::make_unique<Shard>();
    sh->path = image->path();
    sh->base = image->data();
    sh->size = image->size();
    sh->image = std::move(image);
    return sh;
  }
  static std::unique_ptr<Shard> map_file(const std::string& path) {
    return of(MappedFile::open(path));
  }
};

SafetensorsSource::~SafetensorsSource() = default;

void SafetensorsSource::parse_shard(size_t si) {
  const Shard& sh = *shards_[si];
  const std::string& p = sh.path;
  if (sh.size < 8) fail("{}: file is {} bytes, too short for the 8-byte header length", p, sh.size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | sh.base[i];
  if (n > kSafetensorsMaxHeader)
    fail("{}: header length {} exceeds the limit of {} bytes", p, n, kSafetensorsMaxHeader);
  if (n > sh.size - 8)
    fail("{}: header length {} exceeds the {} bytes after the length field (file size {})", p, n,
         sh.size - 8, sh.size);
  const char* hb = reinterpret_cast<const char*>(sh.base + 8);
  json j = parse_json(p, "header", hb, hb + n);
  if (!j.is_object()) fail("{}: header must be a JSON object, found {}", p, describe(j));

  const uint8_t* buf = sh.base + 8 + n;
  const uint64_t buf_size = sh.size - 8 - n;
  std::vector<ByteSpan> spans;
  std::map<std::string, std::string> meta;

  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const json& val = item.value();
    if (key == "__metadata__") {
      if (!val.is_object())
        fail("{}: '__metadata__' must be an object of strings, found {}", p, describe(val));
      for (auto& [mk, mv] : val.items()) {
        if (!mv.is_string())
          fail("{}: '__metadata__' key {} must be a string, found {}", p, quote(mk), describe(mv));
        meta.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    const std::string nm = quote(key);
    if (!val.is_object())
      fail("{}: tensor {} must be a JSON object, found {}", p, nm, describe(val));
    auto field = [&](const char* f) -> const json& {
      auto it = val.find(f);
      if (it == val.end()) fail("{}: tensor {} is missing field '{}'", p, nm, f);
      return *it;
    };

    const json& jd = field("dtype");
    if (!jd.is_string())
      fail("{}: tensor {} field 'dtype' must be a string, found {}", p, nm, describe(jd));
    Entry e;
    e.dtype_str = jd.get<std::string>();
    e.dtype = dtype_from_string(e.dtype_str);

    const json& js = field("shape");
    if (!js.is_array())
      fail("{}: tensor {} field 'shape' must be an array of integers, found {}", p, nm,
           describe(js));
    if (js.size() > kSafetensorsMaxDims)
      fail("{}: tensor {} field 'shape' has {} dimensions, at most {} are supported", p, nm,
           js.size(), kSafetensorsMaxDims);
    std::vector<uint64_t> shape;  // row-major, as in the file
    for (size_t d = 0; d < js.size(); ++d) {
      uint64_t v;
      if (!as_u64(js[d], v))
        fail("{}: tensor {} field 'shape'[{}] must be a non-negative integer, found {}", p, nm, d,
             describe(js[d]));
      shape.push_back(v);
    }

    const json& jo = field("data_offsets");
    if (!jo.is_array() || jo.size() != 2)
      fail("{}: tensor {} field 'data_offsets' must be an array of 2 integers, found {}", p, nm,
           describe(jo));
    uint64_t off[2];
    for (size_t k = 0; k < 2; ++k)
      if (!as_u64(jo[k], off[k]))
        fail("{}: tensor {} field 'data_offsets'[{}] must be a non-negative integer, found {}", p,
             nm, k, describe(jo[k]));
    const uint64_t begin = off[0], end = off[1];
    if (end < begin)
      fail("{}: tensor {} data_offsets [{}, {}]: end is before begin", p, nm, begin, end);
    if (end > buf_size)
      fail(
          "{}: tensor {} data_offsets [{}, {}] extend past the end of the data buffer "
          "({} bytes)",
          p, nm, begin, end, buf_size);

    uint64_t elems = 1;
    for (uint64_t d : shape)
      if (__builtin_mul_overflow(elems, d, &elems))
        fail("{}: tensor {} shape {} has too many elements (overflows 64 bits)", p, nm,
             shape_str(shape));
    // Sizes of dtypes this reader does not know (newer or sub-byte formats)
    // cannot be checked; find() refuses those tensors anyway.
    if (uint64_t esize = dtype_size(e.dtype_str); esize != 0) {
      uint64_t bytes;
      if (__builtin_mul_overflow(elems, esize, &bytes))
        fail("{}: tensor {} of dtype {} and shape {} overflows 64 bits in size", p, nm, e.dtype_str,
             shape_str(shape));
      if (bytes != end - begin)
        fail(
            "{}: tensor {} of dtype {} and shape {} needs {} bytes, but data_offsets [{}, {}] "
            "span {}",
            p, nm, e.dtype_str, shape_str(shape), bytes, begin, end, end - begin);
    }

    e.shape.assign(shape.rbegin(), shape.rend());  // GGML order
    e.data = buf + begin;
    e.nbytes = end - begin;
    e.shard = si;
    auto [it, inserted] = tensors_.emplace(key, std::move(e));
    if (!inserted)
      fail("{}: tensor {} is in both {} and {}", path_, nm, shards_[it->second.shard]->path, p);
    spans.push_back({begin, end, &it->first});
  }

  check_no_overlap(p, spans);

  for (auto& [k, v] : meta) metadata_.emplace(k, std::move(v));
}

std::unique_ptr<SafetensorsSource> SafetensorsSource::open_file(const std::string& path) {
  std::unique_ptr<SafetensorsSource> s(new SafetensorsSource());
  s->path_ = path;
  s->shards_.push_back(Shard::map_file(path));
  s->parse_shard(0);
  return s;
}

std::unique_ptr<SafetensorsSource> SafetensorsSource::from_bytes(std::vector<uint8_t> bytes,
                                                                 std::string name) {
  std::unique_ptr<SafetensorsSource> s(new SafetensorsSource());
  s->path_ = name;
  s->shards_.push_back(Shard::of(MappedFile::from_bytes(std::move(bytes), std::move(name))));
  s->parse_shard(0);
  return s;
}

std::unique_ptr<SafetensorsSource> SafetensorsSource::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory", dir);
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec))
      fail("{}: no model.safetensors or model.safetensors.index.json in the directory", dir);
    auto s = open_file(single_path.string());
    s->path_ = dir;
    return s;
  }

  // The index: {"metadata": {...}, "weight_map": {"<tensor>": "<shard file>", ...}}.
  const std::string ip = index_path.string();
  std::string text;
  {
    std::ifstream in(index_path, std::ios::binary);
    if (!in) fail("{}: cannot open", ip);
    in.seekg(0, std::ios::end);
    auto len = in.tellg();
    if (len < 0) fail("{}: cannot read", ip);
    if (uint64_t(len) > kSafetensorsMaxHeader)
      fail("{}: index is {} bytes, larger than the limit of {} bytes", ip, uint64_t(len),
           kSafetensorsMaxHeader);
    text.resize(size_t(len));
    in.seekg(0);
    if (!in.read(text.data(), len)) fail("{}: cannot read", ip);
  }
  json j = parse_json(ip, "index", text.data(), text.data() + text.size());
  if (!j.is_object()) fail("{}: index must be a JSON object, found {}", ip, describe(j));
  auto wm = j.find("weight_map");
  if (wm == j.end()) fail("{}: missing field 'weight_map'", ip);
  if (!wm->is_object())
    fail("{}: field 'weight_map' must be an object of strings, found {}", ip, describe(*wm));
  if (wm->empty()) fail("{}: field 'weight_map' lists no tensors", ip);

  std::map<std::string, size_t> shard_index;  // file name -> index into shards_, sorted
  for (auto& [tensor, file] : wm->items()) {
    if (!file.is_string())
      fail("{}: weight_map entry {} must be a string, found {}", ip, quote(tensor), describe(file));
    const std::string f = file.get<std::string>();
    if (!plain_file_name(f))
      fail(
          "{}: weight_map entry {} names shard {}, which is not a file name in the model "
          "directory",
          ip, quote(tensor), quote(f));
    shard_index.emplace(f, 0);
  }

  std::unique_ptr<SafetensorsSource> s(new SafetensorsSource());
  s->path_ = dir;
  for (auto& [file, idx] : shard_index) {
    idx = s->shards_.size();
    s->shards_.push_back(Shard::map_file((fs::path(dir) / file).string()));
    s->shards_.back()->file = file;
    s->parse_shard(idx);
  }
  for (auto& [tensor, file] : wm->items()) {
    const std::string f = file.get<std::string>();
    auto it = s->tensors_.find(tensor);
    if (it == s->tensors_.end())
      fail("{}: tensor {} is listed in the index under shard {} but is missing from that file", ip,
           quote(tensor), quote(f));
    const Shard& actual = *s->shards_[it->second.shard];
    if (actual.file != f)
      fail(
          "{}: tensor {} is listed in the index under shard {} but is missing from that file "
          "(it is in {})",
          ip, quote(tensor), quote(f), quote(actual.file));
  }
  return s;
}

std::optional<TensorView> SafetensorsSource::find(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  const Entry& e = it->second;
  if (!e.dtype) {
    const bool known = dtype_size(e.dtype_str) != 0;
    fail("{}: tensor {} has {}dtype {}, which lowrank cannot read (supported: F32, F16, BF16)",
         shards_[e.shard]->path, quote(name), known ? "" : "unknown ", quote(e.dtype_str));
  }
  return TensorView{*e.dtype, e.shape, e.data, e.nbytes, nullptr};
}

std::vector<std::string> SafetensorsSource::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [k, v] : tensors_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> SafetensorsSource::dtype_string(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  return it->second.dtype_str;
}

// --- writer -----------------------------------------------------------------

std::vector<uint8_t> safetensors_to_bytes(const std::vector<SafetensorsTensor>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = h["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::unordered_set<std::string> names;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    const std::string nm = quote(t.name);
    if (t.name.empty()) fail("safetensors writer: empty tensor name");
    if (t.name == "__metadata__")
      fail("safetensors writer: tensor name '__metadata__' is reserved");
    if (!names.insert(t.name).second) fail("safetensors writer: duplicate tensor name {}", nm);
    const char* dt = dtype_to_string(t.dtype);
    if (!dt)
      fail(
          "safetensors writer: tensor {} has dtype {}, which safetensors cannot store "
          "(supported: F32, F16, BF16)",
          nm, dtype_name(t.dtype));
    if (t.shape.size() > kSafetensorsMaxDims)
      fail("safetensors writer: tensor {} has {} dimensions, at most {} are supported", nm,
           t.shape.size(), kSafetensorsMaxDims);
    uint64_t bytes = dtype_size(dt);
    for (int64_t d : t.shape) {
      if (d < 0) fail("safetensors writer: tensor {} has negative dimension {}", nm, d);
      if (__builtin_mul_overflow(bytes, uint64_t(d), &bytes))
        fail("safetensors writer: tensor {} is too large (size overflows 64 bits)", nm);
    }
    if (bytes != t.bytes.size())
      fail("safetensors writer: tensor {} of dtype {} and shape [{}] needs {} bytes, got {}", nm,
           dt, fmt::join(t.shape, ", "), bytes, t.bytes.size());
    h[t.name] = {{"dtype", dt},
                 {"shape", t.shape},
                 {"data_offsets", nlohmann::ordered_json::array({offset, offset + bytes})}};
    offset += bytes;
  }
  std::string header;
  try {
    header = h.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    fail("safetensors writer: cannot encode header: {}", one_line(e.what()));
  }
  header.resize((header.size() + 7) / 8 * 8, ' ');

  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + offset);
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(uint64_t(header.size()) >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (const SafetensorsTensor& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<uint8_t> bytes = safetensors_to_bytes(tensors, metadata);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("{}: cannot open for writing: {}", path, std::strerror(errno));
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  out.close();
  if (!out) fail("{}: write failed: {}", path, std::strerror(errno));
}

}  // namespace lr
