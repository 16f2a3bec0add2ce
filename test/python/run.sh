#!/usr/bin/env bash
# The Python package's test tiers (issue 14), as ctest's test "python" runs them:
#
#   test/python/run.sh [pytest args...]
#
# 1. makes (or reuses) a virtual environment, build/pyenv of the repository
#    (FLASHGEN_PY_VENV=DIR for another; ctest passes <build dir>/pyenv);
# 2. `pip install`s the repository into it (a PEP 517 build: scikit-build-core
#    builds libflashgen, its CLI and the native module, incrementally in
#    the build folder build-wheel/ of the repository; FLASHGEN_PY_BUILD_DIR=DIR for
#    another), unless the venv holds a build of the same sources already. The
#    build needs what dev.sh's does: the Debian dev packages, or their unpacked
#    copies in .deps/usr (then used as dev.sh uses them), and the CUDA toolkit's
#    headers;
# 3. installs pytest and numpy, and PyTorch only when FLASHGEN_PY_TORCH=1 or it
#    already imports in the environment (a CUDA wheel of torch is ~3 GB; without
#    torch the GPU tier is skipped, and its torch-only CPU tests too);
# 4. runs pytest on test/python with -rs (skips are listed with their reasons)
#    and exits with pytest's status.
#
# Environment: FLASHGEN_PY_VENV (not PYENV_DIR, which is pyenv's own),
# FLASHGEN_PY_BUILD_DIR, FLASHGEN_PY_REINSTALL=1, FLASHGEN_PY_TORCH (1: install torch;
# FLASHGEN_PY_TORCH_SPEC: the requirement, default "torch"), PYTHON (the
# interpreter that makes the venv, default python3), and pip's own
# (PIP_INDEX_URL, PIP_FIND_LINKS, ...). The tests read FLASHGEN_TEST_SEED
# (repeats a run's random inputs).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYENV="${FLASHGEN_PY_VENV:-$REPO/build/pyenv}"
PYTHON="${PYTHON:-python3}"
DEPS="$REPO/.deps/usr"

note() { echo "test/python/run.sh: $*" >&2; }
die() {
  note "error: $*"
  exit 1
}

# --- 1. the virtual environment --------------------------------------------------------
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON was not found (set PYTHON to a Python >= 3.9)"
ver="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])' 2>&1)" || die "$PYTHON does not run: $ver"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || die "$PYTHON is Python $ver; the package needs >= 3.9"
PY="$PYENV/bin/python"
if [[ -x "$PY" ]] && ! "$PY" -c 'import sys' >/dev/null 2>&1; then
  [[ -f "$PYENV/pyvenv.cfg" ]] || die "$PY does not run and $PYENV is not a virtual environment (no pyvenv.cfg)"
  note "the virtual environment $PYENV is broken (its interpreter does not run): making it again"
  rm -rf "$PYENV"
fi
if [[ ! -x "$PY" ]]; then
  note "making the virtual environment $PYENV"
  mkdir -p "$(dirname "$PYENV")"
  "$PYTHON" -m venv "$PYENV" ||
    die "$PYTHON -m venv $PYENV failed (Debian/Ubuntu: apt-get install python3-venv)"
fi
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip (make the venv with a Python that has ensurepip)"
pip_install() { "$PY" -m pip install --disable-pip-version-check "$@"; }

# --- 2. the package, built from this repository -----------------------------------------
# The build's dependencies as dev.sh finds them: system headers first, else .deps/usr.
multiarch="$(gcc -print-multiarch 2>/dev/null || true)"
[[ -n "$multiarch" ]] || multiarch="$(uname -m)-linux-gnu"
missing=()
for h in fmt/core.h yaml-cpp/yaml.h xxhash.h CLI/CLI.hpp; do
  found=""
  for d in /usr/include /usr/local/include "/usr/include/$multiarch"; do
    [[ -f "$d/$h" ]] && found=1 && break
  done
  [[ -n "$found" ]] || missing+=("$h")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ -d "$DEPS" ]]; then
    note "using the unpacked packages in $DEPS for: ${missing[*]}"
    export CMAKE_PREFIX_PATH="$DEPS${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    export CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }-isystem $DEPS/include"
    export PATH="$DEPS/bin:$PATH"
  else
    die "missing build dependencies: ${missing[*]}
  Install them (as root): apt-get install -y --no-install-recommends libfmt-dev libyaml-cpp-dev libxxhash-dev libcli11-dev
  or unpack those Debian packages into $DEPS (README.md, dev.sh)."
  fi
