// Safetensors reader (single file, or a HuggingFace directory with sharded
// files) and writer.
//
// File layout: u64 little-endian header length N, N bytes of JSON
//   {"<tensor>": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"<key>": "<string>", ...}}
// then the data buffer; offsets are relative to the start of the buffer.
//
// The reader memory-maps files and treats every byte as hostile: the header
// length, the JSON, every field's type, offsets inside the buffer, end >= begin,
// (end - begin) == dtype size x product(shape) (overflow-checked), overlapping
// tensors and duplicate names (within a file and across shards) are all
// checked at open, and each failure throws lr::Error with one line
// "<path>: <problem>" naming the tensor / field and what was expected vs found.
//
// Tensors of dtypes lowrank does not compute with (I64, F64, I8, ...) are
// accepted at open (HF checkpoints carry e.g. I64 buffers) and find() throws
// for them, naming the tensor and its dtype.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "format/tensor_source.h"

namespace lr {

// Headers longer than this are rejected before anything is allocated for them.
inline constexpr uint64_t kSafetensorsMaxHeader = uint64_t(100) << 20;  // 100 MB
// Tensors have at most this many dimensions.
inline constexpr size_t kSafetensorsMaxDims = 8;

class SafetensorsSource final : public TensorSource {
 public:
  // Maps and validates one .safetensors file.
  static std::unique_ptr<SafetensorsSource> open_file(const std::string& path);
  // A HuggingFace model directory: `model.safetensors.index.json` (its
  // "weight_map" lists tensor -> shard file; each shard is mapped once) when
  // present, else `model.safetensors`.
  static std::unique_ptr<SafetensorsSource> open_dir(const std::string& dir);
  // Parses an in-memory image (tests, fuzzing). `name` is used in messages.
  static std::unique_ptr<SafetensorsSource> from_bytes(std::vector<uint8_t> bytes,
                                                       std::string name);

  ~SafetensorsSource() override;
  SafetensorsSource(const SafetensorsSource&) = delete;
  SafetensorsSource& operator=(const SafetensorsSource&) = delete;

  // The file (or directory) this source was opened from.
  const std::string& path() const override { return path_; }
  // nullopt when absent. Shape is in GGML order (the reverse of the file's
  // row-major shape: [out, in] in the file -> {in, out}). `data` points into the
  // mapping and need not be aligned. Throws lr::Error for a tensor whose dtype
  // is not F32, F16 or BF16.
  std::optional<TensorView> find(const std::string& name) const override;

  // Every tensor name (any dtype), sorted.
  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  // The file's dtype string of a tensor ("F32", "I64", ...); nullopt when absent.
  std::optional<std::string> dtype_string(const std::string& name) const;
  // "__metadata__" of the file (of all shards, merged; the first shard wins).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Shard;
  struct Entry {
    std::string dtype_str;          // as written in the file
    std::optional<DType> dtype;     // nullopt: a dtype lowrank does not read
    std::vector<uint64_t> shape;    // GGML order
    const uint8_t* data = nullptr;
    uint64_t nbytes = 0;
    size_t shard = 0;               // index into shards_
  };

  SafetensorsSource() = default;
  // Validates shards_[i] and adds its tensors and metadata.
  void parse_shard(size_t i);

  std::string path_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::unordered_map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write. `shape` is row-major as stored in the file ([out, in]
// for a linear layer); `bytes` must hold exactly dtype size x product(shape).
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;  // F32, F16 or BF16
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Serialises tensors (data in the given order, header padded with spaces to a
// multiple of 8 bytes). Invalid input (unsupported dtype, negative dimension,
// size mismatch, empty / duplicate / reserved name) throws
// lr::Error("safetensors writer: ...").
std::vector<uint8_t> safetensors_to_bytes(const std::vector<SafetensorsTensor>& tensors,
                                          const std::map<std::string, std::string>& metadata = {});
// Same, written to `path` (throws lr::Error on I/O failure).
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace lr
