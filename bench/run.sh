#!/usr/bin/env bash
# One device run: build libflashgen, measure the mma.sync m16n8k16 ceiling
# (tools/mma_probe, f16 and bf16), install the flashgen package, then time our
# forward (flashgen.attention) and PyTorch SDPA (flash, cuDNN, efficient) on the
# same inputs (bench/bench.py). Logs under $OUT.
#   usage: bench/run.sh [bench.py args...]   (BENCH_DECODE=1: + bench/bench_decode.py; BENCH_DECODE_ONLY=1: only it;
#   BENCH_DECODE_ARGS: its arguments, e.g. "--runs 20 --rows 0,2"; BENCH_SOFTCAP=1 / BENCH_SOFTCAP_ONLY=1:
#   bench/bench_softcap.py, arguments in BENCH_SOFTCAP_ARGS; BENCH_MODIFIERS=1 / BENCH_MODIFIERS_ONLY=1:
#   bench/bench_modifiers.py (windows, sinks, ALiBi), arguments in BENCH_MODIFIERS_ARGS; BENCH_VARLEN=1 /
#   BENCH_VARLEN_ONLY=1: bench/bench_varlen.py (packed variable-length batches), arguments in BENCH_VARLEN_ARGS;
#   BENCH_PAGED=1 / BENCH_PAGED_ONLY=1: bench/bench_paged.py (paged KV cache: decode and chunked prefill),
#   arguments in BENCH_PAGED_ARGS, BENCH_BASELINE_SRC's first tree beside ours as its --baseline;
#   BENCH_HOST=1 / BENCH_HOST_ONLY=1: bench/bench_host.py (host overhead per call: the package, ctypes, SDPA,
#   CUDA graphs), arguments in BENCH_HOST_ARGS, table in $OUT/bench-host.log and $OUT/bench-host.json;
#   BENCH_HOST_ONLY=1 builds neither build/ nor runs the probe)
# The package (bench.py and bench_host.py import it) is installed offline into a
# virtual environment that sees the machine's PyTorch (test/python/install_offline.sh,
# log $OUT/install.log; FLASHGEN_VENV, default /tmp/flashgen-venv): carry .whl/py
# (scikit-build-core, nanobind) and .deps; .whl/cmake only if the machine's cmake is
# older than 3.25. Every bench then runs with that venv's python.
# BENCH_BASELINE_SRC=DIR: also build the libflashgen source tree DIR (e.g. a
# `git archive` of the commit before a kernel change; it uses this tree's
# .deps) and time it beside ours in the same loop (bench.py --baseline); several
# trees, separated by ':', all take turns in that one loop ('.' is this tree's own build; a
# path ending in .so is a built library, used as it is: tools/bench_baseline.sh builds one here
# from a commit, so the device's time does not go to building it).
# FlashAttention-4 joins the tables when .anchor/whl (from
# ../shared/anchors/fa4-carry.sh .anchor) is in this tree and
# /tmp/libs-cu13.tar.xz on the machine: send .anchor/cdsl in a first command
# that runs `cp .anchor/cdsl/libs-cu13.tar.xz /tmp/`, then this script, with
# .anchor/whl, in the next command while the machine is still held.
# bench.py's options pass through, e.g. `--unit m16n8k16` (the mma.sync kernel).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FLASHGEN_CACHE_DIR="${FLASHGEN_CACHE_DIR:-$PWD/build/kernel-cache}"
host_only="${BENCH_HOST_ONLY:-0}"
main_bench=1
for only in BENCH_DECODE_ONLY BENCH_SOFTCAP_ONLY BENCH_MODIFIERS_ONLY BENCH_VARLEN_ONLY BENCH_PAGED_ONLY BENCH_HOST_ONLY; do
  [[ "${!only:-0}" == 1 ]] && main_bench=0
done
if [[ "$host_only" != 1 && ( ! -x build/tools/mma_probe || ! -f build/libflashgen.so ) ]]; then
  # (the library and the probe only: dev.sh configures build/ and builds the example, which links the library)
  { ./dev.sh example --help >/dev/null &&
      PATH="$PWD/.deps/usr/bin:$PATH" cmake --build build -j "$(nproc)" --target flashgen mma_probe >/dev/null; } ||
    { echo "bench/run.sh: build failed" >&2; exit 1; }
