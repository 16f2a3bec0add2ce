// Tune files (include/flashgen/tune.hpp): strict parsing, formatting, the
// table plan() consults, and the profile hash.
#include "flashgen/tune.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>
#include <yaml-cpp/yaml.h>

#include "flashgen/flashgen.hpp"
#include "gen/spec_fields.hpp"
#include "gen/yaml_reader.hpp"
#include "runtime/cache.hpp"
#include "runtime/tune_internal.hpp"

namespace flashgen {
namespace {

constexpr int64_t kMaxSeqlenBucket = int64_t{1} << 40;
constexpr size_t kMaxTuneFileBytes = 16u << 20;
constexpr size_t kMaxDeviceName = 256;
constexpr size_t kMaxGenerator = 32;

// ---- input guards --------------------------------------------------------------

// yaml-cpp recurses once per nesting level; refuse input nested deeper than any
// tune file is, before it reaches the parser. "" when fine.
std::string nesting_problem(const std::string& text) {
  constexpr int kMaxFlowDepth = 16;
  constexpr size_t kMaxIndent = 64;
  constexpr int kMaxLeadingIndicators = 8;
  int depth = 0;
  char quote = 0;
  bool comment = false;
  bool line_start = true;
  size_t indent = 0;
  int indicators = 0;
  size_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      comment = false;
      line_start = true;
      indent = 0;
      indicators = 0;
      if (quote == '\'' || quote == '"') continue;  // multi-line quoted scalar
      continue;
    }
    if (comment) continue;
    if (quote != 0) {
      if (quote == '"' && c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (line_start) {
      if (c == ' ' || c == '\t') {
        if (++indent > kMaxIndent)
          return fmt::format("line {} is indented more than {} columns, deeper than any tune file", line, kMaxIndent);
        continue;
      }
      if ((c == '-' || c == '?' || c == ':') && i + 1 < text.size() && (text[i + 1] == ' ' || text[i + 1] == '\t')) {
        if (++indicators > kMaxLeadingIndicators)
          return fmt::format("line {} nests more than {} block collections, deeper than any tune file", line,
                             kMaxLeadingIndicators);
        continue;
      }
      line_start = false;
    }
    switch (c) {
      case '#':
        if (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n') comment = true;
        break;
      case '\'':
      case '"': quote = c; break;
      case '[':
      case '{':
        if (++depth > kMaxFlowDepth)
          return fmt::format("line {} nests more than {} flow collections, deeper than any tune file", line,
                             kMaxFlowDepth);
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return "";
}

using Reader = gen::YamlReader;

bool valid_profile_name(const std::string& s) {
  if (s.empty() || s.size() > 64 || !std::islower(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_' ||
           c == '-';
  });
}

bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// A KernelSpec carrying the variant fields of `c` (the rest default), and back.
KernelSpec spec_of(const ProblemClass& c) {
  KernelSpec s;
  s.dtype = c.dtype;
  s.head_dim = c.head_dim;
  s.head_dim_v = c.head_dim_v;
  s.mask = c.mask;
  s.bias = c.bias;
  s.has_lse = c.has_lse;
  s.softcap = c.softcap;
  s.sinks = c.sinks;
  s.alibi = c.alibi;
  s.varlen = c.varlen;
  s.paged = c.paged;
  return s;
}
ProblemClass class_of(const KernelSpec& s, int64_t seqlen_q_le) {
  ProblemClass c;
  c.dtype = s.dtype;
  c.head_dim = s.head_dim;
  c.head_dim_v = s.head_dim_v;
  c.mask = s.mask;
  c.bias = s.bias;
  c.has_lse = s.has_lse;
  c.softcap = s.softcap;
  c.sinks = s.sinks;
  c.alibi = s.alibi;
  c.varlen = s.varlen;
  c.paged = s.paged;
  c.seqlen_q_le = seqlen_q_le;
  return c;
}

// Read one field of the spec's field table from a tune file node into `spec`:
// integers within the field's range and multiple, names as parse_* reads them,
// flags as true / false.
void read_field(const Reader& r, const gen::SpecField& field, const YAML::Node& node, const std::string& path,
                KernelSpec& spec) {
  switch (field.kind) {
    case gen::SpecFieldKind::integer: {
      const int64_t v = r.integer(node, path, field.min, field.max);
      if (v % field.multiple != 0) {
        r.fail(path, fmt::format("has value {}: must be a multiple of {} in [{}, {}]", v, field.multiple, field.min,
                                 field.max));
      }
      field.set_int(spec, static_cast<int>(v));
      return;
    }
    case gen::SpecFieldKind::name: {
      const std::string text = r.scalar(node, path);
      try {
        field.set_name(spec, text, path);
      } catch (const InvalidArgument& ex) {
        r.fail(path, fmt::format("has value {}: {}", Reader::describe(node), Reader::enum_reason(ex)));
      }
      return;
    }
    case gen::SpecFieldKind::flag: field.set_flag(spec, r.boolean(node, path)); return;
  }
}

// The fields of the forward family (tune files tune forward kernels), as
// references (a plain vector: clang with libstdc++ 12, the fuzz build, rejects
// std::views::transform over it).
std::vector<std::reference_wrapper<const gen::SpecField>> fwd_fields() {
  std::vector<std::reference_wrapper<const gen::SpecField>> out;
  for (const gen::SpecField* f : gen::spec_fields(KernelFamily::fwd)) out.emplace_back(*f);
  return out;
}

// One tune file line "name: value" per field of `group`, as "{a: 1, b: x}" (flow mapping).
std::string format_fields(const KernelSpec& spec, gen::SpecFieldGroup group) {
  std::string out;
  for (const gen::SpecField& field : fwd_fields()) {
    if (field.group != group) continue;
    if (field.omit_default && !field.get_flag(spec)) continue;  // (written only when set)
    if (!out.empty()) out += ", ";
    out += fmt::format("{}: {}", field.name,
                       field.kind == gen::SpecFieldKind::flag ? (field.get_flag(spec) ? "true" : "false")
                                                              : field.format(spec));
  }
  return out;
}

TuneEntry parse_entry(const Reader& r, const YAML::Node& node, const std::string& path) {
  auto f = r.fields(node, path,
                    {"device", "arch", "profile", "profile_hash", "generator", "problem", "tile", "tflops"});
  TuneEntry e;
  e.device = r.text(f["device"], path + ".device", kMaxDeviceName);
  e.arch = static_cast<int>(r.integer(f["arch"], path + ".arch", 10, 999));
  e.profile = r.scalar(f["profile"], path + ".profile");
  if (!valid_profile_name(e.profile)) {
    r.fail(path + ".profile", fmt::format("has value {}: must be a profile name (a-z first, then a-z, 0-9, '_', '-'; "
                                          "at most 64 characters)",
                                          Reader::describe(f["profile"])));
  }
  e.profile_hash = r.scalar(f["profile_hash"], path + ".profile_hash");
  if (e.profile_hash.size() != 16 || e.profile_hash.find_first_not_of("0123456789abcdef") != std::string::npos) {
    r.fail(path + ".profile_hash",
           fmt::format("has value {}: must be 16 lowercase hex digits", Reader::describe(f["profile_hash"])));
  }
  e.generator = r.text(f["generator"], path + ".generator", kMaxGenerator);

  {
    // The problem class: the variant fields of the spec's field table, then the seqlen bucket.
    const std::string pp = path + ".problem";
    std::vector<std::string> keys, optional;
    for (const gen::SpecField& field : fwd_fields())
      if (field.group == gen::SpecFieldGroup::variant) (field.omit_default ? optional : keys).emplace_back(field.name);
    keys.emplace_back("seqlen_q_le");
    auto p = r.fields(f["problem"], pp, keys, optional);
    KernelSpec spec;
    for (const gen::SpecField& field : fwd_fields()) {
      if (field.group != gen::SpecFieldGroup::variant) continue;
      if (field.omit_default && !p.count(std::string(field.name))) continue;  // absent: false
      read_field(r, field, p[std::string(field.name)], pp + "." + std::string(field.name), spec);
    }
    e.problem = class_of(spec, r.integer(p["seqlen_q_le"], pp + ".seqlen_q_le", 64, kMaxSeqlenBucket));
    if (!is_power_of_two(e.problem.seqlen_q_le)) {
      r.fail(pp + ".seqlen_q_le",
             fmt::format("has value {}: must be a power of two >= 64 (a seqlen_q bucket)", e.problem.seqlen_q_le));
    }
  }
  {
    // The tile: the tile fields of the spec's field table.
    const std::string tp = path + ".tile";
    std::vector<std::string> keys;
    for (const gen::SpecField& field : fwd_fields())
      if (field.group == gen::SpecFieldGroup::tile) keys.emplace_back(field.name);
    auto t = r.fields(f["tile"], tp, keys);
    KernelSpec spec;
    for (const gen::SpecField& field : fwd_fields()) {
      if (field.group != gen::SpecFieldGroup::tile) continue;
      read_field(r, field, t[std::string(field.name)], tp + "." + std::string(field.name), spec);
    }
    e.tile = spec.tile;
    if (e.tile.block_m % (16 * e.tile.warps) != 0) {
      r.fail(tp + ".block_m",
             fmt::format("has value {}: must be a multiple of 16 * warps ({})", e.tile.block_m, 16 * e.tile.warps));
    }
  }
  e.tflops = r.decimal(f["tflops"], path + ".tflops", 1e6);
  return e;
}

bool same_slot(const TuneEntry& a, const TuneEntry& b) {
  return a.device == b.device && a.arch == b.arch && a.profile_hash == b.profile_hash && a.problem == b.problem;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// ---- the table plan() reads ----------------------------------------------------------

struct FileSig {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileSig&) const = default;
};

struct LoadedFile {
  FileSig sig;
  std::shared_ptr<const TuneFile> file;  // null when invalid
};

struct TuneState {
  std::mutex mu;
  std::map<std::string, LoadedFile> files;
  std::set<std::string> notices;  // printed once each
};

TuneState& tune_state() {
  static auto* s = new TuneState();  // leaked: usable at exit
  return *s;
}

void notice_once_locked(TuneState& s, const std::string& line) {
  if (!s.notices.insert(line).second) return;
  std::fprintf(stderr, "%s\n", line.c_str());
}

// FLASHGEN_TUNE_FILE as a path ("" when unset or empty): a relative value is taken from the
// working directory the first time the value is seen, as a relative FLASHGEN_CACHE_DIR is, so
// a later chdir does not lose the file.
std::string named_tune_file() {
  const char* const v = std::getenv("FLASHGEN_TUNE_FILE");
  if (v == nullptr || *v == '\0') return "";
  static std::mutex mu;
  static std::string raw, resolved;
  std::lock_guard<std::mutex> lock(mu);
  if (raw != v) {
    raw = v;
    resolved = rt::absolute_path(raw);
  }
  return resolved;
}

// The current tune files, (re)loaded when they changed.
std::vector<std::pair<std::string, std::shared_ptr<const TuneFile>>> current_files() {
  std::vector<std::pair<std::string, std::shared_ptr<const TuneFile>>> out;
  TuneState& s = tune_state();
  const std::string named = named_tune_file();
  for (const std::string& path : tune_file_paths()) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      std::lock_guard<std::mutex> lock(s.mu);
      s.files.erase(path);
      // A file FLASHGEN_TUNE_FILE names is worth a line even when it does not exist (a typo would
      // otherwise leave the default tiles without a word); the user cache's tune.yml is optional,
      // and a cache directory that cannot be used has its own warning.
      if (!named.empty() && path == named)
        notice_once_locked(s, fmt::format("flashgen: warning: tune file {} (FLASHGEN_TUNE_FILE) is not used: {}", path,
                                          std::strerror(err)));
      continue;
    }
    const FileSig sig{st.st_dev, st.st_ino, st.st_size,
                      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.files.find(path);
      if (it != s.files.end() && it->second.sig == sig) {
        if (it->second.file) out.emplace_back(path, it->second.file);
        continue;
      }
    }
    std::shared_ptr<const TuneFile> file;
    std::string error;
    try {
      file = std::make_shared<const TuneFile>(load_tune_file(path));
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(s.mu);
    s.files[path] = LoadedFile{sig, file};
    if (!error.empty()) {
      notice_once_locked(s, fmt::format("flashgen: warning: tune file {} is not used (the profiles' default tiles "
                                        "are): {}",
                                        path, error));
    }
    if (file) out.emplace_back(path, file);
  }
  return out;
}

}  // namespace

// ---- public ------------------------------------------------------------------------

int64_t seqlen_q_bucket(int64_t seqlen_q) {
  int64_t b = 64;
  while (b < seqlen_q && b < kMaxSeqlenBucket) b *= 2;
  return b;
}

ProblemClass problem_class(const AttentionProblem& p) {
  ProblemClass c;
  c.dtype = p.dtype;
  c.head_dim = static_cast<int>(p.head_dim);
  c.head_dim_v = static_cast<int>(p.head_dim_v);
  c.mask = p.mask;
  c.bias = p.bias.kind;
  c.has_lse = p.lse.data != nullptr;
  c.softcap = p.softcap > 0.f;
  c.sinks = p.sinks != nullptr;
  c.alibi = p.alibi_slopes != nullptr;
  c.varlen = p.varlen();
  c.paged = p.paged();
  c.seqlen_q_le = seqlen_q_bucket(p.seqlen_q);  // (a packed batch: of max_seqlen_q)
  return c;
}

std::string ProblemClass::str() const {
  return fmt::format("{} d{}/v{} mask={} bias={} lse={}{}{}{}{}{} seqlen_q<={}", to_string(dtype), head_dim,
                     head_dim_v, to_string(mask), to_string(bias), has_lse ? 1 : 0, softcap ? " softcap" : "",
                     sinks ? " sinks" : "", alibi ? " alibi" : "", varlen ? " varlen" : "", paged ? " paged" : "",
                     seqlen_q_le);
}

TuneFile parse_tune_file(const std::string& yaml_text, const std::string& origin) {
  Reader r(origin);
  if (yaml_text.size() > kMaxTuneFileBytes) {
    r.fail_document(fmt::format("is {} bytes, more than the {} a tune file may have", yaml_text.size(),
                                kMaxTuneFileBytes));
  }
  if (yaml_text.find('\0') != std::string::npos) r.fail_document("contains a NUL byte (not a YAML text file)");
  if (std::string why = nesting_problem(yaml_text); !why.empty()) r.fail_document(why);
  YAML::Node root;
  try {
    root = gen::load_one_document(yaml_text, origin, "tune file", ": put every entry in its one 'entries' list");
  } catch (const InvalidArgument&) {
    throw;
  } catch (const std::exception& e) {
    r.fail_document(fmt::format("cannot be read as YAML: {}", e.what()));
  }
  TuneFile out;
  try {
    auto top = r.fields(root, "", {"version", "entries"});
    r.integer(top["version"], "version", 1, 1);
    const YAML::Node& entries = top["entries"];
    if (!entries.IsSequence()) {
      r.fail("entries", fmt::format("has value {}: must be a sequence (possibly empty: [])", Reader::describe(entries)));
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string path = fmt::format("entries[{}]", i);
      TuneEntry e = parse_entry(r, entries[i], path);
      for (size_t j = 0; j < out.entries.size(); ++j) {
        if (same_slot(out.entries[j], e)) {
          r.fail(path, fmt::format("repeats entries[{}] (same device, arch, profile_hash and problem)", j));
        }
      }
      out.entries.push_back(std::move(e));
    }
  } catch (const InvalidArgument&) {
    throw;
  } catch (const YAML::Exception& e) {
    r.fail_document(fmt::format("invalid YAML: {}", e.what()));
  } catch (const std::exception& e) {
    r.fail_document(fmt::format("cannot be read: {}", e.what()));
  }
  return out;
}

TuneFile load_tune_file(const std::string& path) {
  return parse_tune_file(gen::read_yaml_file(path, "tune file"), path);
}

std::string format_tune_file(const TuneFile& file) {
  std::string out =
      "# flashgen tune file: measured tiles by device, arch, profile and problem class\n"
      "# (include/flashgen/tune.hpp). Written by `flashgen tune`; read by plan() from\n"
      "# $FLASHGEN_TUNE_FILE and from tune.yml in the user cache directory.\n"
      "version: 1\n";
  if (file.entries.empty()) return out + "entries: []\n";
  out += "entries:\n";
  for (const TuneEntry& e : file.entries) {
    out += fmt::format("  - device: {}\n", quoted(e.device));
    out += fmt::format("    arch: {}\n", e.arch);
    out += fmt::format("    profile: {}\n", quoted(e.profile));  // "null" would read back as a null node
    out += fmt::format("    profile_hash: \"{}\"\n", e.profile_hash);
    out += fmt::format("    generator: {}\n", quoted(e.generator));
    out += fmt::format("    problem: {{{}, seqlen_q_le: {}}}\n", format_fields(spec_of(e.problem), gen::SpecFieldGroup::variant),
                       e.problem.seqlen_q_le);
    KernelSpec tile;
    tile.tile = e.tile;
    out += fmt::format("    tile: {{{}}}\n", format_fields(tile, gen::SpecFieldGroup::tile));
    out += fmt::format("    tflops: {:.1f}\n", e.tflops);
  }
  return out;
}

void save_tune_file(const std::string& path, const TuneFile& file) {
  const std::string text = format_tune_file(file);
  const std::string err = rt::write_file_atomic(path, text.data(), text.size(), 0644);
  if (!err.empty()) throw IoError(fmt::format("cannot write tune file '{}': {}", path, err));
}

void merge_tune_entries(TuneFile& file, const std::vector<TuneEntry>& entries) {
  for (const TuneEntry& e : entries) {
    auto it = std::find_if(file.entries.begin(), file.entries.end(),
                           [&](const TuneEntry& x) { return same_slot(x, e); });
    if (it != file.entries.end()) {
      *it = e;
    } else {
      file.entries.push_back(e);
    }
  }
}

std::string profile_hash(const Profile& p) {
  std::string text = fmt::format("flashgen.profile_hash.v1;name={};archs=", p.name);
  for (int a : p.archs) text += fmt::format("{},", a);
  text += fmt::format(";unit={};dtypes=", to_string(p.matrix_unit.shape));
  for (DType d : p.matrix_unit.operand_dtypes) text += fmt::format("{},", to_string(d));
  text += fmt::format(";acc={};smem_per_block={};smem_per_sm={};registers_per_sm={};max_threads_per_sm={};"
                      "mma={};smem_bw={};dram_bw={:.6g}",
                      p.matrix_unit.accumulator_dtype, p.smem_per_block, p.smem_per_sm, p.registers_per_sm,
                      p.max_threads_per_sm, p.mma_flop_per_clock_per_sm, p.smem_bytes_per_clock_per_sm,
                      p.dram_bytes_per_clock_per_sm);
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

std::string default_tune_file_path() {
  for (const rt::CacheLayer& l : rt::cache_layers()) {
    if (l.kind == rt::CacheLayer::Kind::user && !l.path.empty()) return l.path + "/tune.yml";
  }
  return "";
}

std::vector<std::string> tune_file_paths() {
  std::vector<std::string> out;
  if (const std::string named = named_tune_file(); !named.empty()) out.push_back(named);
  const std::string def = default_tune_file_path();
  if (!def.empty() && std::find(out.begin(), out.end(), def) == out.end()) out.push_back(def);
  return out;
}

std::optional<TunedTile> rt::find_tuned_tile_lazy(const ProblemClass& cls, int arch, const Profile& profile,
                                                  const std::function<std::string()>& device_name) {
  const auto files = current_files();
  if (files.empty()) return std::nullopt;
  const std::string hash = profile_hash(profile);
  bool have_device = false;
  std::string device;
  struct Foreign {
    std::string file;
    size_t index;
    const TuneEntry* entry;
  };
  std::vector<Foreign> foreign;
  for (const auto& [path, file] : files) {
    for (size_t i = 0; i < file->entries.size(); ++i) {
      const TuneEntry& e = file->entries[i];
      if (!(e.problem == cls)) continue;
      if (e.arch == arch && e.profile_hash == hash) {
        if (!have_device) {
          device = device_name();
          have_device = true;
        }
        if (!device.empty() && e.device == device) return TunedTile{e.tile, path, e};
      }
      foreign.push_back(Foreign{path, i, &e});
    }
  }
  if (foreign.empty()) return std::nullopt;
  TuneState& s = tune_state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const Foreign& f : foreign) {
    const TuneEntry& e = *f.entry;
    std::string why;
    if (e.arch != arch) {
      why = fmt::format("it was measured for sm_{}, this plan is for sm_{}", e.arch, arch);
    } else if (e.profile_hash != hash) {
      why = fmt::format("it was measured with another version of profile {} (hash {}, now {} for {}); run flashgen "
                        "tune again",
                        e.profile, e.profile_hash, hash, profile.name);
    } else if (device.empty()) {
      why = "there is no GPU of that arch here to compare its device name with (flashgen pregen --device NAME, "
            "or device=NAME in Python's plan / pregen / explain, selects entries for a named device)";
    } else {
      why = fmt::format("it was measured on {}, this device is {}", rt::shown_device_name(e.device),
                        rt::shown_device_name(device));
    }
    notice_once_locked(s, fmt::format("flashgen: warning: tune entry {}[{}] ({}, {} on {}) is ignored: {}", f.file, f.index,
                                      cls.str(), e.tile.str(), rt::shown_device_name(e.device), why));
  }
  return std::nullopt;
}

std::optional<TunedTile> find_tuned_tile(const ProblemClass& cls, int arch, const Profile& profile,
                                         const std::string& device_name) {
  return rt::find_tuned_tile_lazy(cls, arch, profile, [&] { return device_name; });
}

// (a name a caller passes may hold anything: newlines, escape codes, megabytes)
std::string rt::shown_device_name(const std::string& name) {
  return "'" + gen::YamlReader::shown(name, kMaxDeviceName) + "'";
}

std::string rt::device_name_problem(const std::string& name) {
  if (gen::YamlReader::printable_text(name, kMaxDeviceName)) return "";  // (the rule load_tune_file applies)
  const bool printable = std::all_of(name.begin(), name.end(), gen::YamlReader::printable);
  return fmt::format("must be 1 to {} printable ASCII characters, as tune files record device names (e.g. "
                     "\"NVIDIA H200\"); it has {} bytes{}",
                     kMaxDeviceName, name.size(), printable ? "" : ", some outside printable ASCII");
}

void rt::tune_notice_once(const std::string& line) {
  TuneState& s = tune_state();
  std::lock_guard<std::mutex> lock(s.mu);
  notice_once_locked(s, line);
}

void rt::tune_reset_for_tests() {
  TuneState& s = tune_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.files.clear();
  s.notices.clear();
}

}  // namespace flashgen
