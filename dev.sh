#!/usr/bin/env bash
# Developer entry point.
#
#   ./dev.sh example [args...]   build, then run ./build/examples/attention [args...]
#   ./dev.sh test [ctest args...] build, then run the CPU and GPU test tiers (ctest)
#
# Each command first makes sure the build dependencies are present:
#   - headers fmt/core.h, yaml-cpp/yaml.h, doctest/doctest.h, xxhash.h, CLI/CLI.hpp
#     and the tools cmake, g++, make (or ninja);
#   - when something is missing: if .deps/usr exists in the repository (Debian
#     packages unpacked with `dpkg -x`, for offline machines) and provides it, that
#     tree is used; otherwise, when apt-get is usable (root or password-less sudo),
#     the Debian packages are installed;
#   - the CUDA toolkit's headers (cuda.h, nvrtc.h) from $CUDA_HOME, $CUDA_PATH or
#     /usr/local/cuda (no GPU and no driver are needed to build).
# Then it configures build/ (RelWithDebInfo) once and builds with all cores.
# Running it again when everything is in place only re-runs the (no-op) build.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD="$REPO/build"
DEPS="$REPO/.deps/usr"
APT_PACKAGES=(cmake g++ make libfmt-dev libyaml-cpp-dev doctest-dev libxxhash-dev libcli11-dev)
HEADERS=(fmt/core.h yaml-cpp/yaml.h doctest/doctest.h xxhash.h CLI/CLI.hpp)

usage() {
  cat <<EOF
usage: ./dev.sh example [args...]     build, then run build/examples/attention
       ./dev.sh test [ctest args...]  build, then run ctest --test-dir build --output-on-failure
EOF
}

die() {
  echo "dev.sh: error: $*" >&2
  exit 1
}

note() { echo "dev.sh: $*" >&2; }

cmd="${1:-}"
if [[ $# -gt 0 ]]; then shift; fi
case "$cmd" in
  example | test) ;;
  -h | --help | help)
    usage
    exit 0
    ;;
  *)
    usage >&2
    exit 2
    ;;
esac

multiarch="$(gcc -print-multiarch 2>/dev/null || true)"
[[ -n "$multiarch" ]] || multiarch="$(uname -m)-linux-gnu"

# missing <prefix>... : prints what is not found under the given prefixes
# (in addition to the system include dirs and PATH), one item per line.
missing() {
  local item d found
  for item in "${HEADERS[@]}"; do
    found=""
    for d in /usr/include /usr/local/include "/usr/include/$multiarch"; do
      [[ -f "$d/$item" ]] && found=1 && break
    done
    for d in "$@"; do
      [[ -z "$found" && -f "$d/include/$item" ]] && found=1
    done
    [[ -n "$found" ]] || echo "$item"
  done
  for item in cmake g++; do
    found=""
    command -v "$item" >/dev/null 2>&1 && found=1
    for d in "$@"; do
      [[ -z "$found" && -x "$d/bin/$item" ]] && found=1
    done
    [[ -n "$found" ]] || echo "$item"
  done
  if ! command -v make >/dev/null 2>&1 && ! command -v ninja >/dev/null 2>&1; then
    found=""
    for d in "$@"; do
      [[ -z "$found" && ( -x "$d/bin/make" || -x "$d/bin/ninja" ) ]] && found=1
    done
    [[ -n "$found" ]] || echo "make"
  fi
}

apt_usable() {
  command -v apt-get >/dev/null 2>&1 || return 1
  [[ "$(id -u)" == 0 ]] && return 0
  command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1
}

# --- 1. build dependencies ---------------------------------------------------
use_deps=""
mapfile -t absent < <(missing)
if [[ ${#absent[@]} -gt 0 ]]; then
  if [[ -d "$DEPS" ]] && [[ -z "$(missing "$DEPS")" ]]; then
    note "using unpacked packages in $DEPS for: ${absent[*]}"
    use_deps=1
  elif apt_usable; then
    note "installing missing build dependencies (${absent[*]}) with apt-get"
    sudo_cmd=()
    [[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo -n)
    export DEBIAN_FRONTEND=noninteractive
    if ! { "${sudo_cmd[@]}" apt-get update &&
      "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${APT_PACKAGES[@]}"; }; then
      die "apt-get could not install ${APT_PACKAGES[*]} (offline?). Unpack those Debian
  packages into $DEPS instead (dpkg -x <package>.deb $REPO/.deps)."
    fi
    mapfile -t absent < <(missing)
    [[ ${#absent[@]} -eq 0 ]] || die "still missing after apt-get install: ${absent[*]}"
  else
    die "missing build dependencies: ${absent[*]}
  Install them with (as root):
    apt-get update && apt-get install -y --no-install-recommends ${APT_PACKAGES[*]}
  or, on a machine without network access, unpack those Debian packages into
  $DEPS (dpkg -x <package>.deb $REPO/.deps)."
  fi
fi
if [[ -n "$use_deps" ]]; then
  export PATH="$DEPS/bin:$PATH"
fi

# --- 2. CUDA toolkit headers ---------------------------------------------------
cuda_root=""
for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  if [[ -n "$d" && -f "$d/include/cuda.h" && -f "$d/include/nvrtc.h" ]]; then
    cuda_root="$d"
    break
  fi
done
if [[ -z "$cuda_root" ]]; then
  die "the CUDA toolkit headers (cuda.h and nvrtc.h) were not found in \$CUDA_HOME (${CUDA_HOME:-unset}),
  \$CUDA_PATH (${CUDA_PATH:-unset}) or /usr/local/cuda. Install the CUDA toolkit (only its headers
  are needed to build; no GPU or driver) or set CUDA_HOME to its root."
fi
export CUDA_HOME="$cuda_root"

# --- 3. configure (once) and build ----------------------------------------------
# Both variables are always passed so that switching to or from .deps/usr
# does not leave stale values in the CMake cache.
config_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [[ -n "$use_deps" ]]; then
  config_args+=("-DCMAKE_PREFIX_PATH=$DEPS" "-DCMAKE_CXX_FLAGS=${CXXFLAGS:-} -isystem $DEPS/include")
else
  config_args+=("-DCMAKE_PREFIX_PATH=" "-DCMAKE_CXX_FLAGS=${CXXFLAGS:-}")
fi
stamp="$BUILD/.dev-sh-configure"
wanted="$(printf '%s\n' "CUDA_HOME=$CUDA_HOME" "${config_args[@]}")"
if [[ ! -f "$BUILD/CMakeCache.txt" || ! -f "$stamp" || "$(cat "$stamp")" != "$wanted" ]]; then
  generator=()
  if [[ ! -f "$BUILD/CMakeCache.txt" ]] && ! command -v make >/dev/null 2>&1; then
    generator=(-G Ninja)
  fi
  cmake -S "$REPO" -B "$BUILD" "${generator[@]}" "${config_args[@]}"
  printf '%s\n' "$wanted" >"$stamp"
fi

jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
if [[ "$cmd" == example ]]; then
  cmake --build "$BUILD" -j "$jobs" --target attention
else
  cmake --build "$BUILD" -j "$jobs"
fi

# --- 4. run ------------------------------------------------------------------------
if [[ "$cmd" == example ]]; then
  exec "$BUILD/examples/attention" "$@"
else
  exec ctest --test-dir "$BUILD" --output-on-failure "$@"
fi
