// Helpers of the model tests: a temporary directory, tiny models and
// calibration text written into it.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "compress/synth_model.h"
#include "tiny_model.h"

namespace lr::test {

struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    dir = std::filesystem::temp_directory_path() /
          fmt::format("lowrank-test-{}-{}", ::getpid(), counter()++);
    std::filesystem::create_directories(dir);
  }
  ~TempDir() { std::filesystem::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

inline std::string write_tiny(const TempDir& t, const TinySpec& s, const std::string& name) {
  std::string path = t.file(name);
  auto bytes = make_tiny_gguf(s);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), long(bytes.size()));
  return path;
}

// A random-weight model of `shape` at `keep` (lowrank synth), written into t.
inline std::string write_synth(const TempDir& t, double keep, const std::string& shape = "tiny",
                               uint64_t seed = 1) {
  SynthOptions o;
  o.shape = shape;
  o.keep = keep;
  o.seed = seed;
  o.threads = 2;
  const std::string path = t.file(fmt::format("synth-{}-{}-{}.gguf", shape, keep, seed));
  write_synthetic_model(path, o);
  return path;
}

// A synthetic model that owns its temporary directory.
struct Synth {
  TempDir t;
  std::string path;
  explicit Synth(double keep, const std::string& shape = "tiny", uint64_t seed = 1)
      : path(write_synth(t, keep, shape, seed)) {}
};

inline std::string write_calib(const TempDir& t) {
  std::string path = t.file("calib.txt");
  std::ofstream out(path);
  for (int i = 0; i < 40; ++i)
    out << "The river runs past the mill and the old stone bridge, " << i * 7919
        << " times a day.\n";
  return path;
}

}  // namespace lr::test
