// PyTorch checkpoints read without PyTorch. The fixtures come from
// scripts/make_torch_fixtures.py, which drives Python's own pickle module
// with stand-ins for torch's classes, so the opcodes are the ones
// torch.save writes (protocol 2, storages as persistent ids, stored zip).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/half.h"
#include "format/pickle.h"
#include "format/torch_checkpoint.h"
#include "format/zip.h"
#include "../error_of.h"

namespace lr {
namespace {

using namespace std::string_literals;

std::string fixture(const std::string& name) { return LOWRANK_SOURCE_DIR "/tests/fixtures/torch/" + name; }

std::vector<uint8_t> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<float> floats(const TensorView& v) {
  std::vector<float> out(v.nbytes / (v.dtype == DType::F32 ? 4 : 2));
  if (v.dtype == DType::F32) std::memcpy(out.data(), v.data, v.nbytes);
  else
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, v.data + 2 * i, 2);
      out[i] = f16_to_f32(h);
    }
  return out;
}

using test::error_of;

TEST(TorchCheckpoint, StateDictTensorsValuesAliasesAndViews) {
  for (const char* name : {"state_dict.pt", "other_prefix.pt"}) {
    SCOPED_TRACE(name);
    auto c = TorchCheckpoint::open(fixture(name));
    EXPECT_EQ(c->names(), (std::vector<std::string>{"layer.alias", "layer.bias", "layer.view", "layer.weight",
                                                    "param", "steps"}));
    auto w = c->find("layer.weight");
    ASSERT_TRUE(w);
    EXPECT_EQ(w->dtype, DType::F32);
    EXPECT_EQ(w->shape, (std::vector<uint64_t>{4, 3}));  // GGML order of [3, 4]
    EXPECT_EQ(floats(*w), (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4.5f, 5, 5.5f}));
    EXPECT_EQ(c->find("layer.alias")->data, w->data);  // one storage under two names
    auto view = c->find("layer.view");  // [2, 2] at element offset 8 of the same storage
    EXPECT_EQ(view->data, w->data + 8 * 4);
    EXPECT_EQ(floats(*view), (std::vector<float>{4, 4.5f, 5, 5.5f}));
    auto b = c->find("layer.bias");
    EXPECT_EQ(b->dtype, DType::F16);
    EXPECT_EQ(floats(*b), (std::vector<float>{-1, -0.75f, -0.5f, -0.25f, 0}));
    EXPECT_EQ(floats(*c->find("param")), (std::vector<float>{1.5f, -2}));
    EXPECT_FALSE(c->find("nope"));
    EXPECT_EQ(c->storage_type("steps"), "LongStorage");
    EXPECT_NE(error_of([&] { c->find("steps"); }).find("'steps' is stored as LongStorage"), std::string::npos);
    EXPECT_TRUE(c->globals().count("torch._utils._rebuild_tensor_v2"));
  }
}

TEST(TorchCheckpoint, WholeModulePickleNamedLikeStateDict) {
  auto c = TorchCheckpoint::open(fixture("whole_module.pt"));
  EXPECT_EQ(c->names(), (std::vector<std::string>{"lm_head.weight", "model.layers.0.q_u_proj.weight",
                                                  "model.layers.0.q_v_proj.weight", "model.layers.1.q_u_proj.weight",
                                                  "model.layers.1.q_v_proj.weight"}));
  auto u = c->find("model.layers.1.q_u_proj.weight");
  EXPECT_EQ(u->shape, (std::vector<uint64_t>{2, 4}));
  EXPECT_FLOAT_EQ(floats(*u)[7], 3.0f + 0.1f * 7);
  // The non-persistent rotary buffer is not a tensor of the checkpoint.
  EXPECT_FALSE(c->find("model.inv_freq"));
  EXPECT_TRUE(c->globals().count("transformers.models.llama.modeling_llama.LlamaForCausalLM"));
}

// SVD-LLM's own save of a model loaded with device_map="cpu": the model
// carries hf_device_map = {'': torch.device('cpu')} (a call in the pickle) and
// a config whose torch_dtype is torch.float16 (a global). Both are accepted
// without running anything; the tensors are the same as without them.
TEST(TorchCheckpoint, ModelWithDeviceMapAndConfig) {
  auto c = TorchCheckpoint::open(fixture("svdllm_device_map.pt"));
  auto plain = TorchCheckpoint::open(fixture("whole_module.pt"));
  EXPECT_EQ(c->names(), plain->names());
  EXPECT_EQ(floats(*c->find("model.layers.1.q_u_proj.weight")), floats(*plain->find("model.layers.1.q_u_proj.weight")));
  EXPECT_TRUE(c->globals().count("torch.device"));
  EXPECT_TRUE(c->globals().count("torch.float16"));
}

