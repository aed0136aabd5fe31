// Helpers of the model tests: a temporary directory, tiny models and
// calibration text written into it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

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
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), long(bytes.size()));
  return path;
}

inline std::string write_calib(const TempDir& t) {
  std::string path = t.file("calib.txt");
  std::ofstream out(path);
  for (int i = 0; i < 40; ++i)
    out << "The river runs past the mill and the old stone bridge, " << i * 7919 << " times a day.\n";
  return path;
}

}  // namespace lr::test
