#!/usr/bin/env bash
# Builds, on this machine (no GPU needed), what test/run_device.sh gpu would build
# on the GPU machine, and copies it stripped into a folder to carry there
# (device time is scarce; the build takes a minute or more of it):
#   test/prebuild_gpu.sh [DIR]      (DIR default .devbin, git-ignored)
# DIR then holds flashgen_tests_gpu, libflashgen.so.<soname version> and
# COMMIT (the tree it was built from). On the GPU machine:
#   FLASHGEN_PREBUILT=DIR test/run_device.sh gpu [doctest args]
# runs DIR's binary instead of building (carry DIR and .deps). The binary
# runs on any x86-64 Linux with this machine's glibc and libstdc++ or newer.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.devbin}"
./dev.sh example --help >/dev/null
PATH="$PWD/.deps/usr/bin:$PATH" cmake --build build -j "$(nproc)" --target flashgen_tests_gpu
rm -rf "$dir"
mkdir -p "$dir"
lib=$(readlink -f build/libflashgen.so)
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
cp "$lib" "$dir/$soname"
cp build/test/flashgen_tests_gpu "$dir/"
strip "$dir/flashgen_tests_gpu" "$dir/$soname"
{
  git log -1 --format='%H %s' 2>/dev/null || echo "(not a git checkout)"
  git status --short --untracked-files=no 2>/dev/null | sed 's/^/  changed: /'
} >"$dir/COMMIT"
echo "prebuild_gpu.sh: $dir: $(du -sh "$dir" | cut -f1), built from $(head -c 12 "$dir/COMMIT")"
