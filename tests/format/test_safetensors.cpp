// Safetensors reader and writer: round trips, HF directories (single file and
// sharded), and malformed input, where every case must throw lr::Error with a
// one-line message "<path>: <problem>" naming the tensor / field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "format/safetensors.h"

namespace lr {
namespace {

namespace fs = std::filesystem;

// The message of the lr::Error thrown by f ("" and a failure if none). Checks
// it is one line starting with "<prefix>: ".
template <typename F>
std::string error_of(const std::string& prefix, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(prefix + ": ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "no lr::Error thrown";
  return "";
}

// msg contains every one of words.
void expect_words(const std::string& msg, std::initializer_list<std::string> words) {
  for (const std::string& w : words)
    EXPECT_NE(msg.find(w), std::string::npos) << "message: " << msg << "\nmissing: " << w;
}

// A hand-built file: u64 header length, header text, data buffer.
std::vector<uint8_t> image(const std::string& header, size_t buffer_bytes = 0,
                           uint8_t fill = 0) {
  std::vector<uint8_t> b;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b.push_back(uint8_t(n >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), buffer_bytes, fill);
  return b;
}

std::string parse_error(const std::string& header, size_t buffer_bytes = 0) {
  return error_of("bad.safetensors", [&] {
    SafetensorsSource::from_bytes(image(header, buffer_bytes), "bad.safetensors");
  });
}

std::vector<uint8_t> iota_bytes(size_t n, uint8_t start = 1) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(start + i * 7);
  return b;
}

// A fresh, empty directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           fmt::format("lowrank_st_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
  std::string str() const { return path.string(); }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<SafetensorsTensor> sample_tensors() {
  std::vector<float> f32 = {1.5f, -2.f, 3.25f, 0.f, 1e-3f, -7.f, 42.f, 8.f, 9.f, 10.f, 11.f, 12.f};
  std::vector<uint8_t> f32b(f32.size() * 4);
  std::memcpy(f32b.data(), f32.data(), f32b.size());
  std::vector<float> h = {0.5f, -1.f, 65504.f, 1e-4f, 3.f};
  std::vector<uint8_t> f16b(h.size() * 2), bf16b(12 * 2);
  quantize(DType::F16, h.data(), f16b.data(), int64_t(h.size()));
  std::vector<float> b(12);
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i) * 0.37f - 2.f;
  quantize(DType::BF16, b.data(), bf16b.data(), int64_t(b.size()));
  return {
      {"model.layers.0.self_attn.q_proj.weight", DType::F32, {3, 4}, f32b},
      {"norm", DType::F16, {5}, f16b},
      {"cube", DType::BF16, {2, 3, 2}, bf16b},
      {"scalar", DType::F32, {}, {0, 0, 128, 63}},
      {"empty", DType::F32, {0, 4}, {}},
  };
}

void expect_matches(const SafetensorsSource& src, const std::vector<SafetensorsTensor>& ts) {
  for (const SafetensorsTensor& t : ts) {
    SCOPED_TRACE(t.name);
    auto v = src.find(t.name);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->dtype, t.dtype);
    std::vector<uint64_t> ggml(t.shape.rbegin(), t.shape.rend());
    EXPECT_EQ(v->shape, ggml);
    ASSERT_EQ(v->nbytes, t.bytes.size());
    if (!t.bytes.empty()) {
      EXPECT_EQ(std::memcmp(v->data, t.bytes.data(), t.bytes.size()), 0);
    }
  }
}

// --- round trips ------------------------------------------------------------

TEST(Safetensors, RoundTripFile) {
  TempDir dir;
  auto ts = sample_tensors();
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "lowrank test"}};
  write_safetensors(dir / "m.safetensors", ts, meta);
  auto src = SafetensorsSource::open_file(dir / "m.safetensors");
  EXPECT_EQ(src->path(), dir / "m.safetensors");
  EXPECT_EQ(src->size(), ts.size());
  expect_matches(*src, ts);
  EXPECT_EQ(src->metadata(), meta);
  EXPECT_FALSE(src->find("nope").has_value());
  EXPECT_EQ(src->names(),
            (std::vector<std::string>{"cube", "empty", "model.layers.0.self_attn.q_proj.weight",
                                      "norm", "scalar"}));
  EXPECT_EQ(src->dtype_string("norm"), "F16");
}

