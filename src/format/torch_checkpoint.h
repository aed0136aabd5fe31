// PyTorch checkpoints read without PyTorch: the zip container torch.save
// writes (`<prefix>/data.pkl` plus one raw record per storage) decoded with
// the restricted unpickler (format/pickle.h). Only the functions that rebuild
// tensors and plain containers are "called"; any other call in the pickle is
// refused with a message naming it, so a malicious checkpoint cannot run code.
//
// Tensors are found in a state dict (a dict of name -> tensor, nested dicts
// joined with dots, tuple and list items named by their index: "x.1") and in
// whole-module pickles (nn.Module objects: their _parameters, persistent
// _buffers and _modules, named like state_dict()). Strings inside such
// containers are kept under the same names (Dobi-SVD tags a tuple "us").
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "format/pickle.h"
#include "format/tensor_source.h"
#include "format/zip.h"

namespace lr {

class TorchCheckpoint final : public TensorSource {
 public:
  static std::unique_ptr<TorchCheckpoint> open(const std::string& path);
  static std::unique_ptr<TorchCheckpoint> from_bytes(std::vector<uint8_t> bytes, std::string name);

  const std::string& path() const override { return zip_->path(); }
  // F32, F16 and BF16 tensors (shape in GGML order, data in the file);
  // another dtype is an lr::Error naming it. nullopt when absent.
  std::optional<TensorView> find(const std::string& name) const override;
  // A tensor of any storage type (ByteStorage codes, LongStorage, ...):
  // its shape in GGML order and its bytes, which are elem x numel.
  struct Raw {
    std::string storage;  // "ByteStorage"
    uint64_t elem = 0;    // bytes per element
    std::vector<uint64_t> shape;
    const uint8_t* data = nullptr;
    uint64_t nbytes = 0;
  };
  std::optional<Raw> find_raw(const std::string& name) const;
  // A string stored in the containers (tuple item, dict value); nullopt otherwise.
  std::optional<std::string> find_string(const std::string& name) const;
  std::vector<std::string> names() const;
  // Storage class of a tensor ("FloatStorage", "LongStorage", ...).
  std::optional<std::string> storage_type(const std::string& name) const;
  // Every class or function name the pickle referenced ("module.Name"),
  // for telling checkpoint families apart.
  const std::set<std::string>& globals() const { return globals_; }

 private:
  struct Storage;
  struct Tensor;
  // Checks the zip magic (a legacy torch file gets its own message), then reads.
  static std::unique_ptr<TorchCheckpoint> from_file(std::unique_ptr<MappedFile> f);
  explicit TorchCheckpoint(std::unique_ptr<ZipArchive> z);
  void load();
  // torch._utils._rebuild_tensor_v2's arguments to a tensor over its storage.
  static pickle::ValuePtr rebuild_tensor(const std::string& p, pickle::Document& doc,
                                         pickle::ValuePtr args);
  void walk(const pickle::Value* v, const std::string& prefix, int depth);
  void walk_module(const pickle::Value* m, const std::string& prefix, int depth);

  std::unique_ptr<ZipArchive> zip_;
  std::string prefix_;  // "archive/" or whatever top folder the writer used
  std::unique_ptr<pickle::Document> doc_;
  std::map<std::string, std::shared_ptr<const Tensor>> tensors_;
  std::map<std::string, std::string> strings_;
  size_t walked_ = 0;  // values visited by walk()
  std::set<std::string> globals_;
};

}  // namespace lr
