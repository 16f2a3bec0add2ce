// Internal to libflashgen: the strict reader of its YAML files (profiles,
// gen/profile.cpp; tune files, runtime/tune.cpp; the tool's problem files,
// tools/flashgen_util.cpp). Every problem is an
// InvalidArgument "<origin>: key '<path>' <reason>" (or "<origin>: <reason>"
// for the document as a whole); values are shown sanitized (at most 40
// characters, non-printable bytes as '?').
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "flashgen/types.hpp"

namespace flashgen::gen {

/// Largest YAML file the library and the tool read (profiles, tune files,
/// problem files): far above any real one (a built-in profile is a few KiB, a
/// tune entry a few hundred bytes), far below what hurts (a 4 GiB problem file
/// took 42 s and 8 GB of memory to read).
inline constexpr int64_t kMaxYamlFileBytes = int64_t{16} << 20;

// The whole text of the YAML file `path`; `what` names it in errors ("profile
// file", "tune file", "problem file"). IoError "cannot read <what> '<path>':
// <reason>" when it is missing or unreadable, or is not a regular file: a
// directory reads as an empty document, and a device or FIFO (/dev/zero) may
// never end; or when it is larger than kMaxYamlFileBytes (checked before
// reading, and again while reading, for a file that grows).
inline std::string read_yaml_file(const std::string& path, const char* what) {
  const auto too_large = [&](const std::string& size) {
    return IoError(fmt::format("cannot read {} '{}': it is {}, more than the {} bytes (16 MiB) a YAML file may have",
                               what, path, size, kMaxYamlFileBytes));
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      throw IoError(fmt::format("cannot read {} '{}': {}", what, path,
                                S_ISDIR(st.st_mode) ? "it is a directory, not a YAML file" : "it is not a regular file"));
    }
    if (st.st_size > kMaxYamlFileBytes) throw too_large(fmt::format("{} bytes", st.st_size));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw IoError(fmt::format("cannot read {} '{}': {}", what, path, err ? std::strerror(err) : "open failed"));
  }
  std::string text;
  char chunk[65536];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(text.size()) > kMaxYamlFileBytes) throw too_large("over that (it grew while being read)");
  }
  if (in.bad()) throw IoError(fmt::format("cannot read {} '{}': read failed", what, path));
  return text;
}

// Counts a document's content while yaml-cpp's parser reads it (a document of
// only a null, e.g. after a trailing "---", has none).
class YamlContentCounter : public YAML::EventHandler {
 public:
  bool content = false;
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { content = true; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override { content = true; }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    content = true;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    content = true;
  }
  void OnMapEnd() override {}
};

// The one YAML document of `yaml_text` (a null node when it has none); `origin`
// names the text in errors and `what` its kind ("profile file", "tune file",
// "problem file"). InvalidArgument "<origin>: invalid YAML ..." when it does not
// parse, and "<origin>: has N YAML documents (separated by '---'); a <what> is one
// document<hint>" when it has more than one (YAML::Load would read the first and
// drop the others unread). Empty documents (e.g. after a trailing "---") hold
// nothing to drop and do not count; one that comes before the document is refused
// (YAML::Load reads only the first). The documents are counted through the parser
// one at a time, at most one more than the text has document markers ("---",
// "..."): yaml-cpp 0.7's LoadAll never returns on some malformed text (",[1!!int "
// parses as one document, then the parser reports a next one forever; fuzz_profile
// found it).
inline YAML::Node load_one_document(const std::string& yaml_text, const std::string& origin, const char* what,
                                    const char* hint) {
  auto count = [&](std::string_view marker) {
    size_t n = 0;
    for (size_t at = yaml_text.find(marker); at != std::string::npos; at = yaml_text.find(marker, at + 1)) ++n;
    return n;
  };
  const size_t most = 1 + count("---") + count("...");
  size_t documents = 0;
  bool first_has_content = false;
  YAML::Node root;
  try {
    std::istringstream in(yaml_text);
    YAML::Parser parser(in);
    for (size_t i = 0; i < most; ++i) {
      YamlContentCounter doc;
      if (!parser.HandleNextDocument(doc)) break;
      if (doc.content) {
        ++documents;
        if (i == 0) first_has_content = true;
      }
    }
    if (first_has_content) root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw InvalidArgument(
        fmt::format("{}: invalid YAML at line {}, column {}: {}", origin, e.mark.line + 1, e.mark.column + 1, e.msg));
  } catch (const YAML::Exception& e) {
    throw InvalidArgument(fmt::format("{}: invalid YAML: {}", origin, e.what()));
  }
  if (documents > 1) {
    throw InvalidArgument(fmt::format("{}: has {} YAML documents (separated by '---'); a {} is one document{}", origin,
                                      documents, what, hint));
  }
  if (documents == 1 && !first_has_content) {
    throw InvalidArgument(fmt::format("{}: an empty YAML document ('---') comes before its document; a {} is one "
                                      "document, with nothing before it",
                                      origin, what));
  }
  return root;
}

