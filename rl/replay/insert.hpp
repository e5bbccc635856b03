#pragma once
// Insert of one reserved (steps, envs) block into the ring: one kernel launch that
//  - copies obs / next obs (cast to the storage dtype), actions, rewards and flags into the slots,
//  - stamps the new leaves with the running max priority (read on the device, never by the host),
//  - assembles the n-step return, bootstrap discount and bootstrap slot of every new step and of
//    the producer's last n-1 older steps whose windows reach into the new block (windows are cut
//    at termination with discount 0, at truncation with discount gamma^k, and for now at the
//    newest step; the next insert of that producer completes them),
//  - and rebuilds the tree nodes above the new slots: a warp per touched level-1 node (a node of
//    only new leaves is written without reading anything: sum 128 p, min p), and independently a
//    warp per touched level-2 node, computed from the untouched children's stored values plus the
//    touched ones recomputed in registers (no wait for the level-1 writers); levels >= 3 by the
//    last of their expected arrivals (counts known from the slot ranges, counters in the tree
//    reset by their last arriver).
// The row data is copied by all the other blocks, one thread per (row, element group) item.
#include <cuda_runtime.h>

#include "rl/replay/priority_tree.hpp"
#include "rl/replay/ring.hpp"
#include "rl/replay/slots.hpp"
#include "rl/replay/state.hpp"
#include "rl/replay/transition_batch.hpp"

namespace foxhunt::rl {

// `tree` is null in uniform mode. The batch must already be validated against the ring's layout
// (ReplayBuffer::insert does it). rows == 0 never happens (reserve() rejects it).
void insert_transitions(const RingView& ring, const TreeView* tree, ReplayState* state, const TransitionBatch& batch,
                        const Reservation& reservation, int n_step, float gamma, cudaStream_t stream);

}  // namespace foxhunt::rl
