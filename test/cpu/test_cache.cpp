// CPU tests of the kernel cache (runtime/cache.*) and the compile path:
// miss -> hit without NVRTC, corrupt / truncated / foreign entries (arch,
// NVRTC version, generator version) recompiled and replaced with one notice,
// atomic writes that leave no temp files, directory fallbacks, bundles,
// concurrency across threads and processes, compile errors, NVRTC loading.
// Needs NVRTC (no GPU). Trust, crashes, the 8 x 4 race and unwritable or
// read-only locations are in test_cache_reliability.cpp.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "flashgen/flashgen.hpp"
#include "gen/emit.hpp"
#include "runtime/cache.hpp"
#include "runtime/compile.hpp"
#include "runtime/nvrtc.hpp"
#include "test/cpu/rt_test_util.hpp"

using namespace flashgen;
using flashgen::test::EnvGuard;
using flashgen::test::ends_with;
using flashgen::test::ScopedCache;
using flashgen::test::StderrCapture;
using flashgen::test::TempDir;

namespace {

// Every file in `dir` is a finished entry part: no temp files, no strays.
void check_no_temp_files(const std::string& dir) {
  for (const auto& name : test::list_dir(dir)) {
    INFO("file: ", name);
    CHECK(name[0] != '.');
    CHECK(name.find(".tmp.") == std::string::npos);
    CHECK((ends_with(name, ".cubin") || ends_with(name, ".cu") || ends_with(name, ".log")));
  }
}

}  // namespace

TEST_CASE("cache: key covers every input and only the inputs") {
  const rt::NvrtcVersion v{13, 0};
  const std::vector<std::string> opts = rt::nvrtc_options(80);
  const std::string key = rt::cache_key("src", opts, 80, v);
  CHECK(key.size() == 32);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(rt::cache_key("src", opts, 80, v) == key);  // deterministic
  CHECK(rt::cache_key("src ", opts, 80, v) != key);
  CHECK(rt::cache_key("src", rt::nvrtc_options(90), 80, v) != key);
  CHECK(rt::cache_key("src", opts, 90, v) != key);
  CHECK(rt::cache_key("src", opts, 80, rt::NvrtcVersion{12, 8}) != key);
  std::vector<std::string> reordered = opts;
  std::swap(reordered[1], reordered[2]);
  CHECK(rt::cache_key("src", reordered, 80, v) != key);  // option order matters
  // Length prefixes: moving bytes between adjacent inputs changes the key.
  CHECK(rt::cache_key("src-std=c++17", {"x"}, 80, v) != rt::cache_key("src", {"-std=c++17x"}, 80, v));
}

TEST_CASE("cache: options are in the fixed order") {
  const auto o = rt::nvrtc_options(86);
  REQUIRE(o.size() == 4);
  CHECK(o[0] == "--gpu-architecture=sm_86");
  CHECK(o[1] == "-std=c++17");
  CHECK(o[2] == "--ptxas-options=--verbose");
  CHECK(o[3] == "-default-device");
}

