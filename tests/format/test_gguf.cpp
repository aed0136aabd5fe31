// GGUF reader/writer: round trips, getters, real files. Malformed inputs are in
// test_gguf_corrupt.cpp.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "gguf_test_util.h"

namespace lr::gguf::test {
namespace {

constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "lowrank_gguf_" + std::to_string(getpid()) + "_" + name;
}

double f32_nan_with_payload() {
  // The double image of the f32 signalling NaN 0x7f800123 (quiet bit clear,
  // payload 0x123); it must survive the round trip as-is.
  uint64_t d = uint64_t(0x7ff) << 52 | uint64_t(0x123) << 29;
  double r;
  std::memcpy(&r, &d, 8);
  return r;
}

// Every value type, including extremes and nested arrays.
std::vector<std::pair<std::string, Value>> all_values() {
  std::vector<std::pair<std::string, Value>> kv;
  kv.emplace_back("u8.min", int_value(ValueType::UINT8, 0));
  kv.emplace_back("u8.max", int_value(ValueType::UINT8, 255));
  kv.emplace_back("i8.min", int_value(ValueType::INT8, -128));
  kv.emplace_back("i8.max", int_value(ValueType::INT8, 127));
  kv.emplace_back("u16.max", int_value(ValueType::UINT16, 65535));
  kv.emplace_back("i16.min", int_value(ValueType::INT16, -32768));
  kv.emplace_back("u32.max", int_value(ValueType::UINT32, 0xffffffffll));
  kv.emplace_back("i32.min", int_value(ValueType::INT32, std::numeric_limits<int32_t>::min()));
  kv.emplace_back("u64.zero", int_value(ValueType::UINT64, 0));
  kv.emplace_back("u64.max", int_value(ValueType::UINT64, -1));       // bit-cast 2^64-1
  kv.emplace_back("u64.top", int_value(ValueType::UINT64, kI64Min));  // 2^63
  kv.emplace_back("i64.min", int_value(ValueType::INT64, kI64Min));
  kv.emplace_back("i64.max", int_value(ValueType::INT64, kI64Max));
  kv.emplace_back("f32.x", float_value(ValueType::FLOAT32, 1.5));
  kv.emplace_back("f32.negzero", float_value(ValueType::FLOAT32, -0.0));
  kv.emplace_back("f32.inf", float_value(ValueType::FLOAT32, -INFINITY));
  kv.emplace_back("f32.tiny", float_value(ValueType::FLOAT32,
                                          double(std::numeric_limits<float>::denorm_min())));
  kv.emplace_back("f32.snan", float_value(ValueType::FLOAT32, f32_nan_with_payload()));
  kv.emplace_back("f64.pi", float_value(ValueType::FLOAT64, M_PI));
  kv.emplace_back("f64.tiny",
                  float_value(ValueType::FLOAT64, std::numeric_limits<double>::denorm_min()));
  kv.emplace_back("f64.max", float_value(ValueType::FLOAT64, std::numeric_limits<double>::max()));
  kv.emplace_back("f64.nan", float_value(ValueType::FLOAT64, std::nan("0x5")));
  kv.emplace_back("bool.true", int_value(ValueType::BOOL, 1));
  kv.emplace_back("bool.false", int_value(ValueType::BOOL, 0));
  kv.emplace_back("str.empty", string_value(""));
  kv.emplace_back("str.utf8", string_value("h\xc3\xa9llo \xe2\x9c\x93"));
  kv.emplace_back("str.nul", string_value(std::string("a\0b", 3)));
  kv.emplace_back("arr.u8", int_array(ValueType::UINT8, {0, 1, 255}));
  kv.emplace_back("arr.i8", int_array(ValueType::INT8, {-128, 0, 127}));
  kv.emplace_back("arr.u16", int_array(ValueType::UINT16, {0, 65535}));
  kv.emplace_back("arr.i16", int_array(ValueType::INT16, {-32768, 32767}));
  kv.emplace_back("arr.u32", int_array(ValueType::UINT32, {0, 0xffffffffll}));
  kv.emplace_back("arr.i32", int_array(ValueType::INT32, {-1, 2, -3}));
  kv.emplace_back("arr.u64", int_array(ValueType::UINT64, {0, -1, kI64Min}));
  kv.emplace_back("arr.i64", int_array(ValueType::INT64, {kI64Min, kI64Max}));
  kv.emplace_back("arr.bool", int_array(ValueType::BOOL, {1, 0, 1}));
  kv.emplace_back("arr.f32", float_array(ValueType::FLOAT32, {0.25, -2.0, f32_nan_with_payload()}));
  kv.emplace_back("arr.f64", float_array(ValueType::FLOAT64, {M_E, -0.0, 1e300}));
  kv.emplace_back("arr.str", string_array({"a", "", "\xc4\xa0the", std::string("x\0y", 3)}));
  kv.emplace_back("arr.empty", int_array(ValueType::INT32, {}));
  kv.emplace_back("arr.empty_str", string_array({}));
  kv.emplace_back("arr.nested",
                  array_of_arrays({int_array(ValueType::INT32, {1, 2}), string_array({"x"}),
                                   array_of_arrays({float_array(ValueType::FLOAT64, {0.5})}),
                                   array_of_arrays({})}));
  return kv;
}

TEST(Gguf, EveryValueTypeRoundTrips) {
  Writer w;
  auto kv = all_values();
  for (auto& [k, v] : kv) w.set(k, v);
  auto bytes = w.to_bytes();
  auto f = File::from_bytes(bytes, "mem.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_FALSE(f->has("general.alignment"));  // not written unless set
  ASSERT_EQ(f->metadata().size(), kv.size());
  for (size_t k = 0; k < kv.size(); ++k) {
    EXPECT_EQ(f->metadata()[k].first, kv[k].first);  // insertion order
    EXPECT_TRUE(same(f->metadata()[k].second, kv[k].second)) << kv[k].first;
  }
  EXPECT_EQ(f->find("arr.nested")->array_size(), 4u);
  EXPECT_EQ(f->find("arr.str")->array_size(), 4u);
  EXPECT_EQ(f->find("arr.f64")->array_size(), 3u);
  EXPECT_EQ(f->find("u8.max")->array_size(), 0u);

  // Writing what was read gives the same bytes.
  Writer w2;
  for (auto& [k, v] : f->metadata()) w2.set(k, v);
  EXPECT_EQ(w2.to_bytes(), bytes);
}

TEST(Gguf, SetReplacesInPlace) {
  Writer w;
  w.set_u32("a", 1);
  w.set_string("b", "x");
  w.set_u32("a", 2);
  auto f = File::from_bytes(w.to_bytes(), "mem.gguf");
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(f->get_int("a"), 2);
}

TEST(Gguf, TypedSettersAndGetters) {
  Writer w;
  w.set_string("s", "hello");
  w.set_u32("u32", 4000000000u);
  w.set_i32("i32", -7);
  w.set_u64("u64.small", 12345);
  w.set_u64("u64.big", std::numeric_limits<uint64_t>::max());
  w.set_f32("f32", 0.1f);
  w.set("f64", float_value(ValueType::FLOAT64, 0.1));
  w.set_bool("b", true);
  w.set_strings("strs", {"x", "y"});
  w.set_i32s("ints", {3, -4});
  w.set_f32s("floats", {1.25f, -0.5f});
  w.set("u8s", int_array(ValueType::UINT8, {7}));
  auto f = File::from_bytes(w.to_bytes(), "m.gguf");

  EXPECT_EQ(f->get_string("s"), "hello");
  EXPECT_EQ(f->get_int("u32"), 4000000000);
  EXPECT_EQ(f->get_int("i32"), -7);
  EXPECT_EQ(f->get_int("u64.small"), 12345);
  EXPECT_EQ(f->get_float("f32"), double(0.1f));
  EXPECT_EQ(f->get_float("f64"), 0.1);
  EXPECT_TRUE(f->get_bool("b"));
  EXPECT_EQ(f->get_strings("strs"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(f->get_ints("ints"), (std::vector<int64_t>{3, -4}));
  EXPECT_EQ(f->get_ints("u8s"), (std::vector<int64_t>{7}));
  EXPECT_EQ(f->get_floats("floats"), (std::vector<double>{1.25, -0.5}));

  // Defaults apply only to missing keys.
  EXPECT_EQ(f->get_string("nope", "d"), "d");
  EXPECT_EQ(f->get_int("nope", 5), 5);
  EXPECT_EQ(f->get_float("nope", 2.5), 2.5);
  EXPECT_TRUE(f->get_bool("nope", true));
  EXPECT_EQ(f->get_int("i32", 5), -7);

  std::string e = error_of([&] { f->get_int("missing.key"); });
  EXPECT_EQ(e, "m.gguf: missing metadata key 'missing.key'");
  EXPECT_EQ(error_of([&] { f->get_int("s"); }),
            "m.gguf: metadata key 's' has type STRING, expected integer");
  EXPECT_EQ(error_of([&] { f->get_int("s", 1); }),
            "m.gguf: metadata key 's' has type STRING, expected integer");
  EXPECT_HAS(error_of([&] { f->get_string("u32"); }), "has type UINT32, expected STRING");
  EXPECT_HAS(error_of([&] { f->get_float("u32"); }), "has type UINT32, expected float");
  EXPECT_HAS(error_of([&] { f->get_bool("u32"); }), "expected BOOL");
  EXPECT_HAS(error_of([&] { f->get_int("b"); }), "has type BOOL, expected integer");
  EXPECT_HAS(error_of([&] { f->get_int("u64.big"); }),
             "'u64.big' value 18446744073709551615 does not fit in int64");
  EXPECT_HAS(error_of([&] { f->get_strings("ints"); }),
             "'ints' has type ARRAY[INT32], expected ARRAY[STRING]");
  EXPECT_HAS(error_of([&] { f->get_ints("floats"); }), "has type ARRAY[FLOAT32]");
  EXPECT_HAS(error_of([&] { f->get_floats("s"); }), "has type STRING, expected array of floats");
  EXPECT_HAS(error_of([&] { f->get_strings("gone"); }), "missing metadata key 'gone'");
}

struct TensorCase {
  const char* name;
  DType dtype;
  std::vector<uint64_t> shape;
};

std::vector<uint8_t> encode(DType t, const std::vector<float>& x) {
  uint64_t n = x.size();
  auto nb = row_bytes(t, n);
  EXPECT_TRUE(nb.has_value());
  std::vector<uint8_t> out(*nb);
  quantize(t, x.data(), out.data(), int64_t(n));
  return out;
}

TEST(Gguf, TensorsRoundTripAndAreAligned) {
  const std::vector<TensorCase> cases = {
      {"f32", DType::F32, {7}},
      {"f16", DType::F16, {5, 3}},
      {"bf16", DType::BF16, {3, 2, 2}},
      {"q8_0", DType::Q8_0, {64, 2}},
      {"q4_0", DType::Q4_0, {32, 3, 2, 1}},
      {"q4_1", DType::Q4_1, {96}},
  };
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.f, 1.f);
  Writer w;
  w.set_string("general.architecture", "test");
  std::vector<std::vector<uint8_t>> data;
  for (const auto& c : cases) {
    uint64_t n = 1;
    for (uint64_t d : c.shape) n *= d;
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    data.push_back(encode(c.dtype, x));
    w.add_tensor(c.name, c.dtype, c.shape, data.back().data(), data.back().size());
  }
  std::string path = temp_path("tensors.gguf");
  w.write(path);
  auto bytes = w.to_bytes();
  {
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(on_disk, bytes);
  }
  auto f = File::open(path);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->file_size(), bytes.size());
  EXPECT_EQ(f->data_offset() % 32, 0u);
  ASSERT_EQ(f->tensors().size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const TensorInfo& t = f->tensors()[k];
    EXPECT_EQ(t.name, cases[k].name);
    EXPECT_EQ(t.dtype, cases[k].dtype);
    EXPECT_EQ(t.shape, cases[k].shape);
    EXPECT_EQ(t.nbytes, data[k].size());
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u) << t.name;  // mmap is page-aligned
    EXPECT_EQ(std::memcmp(t.data, data[k].data(), t.nbytes), 0) << t.name;
    EXPECT_EQ(&f->tensor(cases[k].name), &t);
  }
  EXPECT_EQ(f->tensor("q4_0").elements(), 32u * 3 * 2);
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
  EXPECT_EQ(error_of([&] { f->tensor("blk.0.attn_q.weight"); }),
            path + ": missing tensor 'blk.0.attn_q.weight'");

  // Bit exact: re-writing what was read reproduces the file.
  Writer w2;
  for (auto& [k, v] : f->metadata()) w2.set(k, v);
  for (const TensorInfo& t : f->tensors())
    w2.add_tensor(t.name, t.dtype, t.shape, t.data, t.nbytes);
  EXPECT_EQ(w2.to_bytes(), bytes);
  std::filesystem::remove(path);
}

TEST(Gguf, CustomAlignment) {
  for (uint32_t align : {1u, 8u, 64u, 4096u}) {
    Writer w;
    w.set_u32("general.alignment", align);
    std::vector<uint8_t> a(4 * 3), b(2 * 5);
    for (size_t k = 0; k < a.size(); ++k) a[k] = uint8_t(k + 1);
    for (size_t k = 0; k < b.size(); ++k) b[k] = uint8_t(100 + k);
    w.add_tensor("a", DType::F32, {3}, a.data(), a.size());
    w.add_tensor("b", DType::F16, {5}, b.data(), b.size());
    auto f = File::from_bytes(w.to_bytes(), "al.gguf");
    EXPECT_EQ(f->alignment(), align);
    EXPECT_EQ(f->get_int("general.alignment"), align);
    EXPECT_EQ(f->data_offset() % align, 0u);
    for (const TensorInfo& t : f->tensors()) EXPECT_EQ(t.offset % align, 0u);
    EXPECT_EQ(std::memcmp(f->tensor("a").data, a.data(), a.size()), 0);
    EXPECT_EQ(std::memcmp(f->tensor("b").data, b.data(), b.size()), 0);
  }
}

TEST(Gguf, Version2IsAccepted) {
  Writer w;
  w.set_u32("x", 9);
  auto bytes = w.to_bytes();
  bytes[4] = 2;
  auto f = File::from_bytes(bytes, "v2.gguf");
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->get_int("x"), 9);
}

