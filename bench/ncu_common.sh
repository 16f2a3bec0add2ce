# Sourced by the bench/ncu_*.sh scripts, from the repository root: makes $OUT (default ./out), puts
# the .deps libraries and a kernel cache (FLASHGEN_CACHE_DIR, default build-ncu/kernel-cache) in the
# environment, and defines
#   ncu_build_lib NAME   builds libflashgen alone (Release, no tests) in build-ncu/ and sets `lib`
#                        to it; exits with "NAME: build failed" when the build fails;
#   ncu_export REPORT    writes REPORT.ncu-rep's details page to REPORT.txt and its per-instruction
#                        SASS counters to REPORT-sass.csv.
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FLASHGEN_CACHE_DIR="${FLASHGEN_CACHE_DIR:-$PWD/build-ncu/kernel-cache}"
ncu_build_lib() {
  local deps_args=()
  [[ -d .deps/usr ]] && deps_args=("-DCMAKE_PREFIX_PATH=$PWD/.deps/usr" "-DCMAKE_CXX_FLAGS=-isystem $PWD/.deps/usr/include")
  { cmake -S . -B build-ncu -DCMAKE_BUILD_TYPE=Release -DFLASHGEN_BUILD_TESTS=OFF "${deps_args[@]}" >/dev/null &&
      cmake --build build-ncu -j "$(nproc)" --target flashgen >/dev/null; } ||
    { echo "$1: build failed" >&2; exit 1; }
  lib="$PWD/build-ncu/libflashgen.so"
}
ncu_export() {
  ncu --import "$1.ncu-rep" --page details >"$1.txt" 2>&1
  ncu --import "$1.ncu-rep" --page source --csv --print-source sass >"$1-sass.csv" 2>&1
}
