#!/usr/bin/env bash
# Installs the flashgen package from this repository on a machine without a
# network (the GPU machine): into a virtual environment that sees the system's
# site-packages (so the machine's PyTorch is visible), from wheels carried in
# .whl/ (git-ignored), built with the Debian packages unpacked in .deps/ (as
# dev.sh builds). Used by bench/run.sh and by test/run_device.sh python.
#   usage: test/python/install_offline.sh [VENV]     (default: $FLASHGEN_VENV, else /tmp/flashgen-venv)
# Then run VENV/bin/python. Idempotent: an existing VENV is reused, the build
# tree (the build folder build-wheel/ of the repository; FLASHGEN_BUILD_DIR=DIR for
# another) rebuilds incrementally. PYTHON: the interpreter whose site-packages
# the venv sees (default python3).
#
# The wheels (prepare them on a machine with a network, then carry the folders):
#   .whl/py     scikit-build-core, nanobind and their dependencies (pure Python, ~1.3 MB):
#               pip download --dest .whl/py --only-binary=:all: --python-version 3.12 \
#                 --implementation py --platform any "scikit-build-core>=0.10" "nanobind>=2.4"
#               (+ tomli, exceptiongroup, typing-extensions for a Python older than 3.11)
#   .whl/test   pytest and its dependencies (~2.2 MB), installed only when pytest does not import
#   .whl/cmake  cmake (<4) and ninja manylinux wheels (~28 MB), needed only when the machine's
#               cmake is older than 3.25 (or absent) or it has neither make nor ninja
# The build runs without build isolation: scikit-build-core and nanobind are
# installed into VENV first, so the CMake cache in build-wheel/ keeps pointing
# at the same nanobind between runs (an isolated build environment is a new
# temporary folder every time).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
VENV="${1:-${FLASHGEN_VENV:-/tmp/flashgen-venv}}"
PY="${PYTHON:-python3}"

note() { echo "install_offline.sh: $*" >&2; }
die() {
  note "error: $*"
  exit 1
}

# --- 1. the wheels ---------------------------------------------------------------------
links=()
for d in .whl/py .whl/test .whl/cmake; do
  [[ -d "$d" ]] && links+=(--find-links "$REPO/$d")
done
[[ -d .whl/py ]] || die "no .whl/py in $REPO: carry it (the wheels of scikit-build-core and nanobind; see this
  script's header for the pip download command)"

# --- 2. the virtual environment ----------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
  # Without ensurepip (Debian's python3 without python3-venv) the venv has no pip of its
  # own; the system's pip then serves it through the system site-packages.
  "$PY" -m venv --system-site-packages "$VENV" 2>/dev/null ||
    { rm -rf "$VENV" && "$PY" -m venv --system-site-packages --without-pip "$VENV"; } ||
    die "$PY -m venv failed"
fi
VPY="$VENV/bin/python"
# $PY may itself run in a virtual environment (the GPU machine's PyTorch lives in one); a venv
# made from it sees only the base interpreter's site-packages, so a .pth file adds $PY's own
# (appended after VENV's, which therefore wins).
parent_sites="$("$PY" -c 'import site; print("\n".join(site.getsitepackages()))')" ||
  die "$PY cannot list its site-packages"
venv_site="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" ||
  die "$VPY does not run"
printf '%s\n' "$parent_sites" >"$venv_site/_flashgen_parent_site.pth"
"$VPY" -m pip --version >/dev/null 2>&1 || die "$VPY has no pip (neither its own nor the system's)"
pip_install() { "$VPY" -m pip install --no-index "${links[@]}" --disable-pip-version-check "$@"; }
"$VPY" -c 'import torch' 2>/dev/null || note "warning: PyTorch does not import in $VENV ($PY's site-packages)"

# --- 3. build requirements ------------------------------------------------------------------
pip_install -q "scikit-build-core>=0.10" "nanobind>=2.4"
cmake_ok=0
if command -v cmake >/dev/null 2>&1; then
  ver="$(cmake --version | awk 'NR == 1 {print $3}')"
  [[ "$(printf '%s\n' 3.25 "$ver" | sort -V | head -1)" == 3.25 ]] && cmake_ok=1
fi
if [[ "$cmake_ok" != 1 ]]; then
  [[ -d .whl/cmake ]] || die "cmake >= 3.25 is not on this machine and .whl/cmake was not carried"
  note "cmake ${ver:-absent} < 3.25: installing the cmake wheel of .whl/cmake"
  pip_install -q "cmake>=3.25,<4"
fi
if ! command -v make >/dev/null 2>&1 && ! command -v ninja >/dev/null 2>&1; then
  [[ -d .whl/cmake ]] || die "neither make nor ninja is on this machine and .whl/cmake was not carried"
  pip_install -q ninja
fi
export PATH="$VENV/bin:$PATH"
if ! "$VPY" -c 'import pytest' 2>/dev/null; then
  if [[ -d .whl/test ]]; then pip_install -q pytest; else note "pytest does not import and .whl/test was not carried"; fi
fi
"$VPY" - <<'EOF' || die "Python.h is not where $VPY's sysconfig says (install the Python development headers)"
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
EOF

# --- 4. build and install (pyproject.toml: scikit-build-core, nanobind, CMake) ------------------
# Skipped when VENV holds a build of these very sources (a hash of what the wheel is built
# from; FLASHGEN_REINSTALL=1 builds anyway): a device command then spends no time on pip.
sources_hash="$(find CMakeLists.txt pyproject.toml README.md cmake runtime gen templates include profiles tools python \
  -type f -not -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -c1-40)"
stamp="$VENV/.flashgen-sources"
if [[ "${FLASHGEN_REINSTALL:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$sources_hash" ]] &&
  (cd / && "$VPY" -c 'import flashgen' 2>/dev/null); then
  (cd / && "$VPY" -c 'import flashgen, os; print("install_offline.sh: flashgen", flashgen.__version__, "from",
    os.path.dirname(flashgen.__file__), "(already built from these sources)")')
  exit 0
fi
rm -f "$stamp"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"  # (make runs serially otherwise)
if [[ -d .deps/usr ]]; then
  export CMAKE_PREFIX_PATH="$REPO/.deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CXXFLAGS="${CXXFLAGS:-} -isystem $REPO/.deps/usr/include"
fi
build_dir=(--config-settings=build-dir="${FLASHGEN_BUILD_DIR:-$REPO/build-wheel}")
pip_install --no-build-isolation --no-deps --force-reinstall -v "${build_dir[@]}" . ||
  die "pip install . failed (the CMake output is above)"

# --- 5. it imports, outside the repository (not the source folder python/flashgen) -------------
(cd / && "$VPY" -c 'import flashgen, os; print("install_offline.sh: flashgen", flashgen.__version__, "from",
  os.path.dirname(flashgen.__file__), "gpu_available", flashgen.gpu_available())') ||
  die "the installed package does not import"
echo "$sources_hash" >"$stamp"