TEST(Gguf, EmptyFileWithoutPadding) {
  // No tensors and no trailing padding is valid (data section may be absent).
  Bytes b;
  b.header(0, 1).kv_u32("k", 1);
  auto f = File::from_bytes(b.b, "small.gguf");
  EXPECT_EQ(f->get_int("k"), 1);
  EXPECT_TRUE(f->tensors().empty());
  // ... and the writer makes the same file.
  Writer w;
  w.set_u32("k", 1);
  EXPECT_EQ(w.to_bytes(), b.b);
}

TEST(Gguf, RealVocabGpt2) {
  std::string path = LOWRANK_SHARED_DIR "/data/tokenizer/ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto f = File::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->metadata().size(), 16u);
  EXPECT_EQ(f->get_string("general.architecture"), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(f->get_int("gpt2.context_length"), 1024);
  EXPECT_EQ(f->get_int("gpt2.block_count"), 12);
  EXPECT_NEAR(f->get_float("gpt2.attention.layer_norm_epsilon"), 1e-5, 1e-10);
  const auto& tokens = f->get_strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 50257u);
  EXPECT_EQ(tokens[0], "!");
  EXPECT_EQ(tokens[50256], "<|endoftext|>");
  EXPECT_EQ(f->get_ints("tokenizer.ggml.token_type").size(), 50257u);
  const auto& merges = f->get_strings("tokenizer.ggml.merges");
  ASSERT_EQ(merges.size(), 50000u);
  EXPECT_EQ(merges[0], "\xc4\xa0 t");  // "Ġ t"
  EXPECT_EQ(f->get_int("tokenizer.ggml.bos_token_id"), 50256);
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 50256);
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->type, ValueType::ARRAY);

  // Reading the same image from memory gives the same result, and re-writing
  // the metadata reproduces the file byte for byte (the writer lays files out
  // as the reference gguf writer does).
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  auto g = File::from_bytes(bytes, "copy");
  EXPECT_EQ(g->get_strings("tokenizer.ggml.merges"), merges);
  Writer w;
  for (auto& [k, v] : f->metadata()) w.set(k, v);
  EXPECT_TRUE(w.to_bytes() == bytes);
}