fi
if [[ -z "${CUDA_HOME:-}" ]]; then
  for d in "${CUDA_PATH:-}" /usr/local/cuda; do
    if [[ -n "$d" && -f "$d/include/cuda.h" && -f "$d/include/nvrtc.h" ]]; then
      export CUDA_HOME="$d"
      break
    fi
  done
fi
[[ -n "${CUDA_HOME:-}" && -f "$CUDA_HOME/include/cuda.h" ]] ||
  die "the CUDA toolkit headers (cuda.h, nvrtc.h) were not found in \$CUDA_HOME (${CUDA_HOME:-unset}),
  \$CUDA_PATH (${CUDA_PATH:-unset}) or /usr/local/cuda; install the toolkit (headers only are needed) or set CUDA_HOME"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"

# Skipped when the venv already holds a build of these very sources (a hash of what the wheel
# is built from, and of the build's environment); FLASHGEN_PY_REINSTALL=1 installs anyway.
inputs=()
for p in CMakeLists.txt pyproject.toml README.md cmake runtime gen templates include profiles tools python; do
  [[ -e "$REPO/$p" ]] && inputs+=("$p")
done
sources_hash="$(cd "$REPO" && {
  find "${inputs[@]}" -type f -not -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha1sum
  printf '%s\n' "CUDA_HOME=$CUDA_HOME" "CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-}" "CXXFLAGS=${CXXFLAGS:-}"
} | sha1sum | cut -c1-40)"
stamp="$PYENV/.flashgen-sources"
if [[ "${FLASHGEN_PY_REINSTALL:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$sources_hash" ]] &&
  (cd / && "$PY" -c 'import flashgen' >/dev/null 2>&1); then
  note "the package in $PYENV is built from these sources already (FLASHGEN_PY_REINSTALL=1 reinstalls)"
else
  rm -f "$stamp"
  build_dir=(--config-settings="build-dir=${FLASHGEN_PY_BUILD_DIR:-$REPO/build-wheel}")
  note "pip install $REPO (builds libflashgen: minutes the first time, then incremental)"
  pip_install --progress-bar off ${build_dir[@]+"${build_dir[@]}"} "$REPO" ||
    die "pip install $REPO failed (the build's output is above)"
  echo "$sources_hash" >"$stamp"
fi

# --- 3. test requirements ------------------------------------------------------------------
need=()
"$PY" -c 'import pytest' >/dev/null 2>&1 || need+=(pytest)
"$PY" -c 'import numpy' >/dev/null 2>&1 || need+=(numpy)
if [[ ${#need[@]} -gt 0 ]]; then
  pip_install --progress-bar off "${need[@]}" || die "pip install ${need[*]} failed"
fi
if "$PY" -c 'import torch' >/dev/null 2>&1; then
  note "PyTorch $("$PY" -c 'import torch; print(torch.__version__)') is installed: the torch tests run"
elif [[ "${FLASHGEN_PY_TORCH:-0}" == 1 ]]; then
  note "FLASHGEN_PY_TORCH=1: pip install ${FLASHGEN_PY_TORCH_SPEC:-torch} (large)"
  pip_install --progress-bar off "${FLASHGEN_PY_TORCH_SPEC:-torch}" || die "pip install of PyTorch failed"
else
  note "PyTorch is not installed (FLASHGEN_PY_TORCH=1 installs it): the GPU tier and the torch-only CPU tests are skipped"
fi

# --- 4. pytest -------------------------------------------------------------------------------
# From outside the repository, so that `import flashgen` is the installed package (not
# python/flashgen), with no .pytest_cache written into the tree.
cd "$PYENV"
(cd / && "$PY" -c 'import flashgen, os; print("test/python/run.sh: flashgen", flashgen.__version__, "from",
  os.path.dirname(flashgen.__file__), "| gpu_available:", flashgen.gpu_available())') ||
  die "the installed package does not import"
set +e
"$PY" -m pytest "$REPO/test/python" -rs -p no:cacheprovider "$@"
status=$?
set -e
[[ $status -eq 0 ]] || note "pytest exited with status $status"
exit "$status"