TEST_CASE("cache: entry encoding round-trips and every defect is named") {
  const std::string key(32, 'a');
  const std::vector<char> payload = {'\x7f', 'E', 'L', 'F', 1, 2, 3, 4, 5};
  const std::vector<char> entry = rt::encode_cache_entry(key, payload);
  REQUIRE(entry.size() == rt::kCacheHeaderSize + payload.size());
  CHECK(std::memcmp(entry.data(), "FLASHGEN", 8) == 0);
  std::string reason;
  auto ok = rt::decode_cache_entry(entry, key, &reason);
  REQUIRE(ok.has_value());
  CHECK(*ok == payload);

  auto bad = [&](std::vector<char> bytes, const std::string& k, const char* expect) {
    std::string why;
    CHECK_FALSE(rt::decode_cache_entry(bytes, k, &why).has_value());
    INFO("reason: ", why);
    CHECK(why.find(expect) != std::string::npos);
  };
  bad({}, key, "empty");
  bad(std::vector<char>(entry.begin(), entry.begin() + 20), key, "truncated");
  bad(std::vector<char>(entry.begin(), entry.end() - 3), key, "truncated");
  std::vector<char> longer = entry;
  longer.push_back('x');
  bad(longer, key, "corrupt");
  std::vector<char> flipped = entry;
  flipped.back() ^= 0x5a;
  bad(flipped, key, "checksum");
  std::vector<char> magic = entry;
  magic[0] = 'X';
  bad(magic, key, "magic");
  std::vector<char> version = entry;
  version[8] = 99;
  bad(version, key, "format version");
  bad(entry, std::string(32, 'b'), "another key");

  // The header records what made the entry; each foreign field is named.
  const rt::EntryIdentity id{key, 90, rt::NvrtcVersion{13, 0}, kGeneratorVersion};
  const std::vector<char> full = rt::encode_cache_entry(id, payload);
  REQUIRE(rt::decode_cache_entry(full, id, &reason).has_value());
  auto foreign = [&](rt::EntryIdentity writer, const char* expect) {
    std::string why;
    CHECK_FALSE(rt::decode_cache_entry(rt::encode_cache_entry(writer, payload), id, &why).has_value());
    INFO("reason: ", why);
    CHECK(why.find(expect) != std::string::npos);
  };
  foreign(rt::EntryIdentity{key, 80, id.nvrtc, id.generator}, "compiled for sm_80 (this lookup is for sm_90)");
  foreign(rt::EntryIdentity{key, 90, rt::NvrtcVersion{12, 8}, id.generator},
          "made by NVRTC 12.8 (this process uses NVRTC 13.0)");
  foreign(rt::EntryIdentity{key, 90, id.nvrtc, "0.0.1"}, "made by flashgen generator 0.0.1");
  const auto header = rt::decode_cache_header(full.data(), full.size(), &reason);
  REQUIRE(header.has_value());
  CHECK(header->id.key == key);
  CHECK(header->id.arch == 90);
  CHECK(header->id.nvrtc == (rt::NvrtcVersion{13, 0}));
  CHECK(header->id.generator == kGeneratorVersion);
  CHECK(header->payload_size == payload.size());
  // Every header byte is covered by the header checksum.
  for (size_t i : {size_t{20}, size_t{48}, size_t{64}, size_t{70}, size_t{84}, size_t{115}}) {
    std::vector<char> b = full;
    b[i] ^= 0x10;
    std::string why;
    CHECK_FALSE(rt::decode_cache_entry(b, id, &why).has_value());
    CHECK(why.find("header checksum") != std::string::npos);
  }
}

TEST_CASE("cache: miss, then hit without an NVRTC call") {
  ScopedCache cache;
  const KernelSpec spec = test::simple_spec(80, 64);
  const uint64_t before = rt::nvrtc_compile_count();
  CompiledKernel a = compile(spec);
  CHECK(rt::nvrtc_compile_count() == before + 1);
  CHECK_FALSE(a.from_cache);
  CHECK(a.name == spec.kernel_name());
  CHECK(a.key.size() == 32);
  CHECK(test::is_elf(a.cubin));
  CHECK(a.compile_log.find("spill stores") != std::string::npos);
  CHECK(a.cache_path == rt::cache_entry_path(cache.path(), a.name, a.key));
  CHECK(std::filesystem::exists(a.cache_path));
  CHECK(test::read_bytes(rt::cache_entry_path(cache.path(), a.name, a.key, ".cu")).size() > 0);
  CHECK(std::filesystem::exists(rt::cache_entry_path(cache.path(), a.name, a.key, ".log")));
  // The .cu beside the entry is exactly the generated source.
  const std::vector<char> cu = test::read_bytes(rt::cache_entry_path(cache.path(), a.name, a.key, ".cu"));
  CHECK(std::string(cu.begin(), cu.end()) == generate(spec));

  CompiledKernel b = compile(spec);
  CHECK(rt::nvrtc_compile_count() == before + 1);  // no NVRTC call
  CHECK(b.from_cache);
  CHECK(b.cubin == a.cubin);
  CHECK(b.key == a.key);
  CHECK(b.cache_path == a.cache_path);
  CHECK(b.compile_log == a.compile_log);
  check_no_temp_files(cache.path());
}