TEST(Safetensors, RoundTripBytesAndLayout) {
  auto ts = sample_tensors();
  std::vector<uint8_t> b = safetensors_to_bytes(ts);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // header padded so the buffer is 8-byte aligned
  size_t total = 0;
  for (const auto& t : ts) total += t.bytes.size();
  EXPECT_EQ(b.size(), 8 + n + total);
  std::string header(b.begin() + 8, b.begin() + 8 + std::ptrdiff_t(n));
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);  // no metadata: none written
  EXPECT_NE(header.find("\"data_offsets\""), std::string::npos);
  auto src = SafetensorsSource::from_bytes(b, "mem");
  expect_matches(*src, ts);
  EXPECT_TRUE(src->metadata().empty());

  // Values decode as written.
  auto q = src->find("model.layers.0.self_attn.q_proj.weight");
  float row[4];
  dequantize(q->dtype, q->data + 16, row, 4);  // file row 1
  EXPECT_EQ(row[0], 1e-3f);
  EXPECT_EQ(row[1], -7.f);
  auto norm = src->find("norm");
  float h[5];
  dequantize(norm->dtype, norm->data, h, 5);
  EXPECT_EQ(h[2], 65504.f);
  EXPECT_EQ(src->find("scalar")->shape, std::vector<uint64_t>{});
  EXPECT_EQ(src->find("empty")->shape, (std::vector<uint64_t>{4, 0}));
}

TEST(Safetensors, LinearShapeIsReversed) {
  std::vector<uint8_t> w(6 * 10 * 2);
  auto src = SafetensorsSource::from_bytes(
      safetensors_to_bytes({{"lin", DType::BF16, {6, 10}, w}}), "mem");
  EXPECT_EQ(src->find("lin")->shape, (std::vector<uint64_t>{10, 6}));  // {in, out}
}

TEST(Safetensors, HandWrittenHeaderWithGapsAndUnpaddedLength) {
  // Unpadded header, tensors out of order with a gap between them: valid.
  auto src = SafetensorsSource::from_bytes(
      image(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]},)"
            R"("a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]}})",
            16, 3),
      "mem");
  EXPECT_EQ(src->find("a")->shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(src->find("b")->nbytes, 4u);
  EXPECT_EQ(src->find("b")->data[0], 3);
}

TEST(Safetensors, EmptyTensorsMayShareOffsets) {
  auto src = SafetensorsSource::from_bytes(
      image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("c":{"dtype":"F32","shape":[3,0],"data_offsets":[4,4]}})",
            8),
      "mem");
  EXPECT_EQ(src->size(), 3u);
}

TEST(Safetensors, EmptyHeaderObject) {
  auto src = SafetensorsSource::from_bytes(image("{}"), "mem");
  EXPECT_EQ(src->size(), 0u);
  src = SafetensorsSource::from_bytes(image(R"({"__metadata__":{"format":"pt"}}   )"), "mem");
  EXPECT_EQ(src->metadata().at("format"), "pt");
}

// --- unsupported dtypes ---------------------------------------------------

TEST(Safetensors, UnsupportedDtypeFailsOnlyWhenLookedUp) {
  auto src = SafetensorsSource::from_bytes(
      image(R"({"position_ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
            R"("w":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
            R"("packed":{"dtype":"F4","shape":[7],"data_offsets":[24,28]}})",
            28),
      "ckpt.safetensors");
  EXPECT_TRUE(src->find("w").has_value());
  EXPECT_EQ(src->dtype_string("position_ids"), "I64");
  expect_words(error_of("ckpt.safetensors", [&] { src->find("position_ids"); }),
               {"'position_ids'", "I64", "F32, F16, BF16"});
  expect_words(error_of("ckpt.safetensors", [&] { src->find("packed"); }),
               {"'packed'", "unknown dtype", "F4"});
}

