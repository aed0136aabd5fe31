// lowrank's quantizers against the gguf Python package's
// (tests/fixtures/quant/quantize.bin, made by scripts/make_quantize_fixture.py):
// on the same values, the search's error is at most the package's round to
// nearest; and core/dtype.h's plain writers reproduce the package's bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "compress/quantize.h"
#include "core/dtype.h"

namespace lr::compress {
namespace {

struct Case {
  DType type;
  std::vector<float> x;
  std::vector<uint8_t> blocks;  // the package's
};

std::vector<Case> load_cases() {
  std::ifstream in(LOWRANK_SOURCE_DIR "/tests/fixtures/quant/quantize.bin", std::ios::binary);
  EXPECT_TRUE(in.good());
  char magic[4];
  uint32_t version = 0, n = 0;
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(&version), 4);
  in.read(reinterpret_cast<char*>(&n), 4);
  EXPECT_EQ(std::string(magic, 4), "LRQZ");
  EXPECT_EQ(version, 1u);
  std::vector<Case> cases;
  for (uint32_t i = 0; i < n && in; ++i) {
    uint32_t type = 0, count = 0;
    in.read(reinterpret_cast<char*>(&type), 4);
    in.read(reinterpret_cast<char*>(&count), 4);
    Case c;
    c.type = DType(type);
    c.x.resize(count);
    in.read(reinterpret_cast<char*>(c.x.data()), std::streamsize(count) * 4);
    c.blocks.resize(*row_bytes(c.type, count));
    in.read(reinterpret_cast<char*>(c.blocks.data()), std::streamsize(c.blocks.size()));
    cases.push_back(std::move(c));
  }
  EXPECT_TRUE(in.good());
  EXPECT_EQ(cases.size(), 10u);
  return cases;
}

double sq_error(const std::vector<float>& x, DType t, const std::vector<uint8_t>& blocks) {
  std::vector<float> y(x.size());
  dequantize(t, blocks.data(), y.data(), int64_t(x.size()));
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  return e;
}

TEST(QuantizeVsGguf, SearchErrorIsAtMostThePackages) {
  for (const Case& c : load_cases()) {
    std::vector<uint8_t> ours(c.blocks.size());
    quantize_row(c.type, c.x.data(), nullptr, ours.data(), int64_t(c.x.size()));
    const double mine = sq_error(c.x, c.type, ours), theirs = sq_error(c.x, c.type, c.blocks);
    EXPECT_LE(mine, theirs) << dtype_name(c.type);
    if (c.type != DType::Q8_0) {
      EXPECT_LT(mine, 0.95 * theirs) << dtype_name(c.type);
    }
  }
}

TEST(QuantizeVsGguf, PlainWritersMatchThePackageBitForBit) {
  for (const Case& c : load_cases()) {
    if (c.type != DType::Q8_0 && c.type != DType::Q4_0 && c.type != DType::Q4_1) continue;
    std::vector<uint8_t> ours(c.blocks.size());
    quantize(c.type, c.x.data(), ours.data(), int64_t(c.x.size()));
    EXPECT_EQ(ours, c.blocks) << dtype_name(c.type);
  }
}

}  // namespace
}  // namespace lr::compress