TEST_CASE("cache: corrupt, truncated and empty entries are recompiled and replaced") {
  ScopedCache cache;
  const KernelSpec spec = test::simple_spec(80, 64, MaskKind::causal_top_left);
  const CompiledKernel good = compile(spec);
  REQUIRE_FALSE(good.from_cache);
  const std::vector<char> bytes = test::read_bytes(good.cache_path);
  REQUIRE(bytes.size() == rt::kCacheHeaderSize + good.cubin.size());

  struct Damage {
    const char* name;
    std::vector<char> bytes;
    const char* reason;
  };
  std::vector<Damage> damages;
  {
    std::vector<char> b = bytes;
    for (size_t i = rt::kCacheHeaderSize + 100; i < rt::kCacheHeaderSize + 108; ++i) b[i] ^= 0xff;
    damages.push_back({"flipped payload bytes", b, "checksum"});
  }
  {
    std::vector<char> b = bytes;
    b[3] ^= 0x01;
    damages.push_back({"flipped magic byte", b, "magic"});
  }
  {
    std::vector<char> b = bytes;
    b[20] ^= 0x01;  // inside the stored key
    damages.push_back({"flipped key byte", b, "header checksum"});
  }
  damages.push_back({"truncated payload", std::vector<char>(bytes.begin(), bytes.begin() + bytes.size() / 2),
                     "truncated"});
  damages.push_back({"truncated header", std::vector<char>(bytes.begin(), bytes.begin() + 10), "truncated"});
  damages.push_back({"zero-length", {}, "empty"});
  {
    // Whole entries of this key, written by another NVRTC / generator.
    const rt::NvrtcVersion v = rt::nvrtc_version_for(spec.arch);
    damages.push_back({"foreign NVRTC version",
                       rt::encode_cache_entry(rt::EntryIdentity{good.key, spec.arch, rt::NvrtcVersion{v.major - 1, 7},
                                                                kGeneratorVersion},
                                              good.cubin),
                       "made by NVRTC"});
    damages.push_back({"foreign generator version",
                       rt::encode_cache_entry(rt::EntryIdentity{good.key, spec.arch, v, "0.0.9"}, good.cubin),
                       "made by flashgen generator 0.0.9"});
  }
  {
    std::vector<char> b = bytes;
    b.insert(b.end(), 16, 'z');
    damages.push_back({"trailing garbage", b, "corrupt"});
  }

  for (const auto& d : damages) {
    CAPTURE(d.name);
    test::write_bytes(good.cache_path, d.bytes);
    const uint64_t before = rt::nvrtc_compile_count();
    StderrCapture err;
    CompiledKernel again = compile(spec);
    const std::string log = err.stop();
    CHECK_FALSE(again.from_cache);
    CHECK(rt::nvrtc_compile_count() == before + 1);
    CHECK(again.cubin == good.cubin);
    INFO("stderr: ", log);
    CHECK(log.find("flashgen: cache entry " + good.cache_path + " is ") != std::string::npos);
    CHECK(log.find(d.reason) != std::string::npos);
    CHECK(log.find("; recompiling") != std::string::npos);
    CHECK(std::count(log.begin(), log.end(), '\n') == 1);  // one notice
    // Replaced: valid again, a hit without NVRTC.
    CHECK(test::read_bytes(good.cache_path) == bytes);
    CompiledKernel hit = compile(spec);
    CHECK(hit.from_cache);
    CHECK(rt::nvrtc_compile_count() == before + 1);
  }
  check_no_temp_files(cache.path());
}

