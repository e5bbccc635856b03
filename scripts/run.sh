#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs `foxhunt <args>` (default: devices).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_foxhunt
[ $# -gt 0 ] || set -- devices
exec "$FOXHUNT_BUILD/bin/foxhunt" "$@"
