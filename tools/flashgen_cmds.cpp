// flashgen subcommands: pregen, explain, show, cache, info (tune is in
// tools/flashgen_tune.cpp).
#include "tools/flashgen_cmds.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "flashgen/flashgen.hpp"
#include "gen/emit.hpp"
#include "gen/limits.hpp"
#include "gen/unit_traits.hpp"
#include "runtime/cache.hpp"
#include "runtime/compile.hpp"
#include "runtime/driver.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/tune_internal.hpp"
#include "tools/flashgen_cli.hpp"

namespace flashgen::cli {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string join_ints(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + std::to_string(v[i]);
  return out;
}

// "512 bytes", "12.3 KiB", "4.0 MiB", "1.5 GiB": a small size is not "0.0 MiB".
std::string size_text(double bytes) {
  if (bytes < 1024.0) return fmt::format("{:.0f} byte{}", bytes, bytes == 1.0 ? "" : "s");
  if (bytes < 1024.0 * 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// "a,b" and repeated flags -> items. Only ',' separates: a space stays in its item, whose own
// check then refuses it ("--head-dims has value ' 64'"), as --arch and the problem syntax do.
std::vector<std::string> items(const std::vector<std::string>& raw) {
  std::vector<std::string> out;
  for (const auto& r : raw) {
    std::string cur;
    for (char c : r) {
      if (c == ',') {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

// A list option with an empty item between commas ("64,", ",64", "64,,128"): refused as a
// problem string's empty field is, where items() would drop it. (A wholly empty value is the
// caller's "has no value" error.)
void refuse_empty_items(const std::vector<std::string>& raw, const char* option) {
  auto blank = [](const std::string& t, const char* fill) { return t.find_first_not_of(fill) == std::string::npos; };
  // (the option given more than once, one of them with an empty value: said so, not as a ',' the
  // user never typed)
  if (raw.size() > 1)
    for (const std::string& r : raw)
      if (blank(r, ", "))
        throw InvalidArgument(fmt::format("{} is given {} times, once with the empty value '{}': give each {} a "
                                          "value, or leave it out",
                                          option, raw.size(), r, option));
  bool empty_item = false;
  for (const std::string& r : raw) {
    if (blank(r, ", ")) continue;
    for (size_t from = 0;;) {
      const size_t comma = r.find(',', from);
      empty_item = empty_item || blank(r.substr(from, comma == std::string::npos ? std::string::npos : comma - from), " ");
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
  }
  if (empty_item)
    throw InvalidArgument(fmt::format("{} has an empty item in '{}' (a leading, trailing or doubled ','): give "
                                      "comma-separated values",
                                      option, join(raw, ",")));
}

// Label and value of an explain or info line, the values in one column: a label is at most
// kLabelWidth characters (a longer one would push its value out of the column).
constexpr int kLabelWidth = 12;
void row(const char* label, const std::string& text) { std::printf("%-*s %s\n", kLabelWidth, label, text.c_str()); }

// Problem features as a spec fragment for the pregen line.
struct Feature {
  DType dtype;
  int d, dv;
  MaskKind mask;
  BiasKind bias;
  bool lse;
};

struct Job {
  KernelSpec spec;
  std::string origin;  // problem name / "flags"
};

// Where an entry came from, for pregen lines and explain.
std::string layer_of(const std::string& path) {
  if (path.empty()) return "memory";
  for (const rt::CacheLayer& l : rt::cache_layers()) {
    if (!l.path.empty() && path.rfind(l.path + "/", 0) == 0)
      return l.kind == rt::CacheLayer::Kind::bundle ? "bundle " + l.path : "user cache " + l.path;
  }
  return path;
}

}  // namespace

int choose_arch(int requested, std::string* note) {
  if (requested != 0) return requested;
  if (gpu_available()) {
    try {
      const int arch = current_device().arch;
      if (note) *note = fmt::format("sm_{} (the GPU of this machine)", arch);
      return arch;
    } catch (const std::exception&) {
    }
  }
  if (note) *note = "sm_90 (no GPU here; choose another with --arch)";
  return 90;
}

namespace {

// CLI11 gives an option the next argument whatever it is: `--head-dims --dtypes f16` gave --head-dims the
// value '--dtypes' (refused as a head dim), `--out --list` made a bundle named --list. No value the tool
// takes begins with "--", so such a value is an option given without its own: refused as that, first
// (transform() puts the check before the option's others), for every option of `app` and its
// subcommands that takes a value.
void refuse_options_as_values(CLI::App& app) {
  const CLI::Validator needs_value(
      [](std::string& text) -> std::string {
        if (text.rfind("--", 0) != 0) return {};
        return fmt::format("needs a value (got the option '{}'; a value cannot begin with '--')", text);
      },
      "");
  for (CLI::Option* opt : app.get_options())
    if (opt->nonpositional() && opt->get_expected_max() > 0) opt->transform(needs_value);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_options_as_values(*sub);
}

}  // namespace

void add_commands(CLI::App& app, Commands& c) {
  add_pregen(app, c.pregen);
  add_tune(app, c.tune);
  add_explain(app, c.explain);
  add_show(app, c.show);
  add_cache(app, c.cache);
  add_info(app, c.info);
  refuse_options_as_values(app);
}

int run_parsed_command(const CLI::App& app, const Commands& c) {
  const auto parsed = [&](const char* name) { return app.get_subcommand(name)->parsed(); };
  if (parsed("pregen")) return run_pregen(c.pregen);
  if (parsed("tune")) return run_tune(c.tune);
  if (parsed("explain")) return run_explain(c.explain);
  if (parsed("show")) return run_show(c.show);
  if (parsed("cache")) return run_cache(c.cache);
  if (parsed("info")) return run_info(c.info);
  throw InvalidArgument("no subcommand (see flashgen --help)");
}

bool parse_tile_text(const std::string& what, const std::string& text, Tile* tile) {
  if (text.empty() || text == "default") return false;
  std::vector<std::string> fields;
  for (size_t pos = 0;;) {
    const size_t x = text.find('x', pos);
    fields.push_back(text.substr(pos, x == std::string::npos ? std::string::npos : x - pos));
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  if (fields.size() != 4) {
    throw InvalidArgument(fmt::format(
        "{} has value '{}', which is not BLOCK_MxBLOCK_NxWARPSxSTAGES (e.g. 128x64x8x2) or 'default'", what, text));
  }
  struct Field {
    const char* name;
    int64_t hi;
    int* out;
  };
  const Field spec[4] = {{"BLOCK_M", gen::kMaxBlock, &tile->block_m},
                         {"BLOCK_N", gen::kMaxBlock, &tile->block_n},
                         {"WARPS", gen::kMaxWarps, &tile->warps},
                         {"STAGES", gen::kMaxStages, &tile->stages}};
  for (size_t i = 0; i < 4; ++i) {
    const std::optional<int64_t> v = int_in_range(fields[i], 1, spec[i].hi);
    if (!v) {
      throw InvalidArgument(fmt::format("{} has value '{}': {} '{}' must be an integer in [1, {}] {} (the tile "
                                        "is BLOCK_MxBLOCK_NxWARPSxSTAGES, e.g. 128x64x8x2)",
                                        what, text, spec[i].name, fields[i], spec[i].hi, integer_form(1)));
    }
    *spec[i].out = static_cast<int>(*v);
  }
  return true;
}

namespace {

std::string range_text(double lo, double hi) { return fmt::format("[{}, {}]", lo, hi); }

}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi, const std::string& meaning) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        if (int_in_range(text, lo, hi)) return {};
        return fmt::format("value '{}' is not allowed: must be an integer in [{}, {}]{} {}", text, lo, hi,
                           meaning.empty() ? "" : " (" + meaning + ")", integer_form(lo));
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

CLI::Validator number_in(double lo, double hi, const std::string& meaning) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        if (real_in_range(text, lo, hi)) return {};
        return fmt::format("value '{}' is not allowed: must be a finite number in {}{}", text, range_text(lo, hi),
                           meaning.empty() ? "" : " (" + meaning + ")");
      },
      "NUMBER in " + range_text(lo, hi));
}

CLI::Validator non_empty(const std::string& what, const std::string& instead, const std::string& type) {
  return CLI::Validator(
      [=](std::string& text) -> std::string { return text.empty() ? "an empty " + what + "; " + instead : std::string(); },
      type);
}

CLI::Validator non_empty_path(const std::string& instead) { return non_empty("path", instead, "PATH"); }

CLI::Validator existing_file(const std::string& what, const std::string& instead) {
  return CLI::Validator(
      [=, empty = non_empty_path(instead)](std::string& text) -> std::string {
        if (text.empty()) return empty(text);
        struct stat st {};
        if (::stat(text.c_str(), &st) != 0) {
          const int err = errno;
          return fmt::format("value '{}' is not allowed: {} (it must name {})", text,
                             err == ENOENT ? std::string("no such file") : std::strerror(err), what);
        }
        if (!S_ISREG(st.st_mode))
          return fmt::format("value '{}' is not allowed: it is {}, not {}", text,
                             S_ISDIR(st.st_mode) ? "a directory" : "not a regular file", what);
        return {};
      },
      "FILE");
}

CLI::Validator arch_number() {
  return integer_in(gen::kMinArch, gen::kMaxArch, "a compute capability 10 * major + minor, e.g. 90 for sm_90");
}

// What to give instead of an empty --device / --tile.
const char* const kDeviceInstead =
    "give a device name as tune files record it (e.g. \"NVIDIA H200\"), or leave --device out for this machine's GPU";
const char* const kTileInstead =
    "give BLOCK_MxBLOCK_NxWARPSxSTAGES (e.g. 128x64x8x2) or 'default', or leave --tile out for the planned tile";

void check_profile_config(const std::vector<int>& archs) {
  const char* env = std::getenv("FLASHGEN_PROFILE");
  if (env == nullptr || *env == '\0') return;
  try {
    for (int arch : archs) (void)profile_for_arch(arch);
  } catch (const Error& e) {
    throw ConfigError(e.what());
  }
}

void check_nvrtc_config(const std::vector<int>& archs, bool required) {
  const char* env = std::getenv("FLASHGEN_NVRTC_LIBRARY");
  if (!required && (env == nullptr || *env == '\0')) return;
  try {
    if (archs.empty()) (void)rt::nvrtc_version();
    for (int arch : archs) (void)rt::nvrtc_version_for(arch);
  } catch (const Error& e) {
    throw ConfigError(e.what());
  }
}

// ============================================================================
// pregen
// ============================================================================

CLI::App* add_pregen(CLI::App& app, PregenOptions& o) {
  CLI::App* c = app.add_subcommand(
      "pregen",
      "Compile a set of kernels ahead of time (NVRTC, no GPU needed) into the user cache or a bundle directory. "
      "The set is the cross product of the flags for every chosen arch, or the problems of a YAML file.");
  // (--arch and --profile arrive as given and are split by run_pregen, as the other lists are: split by
  // CLI11, a trailing ',' left an empty item that was dropped unseen)
  c->add_option("--arch", o.archs, "target compute capabilities, e.g. 80,90 (10*major+minor)")
      ->type_name(fmt::format("INT in [{}, {}],...", gen::kMinArch, gen::kMaxArch))
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            // each item as arch_number() checks one, spaces and all (empty items: run_pregen's
            // refusal names them)
            for (std::string item : items({text}))
              if (std::string why = arch_number()(item); !why.empty()) return why;
            return {};
          },
          ""));
  c->add_option("--profile", o.profiles,
                "every arch of these built-in profiles, e.g. ampere,hopper; given, the built-in profiles serve the "
                "whole run and FLASHGEN_PROFILE is not used");
  std::vector<CLI::Option*> features;  // the flags whose cross product is the set (not with --problems)
  features.push_back(c->add_option("--head-dims", o.head_dims, "head dims; D or D:DV (head_dim:head_dim_v), e.g. 64,96,128,192:128")
      ->capture_default_str());
  features.push_back(c->add_option("--dtypes", o.dtypes, "f16, bf16 (combinations a profile cannot run are skipped)")
      ->capture_default_str());
  features.push_back(c->add_option("--masks", o.masks,
                "none, causaltl, causalbr, windowtl, windowbr (the window sizes are launch arguments)")
      ->capture_default_str());
  features.push_back(c->add_option("--bias", o.biases, "bias kinds: none, input, f32")->capture_default_str());
  features.push_back(c->add_option("--lse", o.lse, "LSE output: no, yes (both: no,yes)")->capture_default_str());
  features.push_back(c->add_option("--softcap", o.softcap, "softcap specialization: no, yes (both: no,yes; the cap is a launch argument)")
      ->capture_default_str());
  features.push_back(c->add_option("--sinks", o.sinks,
                "attention-sinks specialization: no, yes (both: no,yes; the sink logits are a launch argument)")
      ->capture_default_str());
  features.push_back(c->add_option("--alibi", o.alibi, "ALiBi specialization: no, yes (both: no,yes; the slopes are a launch argument)")
      ->capture_default_str());
  features.push_back(c->add_option("--varlen", o.varlen,
                "packed (variable-length) batch specialization: no, yes (both: no,yes; cu_seqlens are a launch "
                "argument)")
      ->capture_default_str());
  features.push_back(c->add_option("--paged", o.paged,
                "paged KV cache specialization: no, yes (both: no,yes; the page table and page size are launch "
                "arguments)")
      ->capture_default_str());
  c->add_option("--tiles", o.tiles,
                "tiles BLOCK_MxBLOCK_NxWARPSxSTAGES (e.g. 128x64x8x2) or 'default' (the profile's, or a tune "
                "entry's)")
      ->capture_default_str();
  CLI::Option* problems = c->add_option("--problems", o.problems_file,
                "YAML file of problems seen in production (problems: [{dtype, head_dim, seqlen_q, heads_q, ...}]); "
                "replaces the feature flags")
      ->check(existing_file("a YAML problem file", "leave --problems out to compile the set of the feature flags"));
  c->add_option("--device", o.device,
                "plan with the tune entries of this device name (e.g. \"NVIDIA H200\"), for a GPU that is not here")
      ->check(non_empty("device name", kDeviceInstead));
  c->add_option("--tune-file", o.tune_file,
                "read tune entries from this file (as FLASHGEN_TUNE_FILE); it must exist and be a valid tune file")
      ->check(existing_file("a tune file written by flashgen tune",
                            "leave --tune-file out for $FLASHGEN_TUNE_FILE, else tune.yml in the user cache"));
  c->add_option("--out", o.out,
                "write into this bundle directory (created 0755, files 0644) instead of the user cache; ship it and "
                "point FLASHGEN_CACHE_PATH at it")
      ->check(non_empty_path("leave --out out to write into the user cache"));
  c->add_option("-j,--jobs", o.threads, "compile threads (default, or 0: one per core)")
      ->check(integer_in(0, kMaxJobs, "0: one per core"));
  c->add_flag("--list", o.list, "print the specs and exit (nothing is compiled)");
  // (pregen takes problems from a file, not --problem: its own footer)
  c->footer(
      "A --problems file lists problems with the keys of a problem string (flashgen --help), e.g.\n"
      "  problems:\n"
      "    - {dtype: f16, seqlen_q: 4096, heads_q: 32, heads_kv: 8, head_dim: 128, mask: causalbr}\n" +
      std::string(kEnvironmentHelp));
  // The file's problems replace the feature flags (--tiles, --arch and --profile still apply):
  // given together, the flags would be dropped without a word.
  for (CLI::Option* f : features) problems->excludes(f);
  return c;
}

std::string pregen_target_dir(const std::string& what) {
  (void)rt::cache_dir();  // pregen writes: the user cache (or --out) is created here when it does not exist yet
  for (const rt::CacheLayer& l : rt::cache_layers()) {
    if (l.kind != rt::CacheLayer::Kind::user) continue;
    if (!l.usable)
      throw IoError(fmt::format("{} cannot receive kernels: {}", what,
                                l.problem.empty() ? std::string("no directory") : l.problem));
    return l.path;
  }
  throw IoError(fmt::format("{} cannot receive kernels: no directory", what));  // (cache_layers lists the user layer)
}

int run_pregen(const PregenOptions& o) {
  if (!o.tune_file.empty()) {
    // Named on the command line: a file that cannot be used is a usage error, not a notice and the default tiles.
    try {
      (void)load_tune_file(o.tune_file);
    } catch (const Error& e) {
      throw InvalidArgument(fmt::format("--tune-file has value '{}', which is not a usable tune file: {}", o.tune_file,
                                        e.what()));
    }
    ::setenv("FLASHGEN_TUNE_FILE", o.tune_file.c_str(), 1);
  }
  for (const auto& [values, option] :
       {std::pair{&o.archs, "--arch"}, std::pair{&o.profiles, "--profile"}, std::pair{&o.head_dims, "--head-dims"},
        std::pair{&o.dtypes, "--dtypes"},
        std::pair{&o.masks, "--masks"}, std::pair{&o.biases, "--bias"}, std::pair{&o.lse, "--lse"},
        std::pair{&o.softcap, "--softcap"}, std::pair{&o.sinks, "--sinks"}, std::pair{&o.alibi, "--alibi"},
        std::pair{&o.varlen, "--varlen"}, std::pair{&o.paged, "--paged"}, std::pair{&o.tiles, "--tiles"}})
    refuse_empty_items(*values, option);
  if (!o.profiles.empty() && items(o.profiles).empty())
    throw InvalidArgument(fmt::format("--profile has no value ('{}'): give built-in profile names, e.g. ampere,hopper, "
                                      "or leave --profile out",
                                      join(o.profiles, ",")));
  // --profile names built-in profiles: it wins over FLASHGEN_PROFILE, which is then not used in this run.
  if (const char* env = std::getenv("FLASHGEN_PROFILE"); !o.profiles.empty() && env != nullptr && *env != '\0') {
    std::fprintf(stderr,
                 "flashgen pregen: note: --profile %s names built-in profiles; FLASHGEN_PROFILE=%s is not used in this "
                 "run\n",
                 join(items(o.profiles), ",").c_str(), env);
    ::unsetenv("FLASHGEN_PROFILE");
  }
  // Archs.
  if (!o.archs.empty() && items(o.archs).empty())
    throw InvalidArgument(fmt::format("--arch has no value ('{}'): give compute capabilities, e.g. 80,90, or leave "
                                      "--arch out",
                                      join(o.archs, ",")));
  std::vector<int> archs;
  for (const std::string& item : items(o.archs)) archs.push_back(std::stoi(item));  // (each checked by the parser)
  for (const std::string& name : items(o.profiles)) {
    bool found = false;
    for (const Profile& p : builtin_profiles()) {
      if (p.name != name) continue;
      found = true;
      archs.insert(archs.end(), p.archs.begin(), p.archs.end());
    }
    if (!found) {
      std::vector<std::string> names;
      for (const Profile& p : builtin_profiles()) names.push_back(p.name);
      throw InvalidArgument(
          fmt::format("--profile {}: no built-in profile has that name; allowed: {}", name, join(names, ", ")));
    }
  }
  if (archs.empty()) {
    if (!gpu_available())
      throw InvalidArgument("choose the target with --arch (e.g. --arch 80,90) or --profile (e.g. --profile hopper); "
                            "there is no GPU here to default to");
    archs.push_back(current_device().arch);
  }
  std::sort(archs.begin(), archs.end());
  archs.erase(std::unique(archs.begin(), archs.end()), archs.end());

  // Problems: from the file, or the cross product of the flags.
  std::vector<ProblemDesc> problems;
  if (!o.problems_file.empty()) {
    problems = load_problem_set(o.problems_file);
  } else {
    std::vector<std::pair<int, int>> dims;
    for (const std::string& t : items(o.head_dims)) {
      const size_t colon = t.find(':');
      const std::string d_text = t.substr(0, colon), dv_text = colon == std::string::npos ? d_text : t.substr(colon + 1);
      // Every kernel takes the multiples of 8 in [16, 256] (gen/limits.hpp); nothing else would plan.
      const auto head_dim = [](const std::string& text) -> std::optional<int64_t> {
        const std::optional<int64_t> v = int_in_range(text, gen::kMinHeadDim, gen::kMaxHeadDim);
        return v && *v % gen::kHeadDimMultiple == 0 ? v : std::nullopt;
      };
      const std::optional<int64_t> d = head_dim(d_text);
      const std::optional<int64_t> dv = head_dim(dv_text);
      if (!d || !dv) {
        throw InvalidArgument(fmt::format("--head-dims has value '{}': must be D or D:DV (e.g. 96 or 192:128) with "
                                          "D and DV multiples of {} in [{}, {}] (the head dims the kernels take), {}",
                                          t, gen::kHeadDimMultiple, gen::kMinHeadDim, gen::kMaxHeadDim,
                                          integer_form(gen::kMinHeadDim)));
      }
      dims.emplace_back(static_cast<int>(*d), static_cast<int>(*dv));
    }
    auto yes_no = [&](const std::vector<std::string>& values, const char* option) {
      std::vector<bool> out;
      for (const std::string& t : items(values)) {
        if (t == "no" || t == "false" || t == "0") out.push_back(false);
        else if (t == "yes" || t == "true" || t == "1") out.push_back(true);
        else throw InvalidArgument(fmt::format("{}: '{}' is not one of no, yes (or false, true, 0, 1)", option, t));
      }
      if (out.empty())  // ('' or ',': named with the value, as the list options below name theirs)
        throw InvalidArgument(fmt::format("{} has no value ('{}'): give no, yes or no,yes, or leave {} out for its "
                                          "default",
                                          option, join(values, ","), option));
      return out;
    };
    // An empty list must not quietly mean "no problems": name the flag (as yes_no does).
    for (const auto& [values, option, example] :
         {std::tuple{&o.head_dims, "--head-dims", "64,128"}, std::tuple{&o.dtypes, "--dtypes", "f16,bf16"},
          std::tuple{&o.masks, "--masks", "none,causalbr"}, std::tuple{&o.biases, "--bias", "none"}}) {
      if (items(*values).empty())
        throw InvalidArgument(fmt::format("{} has no value ('{}'): give one or more, e.g. {}, or leave {} out for "
                                          "its default",
                                          option, join(*values, ","), example, option));
    }
    const std::vector<bool> lses = yes_no(o.lse, "--lse"), softcaps = yes_no(o.softcap, "--softcap"),
                            sinks = yes_no(o.sinks, "--sinks"), alibis = yes_no(o.alibi, "--alibi"),
                            varlens = yes_no(o.varlen, "--varlen"), pageds = yes_no(o.paged, "--paged");
    for (const std::string& dt : items(o.dtypes))
      for (auto [d, dv] : dims)
        for (const std::string& mk : items(o.masks))
          for (const std::string& bk : items(o.biases))
            for (bool l : lses)
              for (bool sc : softcaps)
                for (bool sn : sinks)
                  for (bool al : alibis)
                    for (bool vl : varlens)
                      for (bool pg : pageds) {
                      ProblemDesc p;
                      p.dtype = parse_dtype(dt, "--dtypes");
                      p.head_dim = d;
                      p.head_dim_v = dv;
                      p.mask = parse_mask(mk, "--masks");  // (window sizes stay -1: the kernel takes them at launch)
                      p.bias = parse_bias(bk, "--bias");
                      p.lse = l;
                      p.softcap = sc ? 1.0f : 0.0f;  // (any cap: the kernel takes it at launch)
                      p.sinks = sn;
                      p.alibi = al;
                      p.seqlen_q = p.seqlen_k = 1024;
                      if (vl) p.seqlens_q = p.seqlens_k = {1024};  // (one sequence: the offsets are launch arguments)
                      if (pg) p.page_size = 16;  // (any page size: the kernel takes it at launch)
                      problems.push_back(p);
                    }
  }
  std::vector<std::optional<Tile>> tiles;
  for (const std::string& t : items(o.tiles)) {
    Tile ts;
    if (parse_tile_text("--tiles", t, &ts)) tiles.emplace_back(ts);
    else tiles.emplace_back(std::nullopt);
  }
  if (tiles.empty()) {  // --tiles '' must not quietly mean the default
    throw InvalidArgument(fmt::format("--tiles has no value ('{}'): give 'default' or tiles BLOCK_MxBLOCK_NxWARPSxSTAGES "
                                      "(e.g. 128x64x8x2), or leave --tiles out for the default",
                                      join(o.tiles, ",")));
  }

  // A broken configuration fails every kernel the same way: say it once, before planning
  // (and after the options: a usage error is reported as such).
  check_profile_config(archs);
  if (!o.list) check_nvrtc_config(archs, true);

  // Specs.
  std::vector<Job> jobs;
  std::set<std::string> seen;
  std::vector<std::string> planning_errors;
  size_t skipped = 0;
  std::set<std::string> skipped_why;  // "bf16 on volta (sm_70)"
  for (int arch : archs) {
    const Profile& profile = profile_for_arch(arch);  // Unsupported names the nearest profiles
    for (size_t row = 0; row < problems.size(); ++row) {
      const ProblemDesc& p = problems[row];
      if (!profile.supports_dtype(p.dtype) && o.problems_file.empty()) {
        ++skipped;  // a flag combination this profile cannot run
        skipped_why.insert(fmt::format("{} on {} (sm_{})", to_string(p.dtype), profile.name, arch));
        continue;
      }
      for (const auto& tile : tiles) {
        try {
          KernelSpec spec;
          if (tile) {
            spec = spec_with_tile(p, arch, profile, *tile);
            check_problem(to_problem(p));
            require_valid(spec, profile);
          } else if (!o.device.empty()) {
            spec = rt::plan_for_device(to_problem(p), arch, o.device);
          } else {
            spec = plan(to_problem(p), arch);
          }
          if (seen.insert(spec.canonical()).second) jobs.push_back(Job{spec, p.name});
          // forward() runs few-row, long-key problems as a split-KV decode on a
          // GPU with enough SMs (decode_preferred): their two kernels too (the
          // split count is a launch argument, not part of the kernels).
          if (!tile && decode_preferred(to_problem(p), arch, INT_MAX)) {
            const DecodePlan dp = plan_decode(to_problem(p), arch, 1);
            for (const KernelSpec* k : {&dp.split, &dp.combine})
              if (seen.insert(k->canonical()).second) jobs.push_back(Job{*k, p.name});
          }
        } catch (const Error& e) {
          // (a file's problem: its row, as the file's parse errors name it)
          planning_errors.push_back(fmt::format("{}sm_{} {}{}: {}",
                                                o.problems_file.empty()
                                                    ? std::string()
                                                    : fmt::format("{}: problems[{}]: ", o.problems_file, row),
                                                arch, p.str(), tile ? " tile " + tile->str() : "", e.what()));
        }
      }
    }
  }
  // An empty set is bad input, not a success: nothing would be compiled or listed (and no kernel failed).
  // (every flag has a value by now, and a file at least one problem: each combination was skipped or refused)
  const std::string dtype_skips =
      fmt::format("dtype not supported by the profile: {}",
                  join(std::vector<std::string>(skipped_why.begin(), skipped_why.end()), ", "));
  if (jobs.empty() && planning_errors.empty()) {
    throw InvalidArgument(fmt::format("the set yields no kernels: {} skipped ({}); "
                                      "nothing to compile (choose --dtypes the profiles take, or other archs)",
                                      skipped == 1 ? std::string("its only flag combination was")
                                                   : fmt::format("all {} flag combinations were", skipped),
                                      dtype_skips));
  }
  if (jobs.empty()) {
    // e.g. a --tiles tile no problem of the set can take: each combination with the reason it was refused.
    std::vector<std::string> given;
    for (const std::string& t : items(o.tiles))
      if (t != "default") given.push_back(t);
    std::string refused;
    for (const std::string& e : planning_errors) refused += "\n  not planned: " + e;
    throw InvalidArgument(fmt::format(
        "the set yields no kernels: {} could not be planned{}{}; nothing to compile ({}):{}",
        count_of(planning_errors.size(), "combination"),
        given.empty() ? std::string() : fmt::format(" with --tiles {}", join(given, ",")),
        skipped ? fmt::format(" and {} skipped ({})", count_of(skipped, "flag combination"), dtype_skips)
                : std::string(),
        given.empty() ? "each breaks the rules listed below; flashgen explain shows the nearest supported alternatives"
                      : "choose tiles the profiles take for these head dims and features, or 'default' for the "
                        "profile's",
        refused));
  }
  if (o.list) {
    for (const Job& j : jobs) std::printf("%s\n", j.spec.canonical().c_str());
    for (const std::string& e : planning_errors) std::fprintf(stderr, "flashgen pregen: not planned: %s\n", e.c_str());
    return planning_errors.empty() ? 0 : 1;
  }

  // Where the entries go (a relative --out from the working directory, shown absolute).
  const std::string out_dir = rt::absolute_path(o.out);
  if (!out_dir.empty()) {
    rt::CacheOverride ov;
    ov.store_dir = out_dir;
    ov.bundles = std::vector<std::string>{};
    ov.bundle_mode = true;
    rt::cache_override(ov);
  }
  const std::string dir = pregen_target_dir(out_dir.empty() ? "the user cache" : "--out " + out_dir);
  const std::string target = out_dir.empty() ? "user cache " + dir : "bundle " + dir;
  // Where an entry is, for the lines and the summary: the target (with --out the bundle being written,
  // which the cache layers list as the user cache), a read-only bundle of FLASHGEN_CACHE_PATH, or memory.
  const auto place_of = [&](const std::string& path) {
    const bool in_out = !out_dir.empty() && path.rfind(out_dir + "/", 0) == 0;
    return in_out ? target : layer_of(path);
  };

  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<KernelSpec> specs;
  for (const Job& j : jobs) specs.push_back(j.spec);
  const int used_threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<size_t>(1, specs.size()))));
  std::fprintf(stderr, "flashgen pregen: %s for %s into %s on %s\n", count_of(specs.size(), "kernel").c_str(),
               [&] {
                 std::vector<std::string> a;
                 for (int x : archs) a.push_back(fmt::format("sm_{}", x));
                 return join(a, ", ");
               }()
                   .c_str(),
               target.c_str(), count_of(static_cast<size_t>(used_threads), "thread").c_str());
  Progress progress("pregen", specs.size(), stderr, is_terminal(stderr));
  const auto results = warmup(specs, threads, [&](const WarmupProgress& w) {
    const WarmupResult& r = *w.last;
    std::string line;
    if (!r.ok) {
      line = fmt::format("FAILED   {}: {}", r.spec.kernel_name(), first_line(r.error));
    } else if (r.from_cache) {
      line = fmt::format("present  {} ({})", r.spec.kernel_name(), place_of(r.cache_path));
    } else {
      line = fmt::format("compiled {} ({:.1f} s)", r.spec.kernel_name(), r.seconds);
    }
    progress.step(line, !r.ok);
  });
  progress.finish();
  const double wall = progress.elapsed();

  // The kernels and their cubins by the directory they are in (place_of): written there by this run,
  // or found there; and those kept in memory only (the cache could not be written, and said so).
  struct Place {
    size_t written = 0, found = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, Place> places;
  size_t compiled = 0, present = 0, failed = 0, in_memory = 0;
  double nvrtc_seconds = 0;
  for (const WarmupResult& r : results) {
    if (!r.ok) {
      ++failed;
      continue;
    }
    if (r.from_cache) {
      ++present;
    } else {
      ++compiled;
      nvrtc_seconds += r.seconds;
    }
    if (r.cache_path.empty()) {
      ++in_memory;
      continue;
    }
    Place& place = places[place_of(r.cache_path)];
    if (r.from_cache) ++place.found;
    else ++place.written;
    struct stat st {};
    if (::stat(r.cache_path.c_str(), &st) == 0) place.bytes += static_cast<uint64_t>(st.st_size);
  }
  // (the rate counts the kernels compiled, over the wall time; none compiled, none given)
  const std::string compiled_text =
      compiled == 0 ? std::string("0 compiled")
                    : fmt::format("{} compiled ({:.1f} s of NVRTC, {:.2f} kernels/s)", compiled, nvrtc_seconds,
                                  wall > 0 ? static_cast<double>(compiled) / wall : 0.0);
  std::printf("pregen: %s in %s (wall) on %s: %s, %zu already present, %zu failed%s\n",
              count_of(results.size(), "kernel").c_str(), Progress::duration(wall).c_str(),
              count_of(static_cast<size_t>(used_threads), "thread").c_str(), compiled_text.c_str(), present,
              failed + planning_errors.size(),
              skipped ? fmt::format("; {} skipped (dtype not supported by the profile)",
                                    count_of(skipped, "flag combination"))
                            .c_str()
                      : "");
  // Into the target only when this run wrote there: kernels found in a bundle of FLASHGEN_CACHE_PATH (never
  // written) or already in the target are counted apart, and a run that wrote nothing says so.
  const Place into = places[target];
  const auto cubins = [](const Place& p) { return size_text(static_cast<double>(p.bytes)) + " of cubins"; };
  std::string where = into.written > 0 ? fmt::format("into {} ({})", target, cubins(into))
                                       : fmt::format("nothing written into {}", target);
  if (into.written == 0 && into.found > 0)
    where += fmt::format("; {} already there ({})", count_of(into.found, "kernel"), cubins(into));
  for (const auto& [name, place] : places)  // (a bundle: only the target is written)
    if (name != target)
      where += fmt::format("; {} already in {} (read-only; {})", count_of(place.found, "kernel"), name, cubins(place));
  if (in_memory > 0)
    where += fmt::format("; {} in memory only, not written (see the warning above)", count_of(in_memory, "kernel"));
  std::printf("pregen: %s\n", where.c_str());
  // The kernels whose ptxas report shows registers spilled to local memory, named so an operator
  // sees them before a fleet runs them (explain --problem gives one kernel's whole report).
  std::vector<std::string> spilling;
  size_t unreported = 0;  // entries without a ptxas report (a cache entry whose .log is missing or empty)
  for (const WarmupResult& r : results) {
    if (!r.ok) continue;
    const PtxasReport rep = parse_ptxas(r.compile_log);
    unreported += rep.found ? 0 : 1;
    if (rep.found && rep.spill_stores + rep.spill_loads > 0)
      spilling.push_back(fmt::format("{}: {} B stored, {} B loaded at {} registers", r.spec.kernel_name(),
                                     rep.spill_stores, rep.spill_loads, rep.registers));
  }
  if (!spilling.empty()) {
    constexpr size_t kShown = 8;
    std::printf("pregen: registers spill to local memory in %zu of %s (ptxas; flashgen explain --problem ... "
                "--arch N reports a problem's kernel in full):\n",
                spilling.size(), count_of(results.size() - failed, "kernel").c_str());
    for (size_t i = 0; i < std::min(kShown, spilling.size()); ++i) std::printf("  %s\n", spilling[i].c_str());
    if (spilling.size() > kShown) std::printf("  and %zu more\n", spilling.size() - kShown);
  }
  if (unreported > 0)
    std::printf("pregen: %s carry no ptxas report (a cache entry without its compile log): their spills are "
                "unknown\n",
                count_of(unreported, "kernel").c_str());
  if (!out_dir.empty()) {
    // (quoted for a POSIX shell where the path holds anything but [A-Za-z0-9_./-], so the line can be pasted)
    const bool plain = out_dir.find_first_not_of(
                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-") == std::string::npos;
    std::string shown = out_dir;
    if (!plain) {
      shown = "'";
      for (char ch : out_dir) shown += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      shown += "'";
    }
    std::printf("pregen: use the bundle with FLASHGEN_CACHE_PATH=%s (read-only; files must not be writable by "
                "others)\n",
                shown.c_str());
  }
  if (failed > 0 || !planning_errors.empty()) {
    std::fprintf(stderr, "pregen: failures:\n");
    for (const std::string& e : planning_errors) std::fprintf(stderr, "  not planned: %s\n", e.c_str());
    for (const WarmupResult& r : results) {
      if (r.ok) continue;
      std::fprintf(stderr, "  %s (%s):\n    %s\n", r.spec.kernel_name().c_str(), r.spec.canonical().c_str(),
                   [&] {
                     std::string s = r.error;
                     for (size_t p = 0; (p = s.find('\n', p)) != std::string::npos; p += 5) s.replace(p, 1, "\n    ");
                     return s;
                   }()
                       .c_str());
    }
    return 1;
  }
  return 0;
}

// ============================================================================
// explain
// ============================================================================

CLI::App* add_explain(CLI::App& app, ExplainOptions& o) {
  CLI::App* c = app.add_subcommand(
      "explain",
      "A dry run (no GPU needed): what a problem gets, or every rule it breaks and the nearest supported "
      "alternatives. Nothing is written to the cache.");
  c->add_option("--problem", o.problem, "the problem, key=value,... (see flashgen --help)")->required();
  c->add_option("--arch", o.arch, "target compute capability (default: the GPU's, else 90)")->check(arch_number());
  c->add_option("--device", o.device, "use the tune entries of this device name")
      ->check(non_empty("device name", kDeviceInstead));
  c->add_option("--tile", o.tile, "explain this tile (BLOCK_MxBLOCK_NxWARPSxSTAGES) instead of the planned one")
      ->check(non_empty("tile", kTileInstead));
  c->add_option("--sms", o.sms, "SM count for the wave model (default: the GPU's when it is the target)")
      ->check(integer_in(1, kMaxSms, "the SM count of the target GPU"));
  c->add_flag("--no-compile", o.no_compile, "do not run NVRTC for the register report when the kernel is not cached");
  return c;
}

namespace {

// Each rule `d` breaks on `arch` (and with `tile`, when set).
std::vector<std::string> broken_rules(const ProblemDesc& d, int arch, const std::optional<Tile>& tile,
                                      KernelSpec* spec_out) {
  std::vector<std::string> out;
  // check_problem() reports the first broken rule; to find every one, each
  // group of fields is checked alone on top of a problem that is valid.
  try {
    check_problem(to_problem(d));
  } catch (const Error& first) {
    ProblemDesc base;
    base.dtype = d.dtype;
    base.batch = base.seqlen_q = base.seqlen_k = base.heads_q = base.heads_kv = 1;
    base.head_dim = base.head_dim_v = 64;
    const std::vector<std::function<void(ProblemDesc&)>> groups = {
        [&](ProblemDesc& x) { x.batch = d.batch; },
        [&](ProblemDesc& x) { x.seqlen_q = d.seqlen_q, x.seqlen_k = d.seqlen_k; },
        [&](ProblemDesc& x) { x.heads_q = d.heads_q, x.heads_kv = d.heads_kv; },
        [&](ProblemDesc& x) { x.head_dim = d.head_dim; },
        [&](ProblemDesc& x) { x.head_dim_v = d.head_dim_v; },
        [&](ProblemDesc& x) {
          x.mask = d.mask, x.bias = d.bias, x.lse = d.lse, x.softcap = d.softcap;
          x.window_left = d.window_left, x.window_right = d.window_right, x.sinks = d.sinks, x.alibi = d.alibi;
        },
        [&](ProblemDesc& x) {  // a packed batch's lengths (batch and the bounds follow from them)
          if (!d.varlen()) return;
          x.batch = d.batch, x.seqlen_q = d.seqlen_q, x.seqlen_k = d.seqlen_k;
          x.seqlens_q = d.seqlens_q, x.seqlens_k = d.seqlens_k, x.seqused_k = d.seqused_k;
          x.page_size = d.page_size;  // (a paged packed batch has no cu_seqlens_k)
        },
        [&](ProblemDesc& x) {  // a paged KV cache: the page size with the keys it splits into pages
          if (!d.paged()) return;
          x.batch = d.batch, x.seqlen_k = d.seqlen_k, x.page_size = d.page_size, x.seqused_k = d.seqused_k;
          if (d.varlen()) x.seqlens_q = d.seqlens_q, x.seqlens_k = d.seqlens_k, x.seqlen_q = d.seqlen_q;
        },
    };
    size_t found = 0;
    for (const auto& g : groups) {
      ProblemDesc x = base;
      g(x);
      try {
        check_problem(to_problem(x));
      } catch (const Error& e) {
        out.push_back(std::string("problem: ") + e.what());
        ++found;
      }
    }
    if (found == 0) out.push_back(std::string("problem: ") + first.what());
  }
  // Spec sentences that repeat a problem rule ("head_dim (100) must be ...") are left out.
  auto repeats_problem_rule = [&](const std::string& sentence) {
    std::string core = sentence;
    if (!core.empty() && core.back() == '.') core.pop_back();
    return std::any_of(out.begin(), out.end(), [&](const std::string& r) { return r.find(core) != std::string::npos; });
  };
  const Profile* profile = nullptr;
  try {
    profile = &profile_for_arch(arch);
  } catch (const Error& e) {
    out.push_back(std::string("arch: ") + e.what());
    return out;
  }
  Tile t;
  if (tile) {
    t = *tile;
  } else {
    const int hd = static_cast<int>(std::max(d.head_dim, d.head_dim_v));
    try {
      const FlashTile& ft = profile->tile_for(
          hd, profile->unit_for(static_cast<int>(d.head_dim), static_cast<int>(d.head_dim_v)));
      t = ft.tile;
    } catch (const Error& e) {
      out.push_back(std::string("profile: ") + e.what());
      const FlashTile& ft = profile->flash.back();
      t = ft.tile;
    }
  }
  const KernelSpec spec = spec_with_tile(d, arch, *profile, t);
  const auto spec_errors = validate(spec, *profile);
  for (const std::string& s : spec_errors) {
    if (!repeats_problem_rule(s)) out.push_back("spec: " + s);
  }
  if (out.empty() && spec_errors.empty()) {  // what one launch covers (launch() refuses the rest)
    try {
      check_launch_limits(to_problem(d), spec);
    } catch (const Error& e) {
      out.push_back(e.what());
    }
  }
  if (spec_out) *spec_out = spec;
  return out;
}

struct Alternative {
  ProblemDesc d;
  int arch;
  std::optional<Tile> tile;
  int changes;
  int64_t distance;
  std::string what;
  std::string kernel;  // the kernel it plans (two alternatives may reach the same one)
};

std::vector<int64_t> nearby_head_dims(int64_t v) {
  if (v % 8 == 0 && v >= 16 && v <= 256) return {v};
  std::vector<int64_t> out;
  const int64_t below = std::clamp<int64_t>(v / 8 * 8, 16, 256);
  const int64_t above = std::clamp<int64_t>((v + 7) / 8 * 8, 16, 256);
  out.push_back(below);
  if (above != below) out.push_back(above);
  return out;
}

std::vector<Alternative> alternatives(const ProblemDesc& d, int arch, const std::optional<Tile>& tile) {
  std::vector<int64_t> ds = nearby_head_dims(d.head_dim), dvs = nearby_head_dims(d.head_dim_v);
  std::vector<DType> dtypes = {d.dtype, d.dtype == DType::f16 ? DType::bf16 : DType::f16};
  std::vector<int> archs = {arch};
  {
    std::set<int> all;
    for (const Profile& p : builtin_profiles()) all.insert(p.archs.begin(), p.archs.end());
    int lower = -1, higher = -1;
    for (int a : all) {
      if (a < arch) lower = a;
      if (a > arch && higher < 0) higher = a;
    }
    if (lower > 0) archs.push_back(lower);
    if (higher > 0) archs.push_back(higher);
  }
  std::vector<int64_t> kvs = {d.heads_kv};
  if (d.heads_kv > 0 && d.heads_q % d.heads_kv != 0) {
    kvs.clear();
    for (int64_t k = d.heads_kv; k >= 1; --k)
      if (d.heads_q % k == 0) {
        kvs.push_back(k);
        break;
      }
    for (int64_t k = d.heads_kv; k <= d.heads_q; ++k)
      if (d.heads_q % k == 0) {
        kvs.push_back(k);
        break;
      }
  }
  std::vector<std::optional<Tile>> tiles = {tile};
  if (tile) tiles.push_back(std::nullopt);

  std::vector<Alternative> out;
  for (int64_t hd : ds)
    for (int64_t hdv : dvs)
      for (DType dt : dtypes)
        for (int a : archs)
          for (int64_t kv : kvs)
            for (const auto& t : tiles) {
              ProblemDesc c = d;
              c.head_dim = hd;
              c.head_dim_v = hdv;
              c.dtype = dt;
              c.heads_kv = kv;
              if (!broken_rules(c, a, t, nullptr).empty()) continue;
              Alternative alt{c, a, t, 0, 0, "", ""};
              std::vector<std::string> what;
              if (hd != d.head_dim) what.push_back(fmt::format("head_dim {} (not {})", hd, d.head_dim)), alt.changes++;
              if (hdv != d.head_dim_v)
                what.push_back(fmt::format("head_dim_v {} (not {})", hdv, d.head_dim_v)), alt.changes++;
              if (dt != d.dtype)
                what.push_back(fmt::format("dtype {} (not {})", to_string(dt), to_string(d.dtype))), alt.changes++;
              if (a != arch) what.push_back(fmt::format("sm_{} (not sm_{})", a, arch)), alt.changes++;
              if (kv != d.heads_kv) what.push_back(fmt::format("heads_kv {} (not {})", kv, d.heads_kv)), alt.changes++;
              if (t != tile) what.push_back("the profile's tile (not " + (tile ? tile->str() : "") + ")"), alt.changes++;
              alt.distance = std::abs(hd - d.head_dim) + std::abs(hdv - d.head_dim_v) + std::abs(a - arch) +
                             std::abs(kv - d.heads_kv);
              alt.what = join(what, ", ");
              if (alt.changes > 0) out.push_back(alt);
            }
  std::sort(out.begin(), out.end(), [](const Alternative& x, const Alternative& y) {
    if (x.changes != y.changes) return x.changes < y.changes;
    return x.distance < y.distance;
  });
  // The first five distinct kernels: an alternative that plans a kernel already listed (e.g. another
  // arch whose profile tile is the tile given) adds nothing.
  std::vector<Alternative> distinct;
  std::set<std::string> kernels;
  for (Alternative& a : out) {
    try {
      const KernelSpec s =
          a.tile ? spec_with_tile(a.d, a.arch, profile_for_arch(a.arch), *a.tile) : plan(to_problem(a.d), a.arch);
      a.kernel = s.kernel_name();
    } catch (const std::exception&) {
      continue;
    }
    if (!kernels.insert(a.kernel).second) continue;
    distinct.push_back(std::move(a));
    if (distinct.size() == 5) break;
  }
  return distinct;
}

}  // namespace

int run_explain(const ExplainOptions& o) {
  const ProblemDesc d = parse_problem_text(o.problem);
  std::string arch_note;
  const int arch = choose_arch(o.arch, &arch_note);
  std::optional<Tile> tile;
  {
    Tile t;
    if (parse_tile_text("--tile", o.tile, &t)) tile = t;
  }
  // A broken FLASHGEN_PROFILE or FLASHGEN_NVRTC_LIBRARY is the configuration's fault, not a rule the problem breaks.
  check_profile_config({arch});
  check_nvrtc_config({arch}, false);
  row("problem", d.str());
  if (d.varlen()) {
    // e.g. "3 sequences packed along the rows (cu_seqlens_q, cu_seqlens_k): total_q 612, total_k 900, ..."
    row("packed", fmt::format("{} sequence{} packed along the rows ({}): total_q {}, total_k "
                              "{}, max_seqlen_q {}, max_seqlen_k {}{}",
                              d.batch, d.batch == 1 ? "" : "s",
                              d.paged() ? "cu_seqlens_q; keys in pages, counted by seqused_k" : "cu_seqlens_q, cu_seqlens_k",
                              d.total_q(), d.total_k(), d.seqlen_q, d.seqlen_k,
                              d.seqused_k && !d.paged() ? "; seqused_k[b] keys of each count (modelled as all of its keys)"
                                                        : ""));
  }
  if (d.paged()) {
    // e.g. "page_size 16: K/V in 256 pages of 16 keys through page_table (page_table_stride 64); ..."
    row("paged", fmt::format("page_size {}: K/V in {} page{} of {} key{} through page_table (page_table_stride {}){}; "
                             "modelled as the same work as a contiguous cache",
                             d.page_size, d.num_pages(), d.num_pages() == 1 ? "" : "s", d.page_size,
                             d.page_size == 1 ? "" : "s", d.page_table_stride(),
                             d.varlen() ? ", seqused_k[b] = seqlens_k[b] keys of each"
                             : d.seqused_k ? ", seqused_k[b] keys of each count (modelled as all seqlen_k)"
                                           : ""));
  }
  if (d.mask == MaskKind::window_top_left || d.mask == MaskKind::window_bottom_right) {
    // e.g. "window_left 127, window_right 0: query i sees keys j from i + off - 127 to i + off (off = 0, top-left)"
    const std::string from = d.window_left < 0 ? std::string("0 (left unbounded)")
                                               : fmt::format("i + off - {}", d.window_left);
    const std::string to = d.window_right < 0 ? std::string("the last key (right unbounded)")
                           : d.window_right == 0 ? std::string("i + off")
                                                 : fmt::format("i + off + {}", d.window_right);
    row("window", fmt::format("window_left {}, window_right {}: query i sees keys j from {} to {} (off = {})",
                              d.window_left, d.window_right, from, to,
                              d.mask != MaskKind::window_bottom_right ? std::string("0, top-left")
                              : d.varlen() ? std::string("each sequence's seqlen_k - seqlen_q, bottom-right")
                                           : fmt::format("seqlen_k - seqlen_q = {}, bottom-right", d.seqlen_k - d.seqlen_q)));
  }
  row("arch", arch_note.empty() ? fmt::format("sm_{}", arch) : arch_note);

  KernelSpec unchecked;
  const std::vector<std::string> rules = broken_rules(d, arch, tile, &unchecked);
  if (!rules.empty()) {
    std::printf("\nunsupported: %zu rule%s broken\n", rules.size(), rules.size() == 1 ? "" : "s");
    for (const std::string& r : rules) std::printf("  - %s\n", r.c_str());
    const auto alts = alternatives(d, arch, tile);
    if (alts.empty()) {
      std::printf("\nno supported alternative was found by changing head dims, dtype, arch, heads_kv or the tile\n");
    } else {
      std::printf("\nnearest supported alternatives:\n");
      for (const Alternative& a : alts) std::printf("  - %s\n      -> %s\n", a.what.c_str(), a.kernel.c_str());
    }
    // Unsupported input, as show and tune treat it: exit 2 (the report above says why).
    std::fflush(stdout);
    std::fprintf(stderr, "flashgen explain: error: the problem is unsupported on sm_%d: %zu rule%s broken (listed "
                 "above)\n",
                 arch, rules.size(), rules.size() == 1 ? "" : "s");
    return 2;
  }

  const Profile& profile = profile_for_arch(arch);
  std::string tile_source;
  KernelSpec spec;
  if (tile) {
    spec = spec_with_tile(d, arch, profile, *tile);
    tile_source = "--tile";
  } else {
    const KernelSpec def = rt::plan_default(to_problem(d), arch);
    spec = o.device.empty() ? plan(to_problem(d), arch) : rt::plan_for_device(to_problem(d), arch, o.device);
    if (spec == def) {
      const FlashTile& ft = profile.tile_for(static_cast<int>(std::max(d.head_dim, d.head_dim_v)), spec.unit);
      tile_source = fmt::format("profile {} default ({} row head_dim_le {})", profile.name,
                                gen::unit_traits(spec.unit).tile_list, ft.head_dim_le);
    } else {
      tile_source = "tune file entry";
      const std::string device = o.device.empty() ? rt::device_name_for_arch(arch) : o.device;
      if (auto t = find_tuned_tile(problem_class(to_problem(d)), arch, profile, device)) {
        tile_source = fmt::format("tune file {} ({}, {:.1f} TFLOP/s measured)", t->file, t->entry.device,
                                  t->entry.tflops);
      }
    }
  }
  row("profile", fmt::format("{} ({}), archs {}, matrix unit {}{} ({} -> f32)", profile.name, profile.source,
                             join_ints(profile.archs, ","), to_string(profile.matrix_unit.shape),
                             profile.wgmma_flash.empty() ? "" : ", wgmma (sm_90a) for head dims that are multiples of 16",
                             [&] {
                               std::vector<std::string> v;
                               for (DType t : profile.matrix_unit.operand_dtypes) v.emplace_back(to_string(t));
                               return join(v, "/");
                             }()));
  row("spec", spec.canonical());
  row("kernel", spec.kernel_name());
  const gen::UnitTraits& unit = gen::unit_traits(spec.unit);
  if (!unit.arch_suffix.empty())
    row("unit", fmt::format("{}, compiled for sm_{}{} (its cubin runs on sm_{} only)",
                            unit.warpgroup ? "wgmma.mma_async m64nNk16" : unit.instruction, spec.arch,
                            unit.arch_suffix, spec.arch));
  const auto qk_chunks = spec.qk_chunks();
  const auto v_chunks = spec.v_chunks();
  row("head dims", fmt::format("head_dim {} = {}, head_dim_v {} = {} ({}, never padded)", spec.head_dim,
                               join_ints(qk_chunks, " + "), spec.head_dim_v, join_ints(v_chunks, " + "),
                               unit.max_chunk != 0
                                   ? fmt::format("shared-memory chunks of at most {} columns", unit.max_chunk)
                                   : std::string("power-of-two chunks")));
  // (wgmma: the consumer warps of the tile and the producer warpgroup, as tune's "12+4w")
  row("tile", fmt::format("block_m {}, block_n {}, {}{} ({} threads), {}; from {}", spec.tile.block_m,
                          spec.tile.block_n,
                          unit.producer_warps == 0 ? count_of(static_cast<size_t>(spec.tile.warps), "warp")
                                                   : fmt::format("{} consumer warps + {} producer warps",
                                                                 spec.tile.warps, unit.producer_warps),
                          unit.producer_warps == 0 ? ""
                          : d.paged() && d.page_size < gen::kWgmmaGatherPageBelow
                              ? fmt::format(" (cp.async gather: pages below {} keys)", gen::kWgmmaGatherPageBelow)
                              : std::string(" (TMA)"),
                          spec.threads(),
                          count_of(static_cast<size_t>(spec.tile.stages), "stage"), tile_source));
  const int64_t dmax = std::max(spec.head_dim, spec.head_dim_v);
  // wgmma: each K/V stage rounded up to 1024 bytes, and 1024 bytes for the tiles' alignment.
  auto stage_bytes = [&](int64_t d) {
    const int64_t b = 2 * spec.tile.block_n * d;
    return unit.smem_align != 0 ? (b + unit.smem_align - 1) / unit.smem_align * unit.smem_align : b;
  };
  // The first region holds the Q tile, then stages the O tile for the store (KernelSpec::smem_bytes,
  // the templates' sO = sQ): block_m x max(head_dim, head_dim_v).
  row("smem", fmt::format("{} bytes = Q/O {} (Q, then O staged for the store) + {} x (K {} + V {}){}; profile limit "
                          "{} per block, {} per SM",
                          spec.smem_bytes(), 2 * spec.tile.block_m * dmax,
                          count_of(static_cast<size_t>(spec.tile.stages), "stage"), stage_bytes(spec.head_dim),
                          stage_bytes(spec.head_dim_v),
                          unit.smem_align != 0
                              ? fmt::format(" + {} alignment (stages padded to {} bytes)", unit.smem_align, unit.smem_align)
                              : std::string(),
                          profile.smem_per_block, profile.smem_per_sm));

  // Cache and registers.
  int registers = -1;
  int64_t spills = 0;
  std::string cache_text, reg_text;
  try {
    const rt::CompileInputs in = rt::compile_inputs(spec);
    const auto hit = rt::cache_lookup(in.name, rt::current_identity(in.key, spec.arch, in.nvrtc));
    std::string log;
    if (hit) {
      cache_text = fmt::format("cached: {} ({})", hit->path.empty() ? "memory" : hit->path, layer_of(hit->path));
      log = hit->log;
    } else {
      cache_text = "not cached (the first call compiles it, or: flashgen pregen)";
      if (!o.no_compile) {
        const auto out = rt::compile_to_cubin(in.source, in.name, in.options);
        log = out.log;
        cache_text += "; compiled now for this report, not stored";
      }
    }
    const PtxasReport rep = parse_ptxas(log);
    if (rep.found) {
      registers = rep.registers;
      spills = rep.spill_stores + rep.spill_loads;
      reg_text = fmt::format("{} per thread, {} bytes spill stores, {} bytes spill loads, {} bytes stack (ptxas, "
                             "NVRTC {})",
                             rep.registers, rep.spill_stores, rep.spill_loads, rep.stack_frame, in.nvrtc.str());
    } else {
      reg_text = fmt::format("unknown (no ptxas report{}); estimated {}", o.no_compile ? "; --no-compile" : "",
                             estimate_registers(spec));
    }
  } catch (const Unavailable& e) {
    cache_text = fmt::format("unknown: {}", first_line(e.what()));
    reg_text = fmt::format("unknown (no NVRTC); estimated {}", estimate_registers(spec));
  } catch (const CompileError& e) {
    cache_text = "not cached";
    reg_text = fmt::format("unknown: NVRTC failed: {}", first_line(e.what()));
  }
  row("registers", reg_text);

  DeviceShape dev;
  dev.sm_count = o.sms;
  if (dev.sm_count == 0 && gpu_available()) {
    try {
      const DeviceInfo di = current_device();
      if (di.arch == arch) dev.sm_count = di.sm_count;
    } catch (const std::exception&) {
    }
  }
  const TileModel m = model_tile(spec, d, profile, dev, registers, spills);
  // e.g. "1 block per SM (1 x 12+4w: 16 warps, 12 consumer + 4 producer each), limited by registers"; tune's
  // occupancy column is the "1 x 12+4w".
  row("occupancy",
      fmt::format("{} per SM ({}: {}{}), limited by {}", count_of(static_cast<size_t>(m.blocks_per_sm), "block"),
                  occupancy_text(m), count_of(static_cast<size_t>(m.resident_warps), "warp"),
                  unit.producer_warps != 0
                      ? fmt::format(", {} consumer + {} producer each", spec.tile.warps, unit.producer_warps)
                      : std::string(),
                  m.occupancy_limit));
  const std::string last_wave = dev.sm_count > 0 ? fmt::format(", {:.0f}% of the last {} used on {} SMs",
                                                               100.0 * m.wave_efficiency,
                                                               unit.persistent ? "round" : "wave", dev.sm_count)
                                                 : std::string();
  // A packed batch's grid is sized by max_seqlen_q; the blocks past a sequence's rows exit at once.
  const std::string grid_of = d.varlen() ? "ceil(max_seqlen_q / block_m) x heads_q x batch; those past their "
                                           "sequence's rows exit at once"
                                         : "ceil(seqlen_q / block_m) x heads_q x batch";
  if (unit.persistent)
    row("grid", fmt::format("persistent: min({} work items ({}), blocks per SM x SMs) blocks, each looping over "
                            "items{}",
                            m.blocks, grid_of, last_wave));
  else
    row("grid", fmt::format("{} ({}){}", count_of(static_cast<size_t>(m.blocks), "block"), grid_of, last_wave));
  row("flops", fmt::format("{:.4g} = 2 x {} x (D + Dv){}", m.flops,
                           d.varlen() ? "Hq x (visible (q, k) pairs, summed over the sequences)"
                                      : "B x Hq x visible (q, k) pairs",
                           d.mask == MaskKind::causal_top_left || d.mask == MaskKind::causal_bottom_right
                               ? " (causal: keys up to the diagonal)"
                           : d.mask != MaskKind::none ? " (window: the keys inside each row's window)"
                                                      : ""));
  row("bytes", fmt::format("{} unique (Q, K, V, O{}{}); per block {:.0f} from global memory, {:.0f} of shared-memory "
                           "traffic",
                           size_text(m.unique_bytes), d.bias != BiasKind::none ? ", bias" : "", d.lse ? ", LSE" : "",
                           m.tile_global_bytes, m.tile_smem_bytes));
  row("intensity",
      fmt::format("{:.1f} FLOP/byte of unique memory traffic vs the profile's ridge point {:.1f} ({} FLOP / {:.4g} "
                  "bytes per clock per SM): {}",
                  m.ai_dram, m.ridge_dram, profile.mma_flop_per_clock_per_sm, profile.dram_bytes_per_clock_per_sm,
                  m.ai_dram >= m.ridge_dram ? "compute-bound" : "memory-bound"));
  row("", fmt::format("per block: {:.1f} FLOP/byte from global memory (if K/V missed L2), {:.1f} FLOP per "
                      "shared-memory byte vs {:.1f} ({} FLOP / {} bytes per clock): {}",
                      m.ai_tile, m.ai_smem, m.ridge_smem, profile.mma_flop_per_clock_per_sm,
                      profile.smem_bytes_per_clock_per_sm,
                      m.ai_smem >= m.ridge_smem ? "the matrix unit, not shared memory, limits"
                                                : "shared-memory bandwidth limits"));
  // (no SM count: --sms not given and no GPU of this arch here; the waves are not modelled)
  const std::string waves_text = dev.sm_count > 0 ? fmt::format("waves {:.0f}%", 100.0 * m.wave_efficiency)
                                                  : std::string("waves not modelled: give --sms");
  row("model", fmt::format("bound by {}; {:.0f}% of the matrix-unit peak (latency {:.0f}%, {}, padding "
                           "{:.0f}%{})",
                           m.bound, 100.0 * m.score, 100.0 * m.latency_efficiency, waves_text,
                           100.0 * m.padding_efficiency,
                           m.spill_bytes > 0 ? fmt::format(", spills {:.0f}%", 100.0 * m.spill_efficiency)
                                             : std::string()));
  // forward() runs few-row, long-key problems as a split-KV decode instead
  // (decode_preferred; it depends on the SM count): what that runs.
  if (!tile) {
    const AttentionProblem ap = to_problem(d);
    const int sms = dev.sm_count > 0 ? dev.sm_count : 0;
    if (decode_preferred(ap, arch, sms > 0 ? sms : INT_MAX)) {
      // Without a GPU: shown for 132 SMs, or, where 132 SMs run it in one kernel, for the fewest
      // SMs that take the decode (decode_preferred grows with the SM count).
      int shown = sms > 0 ? sms : 132;
      if (sms == 0 && !decode_preferred(ap, arch, shown)) {
        int lo = shown, hi = INT_MAX;  // (lo: one kernel; hi: the decode)
        while (hi - lo > 1) {
          const int mid = lo + (hi - lo) / 2;
          (decode_preferred(ap, arch, mid) ? hi : lo) = mid;
        }
        shown = hi;
      }
      try {
        const DecodePlan dp = plan_decode(ap, arch, shown);
        row("decode",
            fmt::format("forward() runs this problem as a split-KV decode{}: {} split{} of {} key tile{}, {}", sms > 0
                            ? fmt::format(" on {} SMs", sms)
                            : shown == 132
                                  ? std::string(" on a GPU with more SMs than its one-kernel grid fills (shown for 132)")
                                  : fmt::format(" on a GPU of {} SMs or more (one of 132 runs it as one kernel; shown "
                                                "for {})",
                                                shown, shown),
                        dp.num_splits, dp.num_splits == 1 ? "" : "s", dp.tiles_per_split,
                        dp.tiles_per_split == 1 ? "" : "s",
                        decode_merges(dp) ? "then the merge" : "whose blocks write O (no merge)"));
        row("", "split   " + dp.split.canonical());
        row("", "combine " + dp.combine.canonical());
      } catch (const Error& e) {
        row("decode", std::string("forward() would run it as a split-KV decode, which refuses it: ") + e.what());
      }
    }
  }
  row("cache", cache_text);
  return 0;
}

// ============================================================================
// show
// ============================================================================

CLI::App* add_show(CLI::App& app, ShowOptions& o) {
  CLI::App* c = app.add_subcommand("show", "Print the generated CUDA source for a problem or a spec.");
  auto* p = c->add_option("--problem", o.problem, "the problem, key=value,... (see flashgen --help)")
                ->check(non_empty("problem", "give key=value,... e.g. dtype=f16,seqlen=4096,heads=32,head_dim=128"));
  auto* s = c->add_option("--spec", o.spec, "a canonical spec string (flashgen.fwd.v1:...)")
                ->check(non_empty("spec", "give a canonical spec string (flashgen.fwd.v1:..., as explain prints it)"));
  p->excludes(s);
  // A spec names its arch and tile: --arch and --tile go with --problem only.
  c->add_option("--arch", o.arch, "target compute capability for --problem (default: the GPU's, else 90)")
      ->check(arch_number())
      ->excludes(s);
  c->add_option("--tile", o.tile, "tile BLOCK_MxBLOCK_NxWARPSxSTAGES for --problem instead of the planned one")
      ->check(non_empty("tile", kTileInstead))
      ->excludes(s);
  return c;
}

int run_show(const ShowOptions& o) {
  KernelSpec spec;
  if (!o.spec.empty()) {
    spec = KernelSpec::parse(o.spec);
    check_profile_config({spec.arch});
  } else if (!o.problem.empty()) {
    const ProblemDesc d = parse_problem_text(o.problem);
    const int arch = choose_arch(o.arch, nullptr);
    Tile t;
    const bool tiled = parse_tile_text("--tile", o.tile, &t);
    check_profile_config({arch});
    if (tiled) {
      spec = spec_with_tile(d, arch, profile_for_arch(arch), t);
    } else {
      spec = plan(to_problem(d), arch);
    }
  } else {
    throw InvalidArgument("give --problem key=value,... or --spec flashgen.fwd.v1:...");
  }
  const std::string source = generate(spec);
  std::fwrite(source.data(), 1, source.size(), stdout);
  return 0;
}

// ============================================================================
// cache
// ============================================================================

CLI::App* add_cache(CLI::App& app, CacheOptions& o) {
  CLI::App* c = app.add_subcommand(
      "cache",
      "Inspect and maintain the kernel cache: ls (every layer), verify (every layer; exit 1 on a bad entry), prune "
      "(the user cache: bad, foreign and stale entries, old temp files), clear (every entry of the user cache).");
  c->add_option("action", o.action, "ls | verify | prune | clear")
      ->required()
      ->check(CLI::IsMember({"ls", "verify", "prune", "clear"}));
  c->add_option("--dir", o.dir, "work on this directory instead of the cache layers")
      ->check(non_empty_path("leave --dir out to work on the cache layers"));
  c->add_flag("--dry-run", o.dry_run, "prune/clear: list what would be removed");
  c->add_option("--older-than", o.older_than_days, "prune: also remove entries not modified for this many days")
      ->check(number_in(0, kMaxAgeDays, "days"));
  c->add_option("--temp-age", o.temp_age_s,
                "prune: remove temp files and orphaned sources older than this many seconds (default 600; younger "
                "ones may belong to a live writer)")
      ->check(number_in(0, kMaxAgeSeconds, "seconds"))
      ->each([&o](const std::string&) { o.temp_age_given = true; });
  return c;
}

namespace {

// Why `path` cannot be listed as a directory ("" when it can).
std::string unlistable_dir_reason(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return err == ENOENT ? std::string("no such directory") : fmt::format("cannot be examined: {}", std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return fmt::format("cannot be read: {}", std::strerror(errno));
  ::closedir(d);
  return {};
}

}  // namespace

int run_cache(const CacheOptions& o) {
  // An option another action takes is a usage error, not ignored: `clear --older-than 30`
  // would otherwise remove every entry.
  {
    std::string wrong;
    if (o.action != "prune" && o.older_than_days >= 0) wrong = "--older-than applies to prune only";
    else if (o.action != "prune" && o.temp_age_given) wrong = "--temp-age applies to prune only";
    else if ((o.action == "ls" || o.action == "verify") && o.dry_run) wrong = "--dry-run applies to prune and clear only";
    if (!wrong.empty()) {
      std::fprintf(stderr, "flashgen cache: error: %s (the action is %s); see flashgen cache --help\n", wrong.c_str(),
                   o.action.c_str());
      return 2;
    }
  }
  // ls, verify and prune judge entries by the NVRTC that would compile them.
  if (o.action != "clear") check_nvrtc_config({}, false);
  const rt::NvrtcForArch nvrtc = rt::loaded_nvrtc_for_arch();
  struct Dir {
    std::string path;
    bool bundle;
    std::string label;
  };
  std::vector<Dir> dirs;
  std::string user_dir;
  // A user cache that does not exist yet: no entries, nothing to prune (inspection creates nothing).
  std::string absent_user_dir;
  // Layers that are configured but cannot be used (ls and verify fail on them).
  size_t unusable = 0;
  const std::string dir_arg = rt::absolute_path(o.dir);  // (shown absolute, as the cache layers are)
  if (!dir_arg.empty()) {
    // A directory named on the command line must be one: an empty listing of a typo would pass.
    if (const std::string why = unlistable_dir_reason(dir_arg); !why.empty()) {
      std::fflush(stdout);
      std::fprintf(stderr, "flashgen cache %s: error: --dir %s: %s\n", o.action.c_str(), dir_arg.c_str(), why.c_str());
      return 1;
    }
    dirs.push_back(Dir{dir_arg, false, "directory"});
    user_dir = dir_arg;
  } else {
    for (const rt::CacheLayer& l : rt::cache_layers()) {
      if (l.kind == rt::CacheLayer::Kind::bundle) {
        if (l.usable) {
          dirs.push_back(Dir{l.path, true, "bundle"});
        } else {
          std::printf("bundle %s: not used: %s\n", l.path.c_str(), l.problem.c_str());
          ++unusable;
        }
      } else if (l.kind == rt::CacheLayer::Kind::user) {
        if (l.usable && !l.exists) {
          absent_user_dir = l.path;
        } else if (l.usable) {
          dirs.push_back(Dir{l.path, false, "user cache"});
          user_dir = l.path;
        } else {
          std::printf("user cache: not used: %s\n", l.problem.c_str());
          if (!l.path.empty()) ++unusable;
        }
      }
    }
  }

  if (o.action == "ls" || o.action == "verify") {
    size_t total = 0, bad = 0, foreign = 0;
    if (!absent_user_dir.empty()) {
      std::printf("user cache %s: 0 entries, does not exist (the first compiled kernel creates it)\n",
                  absent_user_dir.c_str());
    }
    for (const Dir& dir : dirs) {
      const auto reports = rt::cache_scan(dir.path, dir.bundle, nvrtc);
      uint64_t bytes = 0;
      for (const auto& r : reports) bytes += r.bytes;
      // (pregen counts the cubins alone; an entry here is its cubin, source and log)
      std::printf("%s %s: %s, %s on disk\n", dir.label.c_str(), dir.path.c_str(),
                  count_of(reports.size(), "entry", "entries").c_str(), size_text(static_cast<double>(bytes)).c_str());
      const rt::LockFiles locks = rt::cache_lock_files(dir.path);
      if (locks.held > 0)
        std::printf("  %s held: a compile in progress\n", count_of(locks.held, "lock file", "lock files").c_str());
      if (locks.left > 0)
        std::printf("  %s left by a compile or pregen that was stopped (no process holds %s): `flashgen cache "
                    "prune%s` removes %s\n",
                    count_of(locks.left, "lock file", "lock files").c_str(), locks.left == 1 ? "it" : "them",
                    dir.label == "user cache" ? "" : (" --dir " + dir.path).c_str(), locks.left == 1 ? "it" : "them");
      for (const auto& r : reports) {
        ++total;
        if (!r.valid) ++bad;
        else if (!r.current) ++foreign;
        const bool show = o.action == "ls" || !r.current;
        if (!show) continue;
        std::string id = r.header ? fmt::format("sm_{} NVRTC {} gen {}", r.header->id.arch, r.header->id.nvrtc.str(),
                                                r.header->id.generator)
                                  : std::string("?");
        char when[32] = "?";
        const std::time_t t = static_cast<std::time_t>(r.mtime);
        if (std::tm tm{}; ::localtime_r(&t, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
        std::printf("  %-8s %s  %8.1f KiB  %s  %s%s\n", !r.valid ? "BAD" : r.current ? "ok" : "foreign",
                    r.path.substr(r.path.rfind('/') + 1).c_str(), static_cast<double>(r.bytes) / 1024.0, when,
                    id.c_str(), r.problem.empty() ? "" : (": " + r.problem).c_str());
      }
    }
    std::printf("%s: %zu ok, %zu foreign or stale (never loaded here; flashgen cache prune removes them from "
                "the user cache), %zu bad\n",
                count_of(total, "entry", "entries").c_str(), total - bad - foreign, foreign, bad);
    if (unusable > 0) {
      std::fflush(stdout);
      std::fprintf(stderr, "flashgen cache %s: error: %zu configured cache director%s cannot be used (see above)\n",
                   o.action.c_str(), unusable, unusable == 1 ? "y" : "ies");
      return 1;
    }
    return o.action == "verify" && bad > 0 ? 1 : 0;
  }

  // prune / clear: the user cache (or --dir) only; bundles are read-only.
  if (!absent_user_dir.empty()) {
    std::printf("%s: 0 files; the user cache %s does not exist, nothing to remove\n", o.action.c_str(),
                absent_user_dir.c_str());
    return 0;
  }
  if (user_dir.empty()) {
    // Like ls/verify on a cache that cannot be used: a failure (exit 1), not a usage error.
    std::fprintf(stderr, "flashgen cache %s: error: there is no usable user cache directory to %s (see above)\n",
                 o.action.c_str(), o.action.c_str());
    return 1;
  }
  rt::PruneOptions po;
  po.all = o.action == "clear";
  po.dry_run = o.dry_run;
  po.temp_min_age_s = static_cast<int64_t>(o.temp_age_s);
  if (o.older_than_days >= 0) po.older_than_s = static_cast<int64_t>(o.older_than_days * 86400.0);
  const rt::PruneResult r = rt::cache_prune(user_dir, nvrtc, po);
  for (const std::string& f : r.removed) std::printf("%s %s\n", o.dry_run ? "would remove" : "removed", f.c_str());
  for (const std::string& e : r.errors) std::fprintf(stderr, "flashgen cache %s: %s\n", o.action.c_str(), e.c_str());
  std::printf("%s: %s, %s %s in %s\n", o.action.c_str(), count_of(r.removed.size(), "file").c_str(),
              size_text(static_cast<double>(r.bytes)).c_str(), o.dry_run ? "would be freed" : "freed", user_dir.c_str());
  return r.errors.empty() ? 0 : 1;
}

// ============================================================================
// info
// ============================================================================

CLI::App* add_info(CLI::App& app, InfoOptions& o) {
  CLI::App* c = app.add_subcommand("info",
                                   "Print the device, its profile, the NVRTC and driver versions, the cache layers "
                                   "and the tune files.");
  c->add_option("--arch", o.arch, "show the profile and NVRTC of this arch (default: the GPU's, else 90)")
      ->check(arch_number());
  return c;
}

int run_info(const InfoOptions& o) {
  row("flashgen", fmt::format("generator {}, cache format {}", kGeneratorVersion, rt::kCacheFormatVersion));
  std::optional<DeviceInfo> dev;
  if (gpu_available()) {
    try {
      dev = current_device();
    } catch (const std::exception& e) {
      row("device", fmt::format("error: {}", e.what()));
    }
  }
  if (dev) {
    row("device", fmt::format("{} (sm_{}, {} SMs, {} KiB shared memory per block, {:.2f} GHz max clock)", dev->name,
                              dev->arch, dev->sm_count, dev->smem_per_block_optin / 1024, dev->clock_khz / 1e6));
  } else {
    std::string why;
    try {
      (void)rt::driver();
      why = "the driver reports no device";
    } catch (const std::exception& e) {
      why = first_line(e.what());
    }
    row("device", "none (" + why + ")");
  }
  try {
    const rt::Driver& d = rt::driver();
    int v = 0;
    if (d.cuDriverGetVersion(&v) == CUDA_SUCCESS) row("driver", fmt::format("CUDA {}.{}", v / 1000, v % 1000 / 10));
  } catch (const std::exception&) {
    row("driver", "not loaded");
  }
  const int arch = o.arch != 0 ? o.arch : dev ? dev->arch : 90;
  // A broken FLASHGEN_PROFILE / FLASHGEN_NVRTC_LIBRARY: its row gives the whole reason, and the exit status is 2.
  int rc = 0;
  try {
    check_profile_config({arch});
    const Profile& p = profile_for_arch(arch);
    row("profile", fmt::format("sm_{}: {} ({}), matrix unit {}{}, hash {}", arch, p.name, p.source,
                               to_string(p.matrix_unit.shape),
                               p.wgmma_flash.empty() ? "" : " (wgmma, sm_90a, for head dims that are multiples of 16)",
                               profile_hash(p)));
  } catch (const ConfigError& e) {
    row("profile", fmt::format("configuration error: {}", e.what()));
    rc = 2;
  } catch (const std::exception& e) {
    row("profile", fmt::format("sm_{}: {}", arch, first_line(e.what())));
    if (o.arch != 0) rc = 2;  // --arch names an arch no profile serves
  }
  try {
    check_nvrtc_config({arch}, false);
    row("nvrtc", fmt::format("{} from {} (for sm_{})", rt::nvrtc_version_for(arch).str(), rt::nvrtc_library_for(arch),
                             arch));
  } catch (const ConfigError& e) {
    row("nvrtc", fmt::format("configuration error: {}", e.what()));
    rc = 2;
  } catch (const std::exception& e) {
    row("nvrtc", fmt::format("not available for sm_{}: {}", arch, first_line(e.what())));
  }
  // One "cache" row per layer, its kind leading the value ("bundle <dir> ...", "user cache <dir> ...", "memory:
  // ..."), as pregen and cache ls name the layers.
  for (const rt::CacheLayer& l : rt::cache_layers()) {
    const char* kind = l.kind == rt::CacheLayer::Kind::bundle ? "bundle"
                       : l.kind == rt::CacheLayer::Kind::user ? "user cache"
                                                              : "memory";
    std::string text;
    if (l.kind == rt::CacheLayer::Kind::memory) {
      text = fmt::format("{}: {}", kind,
                         l.usable ? "in use (nothing is written to disk)" : "unused (the user cache is writable)");
    } else {
      text = fmt::format("{} {} ({}): {}", kind, l.path.empty() ? "-" : l.path, l.origin,
                         !l.usable                                  ? "not used: " + l.problem
                         : l.kind == rt::CacheLayer::Kind::bundle ? std::string("searched first, read-only")
                         : l.exists                                 ? std::string("searched, written")
                                    : std::string("does not exist (the first compiled kernel creates it)"));
    }
    row("cache", text);
  }
  for (const std::string& f : tune_file_paths()) {
    std::string text;
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) {
      text = "absent";
    } else {
      try {
        text = count_of(load_tune_file(f).entries.size(), "entry", "entries");
      } catch (const std::exception& e) {
        text = fmt::format("invalid: {}", first_line(e.what()));
      }
    }
    row("tune file", fmt::format("{}: {}", f, text));
  }
  return rc;
}

}  // namespace flashgen::cli
