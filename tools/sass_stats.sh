#!/usr/bin/env bash
# The ptxas report and SASS instruction counts of generated kernels, without a
# GPU: for each spec, `flashgen show --spec` writes the source, nvcc compiles it
# to a cubin for the spec's arch (sm_90 -> sm_90a), and cuobjdump -sass (else
# nvdisasm, from PATH or $NVDISASM) disassembles it. One line per kernel:
# registers, spill stores/loads (bytes), then counts of the instruction classes
# that say what a kernel spends its issue slots on: HMMA (mma.sync, by shape),
# HGMMA (wgmma), LDSM (ldmatrix), LDS by width, LDGSTS (cp.async), LDG, MUFU,
# BAR, and the total.
#   usage: tools/sass_stats.sh [-k] SPEC...   (-k: keep the .cu/.cubin/.sass under $SASS_DIR)
# Environment: FLASHGEN (default build/tools/flashgen), NVCC (default nvcc),
# SASS_DIR (default a temporary directory). The nvcc in use must know the arch
# (CUDA 13: sm_75 and later).
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
if [[ "${1:-}" == -k ]]; then keep=1; shift; fi
[[ $# -ge 1 ]] || { echo "usage: tools/sass_stats.sh [-k] SPEC..." >&2; exit 2; }
FLASHGEN="${FLASHGEN:-build/tools/flashgen}"
NVCC="${NVCC:-nvcc}"
dir="${SASS_DIR:-$(mktemp -d)}"
mkdir -p "$dir"
[[ "$keep" == 1 || -n "${SASS_DIR:-}" ]] || trap 'rm -rf "$dir"' EXIT
if command -v cuobjdump >/dev/null; then dis=(cuobjdump -sass)
elif [[ -n "${NVDISASM:-}" ]] || command -v nvdisasm >/dev/null; then dis=("${NVDISASM:-nvdisasm}" -c)
else echo "tools/sass_stats.sh: neither cuobjdump nor nvdisasm found (set NVDISASM)" >&2; exit 2; fi
printf '%-64s %4s %5s %5s %6s %6s %5s %6s %6s %6s %6s %5s %5s %4s %6s\n' kernel regs st_B ld_B HMMA HGMMA LDSM \
  LDS128 LDS64 LDS32 LDGSTS LDG MUFU BAR total
for spec in "$@"; do
  arch=$(sed -n 's/.*:sm=\([0-9]*\),.*/\1/p' <<<"$spec")
  [[ -n "$arch" ]] || { echo "tools/sass_stats.sh: no sm=NN in '$spec'" >&2; exit 2; }
  target="sm_$arch"
  [[ "$arch" == 90 ]] && target=sm_90a
  name=$("$FLASHGEN" show --spec "$spec" | sed -n 's,^// kernel: *,,p' | head -1)
  "$FLASHGEN" show --spec "$spec" >"$dir/$name.cu"
  "$NVCC" -cubin -arch="$target" -O3 -std=c++17 -Xptxas -v -o "$dir/$name.cubin" "$dir/$name.cu" \
    >"$dir/$name.ptxas" 2>&1 || { cat "$dir/$name.ptxas" >&2; exit 1; }
  "${dis[@]}" "$dir/$name.cubin" >"$dir/$name.sass"
  regs=$(sed -n 's/.*Used \([0-9]*\) registers.*/\1/p' "$dir/$name.ptxas" | head -1)
  st=$(sed -n 's/.* \([0-9]*\) bytes spill stores.*/\1/p' "$dir/$name.ptxas" | head -1)
  ld=$(sed -n 's/.* \([0-9]*\) bytes spill loads.*/\1/p' "$dir/$name.ptxas" | head -1)
  # (instruction lines: an opcode after the /*addr*/ column; predicates stripped)
  ops=$(sed -n 's,^ */\*[0-9a-f]*\*/ *\(@!*U*P[0-9T] *\)*\([A-Z][A-Z0-9_.]*\).*,\2,p' "$dir/$name.sass")
  count() { grep -cE "$1" <<<"$ops" || true; }
  printf '%-64s %4s %5s %5s %6s %6s %5s %6s %6s %6s %6s %5s %5s %4s %6s\n' "$name" "$regs" "$st" "$ld" \
    "$(count '^HMMA')" "$(count '^HGMMA')" "$(count '^LDSM')" "$(count '^LDS(\.U)?\.128')" "$(count '^LDS(\.U)?\.64')" \
    "$(count '^LDS(\.U)?(\.32)?$')" "$(count '^LDGSTS')" "$(count '^LDG')" "$(count '^MUFU')" "$(count '^BAR')" \
    "$(wc -l <<<"$ops")"
done
[[ "$keep" == 1 ]] && echo "kept: $dir" >&2
exit 0
