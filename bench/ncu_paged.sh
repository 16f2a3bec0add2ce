#!/usr/bin/env bash
# One device call: what page 16 costs in paged decode, against pages 32-128 and the contiguous
# cache (issue 13: page >= 16 within 10 % of contiguous). Builds the library only (no tests),
# then, logs under $OUT:
#   1. bench/bench_paged.py decode B8 Sq1 Sk16384 at pages 16, 32, 64, 128, the pages shuffled and
#      in order (--order), both in one file each: paged-shuffled.log, paged-sequential.log;
#   2. Nsight Compute on the paged decode kernel (one timed launch) at pages 16 and 64, shuffled
#      and at page 16 in order: ncu-p16-shuffled.txt, ncu-p64-shuffled.txt, ncu-p16-sequential.txt
#      (SpeedOfLight, MemoryWorkloadAnalysis, WarpStateStats, SchedulerStats, LaunchStats).
#   usage: bench/ncu_paged.sh    (carry .deps; torch from the machine)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/ncu_common.sh
ncu_build_lib bench/ncu_paged.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
rc=0
for order in shuffled sequential; do
  PYTHONUNBUFFERED=1 python3 bench/bench_paged.py --lib "$lib" --runs 10 --warmup 3 --sets 2 \
    --page-sizes 16,32,64,128 --decode-q 1 --prefill '' --order "$order" 2>&1 | tee "$OUT/paged-$order.log"
  rc=$((rc | PIPESTATUS[0]))
done
# (the paged kernel's launches in one bench_paged.py run: the correctness check's two, then the
# timed calls; --launch-skip 4 lands on a timed one)
for run in "16 shuffled" "64 shuffled" "16 sequential"; do
  set -- $run
  ncu --target-processes all -k regex:paged --launch-skip 4 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section LaunchStats \
    python3 bench/bench_paged.py --lib "$lib" --runs 2 --warmup 1 --sets 1 --page-sizes "$1" \
    --decode-q 1 --prefill '' --order "$2" >"$OUT/ncu-p$1-$2.txt" 2>&1
  rc=$((rc | $?))
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Stall|Issued Warp|No Eligible" \
    "$OUT/ncu-p$1-$2.txt" | head -30
done
exit "$rc"
