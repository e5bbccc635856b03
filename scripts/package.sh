#!/usr/bin/env bash
# Builds, then installs a self-contained folder (default dist/) for a GPU node that lacks
# CAF/fmt/spdlog: bin/ (foxhunt, the test suites, the benchmarks) and lib/ (bundled libraries).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_foxhunt
prefix=${1:-$FOXHUNT_ROOT/dist}
mkdir -p "$prefix" && prefix=$(cd "$prefix" && pwd)  # absolute: the checks below run from /
rm -rf "$prefix"
# The runtime component only (the CMake package and Python module are scripts/python-package.sh's);
# symbols stripped: the folder must stay under 64 MiB.
cmake --install "$FOXHUNT_BUILD" --prefix "$prefix" --component Unspecified --strip >&2
log "packaged $(du -sh "$prefix" | cut -f1) into $prefix"
# The folder is self-contained: its shipped configs (share/foxhunt/configs) and the market files
# they name must check from inside it, with no source tree in reach (run from /).
for f in "$prefix"/share/foxhunt/configs/*.toml; do
  (cd / && env -u FOXHUNT_CONFIGS "$prefix/bin/foxhunt" check --config "$f" >/dev/null) ||
    { log "error: the packaged $f does not pass foxhunt check"; exit 1; }
done