TEST(Safetensors, UnsupportedDtypeSizeStillChecked) {
  expect_words(parse_error(R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", 8),
               {"'d'", "F64", "needs 16 bytes", "span 8"});
}

// --- malformed files --------------------------------------------------------

TEST(SafetensorsCorrupt, TooShortForLength) {
  for (size_t n = 0; n < 8; ++n) {
    std::string msg = error_of("bad.safetensors", [&] {
      SafetensorsSource::from_bytes(std::vector<uint8_t>(n, 0), "bad.safetensors");
    });
    expect_words(msg, {fmt::format("file is {} bytes", n), "8-byte header length"});
  }
}

TEST(SafetensorsCorrupt, HeaderLengthBeyondFile) {
  std::vector<uint8_t> b = image("{}");
  b[0] = 200;
  std::string msg = error_of("bad.safetensors",
                             [&] { SafetensorsSource::from_bytes(b, "bad.safetensors"); });
  expect_words(msg, {"header length 200", "exceeds the 2 bytes", "file size 10"});
}

TEST(SafetensorsCorrupt, HeaderLengthOverLimit) {
  std::vector<uint8_t> b = image("{}");
  uint64_t n = kSafetensorsMaxHeader + 1;
  std::memcpy(b.data(), &n, 8);
  expect_words(error_of("bad.safetensors",
                        [&] { SafetensorsSource::from_bytes(b, "bad.safetensors"); }),
               {fmt::format("header length {}", n), "limit"});
  n = ~uint64_t(0);
  std::memcpy(b.data(), &n, 8);
  expect_words(error_of("bad.safetensors",
                        [&] { SafetensorsSource::from_bytes(b, "bad.safetensors"); }),
               {"header length 18446744073709551615", "limit"});
}

TEST(SafetensorsCorrupt, InvalidJson) {
  expect_words(parse_error(R"({"a": {"dtype": "F32",)"), {"invalid JSON", "header"});
  expect_words(parse_error("{\"a\n\": 1}"), {"invalid JSON"});
  expect_words(parse_error(std::string("{\"\xff\":1}")), {"invalid JSON"});
  expect_words(parse_error(""), {"invalid JSON"});
}

TEST(SafetensorsCorrupt, HeaderNotObject) {
  expect_words(parse_error("[1, 2]"), {"header must be a JSON object", "array of 2"});
  expect_words(parse_error("12"), {"header must be a JSON object", "number 12"});
}

TEST(SafetensorsCorrupt, DeepNesting) {
  std::string deep = R"({"a":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_words(parse_error(deep), {"nests deeper than"});
}

TEST(SafetensorsCorrupt, TensorEntryNotObject) {
  expect_words(parse_error(R"({"w": [1, 2]})"), {"tensor 'w'", "must be a JSON object",
                                                 "array of 2"});
}

TEST(SafetensorsCorrupt, MissingFields) {
  expect_words(parse_error(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "missing field 'dtype'"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "missing field 'shape'"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[1]}})", 4),
               {"tensor 'w'", "missing field 'data_offsets'"});
}

TEST(SafetensorsCorrupt, IllTypedFields) {
  expect_words(parse_error(R"({"w":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "'dtype' must be a string", "number 32"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "'shape' must be an array", "number 4"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "'shape'[1] must be a non-negative integer", "number -1"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "'shape'[0]", "number 1.0"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4),
               {"tensor 'w'", "'shape'[0]", "string"});
  expect_words(
      parse_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8),
      {"tensor 'w'", "'data_offsets' must be an array of 2 integers", "array of 3"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{}}})", 4),
               {"tensor 'w'", "'data_offsets' must be an array of 2", "object"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,true]}})", 4),
               {"tensor 'w'", "'data_offsets'[1] must be a non-negative integer", "boolean"});
  expect_words(
      parse_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4),
      {"tensor 'w'", "'data_offsets'[0]", "number -4"});
  // Integers past 2^64 parse as floats and are refused.
  expect_words(parse_error(
                   R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,99999999999999999999]}})",
                   4),
               {"tensor 'w'", "'data_offsets'[1]"});
}

TEST(SafetensorsCorrupt, TooManyDims) {
  expect_words(
      parse_error(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4),
      {"tensor 'w'", "9 dimensions", "at most 8"});
}

TEST(SafetensorsCorrupt, EndBeforeBegin) {
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8),
               {"tensor 'w'", "[8, 4]", "end is before begin"});
}

TEST(SafetensorsCorrupt, OffsetsPastBuffer) {
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 8),
               {"tensor 'w'", "[4, 12]", "past the end of the data buffer (8 bytes)"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[0],)"
                           R"("data_offsets":[18446744073709551615,18446744073709551615]}})"),
               {"tensor 'w'", "past the end"});
}