TEST_CASE("cache: an entry of another arch copied over this entry's file is recompiled") {
  ScopedCache cache;
  const KernelSpec s80 = test::simple_spec(80, 64);
  const KernelSpec s90 = test::simple_spec(90, 64);
  const CompiledKernel k80 = compile(s80);
  const CompiledKernel k90 = compile(s90);
  REQUIRE(k80.key != k90.key);
  REQUIRE(k80.cache_path != k90.cache_path);
  const std::vector<char> good90 = test::read_bytes(k90.cache_path);

  // A file that is a perfectly valid entry -- for the sm_80 key.
  std::filesystem::copy_file(k80.cache_path, k90.cache_path,
                             std::filesystem::copy_options::overwrite_existing);
  const uint64_t before = rt::nvrtc_compile_count();
  StderrCapture err;
  CompiledKernel again = compile(s90);
  const std::string log = err.stop();
  CHECK_FALSE(again.from_cache);
  CHECK(rt::nvrtc_compile_count() == before + 1);
  CHECK(again.cubin == k90.cubin);
  INFO("stderr: ", log);
  CHECK(log.find("compiled for sm_80 (this lookup is for sm_90)") != std::string::npos);
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);  // one notice
  CHECK(test::read_bytes(k90.cache_path) == good90);
  CHECK(compile(s90).from_cache);
  CHECK(compile(s80).from_cache);  // the sm_80 entry itself is untouched
  CHECK(rt::nvrtc_compile_count() == before + 1);
  check_no_temp_files(cache.path());
}

TEST_CASE("cache: the directory is created with mode 0700, parents included") {
  TempDir root("flashgen-cachedir");
  const std::string dir = root.path() + "/a/b/flashgen";
  EnvGuard env("FLASHGEN_CACHE_DIR", dir);
  EnvGuard bundles("FLASHGEN_CACHE_PATH", std::nullopt);
  rt::cache_reset_for_tests();
  CHECK(rt::cache_dir() == dir);
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  rt::cache_reset_for_tests();
}

TEST_CASE("cache: a lookup, the layer list and plan() create no directory; the first compile does") {
  TempDir root("flashgen-cachedir-lazy");
  const std::string dir = root.path() + "/a/b/flashgen";
  EnvGuard env("FLASHGEN_CACHE_DIR", dir);
  EnvGuard bundles("FLASHGEN_CACHE_PATH", std::nullopt);
  EnvGuard tune("FLASHGEN_TUNE_FILE", std::nullopt);
  rt::cache_reset_for_tests();
  const KernelSpec spec = test::simple_spec(80, 16);
  const rt::CompileInputs in = rt::compile_inputs(spec);
  CHECK_FALSE(rt::cache_lookup(in.name, in.key).has_value());
  const auto user_layer = [] {
    for (const rt::CacheLayer& l : rt::cache_layers())
      if (l.kind == rt::CacheLayer::Kind::user) return l;
    FAIL("no user layer");
    return rt::CacheLayer{};
  };
  const rt::CacheLayer absent = user_layer();
  CHECK(absent.path == dir);
  CHECK(absent.usable);  // the first write creates it
  CHECK_FALSE(absent.exists);
  CHECK(absent.problem.empty());
  for (const rt::CacheLayer& l : rt::cache_layers())
    if (l.kind == rt::CacheLayer::Kind::memory) CHECK_FALSE(l.usable);
  CHECK(default_tune_file_path() == dir + "/tune.yml");
  AttentionProblem p = make_bshd_problem(DType::f16, 1, 128, 128, 2, 2, 16, 16, MaskKind::none,
                                         reinterpret_cast<const void*>(uintptr_t{0x10000000}),
                                         reinterpret_cast<const void*>(uintptr_t{0x10000000}),
                                         reinterpret_cast<const void*>(uintptr_t{0x10000000}),
                                         reinterpret_cast<void*>(uintptr_t{0x10000000}));
  (void)plan(p, 80);  // reads the tune files, among them <user cache>/tune.yml
  CHECK_FALSE(std::filesystem::exists(root.path() + "/a"));

  // A compile writes: the directory is created then, mode 0700, and the entry is stored in it.
  const CompiledKernel k = compile(spec);
  CHECK_FALSE(k.from_cache);
  CHECK(k.cache_path.rfind(dir + "/", 0) == 0);
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(user_layer().exists);
  CHECK(user_layer().usable);
  CHECK(compile(spec).from_cache);
  rt::cache_reset_for_tests();
}

