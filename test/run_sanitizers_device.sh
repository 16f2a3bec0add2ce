#!/usr/bin/env bash
# Runs on the GPU machine (the `device` tool, a Firecracker kind: compute-
# sanitizer does not work under gVisor). Builds build/ with dev.sh (or reuses
# it), then runs the GPU tier under compute-sanitizer's tools with
# FLASHGEN_TEST_QUICK=1: the test suite "gpu" of test/gpu/test_forward.cpp,
# reduced to its representative subset of small cases (on every matrix unit
# the device runs) plus the refusal checks. Left out: the gpu-faults suite,
# which provokes driver errors on purpose (a foreign cubin, exhausted device
# memory) that the sanitizers would count, and the multi-process cache race
# (test_cache_gpu.cpp), which checks the cache, not the kernels.
#
#   usage: test/run_sanitizers_device.sh [tool...]
#     tools: memcheck racecheck synccheck initcheck (default: all four)
#   FLASHGEN_TEST_UNITS=m16n8k16 runs the cases on that matrix unit only
#   (test/gpu/units.hpp; default: every unit the device runs, about 3x longer);
#   SANITIZER_TOOL_TIMEOUT=<seconds> stops a tool that runs longer (exit 124).
#   FLASHGEN_PREBUILT=DIR runs DIR/flashgen_tests_gpu (test/prebuild_gpu.sh made
#   it on a machine without a GPU) instead of building build/ here.
#
# Writes $OUT/machine.txt, $OUT/warmup.log (the same tests without a sanitizer,
# which also compiles the kernels), $OUT/sanitizer-<tool>.log (the whole run:
# the sanitizer's report and the tests' own lines) and $OUT/sanitizers.txt (one
# summary line per tool);
# prints each tool's summary ("ERROR SUMMARY: 0 errors", for racecheck also
# "RACECHECK SUMMARY: ..."). Exits non-zero when a tool reports an error or a
# test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
tools=("$@")
[[ ${#tools[@]} -gt 0 ]] || tools=(memcheck racecheck synccheck initcheck)
for tool in "${tools[@]}"; do
  case "$tool" in
    memcheck | racecheck | synccheck | initcheck) ;;
    *)
      echo "run_sanitizers_device.sh: unknown tool '$tool' (memcheck racecheck synccheck initcheck)" >&2
      exit 2
      ;;
  esac
done

export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FLASHGEN_CACHE_DIR="${FLASHGEN_CACHE_DIR:-$PWD/build/kernel-cache}"
export FLASHGEN_TEST_QUICK=1

# --- compute-sanitizer --------------------------------------------------------------
sanitizer=""
for c in "$(command -v compute-sanitizer 2>/dev/null)" "${CUDA_HOME:-/nonexistent}/bin/compute-sanitizer" \
  /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
  /usr/local/cuda-*/bin/compute-sanitizer; do
  if [[ -n "$c" && -x "$c" ]]; then
    sanitizer="$c"
    break
  fi
done
if [[ -z "$sanitizer" ]]; then
  echo "run_sanitizers_device.sh: compute-sanitizer not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda*)" >&2
  exit 2
fi
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  "$sanitizer" --version 2>&1 | tail -1
} | tee "$OUT/machine.txt"

# --- build (dev.sh configures build/ once; -N: list the tests, run none) ------------
# (The build log goes to $OUT only when the build fails: at most 8 files come back.)
if [[ -n "${FLASHGEN_PREBUILT:-}" ]]; then
  pre="$(cd "$FLASHGEN_PREBUILT" && pwd)" || exit 2
  [[ -x "$pre/flashgen_tests_gpu" ]] || { echo "run_sanitizers_device.sh: no $pre/flashgen_tests_gpu" >&2; exit 2; }
  echo "prebuilt: $pre, from $(head -1 "$pre/COMMIT" 2>/dev/null)" | tee -a "$OUT/machine.txt"
  export LD_LIBRARY_PATH="$pre:$LD_LIBRARY_PATH"
  binary="$pre/flashgen_tests_gpu"
else
  mkdir -p build
  if ! ./dev.sh test -N >build/sanitizer-build.log 2>&1; then
    cp build/sanitizer-build.log "$OUT/build.log"
    tail -40 "$OUT/build.log"
    echo "run_sanitizers_device.sh: the build failed (log: $OUT/build.log)" >&2
    exit 2
  fi
  binary="$PWD/build/test/flashgen_tests_gpu"
fi
# Compile the kernels once, outside the sanitizers (NVRTC on the host is not
# what is being checked, and it is slow under them): a quick run fills the cache.
start=$(date +%s)
"$binary" --test-suite=gpu --no-version >"$OUT/warmup.log" 2>&1
warm_rc=$?
echo "  warm-up (no sanitizer): exit $warm_rc, $(($(date +%s) - start)) s"
grep -E "^\[doctest\] (test cases|assertions)" "$OUT/warmup.log" | sed 's/^/  warm-up (no sanitizer): /'
if [[ $warm_rc -ne 0 ]]; then
  tail -40 "$OUT/warmup.log"
  echo "run_sanitizers_device.sh: the quick GPU tier fails without a sanitizer; fix that first" >&2
  exit 1
fi
if ! grep -qE "^\[doctest\] test cases: +[0-9]+ \| +[1-9][0-9]* passed" "$OUT/warmup.log"; then
  head -5 "$OUT/warmup.log"
  echo "run_sanitizers_device.sh: no GPU test case ran (no GPU?)" >&2
  exit 1
fi

# Options that every compute-sanitizer version here may not have are used only when present.
help="$("$sanitizer" --help 2>&1)"
common=(--error-exitcode 1)
[[ "$help" == *"--print-limit"* ]] && common+=(--print-limit 50)
# API errors surface as DriverError test failures already; without this flag,
# a deliberate driver query that fails (e.g. an unsupported attribute) would count.
[[ "$help" == *"--report-api-errors"* ]] && common+=(--report-api-errors no)

rc=0
: >"$OUT/sanitizers.txt"
for tool in "${tools[@]}"; do
  extra=()
  # memcheck: padding after every allocation, so an overrun into a neighbouring buffer is caught.
  if [[ "$tool" == memcheck && "$help" == *"--padding"* ]]; then extra+=(--padding 512); fi
  log="$OUT/sanitizer-$tool.log"
  start=$(date +%s)
  limit=()
  if [[ -n "${SANITIZER_TOOL_TIMEOUT:-}" ]]; then limit=(timeout "$SANITIZER_TOOL_TIMEOUT"); fi
  "${limit[@]}" "$sanitizer" --tool "$tool" "${common[@]}" "${extra[@]}" "$binary" --test-suite=gpu \
    --no-version >"$log" 2>&1
  tool_rc=$?
  secs=$(($(date +%s) - start))
  summary="$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | sed -E 's/^=+ *//' | paste -sd ';' -)"
  tests="$(grep -E "^\[doctest\] test cases" "$log" | sed -E 's/^\[doctest\] //')"
  line="$tool: exit $tool_rc, ${secs} s | ${summary:-no summary line (see log)} | ${tests:-no doctest summary}"
  echo "$line" | tee -a "$OUT/sanitizers.txt"
  [[ $tool_rc -eq 0 ]] || rc=1
done
echo "run_sanitizers_device.sh: exit $rc"
exit $rc
