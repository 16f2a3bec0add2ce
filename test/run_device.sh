#!/usr/bin/env bash
# Runs on the GPU machine (the `device` tool): builds libflashgen there and runs
# the README's two commands (all tests, then the main example), writing full
# logs under $OUT. The machine is offline: carry .deps (Debian packages unpacked
# with dpkg -x, see README "Offline machines"); dev.sh picks it up.
#   usage: test/run_device.sh [test|example|all|tune|gpu] [doctest args...]
# gpu (not part of all): builds only the library and the GPU tier and runs the
# GPU tier with the doctest arguments given (e.g. -tc='numerics*'); log:
# $OUT/gpu.log.
# tune (not part of all): flashgen tune for the example's two shapes writes
# $OUT/tune.yml, then the example runs with FLASHGEN_TUNE_FILE set to it and
# flashgen explain shows where each tile came from (log: $OUT/tune.log).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
what="${1:-all}"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FLASHGEN_CACHE_DIR="${FLASHGEN_CACHE_DIR:-$PWD/build/kernel-cache}"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  command -v g++ cmake nvcc; g++ --version | head -1; cmake --version | head -1
} 2>&1 | tee "$OUT/machine.txt"
rc=0
if [[ "$what" == all || "$what" == test ]]; then
  ./dev.sh test -V 2>&1 | tee "$OUT/test.log" | grep -E "^\[doctest\]|tests passed|tests failed|FAILED|ERROR|error:|Error" ; rc=$((rc | ${PIPESTATUS[0]}))
fi
if [[ "$what" == all || "$what" == example ]]; then
  ./dev.sh example 2>&1 | tee "$OUT/example.log"; rc=$((rc | ${PIPESTATUS[0]}))
fi
if [[ "$what" == gpu ]]; then
  shift
  {
    ./dev.sh example --help >/dev/null &&
      PATH="$PWD/.deps/usr/bin:$PATH" cmake --build build -j "$(nproc)" --target flashgen_tests_gpu &&
      build/test/flashgen_tests_gpu "$@"
  } 2>&1 | tee "$OUT/gpu.log" | grep -E "^== |^\[doctest\]|FAIL|error:|ERROR"; rc=$((rc | ${PIPESTATUS[0]}))
fi
if [[ "$what" == tune ]]; then
  {
    # dev.sh configures build/ (and its dependencies) and builds the example;
    # then the CLI is built in the same tree.
    ./dev.sh example --help >/dev/null &&
      PATH="$PWD/.deps/usr/bin:$PATH" cmake --build build -j "$(nproc)" --target flashgen_cli &&
      rm -f "$OUT/tune.yml" &&
      build/tools/flashgen info &&
      build/tools/flashgen tune --out "$OUT/tune.yml" \
        --problem name=llama3-8b-prefill,dtype=f16,batch=1,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr \
        --problem name=allegro-dit,dtype=f16,batch=1,seqlen=79200,heads=24,head_dim=96,mask=none &&
      cat "$OUT/tune.yml" &&
      FLASHGEN_TUNE_FILE="$OUT/tune.yml" build/examples/attention &&
      for p in dtype=f16,batch=1,seqlen=4096,heads_q=32,heads_kv=8,head_dim=128,mask=causalbr \
        dtype=f16,batch=1,seqlen=79200,heads=24,head_dim=96,mask=none; do
        FLASHGEN_TUNE_FILE="$OUT/tune.yml" build/tools/flashgen explain --problem "$p" || exit 1
      done
  } 2>&1 | tee "$OUT/tune.log"; rc=$((rc | ${PIPESTATUS[0]}))
fi
echo "run_device.sh: exit $rc"
exit $rc