TEST(Gguf, RealVocabLlamaSpm) {
  std::string path = LOWRANK_SHARED_DIR "/data/tokenizer/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto f = File::open(path);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens").size(), 32000u);
  EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens")[1], "<s>");
  EXPECT_EQ(f->get_floats("tokenizer.ggml.scores").size(), 32000u);
  EXPECT_EQ(f->get_int("llama.vocab_size"), 32000);
  EXPECT_TRUE(f->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(f->get_bool("tokenizer.ggml.add_eos_token"));
  EXPECT_EQ(f->get_int("tokenizer.ggml.unknown_token_id"), 0);
}

// The file scripts/check_gguf_python.py checks with the reference `gguf`
// package. Keep the two in sync.
Writer python_check_file() {
  Writer w;
  w.set_string("general.architecture", "lowrank-test");
  w.set_u32("general.alignment", 64);
  w.set("test.u8", int_value(ValueType::UINT8, 255));
  w.set("test.i8", int_value(ValueType::INT8, -128));
  w.set("test.u16", int_value(ValueType::UINT16, 65535));
  w.set("test.i16", int_value(ValueType::INT16, -32768));
  w.set_u32("test.u32", 4294967295u);
  w.set_i32("test.i32", std::numeric_limits<int32_t>::min());
  w.set_u64("test.u64", std::numeric_limits<uint64_t>::max());
  w.set("test.i64", int_value(ValueType::INT64, kI64Min));
  w.set_f32("test.f32", 1.5f);
  w.set("test.f64", float_value(ValueType::FLOAT64, 3.141592653589793));
  w.set_bool("test.bool_true", true);
  w.set_bool("test.bool_false", false);
  w.set_string("test.str", "h\xc3\xa9llo w\xc3\xb6rld");
  w.set_string("test.empty_str", "");
  w.set_strings("test.strings", {"a", "", "\xc3\xbcn\xc3\xaf"});
  w.set_i32s("test.i32s", {1, -2, 3});
  w.set_f32s("test.f32s", {0.5f, -1.25f});
  w.set("test.u64s", int_array(ValueType::UINT64, {0, -1}));
  w.set("test.bools", int_array(ValueType::BOOL, {1, 0, 1}));
  w.set("test.nested",
        array_of_arrays({int_array(ValueType::INT32, {1, 2}), int_array(ValueType::INT32, {3})}));
  auto add = [&](const char* name, DType t, std::vector<uint64_t> shape, auto gen) {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    std::vector<float> x(n);
    for (uint64_t i = 0; i < n; ++i) x[i] = gen(double(i));
    auto bytes = encode(t, x);
    w.add_tensor(name, t, shape, bytes.data(), bytes.size());
  };
  // Same formulas as the script.
  add("t.f32", DType::F32, {4, 3}, [](double i) { return float((i - 5) * 0.25); });
  add("t.f16", DType::F16, {8}, [](double i) { return float(i * 0.5 - 2); });
  add("t.bf16", DType::BF16, {2, 2}, [](double i) { return float(i - 1.5); });
  add("t.q8_0", DType::Q8_0, {32, 2}, [](double i) { return float(std::sin(i) * 2); });
  add("t.q4_0", DType::Q4_0, {64}, [](double i) { return float(std::cos(i * 0.3)); });
  add("t.q4_1", DType::Q4_1, {32, 1, 2}, [](double i) { return float(i * 0.1); });
  return w;
}

TEST(Gguf, WriteFileForPythonCheck) {
  const char* out = std::getenv("LOWRANK_GGUF_PY_OUT");
  Writer w = python_check_file();
  auto f = File::from_bytes(w.to_bytes(), "py.gguf");  // always self-check
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->tensors().size(), 6u);
  if (!out || !*out) GTEST_SKIP() << "set LOWRANK_GGUF_PY_OUT=<path> to write the file";
  w.write(out);
}

}  // namespace
}  // namespace lr::gguf::test
