// The block formats' scalar dequantizers (core/quants.cpp) against the `gguf`
// Python package: tests/fixtures/quant/dequant.bin holds random blocks,
// blocks gguf.quants.quantize made, and real blocks of the default model and
// Qwen2.5-Coder-0.5B, each with the values gguf.quants.dequantize returned
// (scripts/make_quant_fixture.py). Every value must match bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace lr {
namespace {

struct Case {
  DType type;
  std::string name;
  std::vector<uint8_t> raw;
  std::vector<float> values;
};

std::vector<Case> read_fixture() {
  std::ifstream in(LOWRANK_SOURCE_DIR "/tests/fixtures/quant/dequant.bin", std::ios::binary);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  auto u32 = [&] {
    uint32_t v;
    EXPECT_LE(at + 4, b.size());
    std::memcpy(&v, b.data() + at, 4);
    at += 4;
    return v;
  };
  EXPECT_GE(b.size(), 12u);
  if (b.size() < 12 || std::memcmp(b.data(), "LRQF", 4) != 0) return {};
  at = 4;
  EXPECT_EQ(u32(), 1u);
  const uint32_t n = u32();
  std::vector<Case> cases;
  for (uint32_t i = 0; i < n && at < b.size(); ++i) {
    Case c;
    const uint32_t type = u32(), blocks = u32(), len = u32();
    c.type = DType(type);
    c.name.assign(reinterpret_cast<const char*>(b.data() + at), len);
    at += len;
    const DTypeInfo info = dtype_info(c.type);
    const size_t bytes = size_t(blocks) * size_t(info.block_bytes);
    const size_t elems = size_t(blocks) * size_t(info.block_elems);
    if (at + bytes + 4 * elems > b.size()) break;
    c.raw.assign(b.begin() + long(at), b.begin() + long(at + bytes));
    at += bytes;
    c.values.resize(elems);
    std::memcpy(c.values.data(), b.data() + at, 4 * elems);
    at += 4 * elems;
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), n);
  return cases;
}

TEST(Quants, BlockSizes) {
  // GGML's block sizes (ggml-common.h as the gguf package lists them).
  const std::map<DType, std::pair<int64_t, int64_t>> want = {
      {DType::Q4_0, {32, 18}},  {DType::Q4_1, {32, 20}},  {DType::Q5_0, {32, 22}},
      {DType::Q5_1, {32, 24}},  {DType::Q8_0, {32, 34}},  {DType::Q2_K, {256, 84}},
      {DType::Q3_K, {256, 110}}, {DType::Q4_K, {256, 144}}, {DType::Q5_K, {256, 176}},
      {DType::Q6_K, {256, 210}}};
  for (const auto& [t, eb] : want) {
    EXPECT_EQ(dtype_info(t).block_elems, eb.first) << dtype_name(t);
    EXPECT_EQ(dtype_info(t).block_bytes, eb.second) << dtype_name(t);
  }
  EXPECT_EQ(row_bytes(DType::Q4_K, 896), std::nullopt);  // not whole super-blocks
  EXPECT_EQ(row_bytes(DType::Q6_K, 1536), 6u * 210);
  EXPECT_FALSE(dtype_info(uint32_t(16)).has_value());  // IQ2_XXS: refused
}

TEST(Quants, DequantizeMatchesGgufPackageBitForBit) {
  const std::vector<Case> cases = read_fixture();
  ASSERT_GE(cases.size(), 20u);
  std::map<DType, int> real;
  for (const Case& c : cases) {
    std::vector<float> got(c.values.size());
    dequantize(c.type, c.raw.data(), got.data(), int64_t(got.size()));
    int wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &c.values[i], 4);
      if (a != b && wrong++ < 3)
        ADD_FAILURE() << c.name << " element " << i << ": " << got[i] << " vs gguf " << c.values[i];
    }
    EXPECT_EQ(wrong, 0) << c.name;
    if (c.name.find(".gguf:") != std::string::npos) ++real[c.type];
  }
  // Real blocks of the formats the real models use.
  for (DType t : {DType::Q4_1, DType::Q8_0, DType::Q5_0, DType::Q4_K, DType::Q6_K})
    EXPECT_GE(real[t], 1) << dtype_name(t);
}

}  // namespace
}  // namespace lr
