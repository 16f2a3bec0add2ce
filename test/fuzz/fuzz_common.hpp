// Shared by the libFuzzer targets of test/fuzz. Each target is built two ways:
//   - as a libFuzzer target (FLASHGEN_FUZZ=ON, clang): FLASHGEN_FUZZ_ENTRY is
//     LLVMFuzzerTestOneInput and a finding aborts, so libFuzzer saves the input;
//   - into the CPU test binary (FLASHGEN_FUZZ_REPLAY defined): the entry is
//     flashgen_fuzz_<name>() and a finding throws FuzzFinding, so
//     test/cpu/test_fuzz_replay.cpp replays the seed corpora and every saved
//     crash with the same checks under doctest (and under ASan in build-asan).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include "flashgen/types.hpp"

namespace flashgen::fuzz {

/// A broken property (replay builds only; not a std::exception, so the
/// targets' own catch clauses never swallow it).
struct FuzzFinding {
  std::string what;
};

[[noreturn]] inline void finding(const char* target, const std::string& what) {
#ifdef FLASHGEN_FUZZ_REPLAY
  throw FuzzFinding{std::string(target) + ": " + what};
#else
  std::fprintf(stderr, "%s: %s\n", target, what.c_str());
  std::fflush(stderr);
  std::abort();
#endif
}

/// Runs one input through `body`. InvalidArgument is the expected outcome of
/// bad input; its message must start with `prefix` (the origin or the quoted
/// spec), else it is a finding (`what_prefix` names the rule). Any other
/// exception is a finding.
template <class Body>
void run_input(const char* target, const std::string& prefix, const char* what_prefix, Body&& body) {
  try {
    body();
  } catch (const InvalidArgument& e) {
    if (std::string(e.what()).rfind(prefix, 0) != 0) finding(target, std::string(what_prefix) + e.what());
  } catch (const FuzzFinding&) {
    throw;
  } catch (const std::exception& e) {
    finding(target, std::string("unexpected exception ") + typeid(e).name() + ": " + e.what());
  } catch (...) {
    finding(target, "an exception not derived from std::exception");
  }
}

}  // namespace flashgen::fuzz

#ifdef FLASHGEN_FUZZ_REPLAY
#define FLASHGEN_FUZZ_ENTRY(name) int flashgen_fuzz_##name(const uint8_t* data, size_t size)
#else
#define FLASHGEN_FUZZ_ENTRY(name) extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#endif