TEST_CASE("cache: a relative FLASHGEN_CACHE_DIR or FLASHGEN_CACHE_PATH entry is taken from the working directory once") {
  TempDir root("flashgen-relative");
  std::filesystem::create_directories(root.path() + "/work/bundle");
  const test::ScopedCwd cwd(root.path() + "/work");
  const std::string work = cwd.current();  // (the real path of the directory)
  EnvGuard env("FLASHGEN_CACHE_DIR", "./rel/flashgen/");
  EnvGuard bundles("FLASHGEN_CACHE_PATH", "bundle");
  EnvGuard tune("FLASHGEN_TUNE_FILE", std::nullopt);
  rt::cache_reset_for_tests();
  CHECK(rt::cache_dir() == work + "/rel/flashgen");
  bool bundle_seen = false;
  for (const rt::CacheLayer& l : rt::cache_layers())
    if (l.kind == rt::CacheLayer::Kind::bundle) {
      bundle_seen = true;
      CHECK(l.path == work + "/bundle");
    }
  CHECK(bundle_seen);
  // A later chdir does not move the cache: the first compile stores under the first directory.
  cwd.move(root.path() + "/elsewhere");
  const CompiledKernel k = compile(test::simple_spec(80, 16));
  CHECK(k.cache_path.rfind(work + "/rel/flashgen/", 0) == 0);
  CHECK(std::filesystem::exists(k.cache_path));
  CHECK_FALSE(std::filesystem::exists(root.path() + "/elsewhere/rel"));
  rt::cache_reset_for_tests();
}

TEST_CASE("cache: absolute_path makes a path absolute and normalises it lexically") {
  TempDir root("flashgen-abspath");
  std::filesystem::create_directories(root.path() + "/a/b");
  const test::ScopedCwd cwd(root.path() + "/a/b");
  const std::string b = cwd.current();
  const std::string a = b.substr(0, b.rfind('/'));
  const std::string top = a.substr(0, a.rfind('/'));
  CHECK(rt::absolute_path("x") == b + "/x");
  CHECK(rt::absolute_path("./x/") == b + "/x");
  CHECK(rt::absolute_path(".") == b);
  CHECK(rt::absolute_path("./") == b);
  CHECK(rt::absolute_path("..") == a);
  CHECK(rt::absolute_path("../x") == a + "/x");
  CHECK(rt::absolute_path(".././../x") == top + "/x");
  CHECK(rt::absolute_path("..//x") == a + "/x");
  CHECK(rt::absolute_path("x/../y") == b + "/y");  // (no directory x is named on the way)
  CHECK(rt::absolute_path("a/./c//d/") == b + "/a/c/d");
  CHECK(rt::absolute_path("..x") == b + "/..x");
  CHECK(rt::absolute_path("/p/../q/") == "/q");
  CHECK(rt::absolute_path("//p") == "/p");
  CHECK(rt::absolute_path("///") == "/");
  CHECK(rt::absolute_path("").empty());
  // Above the root stays at the root.
  std::string ups;
  for (size_t i = 0, n = std::count(b.begin(), b.end(), '/') + 2; i < n; ++i) ups += "../";
  CHECK(rt::absolute_path(ups + "x") == "/x");
  CHECK(rt::absolute_path(ups) == "/");
}