fi
first_baseline=()
all_baselines=()
if [[ -n "${BENCH_BASELINE_SRC:-}" ]]; then
  # (several trees separated by ':' for bench.py and bench_decode.py, all in one loop; bench_paged.py takes the first)
  deps_args=()
  [[ -d .deps/usr ]] && deps_args=("-DCMAKE_PREFIX_PATH=$PWD/.deps/usr" "-DCMAKE_CXX_FLAGS=-isystem $PWD/.deps/usr/include")
  libs=()
  IFS=: read -r -a trees <<<"$BENCH_BASELINE_SRC"
  for tree in "${trees[@]}"; do
    # ('.': this tree's own build/libflashgen.so through the C ABI, beside ours through the
    # package: an A/A check of the two ways in)
    if [[ "$tree" == . ]]; then libs+=("$PWD/build/libflashgen.so"); continue; fi
    # (a built library, e.g. one built on another machine and carried: used as it is)
    if [[ "$tree" == *.so* && -f "$tree" ]]; then libs+=("$PWD/$tree"); continue; fi
    { cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DFLASHGEN_BUILD_TESTS=OFF "${deps_args[@]}" >/dev/null &&
        cmake --build "$tree/build" -j "$(nproc)" --target flashgen >/dev/null; } ||
      { echo "bench/run.sh: baseline build of $tree failed" >&2; exit 1; }
    libs+=("$tree/build/libflashgen.so")
  done
  first_baseline=(--baseline "${libs[0]}")
  all_baselines=(--baseline "$(IFS=,; echo "${libs[*]}")")
fi
# (the libraries also come in two halves, for a tree that with them would pass the 64 MiB a
# command carries: `split -n 2 -d .anchor/cdsl/libs-cu13.tar.xz part` into .anchor/cdsl_a/part00
# and .anchor/cdsl_b/part01; send cdsl_a with one command that copies part00 to /tmp, then
# cdsl_b and .anchor/whl with the one that runs this script, while the machine is still held)
if [[ ! -f /tmp/libs-cu13.tar.xz && -f /tmp/part00 && -f .anchor/cdsl_b/part01 ]]; then
  cat /tmp/part00 .anchor/cdsl_b/part01 >/tmp/libs-cu13.tar.xz
