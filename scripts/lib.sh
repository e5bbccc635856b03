# shellcheck shell=bash
# Shared by scripts/run.sh and scripts/test.sh: install what is missing, configure, build.
# Safe to run any number of times: installed packages and an up-to-date build are left alone.
set -euo pipefail

FOXHUNT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FOXHUNT_BUILD=${FOXHUNT_BUILD:-$FOXHUNT_ROOT/build}
FOXHUNT_CUDA_ARCHITECTURES=${FOXHUNT_CUDA_ARCHITECTURES:-90}

# Debian 12 packages the build needs (the CUDA 13 toolkit is the one thing we do not install).
FOXHUNT_PACKAGES=(cmake ninja-build g++ libcaf-dev libspdlog-dev libgtest-dev libtomlplusplus-dev
                  libcli11-dev nlohmann-json3-dev libpng-dev python3-dev pybind11-dev)
# Packages only some tests use (chromium: report.html rendered in headless Chromium). A platform
# without them still builds and tests; those tests skip with the reason.
FOXHUNT_TEST_PACKAGES=(chromium)

log() { printf '[foxhunt] %s\n' "$*" >&2; }

install_packages() {
  local missing=()
  for p in "${FOXHUNT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

install_test_packages() {
  command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 || {
    log "not a Debian system: skipping the test-only packages (${FOXHUNT_TEST_PACKAGES[*]})"
    return 0
  }
  local missing=()
  for p in "${FOXHUNT_TEST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q >&2 || true
  local available=()
  for p in "${missing[@]}"; do
    if apt-cache show "$p" >/dev/null 2>&1; then
      available+=("$p")
    else
      log "test package $p is not available on this platform: the tests that need it skip"
    fi
  done
  [ ${#available[@]} -eq 0 ] && return 0
  log "installing test packages: ${available[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${available[@]}" >&2 ||
    log "could not install ${available[*]}: the tests that need them skip"
}

find_nvcc() {
  if command -v nvcc >/dev/null 2>&1; then command -v nvcc; return; fi
  for d in /usr/local/cuda /usr/local/cuda-13*; do
    [ -x "$d/bin/nvcc" ] && { echo "$d/bin/nvcc"; return; }
  done
  log "error: nvcc not found. foxhunt needs the CUDA 13 toolkit (nvcc, cuBLAS, NCCL, CUPTI) in /usr/local/cuda"
  exit 1
}

build_foxhunt() {
  install_packages
  local nvcc
  nvcc=$(find_nvcc)
  if [ ! -f "$FOXHUNT_BUILD/build.ninja" ]; then
    log "configuring $FOXHUNT_BUILD (CUDA architectures $FOXHUNT_CUDA_ARCHITECTURES)"
    cmake -S "$FOXHUNT_ROOT" -B "$FOXHUNT_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_COMPILER="$nvcc" -DFOXHUNT_CUDA_ARCHITECTURES="$FOXHUNT_CUDA_ARCHITECTURES" >&2
  fi
  log "building"
  cmake --build "$FOXHUNT_BUILD" >&2
}
