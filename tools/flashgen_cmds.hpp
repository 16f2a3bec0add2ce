// The subcommands of the flashgen tool: options, CLI11 registration, and the
// code that runs them (tools/flashgen_cmds.cpp, tools/flashgen_tune.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashgen/flashgen.hpp"

namespace flashgen::cli {

struct PregenOptions {
  std::vector<std::string> archs;  ///< --arch items as given ("80,90"); run_pregen checks and parses them
  std::vector<std::string> profiles;
  std::vector<std::string> head_dims = {"64", "128"};
  std::vector<std::string> dtypes = {"f16", "bf16"};
  std::vector<std::string> masks = {"none", "causaltl", "causalbr"};
  std::vector<std::string> biases = {"none"};
  std::vector<std::string> lse = {"no"};
  std::vector<std::string> softcap = {"no"};
  std::vector<std::string> sinks = {"no"};
  std::vector<std::string> alibi = {"no"};
  std::vector<std::string> varlen = {"no"};
  std::vector<std::string> paged = {"no"};
  std::vector<std::string> tiles = {"default"};
  std::string problems_file;
  std::string device;
  std::string tune_file;
  std::string out;
  int threads = 0;
  bool list = false;
};
CLI::App* add_pregen(CLI::App& app, PregenOptions& o);
int run_pregen(const PregenOptions& o);

struct TuneOptions {
  std::vector<std::string> problems;
  std::string problems_file;
  std::string out;
  int top = 4;
  int compile = 12;
  int runs = 10;
  int warmups = 3;
  int threads = 0;
  bool dry_run = false;
  bool compile_only = false;
  int arch = 0;
};
CLI::App* add_tune(CLI::App& app, TuneOptions& o);
int run_tune(const TuneOptions& o);

struct ExplainOptions {
  std::string problem;
  int arch = 0;
  std::string device;
  std::string tile;
  int sms = 0;
  bool no_compile = false;
};
CLI::App* add_explain(CLI::App& app, ExplainOptions& o);
int run_explain(const ExplainOptions& o);

struct ShowOptions {
  std::string problem;
  std::string spec;
  int arch = 0;
  std::string tile;
};
CLI::App* add_show(CLI::App& app, ShowOptions& o);
int run_show(const ShowOptions& o);

struct CacheOptions {
  std::string action;       // ls | verify | prune | clear
  std::string dir;          // instead of the layers
  bool dry_run = false;
  double older_than_days = -1;
  double temp_age_s = 600;
  bool temp_age_given = false;  // --temp-age was on the command line
};
CLI::App* add_cache(CLI::App& app, CacheOptions& o);
int run_cache(const CacheOptions& o);

struct InfoOptions {
  int arch = 0;
};
CLI::App* add_info(CLI::App& app, InfoOptions& o);
int run_info(const InfoOptions& o);

/// Every subcommand's options. add_commands registers all of them (main() and
/// the tests build the same application from it), and makes every option that takes
/// a value refuse one that begins with "--" ("<option>: needs a value (got the option
/// '<value>'; ...)"): the option was given without its value and took the next option's name.
struct Commands {
  PregenOptions pregen;
  TuneOptions tune;
  ExplainOptions explain;
  ShowOptions show;
  CacheOptions cache;
  InfoOptions info;
};
void add_commands(CLI::App& app, Commands& c);
/// Runs the subcommand `app` parsed (exceptions propagate; main() reports them).
int run_parsed_command(const CLI::App& app, const Commands& c);

// Shared by the commands.

/// The arch to plan for: `requested` if non-zero, else the GPU's, else 90 (with *note saying so).
int choose_arch(int requested, std::string* note);

/// Parses "BMxBNxWxS" (e.g. 128x64x8x2) into *tile, or "" / "default"
/// (returns false). Each field is an integer in plain decimal (int_in_range: no
/// sign, leading zeros or spaces) within the spec's bounds
/// (block_m, block_n in [1, 256], warps in [1, 16], stages in [1, 4]; validate()
/// then applies the finer rules). Throws InvalidArgument naming `what` (the
/// option), the text, the field, its value and the allowed range.
bool parse_tile_text(const std::string& what, const std::string& text, Tile* tile);

// ---- numeric options -------------------------------------------------------------

/// A CLI11 check, run on the option's text before CLI11 converts it: a decimal
/// integer in [lo, hi] (int_in_range; a leading zero, which CLI11 would read as
/// octal, is refused). The message names the value and the
/// range, and `meaning` when given (e.g. "an SM count"); CLI11 prefixes the option.
CLI::Validator integer_in(int64_t lo, int64_t hi, const std::string& meaning = "");
/// The same for a finite decimal number in [lo, hi] (real_in_range).
CLI::Validator number_in(double lo, double hi, const std::string& meaning = "");
/// A text option given as "" is refused ("an empty <what>; <instead>"): without the
/// option the command uses a default, and --tile '' or --device '' must not quietly
/// mean that default. `type` is the value's name in --help (e.g. "PATH").
CLI::Validator non_empty(const std::string& what, const std::string& instead, const std::string& type = "");
/// non_empty for a path option: "an empty path; <instead>".
CLI::Validator non_empty_path(const std::string& instead);
/// A file option: "" and a path that is not an existing regular file are refused
/// ("an empty path; <instead>", "'<path>' does not exist (<what>)", "'<path>' is a
/// directory, not <what>"), before the command does anything.
CLI::Validator existing_file(const std::string& what, const std::string& instead);
/// integer_in for --arch: a compute capability in [gen::kMinArch, gen::kMaxArch]
/// (gen/limits.hpp, the range profile_for_arch() takes).
CLI::Validator arch_number();

/// Bounds of the numeric options (the allowed ranges their messages state).
/// The environment variables the tool reads, the last lines of every --help.
inline constexpr const char* kEnvironmentHelp =
    "Environment: FLASHGEN_CACHE_DIR, FLASHGEN_CACHE_PATH, FLASHGEN_TUNE_FILE, FLASHGEN_NVRTC_LIBRARY,\n"
    "FLASHGEN_PROFILE (see README.md).";
inline constexpr int64_t kMaxJobs = 4096;           ///< -j/--jobs (0: one per core)
inline constexpr int64_t kMaxSms = 4096;            ///< explain --sms
inline constexpr double kMaxAgeDays = 36500;        ///< cache prune --older-than (100 years)
inline constexpr double kMaxAgeSeconds = 36500.0 * 86400.0;  ///< cache prune --temp-age (100 years)

// ---- configuration -----------------------------------------------------------

/// The environment cannot serve the command: FLASHGEN_PROFILE or
/// FLASHGEN_NVRTC_LIBRARY names something unusable, or no NVRTC compiles for
/// an arch a command must compile for. main() reports it once, as
/// "configuration error", with exit status 2, before any kernel is attempted.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// With FLASHGEN_PROFILE set: the file loads and lists every arch of `archs`
/// (the archs the command plans for).
/// Throws ConfigError with the library's full message (which names the variable).
void check_profile_config(const std::vector<int>& archs);

/// NVRTC for each arch of `archs` loads and targets it. `required`: the
/// command compiles, so any failure is a ConfigError; otherwise only a failure
/// while FLASHGEN_NVRTC_LIBRARY is set is (a command that merely reports NVRTC
/// versions works without NVRTC). An empty `archs` checks the primary NVRTC.
void check_nvrtc_config(const std::vector<int>& archs, bool required);

}  // namespace flashgen::cli
