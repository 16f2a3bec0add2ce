#!/usr/bin/env bash
# Runs on the GPU machine (the `device` tool): builds libflashgen there and runs
# the README's two commands (all tests, then the main example), writing full
# logs under $OUT. The machine is offline: carry .deps (Debian packages unpacked
# with dpkg -x, see README "Offline machines"); dev.sh picks it up.
#   usage: test/run_device.sh [test|example|all] [extra scratch command...]
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
echo "run_device.sh: exit $rc"
exit $rc