class YamlReader {
 public:
  explicit YamlReader(std::string origin) : origin_(std::move(origin)) {}

  const std::string& origin() const { return origin_; }

  [[noreturn]] void fail(const std::string& path, const std::string& reason) const {
    throw InvalidArgument(fmt::format("{}: key '{}' {}", origin_, path, reason));
  }
  [[noreturn]] void fail_document(const std::string& reason) const {
    throw InvalidArgument(fmt::format("{}: {}", origin_, reason));
  }

  // A byte of printable ASCII (0x20 to 0x7e).
  static bool printable(char c) { return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f; }
  // 1 to max_len bytes, all printable ASCII (text() of a key; a tune entry's device name).
  static bool printable_text(std::string_view s, size_t max_len) {
    return !s.empty() && s.size() <= max_len && std::all_of(s.begin(), s.end(), printable);
  }
  // At most `max` characters (then "..."), bytes outside printable ASCII as '?'.
  static std::string shown(std::string s, size_t max = 40) {
    if (s.size() > max) s = s.substr(0, max) + "...";
    for (char& c : s)
      if (!printable(c)) c = '?';
    return s;
  }

  static std::string describe(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Scalar: return fmt::format("'{}'", shown(n.Scalar()));
      case YAML::NodeType::Sequence: return "a sequence";
      case YAML::NodeType::Map: return "a mapping";
      case YAML::NodeType::Null: return "empty";
      default: return "undefined";
    }
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  // The mapping `n` at `path` (the document when empty): every key of `keys`
  // exactly once, any of `optional` at most once, nothing else.
  std::map<std::string, YAML::Node> fields(const YAML::Node& n, const std::string& path,
                                           std::vector<std::string> keys,
                                           const std::vector<std::string>& optional = {}) const {
    const size_t required = keys.size();
    keys.insert(keys.end(), optional.begin(), optional.end());
    std::string allowed;
    for (const auto& k : keys) allowed += (allowed.empty() ? "" : ", ") + k;
    if (!n.IsMap()) {
      if (path.empty())
        fail_document(fmt::format("the document must be a mapping with the keys {}; got {}", allowed, describe(n)));
      fail(path, fmt::format("must be a mapping with the keys {}; got {}", allowed, describe(n)));
    }
    std::map<std::string, YAML::Node> out;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node key_node = it->first;
      if (!key_node.IsScalar()) {
        fail(path.empty() ? std::string("<root>") : path,
             fmt::format("has a key that is {}, not a name; allowed keys: {}", describe(key_node), allowed));
      }
      const std::string key = key_node.Scalar();
      if (std::find(keys.begin(), keys.end(), key) == keys.end())
        fail(join(path, shown(key)), fmt::format("is unknown; allowed keys: {}", allowed));
      if (!out.emplace(key, it->second).second) fail(join(path, key), "appears more than once");
    }
    for (size_t i = 0; i < required; ++i) {
      if (!out.count(keys[i])) fail(join(path, keys[i]), "is missing");
    }
    return out;
  }

  // A decimal integer in [lo, hi]; `what` says what is allowed.
  int64_t integer(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi,
                  const std::string& what) const {
    int64_t v = 0;
    bool ok = n.IsScalar();
    if (ok) {
      const std::string& s = n.Scalar();
      auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      ok = !s.empty() && ec == std::errc() && ptr == s.data() + s.size();
    }
    if (!ok || v < lo || v > hi) fail(path, fmt::format("has value {}: must be {}", describe(n), what));
    return v;
  }
  int64_t integer(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi) const {
    return integer(n, path, lo, hi, fmt::format("an integer in [{}, {}]", lo, hi));
  }
  int64_t positive(const YAML::Node& n, const std::string& path,
                   int64_t hi = std::numeric_limits<int64_t>::max()) const {
    if (hi == std::numeric_limits<int64_t>::max()) return integer(n, path, 1, hi, "a positive integer");
    return integer(n, path, 1, hi);
  }

  // A plain decimal (digits, at most one '.'; no sign, exponent, inf or nan).
  static bool plain_decimal(const YAML::Node& n, double& v) {
    if (!n.IsScalar()) return false;
    const std::string& s = n.Scalar();
    const bool ok = !s.empty() && s.size() <= 32 && std::isdigit(static_cast<unsigned char>(s.front())) &&
                    std::isdigit(static_cast<unsigned char>(s.back())) &&
                    std::all_of(s.begin(), s.end(),
                                [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; }) &&
                    std::count(s.begin(), s.end(), '.') <= 1;
    if (!ok) return false;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(v);
  }
  // A plain decimal in (0, hi].
  double positive_number(const YAML::Node& n, const std::string& path, double hi) const {
    double v = 0;
    if (!plain_decimal(n, v) || !(v > 0) || v > hi)
      fail(path, fmt::format("has value {}: must be a positive decimal number at most {} (e.g. 18.4)", describe(n), hi));
    return v;
  }
  // A plain decimal in [0, hi].
  double decimal(const YAML::Node& n, const std::string& path, double hi) const {
    double v = 0;
    if (!plain_decimal(n, v) || v < 0 || v > hi)
      fail(path, fmt::format("has value {}: must be a decimal number in [0, {}] (e.g. 312.5)", describe(n), hi));
    return v;
  }

  std::string scalar(const YAML::Node& n, const std::string& path) const {
    if (!n.IsScalar()) fail(path, fmt::format("has value {}: must be a scalar", describe(n)));
    return n.Scalar();
  }
  // Printable ASCII, 1..max_len characters.
  std::string text(const YAML::Node& n, const std::string& path, size_t max_len) const {
    const std::string s = scalar(n, path);
    if (!printable_text(s, max_len))
      fail(path, fmt::format("has value {}: must be 1 to {} printable ASCII characters", describe(n), max_len));
    return s;
  }
  bool boolean(const YAML::Node& n, const std::string& path) const {
    if (n.IsScalar() && n.Scalar() == "true") return true;
    if (n.IsScalar() && n.Scalar() == "false") return false;
    fail(path, fmt::format("has value {}: allowed: true, false", describe(n)));
  }
  // A non-empty sequence.
  const YAML::Node& sequence(const YAML::Node& n, const std::string& path) const {
    if (!n.IsSequence() || n.size() == 0)
      fail(path, fmt::format("has value {}: must be a non-empty sequence", describe(n)));
    return n;
  }

  // parse_* say "<what>: '<text>' is not a known <kind>; allowed: ..."; keep
  // the part from "not a known" on.
  static std::string enum_reason(const InvalidArgument& e) {
    const std::string m = e.what();
    const auto pos = m.find("not a known");
    return pos == std::string::npos ? m : m.substr(pos);
  }

 private:
  std::string origin_;
};

}  // namespace flashgen::gen
