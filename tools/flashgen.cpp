// flashgen — the libflashgen command-line tool.
//
//   flashgen pregen   compile a set of kernels without a GPU (user cache or a bundle directory)
//   flashgen tune     time candidate tiles on the GPU, write the winners to a tune file
//   flashgen explain  what a problem gets: profile, spec, tile, registers, FLOPs, bytes, roofline
//   flashgen show     the generated CUDA source of a problem or spec
//   flashgen cache    ls | verify | prune | clear
//   flashgen info     device, profile, NVRTC and driver versions, cache layers, tune files
//   flashgen --version  the version of the tool and the library
//
// Every subcommand has --help. Errors go to stderr with a non-zero exit status
// (1: some kernels failed / entries are bad / a cache directory cannot be
// listed, 2: the command could not run: a usage error, a value out of range,
// a problem no kernel supports (show, tune; explain after its report of the
// broken rules), a configuration error).
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "flashgen/version.hpp"
#include "runtime/cache.hpp"
#include "tools/flashgen_cmds.hpp"

// Whether stdout's output could not be written (flushed here); then says so on stderr, with the
// reason in errno if the failed write set it.
static bool stdout_failed(const std::string& command) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return false;
  const int err = errno;
  std::fprintf(stderr, "%s: error: writing the output to stdout failed%s%s\n", command.c_str(), err ? ": " : "",
               err ? std::strerror(err) : "");
  return true;
}

int main(int argc, char** argv) {
  using namespace flashgen::cli;
  CLI::App app{"flashgen: generate, pre-compile, tune and inspect libflashgen's flash-attention kernels"};
  app.require_subcommand(1);
  app.fallthrough(false);
  app.footer(
      "Problems are written key=value,... e.g.\n"
      "  --problem dtype=f16,batch=1,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr\n"
      "Left out: dtype f16, batch 1, seqlen_k = seqlen_q, heads_kv = heads_q, head_dim_v = head_dim.\n" +
      std::string(kEnvironmentHelp));

  app.set_version_flag("--version",
                       fmt::format("flashgen {} (libflashgen {}; code generator {}, kernel cache format {})",
                                   FLASHGEN_LIBRARY_VERSION, FLASHGEN_LIBRARY_VERSION, flashgen::kGeneratorVersion,
                                   flashgen::rt::kCacheFormatVersion),
                       "print the version of flashgen and libflashgen and exit");

  Commands commands;
  add_commands(app, commands);

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
  const std::string command = argc > 1 && is_subcommand(argv[1]) ? std::string("flashgen ") + argv[1] : "flashgen";
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {  // --help, --version
      errno = 0;  // (the reason is the failed write's, in app.exit or in the flush)
      app.exit(e);
      return stdout_failed(command) ? 1 : 0;
    }
    // Usage errors and numbers out of range (the option checks name the value and what is allowed).
    std::fprintf(stderr, "%s: error: %s; see %s --help\n", command.c_str(), e.what(), command.c_str());
    return 2;
  }

  try {
    const int rc = run_parsed_command(app, commands);
    // Output that could not be written (a full disk, a closed pipe or stdout)
    // is a failure, not a success with nothing said.
    errno = 0;
    if (stdout_failed(command)) return rc != 0 ? rc : 1;
    return rc;
  } catch (const ConfigError& e) {
    // Once, with the whole reason, before any kernel was attempted.
    std::fflush(stdout);
    std::fprintf(stderr, "%s: configuration error: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", command.c_str(), e.what());
    return 2;
  }
}