TEST(TorchCheckpoint, RefusesToCallArbitraryFunctions) {
  std::string e = error_of([] { TorchCheckpoint::open(fixture("calls_system.pt")); });
  EXPECT_NE(e.find("refusing to call posix.system"), std::string::npos) << e;
}

TEST(TorchCheckpoint, BrokenFilesAreClearErrors) {
  auto has = [](const std::string& file, const std::string& want) {
    std::string e = error_of([&] { TorchCheckpoint::open(fixture(file)); });
    EXPECT_NE(e.find(want), std::string::npos) << file << ": " << e;
  };
  has("missing_record.pt", "storage record 'archive/data/1' is missing");
  has("big_endian.pt", "byte order 'big' is not supported");
  has("deflated.pt", "is compressed (method 8)");
  has("non_contiguous.pt", "non-contiguous tensor");
  has("too_small.pt", "tensor of 6 elements at offset 0 exceeds its FloatStorage of 4 elements");
  // Not a zip at all, and every truncation of a good file.
  std::string e = error_of([] { TorchCheckpoint::open(LOWRANK_SOURCE_DIR "/README.md"); });
  EXPECT_NE(e.find("not a zip-format PyTorch checkpoint"), std::string::npos) << e;
  const auto good = bytes_of(fixture("state_dict.pt"));
  for (size_t n = 0; n < good.size(); n += 7) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + long(n));
    EXPECT_THROW(TorchCheckpoint::from_bytes(cut, "cut.pt"), Error) << n;
  }
}

// The unpickler on its own: hand-written opcode streams.
TEST(Pickle, OpcodesAndErrors) {
  pickle::Hooks none;
  // {'a': [1, -2, 300, 2**40], 'b': (True, None, 1.5)}
  const std::string ok = "\x80\x02}q\x00(X\x01\x00\x00\x00"s + "a" +
                         "]q\x01(K\x01J\xfe\xff\xff\xffM,\x01\x8a\x06\x00\x00\x00\x00\x00\x01"s +
                         "eX\x01\x00\x00\x00"s + "b" + "\x88NG?\xf8" + std::string(6, '\0') + "\x87u.";
  auto d = pickle::load(reinterpret_cast<const uint8_t*>(ok.data()), ok.size(), "t", none);
  const pickle::Value* a = d->root->get("a");
  ASSERT_TRUE(a);
  ASSERT_EQ(a->items.size(), 4u);
  EXPECT_EQ(a->items[0]->i, 1);
  EXPECT_EQ(a->items[1]->i, -2);
  EXPECT_EQ(a->items[2]->i, 300);
  EXPECT_EQ(a->items[3]->i, int64_t(1) << 40);
  const pickle::Value* b = d->root->get("b");
  EXPECT_EQ(b->items[0]->i, 1);
  EXPECT_EQ(b->items[1]->kind, pickle::Kind::None);
  EXPECT_DOUBLE_EQ(b->items[2]->f, 1.5);
  auto err = [&](const std::string& p) {
    return error_of([&] { pickle::load(reinterpret_cast<const uint8_t*>(p.data()), p.size(), "t", none); });
  };
  EXPECT_NE(err("\x80\x02}").find("truncated"), std::string::npos);
  EXPECT_NE(err("\x80\x02s.").find("stack underflow"), std::string::npos);
  EXPECT_NE(err("\x80\x02h\x05.").find("memo key 5"), std::string::npos);
  EXPECT_NE(err(std::string("\x80\x02\x8a\x09", 4) + std::string(9, '\1') + ".").find("LONG1 of 9 bytes"),
            std::string::npos);
  EXPECT_NE(err("\x80\x02I1\n.").find("unsupported pickle opcode 0x49"), std::string::npos);
  EXPECT_NE(err("cos\nsystem\nX\x02\x00\x00\x00"s + "ls\x85R.").find("refusing to call os.system"),
            std::string::npos);
  // A list appended to itself through the memo: a cycle, freed with the document.
  const std::string cyc = std::string("\x80\x02]q\x00h\x00", 7) + "a.";
  auto c = pickle::load(reinterpret_cast<const uint8_t*>(cyc.data()), cyc.size(), "t", none);
  EXPECT_EQ(c->root->items[0], c->root);
}

TEST(Zip, RejectsGarbageAndTruncation) {
  EXPECT_THROW(ZipArchive::from_bytes({1, 2, 3}, "x.zip"), Error);
  auto good = bytes_of(fixture("state_dict.pt"));
  auto z = ZipArchive::from_bytes(good, "good.zip");
  EXPECT_TRUE(z->find("archive/data.pkl"));
  EXPECT_TRUE(z->find("archive/byteorder"));
  good[good.size() - 22 + 16] ^= 0x40;  // directory offset of the end record
  EXPECT_THROW(ZipArchive::from_bytes(good, "bad.zip"), Error);
}

}  // namespace
}  // namespace lr
