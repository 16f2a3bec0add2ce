#!/usr/bin/env bash
# One device call: where the paged chunked prefill (issue 13's table (b): bf16 D128 GQA 32/8, B4,
# 8192 cached keys + 2048 new rows, causal bottom-right, the wgmma kernel) loses its time against the
# same problem on a contiguous cache. Builds the library only (no tests), then, logs under $OUT:
#   1. bench/bench_paged.py's prefill table at pages 16 and 256, shuffled (paged-prefill.log);
#   2. Nsight Compute (--set full) on one timed launch each of the contiguous kernel and the paged
#      kernel at pages 16 (the producer's cp.async gather) and 256 (one TMA box a key tile, as
#      contiguous): the details page and the per-instruction SASS counters of each in
#      $OUT/ncu-prefill.tar.gz (contig, p16, p256), and their headline lines printed.
#   usage: bench/ncu_paged_prefill.sh    (carry .deps; torch from the machine)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/ncu_common.sh
ncu_build_lib bench/ncu_paged_prefill.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
common=(--lib "$lib" --decode '' --prefill 4x8192+2048 --order shuffled)
PYTHONUNBUFFERED=1 python3 bench/bench_paged.py "${common[@]}" --runs 10 --warmup 3 --sets 2 --page-sizes 16,256 2>&1 |
  grep -v "Warning" | tee "$OUT/paged-prefill.log"
rc=${PIPESTATUS[0]}
# (one bench_paged.py run per profile, a page size each: the correctness check launches each kernel
# before the timed calls, so --launch-skip 3 lands on a timed launch; the contiguous kernel's name
# ends in its mask, the paged one's in _paged)
work=$(mktemp -d)
for run in "contig 256 regex:fwd_sm90.*causalbr$" "p16 16 regex:fwd_sm90.*causalbr_paged$" \
  "p256 256 regex:fwd_sm90.*causalbr_paged$"; do
  set -- $run
  ncu --clock-control none --target-processes all -k "$3" --launch-skip 3 --launch-count 1 --set full \
    --import-source no -f -o "$work/$1" \
    python3 bench/bench_paged.py "${common[@]}" --runs 2 --warmup 1 --sets 1 --page-sizes "$2" >"$work/$1.log" 2>&1
  rc=$((rc | $?))
  [[ -f "$work/$1.ncu-rep" ]] || { echo "$1: no report"; tail -5 "$work/$1.log"; continue; }
  ncu_export "$work/$1"
  echo "== $1"
  grep -E "^  [a-zA-Z_].*\(|Duration|SM Frequency|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Registers Per Thread|Warp Cycles Per Issued|Executed Instructions  |DRAM Throughput|L2 Hit Rate" \
    "$work/$1.txt" | head -16
done
tar -czf "$OUT/ncu-prefill.tar.gz" -C "$work" $(cd "$work" && ls | grep -v '\.ncu-rep$')
ls -la "$OUT/ncu-prefill.tar.gz"
exit "$rc"
