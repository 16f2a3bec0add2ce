#!/usr/bin/env bash
# One device call: Nsight Compute on dense forward kernels, ours and FlashAttention-4's, one
# launch each (bench/ncu_dense.py: warm-up outside the profiled NVTX range), the full section
# set with the per-instruction stall samples (SourceCounters). Builds the library only (no tests).
#   usage: bench/ncu_dense.sh RUN...     RUN = system:shape:dtype:mask[:spec], e.g.
#          bench/ncu_dense.sh ours:3:bf16:none fa4:3:bf16:none ours:2:f16:causal
#   (system ours|fa4|flash, flash = PyTorch SDPA's flash backend (FlashAttention-2); shape an index
#   into bench.py's list; spec: a kernel spec string for ours, e.g. an m16n8k16 one on sm_90)
# Writes $OUT/ncu-dense.tar.gz: per run NAME.txt (ncu's details page) and NAME-sass.csv (the
# source page: every SASS instruction with its executed count and stall samples), NAME =
# system-shape-dtype-mask; prints the headline metrics. FlashAttention-4 needs
# /tmp/libs-cu13.tar.xz (or /tmp/part00 + .anchor/cdsl_b/part01) and .anchor/whl, as bench/run.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: bench/ncu_dense.sh system:shape:dtype:mask[:spec]..." >&2; exit 2; }
export FLASHGEN_CACHE_DIR="${FLASHGEN_CACHE_DIR:-$PWD/build/kernel-cache}"
source bench/ncu_common.sh
# (the library bench/run.sh or test/run_device.sh built in this call, else one of its own)
lib="$PWD/build/libflashgen.so"
[[ -f "$lib" ]] || ncu_build_lib bench/ncu_dense.sh
# FlashAttention-4 (as bench/run.sh sets it up)
if [[ ! -f /tmp/libs-cu13.tar.xz && -f /tmp/part00 && -f .anchor/cdsl_b/part01 ]]; then
  cat /tmp/part00 .anchor/cdsl_b/part01 >/tmp/libs-cu13.tar.xz
fi
if [[ -d .anchor/whl && -f /tmp/libs-cu13.tar.xz && ! -d /tmp/site/flash_attn ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .anchor/whl/*.whl &&
    tar -xJf /tmp/libs-cu13.tar.xz -C /tmp/site || echo "bench/ncu_dense.sh: FlashAttention-4 setup failed" >&2
fi
[[ -d /tmp/site/flash_attn ]] && export PYTHONPATH="/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
work=$(mktemp -d)
rc=0
for run in "$@"; do
  IFS=: read -r system shape dtype mask spec <<<"$run"
  name="$system-$shape-$dtype-$mask${spec:+-spec}"
  extra=()
  [[ -n "${spec:-}" ]] && extra=(--spec "$spec")
  ncu --clock-control none --nvtx --nvtx-include "prof/" --launch-count 1 --set full --import-source no -f -o "$work/$name" \
    python3 bench/ncu_dense.py --system "$system" --shape "$shape" --dtype "$dtype" --mask "$mask" \
    --lib "$lib" "${extra[@]}" >"$work/$name.log" 2>&1
  r=$?
  rc=$((rc | r))
  grep -E "ncu_dense.py:|==ERROR==|==WARNING==" "$work/$name.log" | head -5
  [[ -f "$work/$name.ncu-rep" ]] || { echo "$name: no report (rc $r)"; tail -5 "$work/$name.log"; continue; }
  ncu_export "$work/$name"
  echo "== $name"
  grep -E "^  [a-zA-Z_].*\(|Duration|SM Frequency|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Registers Per Thread|Theoretical Occupancy|Warp Cycles Per Issued|Executed Instructions  " \
    "$work/$name.txt" | head -16
done
tar -czf "$OUT/ncu-dense.tar.gz" -C "$work" $(cd "$work" && ls | grep -v '\.ncu-rep$')
ls -la "$OUT/ncu-dense.tar.gz"
exit "$rc"