TEST(SafetensorsCorrupt, SizeMismatch) {
  expect_words(parse_error(R"({"w":{"dtype":"BF16","shape":[3,4],"data_offsets":[0,20]}})", 20),
               {"tensor 'w'", "BF16", "[3, 4]", "needs 24 bytes", "[0, 20]", "span 20"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[],"data_offsets":[0,8]}})", 8),
               {"tensor 'w'", "needs 4 bytes", "span 8"});
}

TEST(SafetensorsCorrupt, SizeOverflow) {
  expect_words(
      parse_error(
          R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4),
      {"tensor 'w'", "[4294967296, 4294967296]", "overflows 64 bits"});
  // Elements fit, bytes do not.
  expect_words(
      parse_error(R"({"w":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})",
                  4),
      {"tensor 'w'", "F32", "overflows 64 bits"});
  // A zero dimension does not hide an overflow of the dimensions before it.
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],)"
                           R"("data_offsets":[0,0]}})"),
               {"tensor 'w'", "overflows 64 bits"});
}

TEST(SafetensorsCorrupt, Overlap) {
  expect_words(parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           12),
               {"'a'", "[0, 8]", "'b'", "[4, 12]", "overlap"});
  // Identical spans, and one span inside a larger one further back.
  expect_words(parse_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                           4),
               {"'a'", "'b'", "overlap"});
  expect_words(parse_error(R"({"big":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                           R"("m":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                           R"("z":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                           16),
               {"'big'", "overlap"});
}

TEST(SafetensorsCorrupt, DuplicateName) {
  expect_words(parse_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           8),
               {"duplicate key 'w'", "header"});
  expect_words(parse_error(R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4),
               {"duplicate key 'dtype'"});
}

TEST(SafetensorsCorrupt, BadMetadata) {
  expect_words(parse_error(R"({"__metadata__":[1]})"), {"'__metadata__'", "object", "array of 1"});
  expect_words(parse_error(R"({"__metadata__":{"format":"pt","n":3}})"),
               {"'__metadata__' key 'n'", "must be a string", "number 3"});
}

TEST(SafetensorsCorrupt, HostileNameStaysOneLine) {
  std::string msg =
      parse_error(R"({"a\nb\u0000c":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 8);
  expect_words(msg, {"'a\\x0ab\\x00c'", "needs 4 bytes"});
  std::string long_name(5000, 'n');
  msg = parse_error(R"({")" + long_name + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})",
                    8);
  expect_words(msg, {"(5000 bytes)"});
  EXPECT_LT(msg.size(), 600u);
}

TEST(SafetensorsCorrupt, EveryTruncationFailsCleanly) {
  std::vector<uint8_t> b = safetensors_to_bytes(sample_tensors(), {{"k", "v"}});
  for (size_t n = 0; n < b.size(); ++n) {
    SCOPED_TRACE(n);
    std::vector<uint8_t> cut(b.begin(), b.begin() + std::ptrdiff_t(n));
    error_of("cut", [&] { SafetensorsSource::from_bytes(cut, "cut"); });
  }
}

TEST(SafetensorsCorrupt, SingleByteFlipsNeverCrash) {
  // Every single-byte corruption of the header either parses (and then every
  // tensor is in bounds) or throws lr::Error.
  std::vector<uint8_t> b = safetensors_to_bytes(sample_tensors());
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  const uint8_t patterns[] = {0x00, 0xff, '"', '{', '[', '0', '9', '-', ','};
  for (size_t i = 0; i < 8 + n; ++i) {
    for (uint8_t p : patterns) {
      std::vector<uint8_t> c = b;
      c[i] = p;
      try {
        auto src = SafetensorsSource::from_bytes(c, "flip");
        for (const std::string& name : src->names()) {
          try {
            auto v = src->find(name);
            ASSERT_TRUE(v.has_value());
            unsigned sum = 0;  // touch every byte (ASan builds catch a bad view)
            for (uint64_t k = 0; k < v->nbytes; ++k) sum += v->data[k];
            (void)sum;
          } catch (const Error&) {
          }
        }
      } catch (const Error&) {
      }
    }
  }
}

