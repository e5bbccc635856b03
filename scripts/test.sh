#!/usr/bin/env bash
# The tests: installs what is missing (and the test-only packages where the platform has them),
# builds, runs every ctest (labels cpu and gpu). Without a CUDA device the GPU tests report as
# skipped with the reason. Extra args go to ctest (e.g. -L cpu).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_foxhunt
install_test_packages
log "testing"
ctest --test-dir "$FOXHUNT_BUILD" --output-on-failure -j "$(nproc)" "$@"
