#!/usr/bin/env bash
# Builds libflashgen at a commit on this machine, for bench/run.sh's BENCH_BASELINE_SRC on the
# device: `git archive COMMIT` into a temporary tree, the library only (Release, this tree's
# .deps as dev.sh uses them), stripped, written to OUT (default .bench-libs/COMMIT.so, ignored by
# git; carry that folder). The device then times it without building it. The library loads
# NVRTC and the driver at run time, so one built here runs there (its .deps libraries come
# from this tree's .deps on both).
#   usage: tools/bench_baseline.sh COMMIT [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: tools/bench_baseline.sh COMMIT [OUT]" >&2; exit 2; }
commit=$(git rev-parse --short "$1^{commit}")
out="${2:-.bench-libs/$commit.so}"
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
git archive "$commit" | tar -x -C "$tree"
deps_args=()
[[ -d .deps/usr ]] && deps_args=("-DCMAKE_PREFIX_PATH=$PWD/.deps/usr" "-DCMAKE_CXX_FLAGS=-isystem $PWD/.deps/usr/include")
cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DFLASHGEN_BUILD_TESTS=OFF "${deps_args[@]}" >/dev/null
cmake --build "$tree/build" -j "$(nproc)" --target flashgen >/dev/null
mkdir -p "$(dirname "$out")"
lib=$(readlink -f "$tree/build/libflashgen.so")
strip -o "$out" "$lib"
echo "$out: libflashgen at $commit ($(du -h "$out" | cut -f1))"