TEST_CASE("cache: a cache directory below a file names the file") {
  TempDir root("flashgen-notdir");
  std::ofstream(root.path() + "/afile") << "x";
  for (const char* below : {"/afile/c", "/afile/c/d"}) {
    CAPTURE(below);
    EnvGuard env("FLASHGEN_CACHE_DIR", root.path() + below);
    rt::cache_reset_for_tests();
    bool seen = false;
    for (const rt::CacheLayer& l : rt::cache_layers())
      if (l.kind == rt::CacheLayer::Kind::user) {
        seen = true;
        CHECK_FALSE(l.usable);
        CHECK(l.problem.find(root.path() + "/afile is not a directory") != std::string::npos);
        CHECK(l.problem.find("stat failed") == std::string::npos);
      }
    CHECK(seen);
  }
  rt::cache_reset_for_tests();
}

TEST_CASE("cache: XDG_CACHE_HOME and HOME fallbacks") {
  TempDir root("flashgen-xdg");
  EnvGuard no_dir("FLASHGEN_CACHE_DIR", std::nullopt);
  {
    EnvGuard xdg("XDG_CACHE_HOME", root.path() + "/xdg");
    rt::cache_reset_for_tests();
    CHECK(rt::cache_dir() == root.path() + "/xdg/flashgen");
  }
  {
    EnvGuard xdg("XDG_CACHE_HOME", std::nullopt);
    EnvGuard home("HOME", root.path() + "/home");
    rt::cache_reset_for_tests();
    CHECK(rt::cache_dir() == root.path() + "/home/.cache/flashgen");
  }
  rt::cache_reset_for_tests();
}

TEST_CASE("cache: an unusable directory falls back to memory with one warning") {
  TempDir root("flashgen-nodir");
  test::write_bytes(root.path() + "/file", {'x'});
  // A directory below a regular file can never be created (even by root).
  EnvGuard env("FLASHGEN_CACHE_DIR", root.path() + "/file/cache");
  EnvGuard bundles("FLASHGEN_CACHE_PATH", std::nullopt);
  rt::cache_reset_for_tests();

  const KernelSpec spec = test::simple_spec(80, 64, MaskKind::causal_bottom_right);
  const uint64_t before = rt::nvrtc_compile_count();
  StderrCapture err;
  CompiledKernel a = compile(spec);
  CompiledKernel b = compile(spec);
  CompiledKernel c = compile(test::simple_spec(90, 64, MaskKind::causal_bottom_right));
  const std::string log = err.stop();
  INFO("stderr: ", log);
  CHECK(rt::cache_dir().empty());
  CHECK_FALSE(a.from_cache);
  CHECK(a.cache_path.empty());
  CHECK(b.from_cache);  // memory layer: no second NVRTC call
  CHECK(b.cubin == a.cubin);
  CHECK(b.cache_path.empty());
  CHECK_FALSE(c.from_cache);
  CHECK(rt::nvrtc_compile_count() == before + 2);
  // Exactly one warning line, naming the directory.
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
  CHECK(log.find("flashgen: warning:") != std::string::npos);
  CHECK(log.find(root.path() + "/file/cache") != std::string::npos);
  CHECK(log.find("memory only") != std::string::npos);
  rt::cache_reset_for_tests();
}

