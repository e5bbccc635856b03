#!/usr/bin/env bash
# Builds, then installs the devel component (the CMake package: headers, static libraries,
# lib/cmake/foxhunt, the bundled toml++; docs/python.md) into a folder (default dist-py/) that a GPU
# host builds the Python module against with its own Python: scripts/python-gpu-host.sh.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_foxhunt
prefix=${1:-$FOXHUNT_ROOT/dist-py}
mkdir -p "$prefix" && prefix=$(cd "$prefix" && pwd)
rm -rf "$prefix"
cmake --install "$FOXHUNT_BUILD" --prefix "$prefix" --component devel --strip >&2
# The module built here is for this machine's Python; the host builds its own.
rm -rf "$prefix/lib/python"
log "packaged $(du -sh "$prefix" | cut -f1) into $prefix"
