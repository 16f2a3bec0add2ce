// Helpers shared by the runtime's CPU tests (test_cache, test_c_api,
// test_compile): temp directories, environment guards, stderr capture, specs.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "runtime/cache.hpp"

namespace flashgen::test {

/// Whether `s` ends with `suffix`.
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  explicit TempDir(const char* tag = "flashgen-test") {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + tag + "-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// Sets (or unsets, with nullopt) an environment variable; restores it on exit.
class EnvGuard {
 public:
  EnvGuard(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~EnvGuard() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

/// Makes `dir` the working directory (created with its parents); restores the
/// previous one on exit. current() is `dir` as the file system resolves it.
class ScopedCwd {
 public:
  explicit ScopedCwd(const std::string& dir) : back_(std::filesystem::current_path()) {
    std::filesystem::create_directories(dir);
    std::filesystem::current_path(dir);
  }
  ~ScopedCwd() { std::filesystem::current_path(back_); }
  ScopedCwd(const ScopedCwd&) = delete;
  ScopedCwd& operator=(const ScopedCwd&) = delete;
  std::string current() const { return std::filesystem::current_path().string(); }
  /// Moves to `dir` (created) for the rest of the scope.
  void move(const std::string& dir) const {
    std::filesystem::create_directories(dir);
    std::filesystem::current_path(dir);
  }

 private:
  std::filesystem::path back_;
};

/// FLASHGEN_CACHE_DIR pointed at a fresh temp dir (no bundles, no tune file)
/// for one test; the cache's resolved state is reset on entry and exit.
class ScopedCache {
 public:
  ScopedCache()
      : dir_("flashgen-cache"),
        env_("FLASHGEN_CACHE_DIR", dir_.path()),
        bundles_("FLASHGEN_CACHE_PATH", std::nullopt),
        tune_("FLASHGEN_TUNE_FILE", std::nullopt) {
    rt::cache_reset_for_tests();
  }
  ~ScopedCache() { rt::cache_reset_for_tests(); }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
  EnvGuard env_;
  EnvGuard bundles_;
  EnvGuard tune_;
};

/// Redirects file descriptor 2 into a temp file until stop().
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    char name[] = "/tmp/flashgen-stderr-XXXXXX";
    fd_ = ::mkstemp(name);
    path_ = name;
    saved_ = ::dup(2);
    ::dup2(fd_, 2);
  }
  ~StderrCapture() { stop(); }
  std::string stop() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
      ::close(fd_);
      std::ifstream in(path_, std::ios::binary);
      text_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      ::unlink(path_.c_str());
    }
    return text_;
  }

 private:
  int fd_ = -1;
  int saved_ = -1;
  std::string path_;
  std::string text_;
};

inline std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline bool is_elf(const std::vector<char>& b) {
  return b.size() > 4 && b[0] == '\x7f' && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
}

/// Every file name in `dir` (not recursive).
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

/// The spec a profile's tiles give for the given features.
inline KernelSpec spec_for(const Profile& profile, int arch, DType dtype, int d, int dv, MaskKind mask,
                           BiasKind bias, bool lse) {
  const FlashTile& t = profile.tile_for(std::max(d, dv));
  KernelSpec s;
  s.arch = arch;
  s.unit = profile.matrix_unit.shape;
  s.dtype = dtype;
  s.head_dim = d;
  s.head_dim_v = dv;
  s.tile = t.tile;
  s.mask = mask;
  s.bias = bias;
  s.has_lse = lse;
  return s;
}

inline KernelSpec simple_spec(int arch = 80, int d = 64, MaskKind mask = MaskKind::none) {
  return spec_for(profile_for_arch(arch), arch, DType::f16, d, d, mask, BiasKind::none, false);
}

}  // namespace flashgen::test