TEST_CASE("cache: read-only bundles are searched first and never written") {
  TempDir bundle("flashgen-bundle");
  const KernelSpec spec = test::simple_spec(90, 128);
  CompiledKernel original;
  {
    ScopedCache producer;  // an operator pre-generating the bundle
    original = compile(spec);
    REQUIRE_FALSE(original.from_cache);
    for (const char* ext : {".cubin", ".cu", ".log"})
      std::filesystem::copy_file(rt::cache_entry_path(producer.path(), original.name, original.key, ext),
                                 rt::cache_entry_path(bundle.path(), original.name, original.key, ext));
  }
  ScopedCache user;
  EnvGuard bundles("FLASHGEN_CACHE_PATH", "/nonexistent/flashgen-bundle:" + bundle.path());
  rt::cache_reset_for_tests();
  const uint64_t before = rt::nvrtc_compile_count();
  StderrCapture named;
  CompiledKernel k = compile(spec);
  // A directory FLASHGEN_CACHE_PATH names that does not exist is said once (a typo would
  // otherwise mean silent NVRTC compiles at run time); the next one is still searched.
  CHECK(test::contains(named.stop(), "flashgen: bundle directory /nonexistent/flashgen-bundle (FLASHGEN_CACHE_PATH) is not "
                               "used: it cannot be examined: No such file or directory"));
  CHECK(k.from_cache);
  CHECK(rt::nvrtc_compile_count() == before);
  CHECK(k.cache_path == rt::cache_entry_path(bundle.path(), original.name, original.key));
  CHECK(k.cubin == original.cubin);
  CHECK(k.compile_log == original.compile_log);
  CHECK(test::list_dir(user.path()).empty());  // nothing written to the user cache

  // A corrupt bundle entry is skipped (not rewritten); the user cache takes over.
  test::write_bytes(k.cache_path, {'b', 'a', 'd'});
  StderrCapture err;
  CompiledKernel k2 = compile(spec);
  const std::string log = err.stop();
  CHECK_FALSE(k2.from_cache);
  CHECK(k2.cache_path == rt::cache_entry_path(user.path(), original.name, original.key));
  CHECK(log.find("bundle entry") != std::string::npos);
  CHECK(test::read_bytes(k.cache_path).size() == 3);
  rt::cache_reset_for_tests();
}