fi
if [[ -d .anchor/whl && -f /tmp/libs-cu13.tar.xz ]]; then
  if [[ ! -d /tmp/site/flash_attn ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .anchor/whl/*.whl &&
      tar -xJf /tmp/libs-cu13.tar.xz -C /tmp/site || echo "bench/run.sh: FlashAttention-4 setup failed" >&2
  fi
  export PYTHONPATH="/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
elif [[ -d .anchor/whl ]]; then
  echo "bench/run.sh: .anchor/whl is here but /tmp/libs-cu13.tar.xz is not (send .anchor/cdsl first): no FlashAttention-4" >&2
fi
# The flashgen package, for bench.py and bench_host.py.
PY=python3
if [[ "$main_bench" == 1 || "${BENCH_HOST:-0}" == 1 || "$host_only" == 1 ]]; then
  venv="${FLASHGEN_VENV:-/tmp/flashgen-venv}"
  if ! test/python/install_offline.sh "$venv" >"$OUT/install.log" 2>&1; then
    echo "bench/run.sh: the flashgen package did not install; the end of $OUT/install.log:" >&2
    tail -40 "$OUT/install.log" >&2
    exit 1
  fi
  tail -1 "$OUT/install.log"
  PY="$venv/bin/python"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/bench-gpu.txt"
if [[ "$host_only" != 1 ]]; then
  for dt in f16 bf16; do
    build/tools/mma_probe --dtype "$dt" | tee "$OUT/probe-$dt.txt"
  done
  c16=$(awk '/^achieved/ {print $2}' "$OUT/probe-f16.txt")
  c32=$(awk '/^achieved/ {print $2}' "$OUT/probe-bf16.txt")
fi
if [[ "$main_bench" == 1 ]]; then
PYTHONUNBUFFERED=1 "$PY" bench/bench.py --ceiling-f16 "${c16:-0}" --ceiling-bf16 "${c32:-0}" "${all_baselines[@]}" "$@" \
  2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
fi
# BENCH_HOST=1: also the host overhead per call (bench/bench_host.py); BENCH_HOST_ONLY=1: only that.
if [[ "${BENCH_HOST:-0}" == 1 || "$host_only" == 1 ]]; then
  PYTHONUNBUFFERED=1 "$PY" bench/bench_host.py --json "$OUT/bench-host.json" ${BENCH_HOST_ARGS:-} 2>&1 |
    tee "$OUT/bench-host.log"
  rc=$(( ${rc:-0} | ${PIPESTATUS[0]} ))
fi
# BENCH_DECODE=1: also the split-KV decode table (bench/bench_decode.py);
# BENCH_DECODE_ONLY=1: only that.
if [[ "${BENCH_DECODE:-0}" == 1 || "${BENCH_DECODE_ONLY:-0}" == 1 ]]; then
  PYTHONUNBUFFERED=1 "$PY" bench/bench_decode.py --lib build/libflashgen.so "${all_baselines[@]}" ${BENCH_DECODE_ARGS:-} 2>&1 |
    tee "$OUT/bench-decode.log"
  rc=$(( ${rc:-0} | ${PIPESTATUS[0]} ))
fi
# BENCH_SOFTCAP=1: also softcap against the plain forward (bench/bench_softcap.py,
# arguments in BENCH_SOFTCAP_ARGS); BENCH_SOFTCAP_ONLY=1: only that.
if [[ "${BENCH_SOFTCAP:-0}" == 1 || "${BENCH_SOFTCAP_ONLY:-0}" == 1 ]]; then
  PYTHONUNBUFFERED=1 "$PY" bench/bench_softcap.py --lib build/libflashgen.so ${BENCH_SOFTCAP_ARGS:-} 2>&1 |
    tee "$OUT/bench-softcap.log"
  rc=$(( ${rc:-0} | ${PIPESTATUS[0]} ))
fi
# BENCH_MODIFIERS=1: also windows, sinks and ALiBi against the plain forward
# (bench/bench_modifiers.py, arguments in BENCH_MODIFIERS_ARGS); BENCH_MODIFIERS_ONLY=1: only that.
if [[ "${BENCH_MODIFIERS:-0}" == 1 || "${BENCH_MODIFIERS_ONLY:-0}" == 1 ]]; then
  PYTHONUNBUFFERED=1 "$PY" bench/bench_modifiers.py --lib build/libflashgen.so ${BENCH_MODIFIERS_ARGS:-} 2>&1 |
    tee "$OUT/bench-modifiers.log"
  rc=$(( ${rc:-0} | ${PIPESTATUS[0]} ))
fi
# BENCH_VARLEN=1: also packed (varlen) batches against SDPA on jagged nested tensors and
# FlashAttention-4's varlen (bench/bench_varlen.py, arguments in BENCH_VARLEN_ARGS); BENCH_VARLEN_ONLY=1: only that.
if [[ "${BENCH_VARLEN:-0}" == 1 || "${BENCH_VARLEN_ONLY:-0}" == 1 ]]; then
  PYTHONUNBUFFERED=1 "$PY" bench/bench_varlen.py --lib build/libflashgen.so ${BENCH_VARLEN_ARGS:-} 2>&1 |
    tee "$OUT/bench-varlen.log"
  rc=$(( ${rc:-0} | ${PIPESTATUS[0]} ))
fi
# BENCH_PAGED=1: also the paged KV cache (decode and chunked prefill) against our contiguous cache and
# FlashAttention-4's paged path (bench/bench_paged.py, arguments in BENCH_PAGED_ARGS); BENCH_PAGED_ONLY=1: only that.
if [[ "${BENCH_PAGED:-0}" == 1 || "${BENCH_PAGED_ONLY:-0}" == 1 ]]; then
  PYTHONUNBUFFERED=1 "$PY" bench/bench_paged.py --lib build/libflashgen.so "${first_baseline[@]}" ${BENCH_PAGED_ARGS:-} 2>&1 |
    tee "$OUT/bench-paged.log"
  rc=$(( ${rc:-0} | ${PIPESTATUS[0]} ))
fi
exit "${rc:-0}"
