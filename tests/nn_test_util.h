// Why this file exists: the nn and safetensors tests write real files; each test gets
// its own fresh folder (removed afterwards) so tests never see each other's files, and
// compares tensors byte for byte, since "bit-exact" is what a checkpoint promises.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/tensor.h"
#include "core/views.h"

namespace cg::testing_nn {

// A fresh folder under the system temp dir, removed (with its files) on destruction.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("chunkgrad_") + (info ? info->test_suite_name() : "x") + "_" +
                       (info ? info->name() : "y") + "_" + std::to_string(::getpid());
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file's bytes ("" when it cannot be read).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Same dtype, shape and bytes (NaN payloads and signed zeros included).
inline ::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
    return ::testing::AssertionFailure()
           << dtype_name(a.dtype()) << " " << shape_str(a.shape()) << " vs "
           << dtype_name(b.dtype()) << " " << shape_str(b.shape());
  }
  const Tensor ca = raw::contiguous(a), cb = raw::contiguous(b);
  if (ca.nbytes() > 0 && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) != 0) {
    return ::testing::AssertionFailure()
           << "bytes differ (" << dtype_name(a.dtype()) << " " << shape_str(a.shape()) << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace cg::testing_nn
