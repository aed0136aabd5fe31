// GGUF reader on malformed input: every case must throw lr::Error with a
// one-line message naming the file and the problem (never crash or bad_alloc).
#include <algorithm>
#include <filesystem>
#include <random>

#include "gguf_test_util.h"

namespace lr::gguf::test {
namespace {

constexpr uint32_t kQ8_0 = uint32_t(DType::Q8_0);
constexpr uint32_t kF32 = uint32_t(DType::F32);

// A valid file: one key, one Q8_0 [32, 2] tensor (68 bytes).
Bytes good_prefix(uint64_t n_tensors = 1) {
  Bytes b;
  b.header(n_tensors, 1).kv_str("general.name", "x");
  return b;
}

TEST(GgufCorrupt, HandBuiltGoodFileParses) {
  Bytes b = good_prefix();
  b.tensor("w", {32, 2}, kQ8_0, 0).pad().zeros(68);
  auto f = File::from_bytes(b.b, "good.gguf");
  EXPECT_EQ(f->tensor("w").nbytes, 68u);
}

// A writer-made file with metadata and tensors, for truncation.
std::vector<uint8_t> sample_file() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_strings("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
  w.set_u32("llama.context_length", 128);
  std::vector<uint8_t> q(68, 1), f(4 * 40, 2);
  w.add_tensor("blk.0.attn_q.weight", DType::Q8_0, {32, 2}, q.data(), q.size());
  w.add_tensor("output.weight", DType::F32, {8, 5}, f.data(), f.size());
  return w.to_bytes();
}

size_t find_bytes(const std::vector<uint8_t>& b, std::string_view s) {
  auto it = std::search(b.begin(), b.end(), s.begin(), s.end());
  EXPECT_NE(it, b.end()) << s;
  return size_t(it - b.begin());
}

std::vector<uint8_t> cut(const std::vector<uint8_t>& b, size_t n) {
  return std::vector<uint8_t>(b.begin(), b.begin() + std::ptrdiff_t(n));
}

TEST(GgufCorrupt, TruncatedAnywhereFails) {
  auto b = sample_file();
  auto f = File::from_bytes(b, "full.gguf");
  const TensorInfo& last = f->tensors().back();
  size_t end = f->data_offset() + last.offset + last.nbytes;
  for (size_t n = 0; n < end; ++n) {
    SCOPED_TRACE(n);
    parse_error(cut(b, n));
  }
  // Cutting only the final padding leaves a valid file.
  EXPECT_NO_THROW(File::from_bytes(cut(b, end), "x"));
}

TEST(GgufCorrupt, TruncatedMessagesNameTheField) {
  auto b = sample_file();
  EXPECT_HAS(parse_error(cut(b, 0)), "not a GGUF file (only 0 bytes)");
  EXPECT_HAS(parse_error(cut(b, 6)), "unexpected end of file reading version (header)");
  EXPECT_HAS(parse_error(cut(b, 20)), "unexpected end of file reading metadata count (header)");

  // Inside the value of the first key.
  size_t p = find_bytes(b, "general.architecture") + 20 + 4 + 3;
  std::string e = parse_error(cut(b, p));
  EXPECT_HAS(e, "unexpected end of file reading string (metadata key 'general.architecture')");
  EXPECT_HAS(e, "need 8 bytes, 3 left");

  // Inside the string data of the array.
  p = find_bytes(b, "ccc") + 1;
  e = parse_error(cut(b, p));
  EXPECT_HAS(e,
             "array string length 3 (metadata key 'tokenizer.ggml.tokens') runs past end of "
             "file: 1 bytes left");

  // Inside a key.
  p = find_bytes(b, "llama.context_length") + 5;
  EXPECT_HAS(parse_error(cut(b, p)), "key length 20 (metadata entry #2) runs past end of file");

  // Inside a tensor info.
  p = find_bytes(b, "output.weight") + 13 + 2;
  EXPECT_HAS(parse_error(cut(b, p)),
             "unexpected end of file reading dimension count (tensor 'output.weight')");
  p = find_bytes(b, "output.weight") + 13 + 4 + 8 + 8 + 4 + 1;
  EXPECT_HAS(parse_error(cut(b, p)), "reading data offset (tensor 'output.weight')");

  // Inside the data section.
  auto f = File::from_bytes(b, "full.gguf");
  size_t data = f->data_offset();
  e = parse_error(cut(b, data + 10));
  EXPECT_HAS(e, "tensor 'blk.0.attn_q.weight' data [offset 0, 68 bytes] extends past end of file");
  EXPECT_HAS(e, fmt::format("data section starts at {}, file size {}", data, data + 10));
  e = parse_error(cut(b, data + 100));
  EXPECT_HAS(e, "tensor 'output.weight' data [offset 96, 160 bytes] extends past end of file");
}

TEST(GgufCorrupt, BadMagic) {
  auto b = sample_file();
  b[0] = 'X';
  EXPECT_HAS(parse_error(b), "not a GGUF file (bad magic 0x46554758");
  Bytes png;
  png.raw("\x89PNG\r\n\x1a\n", 8).zeros(40);
  EXPECT_HAS(parse_error(png.b), "bad magic");
}

TEST(GgufCorrupt, UnsupportedVersions) {
  Bytes v1;
  v1.raw("GGUF", 4).u32(1).u32(0).u32(0);  // v1 had u32 counts
  EXPECT_EQ(parse_error(v1.b), "bad.gguf: unsupported GGUF version 1 (supported: 2, 3)");
  Bytes v99;
  v99.header(0, 0, 99);
  EXPECT_HAS(parse_error(v99.b), "unsupported GGUF version 99");
  Bytes v0;
  v0.header(0, 0, 0);
  EXPECT_HAS(parse_error(v0.b), "unsupported GGUF version 0");
  Bytes be;
  be.header(0, 0, 0x03000000);
  EXPECT_HAS(parse_error(be.b), "big-endian");
}

TEST(GgufCorrupt, HugeCounts) {
  Bytes t;
  t.header(uint64_t(1) << 60, 0).zeros(64);
  EXPECT_HAS(parse_error(t.b), "tensor count 1152921504606846976 (header) is implausible");
  Bytes k;
  k.header(0, ~uint64_t(0)).zeros(64);
  EXPECT_HAS(parse_error(k.b), "metadata count 18446744073709551615 (header) is implausible");
  Bytes a;
  a.header(0, 1).str("arr").u32(uint32_t(ValueType::ARRAY)).u32(uint32_t(ValueType::UINT64));
  a.u64(uint64_t(1) << 60).zeros(16);
  EXPECT_HAS(parse_error(a.b),
             "array length 1152921504606846976 (metadata key 'arr') is implausible");
  Bytes s;  // array of strings: 8 bytes each at least
  s.header(0, 1).str("arr").u32(uint32_t(ValueType::ARRAY)).u32(uint32_t(ValueType::STRING));
  s.u64(3).u64(0).u64(0);
  // ... but a count that fits the file and runs out is a truncation.
  EXPECT_HAS(parse_error(s.b), "unexpected end of file reading array string (metadata key 'arr')");
}

TEST(GgufCorrupt, HugeStringLengths) {
  Bytes key;
  key.header(0, 1).u64(uint64_t(1) << 62).raw("abc", 3);
  EXPECT_HAS(parse_error(key.b),
             "key length 4611686018427387904 (metadata entry #0) runs past end of file");
  Bytes val;
  val.header(0, 1).str("general.name").u32(uint32_t(ValueType::STRING)).u64(~uint64_t(0));
  EXPECT_HAS(parse_error(val.b),
             "string length 18446744073709551615 (metadata key 'general.name') runs past end of "
             "file: 0 bytes left");
  Bytes tn;
  tn.header(1, 0).u64(1000).zeros(40);
  EXPECT_HAS(parse_error(tn.b), "name length 1000 (tensor info #0) runs past end of file");
}

TEST(GgufCorrupt, BadValues) {
  Bytes type;
  type.header(0, 1).str("k").u32(13).u32(0);
  EXPECT_EQ(parse_error(type.b), "bad.gguf: metadata key 'k' has unknown value type 13");
  Bytes elem;
  elem.header(0, 1).str("k").u32(uint32_t(ValueType::ARRAY)).u32(77).u64(0);
  EXPECT_HAS(parse_error(elem.b), "metadata key 'k': array has unknown element type 77");
  Bytes boolean;
  boolean.header(0, 1).str("flag").u32(uint32_t(ValueType::BOOL)).u8(2);
  EXPECT_HAS(parse_error(boolean.b), "metadata key 'flag': BOOL value is 2, expected 0 or 1");

  // Arrays nested 9 deep.
  Bytes deep;
  deep.header(0, 1).str("deep").u32(uint32_t(ValueType::ARRAY));
  for (int k = 0; k < 9; ++k) deep.u32(uint32_t(ValueType::ARRAY)).u64(1);
  deep.u32(uint32_t(ValueType::UINT8)).u64(0);
  EXPECT_HAS(parse_error(deep.b), "metadata key 'deep': arrays nested deeper than 8 levels");
  // 8 deep is fine.
  Bytes ok;
  ok.header(0, 1).str("deep").u32(uint32_t(ValueType::ARRAY));
  for (int k = 0; k < 7; ++k) ok.u32(uint32_t(ValueType::ARRAY)).u64(1);
  ok.u32(uint32_t(ValueType::UINT8)).u64(1).u8(5);
  EXPECT_NO_THROW(File::from_bytes(ok.b, "ok"));
}

TEST(GgufCorrupt, DuplicateKeysAndTensors) {
  Bytes k;
  k.header(0, 3).kv_u32("a", 1).kv_u32("b", 2).kv_str("a", "x");
  EXPECT_EQ(parse_error(k.b), "bad.gguf: duplicate metadata key 'a' (entries #0 and #2)");
  Bytes t = good_prefix(2);
  t.tensor("w", {32}, kQ8_0, 0).tensor("w", {32}, kQ8_0, 64).pad().zeros(128);
  EXPECT_HAS(parse_error(t.b), "duplicate tensor name 'w' (tensor infos #0 and #1)");
}

TEST(GgufCorrupt, BadShapes) {
  Bytes zero = good_prefix();
  zero.tensor("w", {32, 0}, kQ8_0, 0).pad().zeros(64);
  EXPECT_HAS(parse_error(zero.b), "tensor 'w' dimension 1 is 0");

  Bytes five = good_prefix();
  five.tensor("w", {1, 1, 1, 1, 1}, kF32, 0).pad().zeros(64);
  EXPECT_HAS(parse_error(five.b), "tensor 'w' has 5 dimensions, expected 1 to 4");
  Bytes none = good_prefix();
  none.str("w").u32(0).u32(kF32).u64(0).pad().zeros(64);
  EXPECT_HAS(parse_error(none.b), "tensor 'w' has 0 dimensions");
  Bytes many = good_prefix();
  many.str("w").u32(0xffffffffu).zeros(64);
  EXPECT_HAS(parse_error(many.b), "has 4294967295 dimensions");

  Bytes row = good_prefix();
  row.tensor("blk.0.ffn_up.weight", {48, 2}, kQ8_0, 0).pad().zeros(200);
  EXPECT_HAS(parse_error(row.b),
             "tensor 'blk.0.ffn_up.weight' shape [48, 2]: row of 48 elements is not a multiple "
             "of the Q8_0 block size 32");

  Bytes overflow = good_prefix();
  overflow.tensor("w", {uint64_t(1) << 32, uint64_t(1) << 32}, kF32, 0).pad().zeros(64);
  EXPECT_HAS(parse_error(overflow.b), "too many elements");
  Bytes bytes_overflow = good_prefix();  // elements fit in int64, bytes do not
  bytes_overflow.tensor("w", {uint64_t(1) << 31, uint64_t(1) << 31}, kF32, 0).pad().zeros(64);
  EXPECT_HAS(parse_error(bytes_overflow.b), "byte size overflows");
  Bytes huge = good_prefix();  // fits in u64 but not in the file
  huge.tensor("w", {uint64_t(1) << 20, uint64_t(1) << 20}, kF32, 0).pad().zeros(64);
  EXPECT_HAS(parse_error(huge.b), "tensor 'w' data [offset 0, 4398046511104 bytes] extends past");
}

TEST(GgufCorrupt, UnknownDtype) {
  Bytes u = good_prefix();
  u.tensor("tok_embd.weight", {32}, 99, 0).pad().zeros(64);
  EXPECT_EQ(parse_error(u.b), "bad.gguf: tensor 'tok_embd.weight' has unknown ggml type id 99");
  Bytes k = good_prefix();
  k.tensor("w", {256}, 23, 0).pad().zeros(256);
  EXPECT_HAS(parse_error(k.b),
             "tensor 'w' has type IQ4_XS (ggml type id 23), which is not supported");
  Bytes removed = good_prefix();
  removed.tensor("w", {32}, 4, 0).pad().zeros(64);
  EXPECT_HAS(parse_error(removed.b), "unknown ggml type id 4");
}

TEST(GgufCorrupt, OffsetsAndAlignment) {
  Bytes past = good_prefix();
  past.tensor("w", {8}, kF32, 4096).pad().zeros(64);
  EXPECT_HAS(parse_error(past.b),
             "tensor 'w' data [offset 4096, 32 bytes] extends past end of file");
  Bytes wrap = good_prefix();  // offset + size wraps around u64
  wrap.tensor("w", {8}, kF32, ~uint64_t(31)).pad().zeros(64);
  EXPECT_HAS(parse_error(wrap.b), "extends past end of file");
  Bytes mis = good_prefix();
  mis.tensor("w", {8}, kF32, 3).pad().zeros(64);
  EXPECT_HAS(parse_error(mis.b),
             "tensor 'w' data offset 3 is misaligned (not a multiple of alignment 32)");

  Bytes a48;
  a48.header(0, 1).kv_u32("general.alignment", 48);
  EXPECT_HAS(parse_error(a48.b), "general.alignment must be a nonzero power of two, got 48");
  Bytes a0;
  a0.header(0, 1).kv_u32("general.alignment", 0);
  EXPECT_HAS(parse_error(a0.b), "general.alignment must be a nonzero power of two, got 0");
  Bytes as;
  as.header(0, 1).kv_str("general.alignment", "32");
  EXPECT_HAS(parse_error(as.b),
             "metadata key 'general.alignment' has type STRING, expected UINT32");

  // With alignment 64, offset 32 is misaligned.
  Bytes a64;
  a64.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {8}, kF32, 32).pad(64).zeros(128);
  EXPECT_HAS(parse_error(a64.b), "not a multiple of alignment 64");
}

TEST(GgufCorrupt, FileTextInMessagesIsOneLine) {
  Bytes k;
  k.header(0, 1).str("evil\nkey").u32(99);
  EXPECT_EQ(parse_error(k.b), "bad.gguf: metadata key 'evil\\x0akey' has unknown value type 99");
  Bytes t;
  std::string long_name(300, 'n');
  t.header(1, 0).tensor(long_name, {8}, 99, 0);
  std::string e = parse_error(t.b);
  EXPECT_HAS(e, "tensor '" + std::string(120, 'n') + "...(300 bytes)' has unknown ggml type id 99");
}

TEST(GgufCorrupt, MissingTensor) {
  Bytes b = good_prefix();
  b.tensor("w", {32}, kQ8_0, 0).pad().zeros(64);
  auto f = File::from_bytes(b.b, "model.gguf");
  EXPECT_EQ(error_of([&] { f->tensor("output.weight"); }),
            "model.gguf: missing tensor 'output.weight'");
}

TEST(GgufCorrupt, OpenErrors) {
  EXPECT_HAS(error_of([] { File::open("/nonexistent/dir/m.gguf"); }),
             "/nonexistent/dir/m.gguf: cannot open: No such file or directory");
  std::string dir = testing::TempDir();
  EXPECT_HAS(error_of([&] { File::open(dir); }), "not a regular file");
  std::string empty = dir + "lowrank_gguf_empty.gguf";
  {
    std::FILE* f = std::fopen(empty.c_str(), "wb");
    std::fclose(f);
  }
  EXPECT_EQ(error_of([&] { File::open(empty); }), empty + ": not a GGUF file (only 0 bytes)");
  std::filesystem::remove(empty);
}

// Random byte flips of a valid file: parse must either succeed (and then
// every tensor lies inside the image) or throw lr::Error.
TEST(GgufCorrupt, RandomMutations) {
  auto base = sample_file();
  std::mt19937 rng(7);
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = base;
    int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      size_t at = rng() % b.size();
      b[at] = uint8_t(rng() % 4 == 0 ? 0xff : rng());
    }
    if (rng() % 5 == 0) b.resize(rng() % b.size());
    try {
      auto f = File::from_bytes(b, "m");
      for (const TensorInfo& t : f->tensors())
        ASSERT_LE(f->data_offset() + t.offset + t.nbytes, f->file_size()) << t.name;
      for (const auto& kv : f->metadata()) (void)kv.second.array_size();
    } catch (const lr::Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace lr::gguf::test
