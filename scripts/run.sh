#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs `foxhunt <args>` (default: training
# on the shipped CartPole pipeline config).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_foxhunt
[ $# -gt 0 ] || set -- train --config "$FOXHUNT_ROOT/configs/pipeline_dqn_cartpole.toml"
exec "$FOXHUNT_BUILD/bin/foxhunt" "$@"
