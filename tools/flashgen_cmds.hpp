// The subcommands of the flashgen tool: options, CLI11 registration, and the
// code that runs them (tools/flashgen_cmds.cpp, tools/flashgen_tune.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace flashgen::cli {

struct PregenOptions {
  std::vector<int> archs;
  std::vector<std::string> profiles;
  std::vector<std::string> head_dims = {"64", "128"};
  std::vector<std::string> dtypes = {"f16", "bf16"};
  std::vector<std::string> masks = {"none", "causaltl", "causalbr"};
  std::vector<std::string> biases = {"none"};
  std::vector<std::string> lse = {"no"};
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
};
CLI::App* add_cache(CLI::App& app, CacheOptions& o);
int run_cache(const CacheOptions& o);

struct InfoOptions {
  int arch = 0;
};
CLI::App* add_info(CLI::App& app, InfoOptions& o);
int run_info(const InfoOptions& o);

// Shared by the commands.

/// The arch to plan for: `requested` if non-zero, else the GPU's, else 90 (with *note saying so).
int choose_arch(int requested, std::string* note);

/// Parses "BMxBNxWxS" (e.g. 128x64x8x2) or "default" (returns false).
bool parse_tile_text(const std::string& text, int* bm, int* bn, int* w, int* s);

}  // namespace flashgen::cli