TEST(SafetensorsCorrupt, OpenFileErrors) {
  TempDir dir;
  expect_words(error_of(dir / "missing.safetensors",
                        [&] { SafetensorsSource::open_file(dir / "missing.safetensors"); }),
               {"cannot open"});
  expect_words(error_of(dir.str(), [&] { SafetensorsSource::open_file(dir.str()); }),
               {"not a regular file"});
  write_bytes(dir / "empty.safetensors", {});
  expect_words(error_of(dir / "empty.safetensors",
                        [&] { SafetensorsSource::open_file(dir / "empty.safetensors"); }),
               {"file is 0 bytes"});
  write_bytes(dir / "bad.safetensors",
              image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4));
  expect_words(error_of(dir / "bad.safetensors",
                        [&] { SafetensorsSource::open_file(dir / "bad.safetensors"); }),
               {"tensor 'w'", "needs 8 bytes"});
}

// --- writer -----------------------------------------------------------------

TEST(SafetensorsWriter, RejectsBadInput) {
  auto err = [](std::vector<SafetensorsTensor> ts) {
    return error_of("safetensors writer", [&] { safetensors_to_bytes(ts); });
  };
  expect_words(err({{"q", DType::Q8_0, {32}, std::vector<uint8_t>(34)}}),
               {"'q'", "Q8_0", "F32, F16, BF16"});
  expect_words(err({{"w", DType::F32, {2, 3}, std::vector<uint8_t>(20)}}),
               {"'w'", "[2, 3]", "needs 24 bytes", "got 20"});
  expect_words(err({{"w", DType::F32, {-1}, {}}}), {"'w'", "negative dimension -1"});
  expect_words(err({{"w", DType::F32, {1}, std::vector<uint8_t>(4)},
                    {"w", DType::F32, {1}, std::vector<uint8_t>(4)}}),
               {"duplicate tensor name 'w'"});
  expect_words(err({{"__metadata__", DType::F32, {1}, std::vector<uint8_t>(4)}}), {"reserved"});
  expect_words(err({{"", DType::F32, {1}, std::vector<uint8_t>(4)}}), {"empty tensor name"});
  expect_words(err({{"\xff", DType::F32, {1}, std::vector<uint8_t>(4)}}), {"cannot encode"});
  expect_words(err({{"w", DType::F32, {int64_t(1) << 40, int64_t(1) << 40}, {}}}),
               {"'w'", "overflows"});
}

TEST(SafetensorsWriter, WriteFailureIsAnError) {
  TempDir dir;
  std::string p = dir / "no/such/dir/m.safetensors";
  expect_words(error_of(p, [&] { write_safetensors(p, sample_tensors()); }), {"cannot open"});
}

// --- HuggingFace directories ------------------------------------------------

TEST(SafetensorsDir, SingleFile) {
  TempDir dir;
  auto ts = sample_tensors();
  write_safetensors(dir / "model.safetensors", ts);
  auto src = SafetensorsSource::open_dir(dir.str());
  EXPECT_EQ(src->path(), dir.str());
  expect_matches(*src, ts);
}

// Three shards: model-0000{1,2,3}-of-00003.safetensors.
std::vector<std::vector<SafetensorsTensor>> write_shards(const TempDir& dir) {
  std::vector<std::vector<SafetensorsTensor>> shards = {
      {{"a", DType::F32, {2, 2}, iota_bytes(16)}, {"b", DType::BF16, {3}, iota_bytes(6, 9)}},
      {{"c", DType::F16, {4, 1}, iota_bytes(8, 50)}},
      {{"d", DType::F32, {1}, iota_bytes(4, 90)}, {"e", DType::F32, {0}, {}}},
  };
  for (size_t i = 0; i < shards.size(); ++i)
    write_safetensors(dir / fmt::format("model-{:05}-of-00003.safetensors", i + 1), shards[i],
                      {{"shard", std::to_string(i + 1)}});
  return shards;
}

const char* kIndex = R"({
  "metadata": {"total_size": 46},
  "weight_map": {
    "a": "model-00001-of-00003.safetensors",
    "b": "model-00001-of-00003.safetensors",
    "c": "model-00002-of-00003.safetensors",
    "d": "model-00003-of-00003.safetensors",
    "e": "model-00003-of-00003.safetensors"
  }
})";

TEST(SafetensorsDir, Sharded) {
  TempDir dir;
  auto shards = write_shards(dir);
  write_text(dir / "model.safetensors.index.json", kIndex);
  // The index wins over a stray single file.
  write_bytes(dir / "model.safetensors", {1, 2, 3});
  auto src = SafetensorsSource::open_dir(dir.str());
  EXPECT_EQ(src->path(), dir.str());
  EXPECT_EQ(src->size(), 5u);
  for (const auto& s : shards) expect_matches(*src, s);
  EXPECT_EQ(src->metadata().at("shard"), "1");  // the first shard's metadata wins
}