TEST_CASE("cache: many threads compiling one new kernel at once all succeed, one NVRTC call") {
  ScopedCache cache;
  const KernelSpec spec = test::simple_spec(86, 96);
  const uint64_t before = rt::nvrtc_compile_count();
  constexpr int kThreads = 8;
  std::vector<CompiledKernel> results(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      try {
        results[i] = compile(spec);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  int fresh = 0;
  for (int i = 0; i < kThreads; ++i) {
    CAPTURE(i);
    CHECK(errors[i].empty());
    CHECK(test::is_elf(results[i].cubin));
    CHECK(results[i].cubin == results[0].cubin);
    fresh += results[i].from_cache ? 0 : 1;
  }
  CHECK(fresh == 1);
  CHECK(rt::nvrtc_compile_count() == before + 1);
  check_no_temp_files(cache.path());
}

TEST_CASE("cache: concurrent stores and lookups from threads and processes never see a partial entry") {
  ScopedCache cache;
  const std::string name = "flashgen_fwd_cache_storm";
  const std::string key = rt::cache_key("storm source", rt::nvrtc_options(80), 80, rt::NvrtcVersion{1, 2});
  std::vector<char> cubin(200000);
  for (size_t i = 0; i < cubin.size(); ++i) cubin[i] = static_cast<char>((i * 131) & 0xff);
  cubin[0] = '\x7f';

  std::atomic<int> bad{0};
  std::atomic<int> hits{0};
  auto storm = [&](int rounds) {
    for (int r = 0; r < rounds; ++r) {
      if (rt::cache_store(name, key, cubin, "storm source", "log").empty()) bad++;
      auto hit = rt::cache_lookup(name, key);
      if (!hit || hit->cubin != cubin) bad++;
      else hits++;
    }
  };
  StderrCapture err;  // any "is corrupt" line would show here
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < 6; ++i) threads.emplace_back(storm, 25);
    for (auto& t : threads) t.join();
  }
  // Processes: fork after the threads are joined (no lock is held).
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int local_bad = 0;
      for (int r = 0; r < 25; ++r) {
        if (rt::cache_store(name, key, cubin, "storm source", "log").empty()) local_bad++;
        auto hit = rt::cache_lookup(name, key);
        if (!hit || hit->cubin != cubin) local_bad++;
      }
      ::_exit(local_bad == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  storm(25);  // the parent joins the race
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const std::string log = err.stop();
  CHECK(bad == 0);
  CHECK(hits == 6 * 25 + 25);
  INFO("stderr: ", log);
  CHECK(log.empty());
  check_no_temp_files(cache.path());
  CHECK(test::list_dir(cache.path()).size() == 3);  // .cubin, .cu, .log
}

TEST_CASE("cache: a failed compile dumps the source and names spec, kernel, options and log") {
  ScopedCache cache;
  // The m16n8k16 kernel uses cp.async, which ptxas refuses for sm_75: a real
  // compile error from NVRTC (no profile validates this spec).
  KernelSpec spec = test::simple_spec(80, 64);
  spec.arch = 75;
  try {
    rt::compile_unvalidated(spec);
    FAIL("compiling the m16n8k16 kernel (cp.async) for sm_75 should fail");
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    INFO("message: ", msg);
    CHECK(msg.find(spec.canonical()) != std::string::npos);
    CHECK(msg.find(spec.kernel_name()) != std::string::npos);
    CHECK(msg.find("--gpu-architecture=sm_75 -std=c++17 --ptxas-options=--verbose -default-device") !=
          std::string::npos);
    CHECK(msg.find("NVRTC log:") != std::string::npos);
    CHECK(msg.find("cp.async") != std::string::npos);
    const std::string prefix = cache.path() + "/" + spec.kernel_name() + "-";
    const size_t at = msg.find(prefix);
    REQUIRE(at != std::string::npos);
    const std::string path = msg.substr(at, msg.find('\n', at) - at);
    CHECK(ends_with(path, ".cu"));
    const std::vector<char> dumped = test::read_bytes(path);
    CHECK(std::string(dumped.begin(), dumped.end()) == gen::emit_forward(spec));
  }
  check_no_temp_files(cache.path());
}

TEST_CASE("nvrtc: version and library") {
  REQUIRE(rt::nvrtc_available());
  const rt::NvrtcVersion v = rt::nvrtc_version();
  CHECK(v.major >= 12);
  CHECK_FALSE(rt::nvrtc_library().empty());
  MESSAGE("NVRTC " << v.str() << " from " << rt::nvrtc_library());
}

// Runs in a child process (the test binary re-executed with a filter), since
// the NVRTC library is chosen once per process.
TEST_CASE("nvrtc: FLASHGEN_NVRTC_LIBRARY overrides the search and a bad path is Unavailable") {
  if (const char* marker = std::getenv("FLASHGEN_TEST_NVRTC_CHILD")) {
    CHECK_FALSE(rt::nvrtc_available());
    try {
      rt::nvrtc_version();
      FAIL("nvrtc_version should throw");
    } catch (const Unavailable& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find("FLASHGEN_NVRTC_LIBRARY") != std::string::npos);
      CHECK(msg.find("/nonexistent/libnvrtc.so.99") != std::string::npos);
    }
    CHECK_THROWS_AS(compile(test::simple_spec(80, 64)), Unavailable);
    CHECK_NOTHROW(generate(test::simple_spec(80, 64)));  // generation needs no NVRTC
    test::write_bytes(marker, {'o', 'k'});
    return;
  }
  TempDir dir("flashgen-nvrtc-child");
  const std::string marker = dir.path() + "/ok";
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("FLASHGEN_TEST_NVRTC_CHILD", marker.c_str(), 1);
    ::setenv("FLASHGEN_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.99", 1);
    ::setenv("FLASHGEN_CACHE_DIR", dir.path().c_str(), 1);
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 1);
    const char* argv[] = {"flashgen_tests_cpu",
                          "--test-case=nvrtc: FLASHGEN_NVRTC_LIBRARY overrides*", "--no-version",
                          nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::filesystem::exists(marker));  // the child really ran the checks
}
