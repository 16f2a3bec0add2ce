#!/usr/bin/env bash
# Runs on the GPU machine (the `device` tool): builds libflashgen there and runs
# the README's two commands (all tests, then the main example), writing full
# logs under $OUT. The machine is offline: carry .deps (Debian packages unpacked
# with dpkg -x, see README "Offline machines"); dev.sh picks it up.
#   usage: test/run_device.sh [test|example|all|tune|gpu|python] [doctest or pytest args...]
# gpu (not part of all): builds only the library and the GPU tier and runs the
# GPU tier with the doctest arguments given (e.g. -tc='numerics*'); log:
# $OUT/gpu.log. FLASHGEN_PREBUILT=DIR: run DIR/flashgen_tests_gpu instead
# (test/prebuild_gpu.sh made it on a machine without a GPU; nothing is built).
# python (not part of all): installs the Python package into a virtual
# environment that sees the machine's PyTorch (test/python/install_offline.sh:
# carry .whl/py and .whl/test besides .deps; log $OUT/python-install.log), then
# runs `pytest test/python -rs` with the arguments given (log $OUT/pytest.log,
# JUnit XML $OUT/pytest.xml), unbuffered, killed after $PYTEST_TIMEOUT seconds
# (default 420; the device's commands end at 600). FLASHGEN_VENV: the venv
# (default /tmp/flashgen-venv, kept while the machine is held).
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
  if [[ -n "${FLASHGEN_PREBUILT:-}" ]]; then
    {
      pre="$(cd "$FLASHGEN_PREBUILT" && pwd)" &&
        echo "prebuilt: $pre, from $(head -1 "$pre/COMMIT" 2>/dev/null)" &&
        LD_LIBRARY_PATH="$pre:$LD_LIBRARY_PATH" "$pre/flashgen_tests_gpu" "$@"
    } 2>&1 | tee "$OUT/gpu.log" | grep -E "^prebuilt: |^== |^\[doctest\]|FAIL|error:|ERROR"; rc=$((rc | ${PIPESTATUS[0]}))
  else
    {
      ./dev.sh example --help >/dev/null &&
        PATH="$PWD/.deps/usr/bin:$PATH" cmake --build build -j "$(nproc)" --target flashgen_tests_gpu &&
        build/test/flashgen_tests_gpu "$@"
    } 2>&1 | tee "$OUT/gpu.log" | grep -E "^== |^\[doctest\]|FAIL|error:|ERROR"; rc=$((rc | ${PIPESTATUS[0]}))
  fi
fi
if [[ "$what" == python ]]; then
  shift
  venv="${FLASHGEN_VENV:-/tmp/flashgen-venv}"
  if test/python/install_offline.sh "$venv" >"$OUT/python-install.log" 2>&1; then
    tail -1 "$OUT/python-install.log"
    "$venv/bin/python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
      "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' 2>&1 | tee -a "$OUT/machine.txt"
    PYTHONUNBUFFERED=1 timeout -k 10 "${PYTEST_TIMEOUT:-420}" "$venv/bin/python" -u -m pytest test/python -rs \
      -p no:cacheprovider --junitxml "$OUT/pytest.xml" "$@" 2>&1 | tee "$OUT/pytest.log"
    prc=${PIPESTATUS[0]}
    [[ "$prc" == 124 || "$prc" == 137 ]] && echo "run_device.sh: pytest killed after ${PYTEST_TIMEOUT:-420} s"
    rc=$((rc | prc))
  else
    echo "run_device.sh: the package did not install; the end of $OUT/python-install.log:"
    tail -40 "$OUT/python-install.log"
    rc=1
  fi
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
