// flashgen — the libflashgen command-line tool.
//
//   flashgen pregen   compile a set of kernels without a GPU (user cache or a bundle directory)
//   flashgen tune     time candidate tiles on the GPU, write the winners to a tune file
//   flashgen explain  what a problem gets: profile, spec, tile, registers, FLOPs, bytes, roofline
//   flashgen show     the generated CUDA source of a problem or spec
//   flashgen cache    ls | verify | prune | clear
//   flashgen info     device, profile, NVRTC and driver versions, cache layers, tune files
//
// Every subcommand has --help. Errors go to stderr with a non-zero exit status
// (1: some kernels failed / entries are bad, 2: the command could not run;
// usage errors get CLI11's codes).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include "tools/flashgen_cmds.hpp"

int main(int argc, char** argv) {
  using namespace flashgen::cli;
  CLI::App app{"flashgen: generate, pre-compile, tune and inspect libflashgen's flash-attention kernels"};
  app.require_subcommand(1);
  app.fallthrough(false);
  app.footer(
      "Problems are written key=value,... e.g.\n"
      "  --problem dtype=f16,batch=1,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr\n"
      "Environment: FLASHGEN_CACHE_DIR, FLASHGEN_CACHE_PATH, FLASHGEN_TUNE_FILE, FLASHGEN_NVRTC_LIBRARY,\n"
      "FLASHGEN_PROFILE (see README.md).");

  PregenOptions pregen;
  CLI::App* pregen_cmd = add_pregen(app, pregen);
  TuneOptions tune;
  CLI::App* tune_cmd = add_tune(app, tune);
  ExplainOptions explain;
  CLI::App* explain_cmd = add_explain(app, explain);
  ShowOptions show;
  CLI::App* show_cmd = add_show(app, show);
  CacheOptions cache;
  CLI::App* cache_cmd = add_cache(app, cache);
  InfoOptions info;
  CLI::App* info_cmd = add_info(app, info);

  // Name an unknown subcommand (CLI11 would only say that one is required).
  auto is_subcommand = [&](const std::string& name) {
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->get_name() == name) return true;
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !is_subcommand(argv[1])) {
    std::fprintf(stderr,
                 "flashgen: error: unknown subcommand '%s'; allowed: pregen, tune, explain, show, cache, info (see "
                 "flashgen --help)\n",
                 argv[1]);
    return 2;
  }
  CLI11_PARSE(app, argc, argv);

  const char* name = "flashgen";
  try {
    if (pregen_cmd->parsed()) {
      name = "flashgen pregen";
      return run_pregen(pregen);
    }
    if (tune_cmd->parsed()) {
      name = "flashgen tune";
      return run_tune(tune);
    }
    if (explain_cmd->parsed()) {
      name = "flashgen explain";
      return run_explain(explain);
    }
    if (show_cmd->parsed()) {
      name = "flashgen show";
      return run_show(show);
    }
    if (cache_cmd->parsed()) {
      name = "flashgen cache";
      return run_cache(cache);
    }
    if (info_cmd->parsed()) {
      name = "flashgen info";
      return run_info(info);
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 2;
  }
  std::fprintf(stderr, "flashgen: error: no subcommand (see flashgen --help)\n");
  return 2;
}
