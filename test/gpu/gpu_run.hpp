// GPU tier: running a group of cases (one line each, one doctest check per
// case) and the test-case macros, shared by the GPU test files.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "test/gpu/gpu_util.hpp"

namespace fgtest {

inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& e : v) s += (s.empty() ? "" : "; ") + e;
  return s;
}

/// Runs every case, one line each; one doctest check per case.
inline void run_group(const char* title, const std::vector<Case>& cases) {
  double cost = 0.0;
  for (const Case& c : cases) cost += reference_cost(c);
  std::printf("== %s: %zu cases (reference ~%.2f G multiply-adds)\n", title, cases.size(), cost * 1e-9);
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  precompile(cases);
  int failed = 0;
  double ref_seconds = 0.0, max_o = 0.0, max_lse = 0.0;
  for (const Case& c : cases) {
    const CaseResult r = run_case(c);
    std::printf("  %s\n", r.line.c_str());
    for (const std::string& e : r.errors) std::printf("      %s\n", e.c_str());
    std::fflush(stdout);
    failed += r.ok ? 0 : 1;
    ref_seconds += r.ref_seconds;
    max_o = std::max(max_o, r.max_err_o);
    max_lse = std::max(max_lse, r.max_err_lse);
    CHECK_MESSAGE(r.ok, c.str() << ": " << join(r.errors));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("== %s: %zu cases, %d failed, max|dO| %.2e, max|dLSE| %.2e, %.1f s (reference %.1f s)\n", title,
              cases.size(), failed, max_o, max_lse, secs, ref_seconds);
  std::fflush(stdout);
}

/// A case of a layout test file (test_paged.cpp, test_varlen.cpp) run on one unit:
/// its result and the line printed for it.
struct UnitOutcome {
  CaseResult res;
  std::string line;
};

/// Runs every case on every unit (the units' kernels first: precompile(cases, unit)
/// inside the unit's scope), one line per run, one doctest check per run; `what(c, u)`
/// names a run in the check's message.
template <class C, class Precompile, class RunOne, class What>
void run_on_units(const char* title, const std::vector<C>& cases, Precompile precompile, RunOne run_one, What what) {
  std::printf("== %s: %zu cases x each unit\n", title, cases.size());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  for (const Unit& u : units()) {
    UnitScope scope(u);
    precompile(cases, u);
  }
  int failed = 0, runs = 0;
  double ref_seconds = 0.0;
  for (const C& c : cases)
    for (const Unit& u : units()) {
      const UnitOutcome o = run_one(c, u);
      std::printf("  %s\n", o.line.c_str());
      for (const std::string& e : o.res.errors) std::printf("      %s\n", e.c_str());
      std::fflush(stdout);
      ++runs;
      failed += o.res.ok ? 0 : 1;
      ref_seconds += o.res.ref_seconds;
      CHECK_MESSAGE(o.res.ok, what(c, u) << " on " << u.name << " (seed " << o.res.seed << "): " << join(o.res.errors));
    }
  std::printf("== %s: %d runs, %d failed, %.1f s (reference %.1f s)\n", title, runs, failed,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), ref_seconds);
  std::fflush(stdout);
}

inline Case base(const char* group) {
  Case c;
  c.group = group;
  return c;
}

}  // namespace fgtest

// The full grid; skipped under FLASHGEN_TEST_QUICK=1.
#define FLASHGEN_GPU_TEST(name) TEST_CASE(name * doctest::skip(!fgtest::gpu_present() || fgtest::quick_mode()))
// Only under FLASHGEN_TEST_QUICK=1.
#define FLASHGEN_GPU_QUICK_TEST(name) TEST_CASE(name * doctest::skip(!fgtest::gpu_present() || !fgtest::quick_mode()))
// Always (where a GPU is present).
#define FLASHGEN_GPU_ALWAYS_TEST(name) TEST_CASE(name * doctest::skip(!fgtest::gpu_present()))