TEST(SafetensorsDir, NoModelFiles) {
  TempDir dir;
  expect_words(error_of(dir.str(), [&] { SafetensorsSource::open_dir(dir.str()); }),
               {"no model.safetensors or model.safetensors.index.json"});
  expect_words(error_of(dir / "nope", [&] { SafetensorsSource::open_dir(dir / "nope"); }),
               {"not a directory"});
}

TEST(SafetensorsDir, TensorMissingFromItsShard) {
  TempDir dir;
  write_shards(dir);
  std::string idx = kIndex;
  idx.replace(idx.find("\"e\""), 3, "\"zz\"");
  write_text(dir / "model.safetensors.index.json", idx);
  std::string ip = dir / "model.safetensors.index.json";
  expect_words(error_of(ip, [&] { SafetensorsSource::open_dir(dir.str()); }),
               {"tensor 'zz'", "'model-00003-of-00003.safetensors'", "missing"});
}

TEST(SafetensorsDir, TensorInAnotherShardThanListed) {
  TempDir dir;
  write_shards(dir);
  std::string idx = kIndex;
  idx.replace(idx.find("\"b\": \"model-00001"), 17, "\"b\": \"model-00002");
  write_text(dir / "model.safetensors.index.json", idx);
  std::string ip = dir / "model.safetensors.index.json";
  expect_words(error_of(ip, [&] { SafetensorsSource::open_dir(dir.str()); }),
               {"tensor 'b'", "'model-00002-of-00003.safetensors'", "missing",
                "it is in 'model-00001-of-00003.safetensors'"});
}

TEST(SafetensorsDir, DuplicateAcrossShards) {
  TempDir dir;
  write_shards(dir);
  write_safetensors(dir / "model-00002-of-00003.safetensors",
                    {{"c", DType::F16, {4, 1}, iota_bytes(8)}, {"a", DType::F32, {1}, iota_bytes(4)}});
  write_text(dir / "model.safetensors.index.json", kIndex);
  expect_words(error_of(dir.str(), [&] { SafetensorsSource::open_dir(dir.str()); }),
               {"tensor 'a'", "model-00001-of-00003.safetensors",
                "model-00002-of-00003.safetensors", "both"});
}

TEST(SafetensorsDir, CorruptShardNamesTheShard) {
  TempDir dir;
  write_shards(dir);
  write_bytes(dir / "model-00002-of-00003.safetensors", image("{", 0));
  write_text(dir / "model.safetensors.index.json", kIndex);
  std::string sp = dir / "model-00002-of-00003.safetensors";
  expect_words(error_of(sp, [&] { SafetensorsSource::open_dir(dir.str()); }), {"invalid JSON"});
  fs::remove(sp);
  expect_words(error_of(sp, [&] { SafetensorsSource::open_dir(dir.str()); }), {"cannot open"});
}

TEST(SafetensorsDir, BadIndex) {
  TempDir dir;
  write_shards(dir);
  std::string ip = dir / "model.safetensors.index.json";
  auto err = [&](const std::string& text) {
    write_text(ip, text);
    return error_of(ip, [&] { SafetensorsSource::open_dir(dir.str()); });
  };
  expect_words(err("{\"weight_map\": "), {"invalid JSON", "index"});
  expect_words(err("[]"), {"index must be a JSON object"});
  expect_words(err(R"({"metadata": {}})"), {"missing field 'weight_map'"});
  expect_words(err(R"({"weight_map": ["a"]})"), {"'weight_map' must be an object"});
  expect_words(err(R"({"weight_map": {}})"), {"lists no tensors"});
  expect_words(err(R"({"weight_map": {"a": 1}})"), {"entry 'a'", "must be a string", "number 1"});
  expect_words(err(R"({"weight_map": {"a": "../model-00001-of-00003.safetensors"}})"),
               {"entry 'a'", "not a file name in the model directory"});
  expect_words(err(R"({"weight_map": {"a": "/etc/passwd"}})"), {"not a file name"});
  expect_words(err(R"({"weight_map": {"a": ".."}})"), {"not a file name"});
  expect_words(err(R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})"),
               {"duplicate key 'a'"});
}

}  // namespace
}  // namespace lr
