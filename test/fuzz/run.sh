#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, FLASHGEN_FUZZ=ON, in build-fuzz/) and
# runs each for a bounded time. CI runs it after the other tiers.
#
#   test/fuzz/run.sh [seconds per target] [target...]
#     seconds   -max_total_time of each target (default 60)
#     target    fuzz_profile, fuzz_spec, fuzz_tune (default: every target the
#               build has; fuzz_tune exists once include/flashgen/tune.hpp does)
#
# Seeds: test/fuzz/corpus/<name>/ (plus profiles/ for fuzz_profile). New inputs
# go to build-fuzz/corpus/<target>/, kept between runs; a crashing input is
# written to build-fuzz/artifacts/<target>/ and the script exits non-zero.
# Reproduce one with: build-fuzz/test/fuzz/<target> <crash file>. Every crash
# found is fixed, its input copied to test/fuzz/crashes/<name>/ (replayed by
# the CPU tier, test/cpu/test_fuzz_replay.cpp) and written out as a doctest
# case (test/cpu/test_fuzz_regressions.cpp).
#
# Environment: FLASHGEN_FUZZ_BUILD (build dir, default build-fuzz),
# CLANG / CLANGXX (compilers, default clang / clang++), FUZZ_JOBS (build jobs),
# FUZZ_INSTALL=1 (apt-get install clang libclang-rt-dev when they are missing).
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${FLASHGEN_FUZZ_BUILD:-$REPO/build-fuzz}"
SECONDS_PER_TARGET="${1:-60}"
if [[ $# -gt 0 ]]; then shift; fi
CC_BIN="${CLANG:-clang}"
CXX_BIN="${CLANGXX:-clang++}"

die() {
  echo "fuzz/run.sh: error: $*" >&2
  exit 2
}

# FUZZ_INSTALL=1 (CI): install clang and libFuzzer with apt-get when missing.
links_fuzzer() {
  local dir
  dir="$(mktemp -d)"
  printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
    >"$dir/probe.cpp"
  "$CXX_BIN" -fsanitize=fuzzer,address,undefined "$dir/probe.cpp" -o "$dir/probe" 2>"$dir/err"
  local rc=$?
  [[ $rc -eq 0 ]] || cat "$dir/err" >&2
  rm -rf "$dir"
  return $rc
}
if [[ "${FUZZ_INSTALL:-0}" == 1 ]] && ! { command -v "$CXX_BIN" >/dev/null 2>&1 && links_fuzzer 2>/dev/null; }; then
  sudo_cmd=()
  [[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo -n)
  echo "fuzz/run.sh: installing clang and libFuzzer (clang libclang-rt-dev) with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq &&
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends clang libclang-rt-dev >/dev/null ||
    die "apt-get could not install clang libclang-rt-dev"
fi

[[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]] || die "seconds per target must be a number, got '$SECONDS_PER_TARGET'"
command -v "$CXX_BIN" >/dev/null 2>&1 || die "$CXX_BIN not found; libFuzzer needs clang
  (Debian/Ubuntu: apt-get install -y --no-install-recommends clang libclang-rt-dev)"
command -v "$CC_BIN" >/dev/null 2>&1 || die "$CC_BIN not found (install clang)"

# libFuzzer's runtime ships with clang's compiler-rt (Debian: libclang-rt-<N>-dev).
links_fuzzer || die "$CXX_BIN cannot link -fsanitize=fuzzer; install libFuzzer (Debian/Ubuntu: libclang-rt-dev)"

# --- build -------------------------------------------------------------------------
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
    -DFLASHGEN_FUZZ=ON -DFLASHGEN_BUILD_TESTS=OFF -DFLASHGEN_BUILD_EXAMPLES=OFF || die "cmake configure failed"
else
  cmake "$BUILD" >/dev/null || die "cmake re-configure failed"
fi
mapfile -t available < "$BUILD/test/fuzz/targets.txt"
if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  targets=("${available[@]}")
fi
for t in "${targets[@]}"; do
  [[ " ${available[*]} " == *" $t "* ]] || die "unknown target '$t'; this build has: ${available[*]}"
done
jobs="${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"
cmake --build "$BUILD" -j "$jobs" --target "${targets[@]}" || die "build failed"

# --- run -----------------------------------------------------------------------------
# ASan: leaks are findings too; UBSan already aborts (-fno-sanitize-recover).
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
summary=()
for t in "${targets[@]}"; do
  name="${t#fuzz_}"
  corpus="$BUILD/corpus/$t"
  artifacts="$BUILD/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  seeds=("$REPO/test/fuzz/corpus/$name")
  [[ "$t" == fuzz_profile ]] && seeds+=("$REPO/profiles")
  dict=()
  [[ -f "$REPO/test/fuzz/$name.dict" ]] && dict=("-dict=$REPO/test/fuzz/$name.dict")
  log="$BUILD/$t.log"
  echo "== $t: ${SECONDS_PER_TARGET} s (log $log)"
  "$BUILD/test/fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" \
    "$corpus" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  # libFuzzer's closing lines: "Done N runs in S second(s)" and the final stats.
  runs="$(grep -E '^stat::number_of_executed_units:' "$log" | awk '{print $2}' | tail -1)"
  secs="$(grep -E '^Done [0-9]+ runs in' "$log" | sed -E 's/.* in ([0-9]+) second.*/\1/' | tail -1)"
  cov="$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' || true)"
  if [[ $rc -eq 0 ]]; then
    line="$t: ok, ${runs:-?} runs in ${secs:-?} s, ${cov:-no stats}, corpus $(ls "$corpus" | wc -l) files"
  else
    status=1
    line="$t: FAILED (exit $rc) after ${runs:-?} runs; input saved in $artifacts/"
    grep -E 'ERROR|runtime error|fuzz_[a-z]+:|Test unit written|SUMMARY' "$log" | head -20
  fi
  echo "$line"
  summary+=("$line")
done
echo "== fuzz summary"
printf '  %s\n' "${summary[@]}"
exit $status
