#pragma once
// The four pipeline actors, one file each, and what they share (actors/pipeline_shared.hpp: the
// configuration, the credit protocol, the progress counts), for the code that spawns them.
#include "actors/collector_actor.hpp"
#include "actors/learner_actor.hpp"
#include "actors/pipeline_shared.hpp"
#include "actors/replay_actor.hpp"
#include "actors/target_sync_actor.hpp"
