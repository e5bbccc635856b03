#!/usr/bin/env python3
"""PyTorch baseline of bench/replay.cu: the same replay operations as plain tensor ops on the GPU.

  insert: write a (1, B) block into the ring at the next B slots (obs, next obs, action, reward,
          flags), new priorities = the running max (a device tensor), and n-step returns for the
          oldest step of a per-producer n-step history (the usual PyTorch n-step buffer).
  sample: cumsum of p^alpha + stratified uniforms + searchsorted, IS weights from the global min
          priority, gather of obs / action / return / discount / bootstrap next obs.
  update: p = (|td| + eps)^alpha scattered into the priorities, running max raised.

Eager PyTorch, one op per line, timed with CUDA events (median of many single operations).
Prints one line per case:  RESULT op=<insert|sample|update> batch=<B> capacity=<C> us=<median>
or a single line "baseline skipped: <reason>" when torch or CUDA is missing.
"""
import argparse
import sys

OBS_DIM = 64
N_STEP = 3
GAMMA = 0.99
ALPHA = 0.6
BETA = 0.4
EPS = 1e-6
SLEEP_CYCLES = 200_000  # ~100 us at the H200's ~2 GHz SM clock


def median_us(torch, fn, warmup, reps):
    """Median stream time of fn: a GPU sleep queued first keeps the stream busy while Python
    enqueues the operation, as bench/replay.cu measures its own (bench::median_stream_ms)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    times.sort()
    return times[len(times) // 2]


class TorchReplay:
    def __init__(self, torch, capacity, dev):
        self.t = torch
        self.C = capacity
        self.dev = dev
        C = capacity
        self.obs = torch.empty(C, OBS_DIM, device=dev).uniform_(-2, 2)
        self.next_obs = torch.empty(C, OBS_DIM, device=dev).uniform_(-2, 2)
        self.actions = torch.randint(0, 8, (C,), dtype=torch.int32, device=dev)
        self.rewards = torch.empty(C, device=dev).uniform_(-1, 1)
        self.flags = torch.zeros(C, dtype=torch.uint8, device=dev)
        self.returns = torch.empty(C, device=dev).uniform_(-1, 1)
        self.discounts = torch.full((C,), GAMMA ** N_STEP, device=dev)
        self.boot = (torch.arange(C, device=dev) + N_STEP) % C
        self.prio = (torch.empty(C, device=dev).uniform_(0, 3) + EPS) ** ALPHA
        self.max_prio = self.prio.max().reshape(1)
        self.head = 0
        self.hist = {}
        self.strata = {}

    def insert(self, b):
        t = self.t
        B = b["rewards"].shape[0]
        slots = (t.arange(B, device=self.dev) + self.head) % self.C
        self.head += B
        self.obs[slots] = b["obs"]
        self.next_obs[slots] = b["next_obs"]
        self.actions[slots] = b["actions"]
        self.rewards[slots] = b["rewards"]
        self.flags[slots] = b["terminated"] | (b["truncated"] << 1)
        self.prio[slots] = self.max_prio
        # n-step history of this producer: (n, B) rewards, terminated, ended, slots.
        h = self.hist.get(B)
        if h is None:
            h = {"r": t.zeros(N_STEP, B, device=self.dev), "term": t.zeros(N_STEP, B, device=self.dev),
                 "end": t.zeros(N_STEP, B, device=self.dev),
                 "slots": t.zeros(N_STEP, B, dtype=t.int64, device=self.dev), "count": 0}
            self.hist[B] = h
        pos = h["count"] % N_STEP
        h["r"][pos] = b["rewards"]
        h["term"][pos] = b["terminated"].float()
        h["end"][pos] = (b["terminated"] | b["truncated"]).float()
        h["slots"][pos] = slots
        h["count"] += 1
        if h["count"] >= N_STEP:  # the oldest step's window is complete
            oldest = (pos + 1) % N_STEP
            ret = t.zeros(B, device=self.dev)
            disc = t.ones(B, device=self.dev)
            live = t.ones(B, device=self.dev)
            boot = h["slots"][oldest].clone()
            for k in range(N_STEP):
                j = (oldest + k) % N_STEP
                ret += live * disc * h["r"][j]
                boot = t.where(live > 0, h["slots"][j], boot)
                disc = t.where(live > 0, disc * GAMMA * (1 - h["term"][j]), disc)
                live = live * (1 - h["end"][j])
            old = h["slots"][oldest]
            self.returns[old] = ret
            self.discounts[old] = disc
            self.boot[old] = boot

    def sample(self, B):
        t = self.t
        strata = self.strata.get(B)
        if strata is None:
            strata = t.arange(B, device=self.dev, dtype=t.float32)
            self.strata[B] = strata
        cs = t.cumsum(self.prio, 0)
        total = cs[-1]
        u = (strata + t.rand(B, device=self.dev)) * (total / B)
        idx = t.searchsorted(cs, u).clamp_(max=self.C - 1)
        p = self.prio[idx]
        w = (self.prio.min() / p) ** BETA
        return (idx, w, self.obs[idx], self.actions[idx], self.returns[idx], self.discounts[idx],
                self.next_obs[self.boot[idx]])

    def update(self, idx, td):
        p = (td.abs() + EPS) ** ALPHA
        self.prio[idx] = p
        t = self.t
        t.maximum(self.max_prio, p.max(), out=self.max_prio)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--capacities", default="1048576,16777216")
    ap.add_argument("--batches", default="256,4096")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means no baseline
        print(f"baseline skipped: torch is not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        print("baseline skipped: torch.cuda.is_available() is False")
        return 0
    dev = torch.device("cuda")
    torch.manual_seed(0)
    for C in [int(x) for x in args.capacities.split(",")]:
        rb = TorchReplay(torch, C, dev)
        for B in [int(x) for x in args.batches.split(",")]:
            block = {"obs": torch.empty(B, OBS_DIM, device=dev).uniform_(-2, 2),
                     "next_obs": torch.empty(B, OBS_DIM, device=dev).uniform_(-2, 2),
                     "actions": torch.randint(0, 8, (B,), dtype=torch.int32, device=dev),
                     "rewards": torch.empty(B, device=dev).uniform_(-1, 1),
                     "terminated": (torch.rand(B, device=dev) < 0.005).to(torch.uint8),
                     "truncated": (torch.rand(B, device=dev) < 0.005).to(torch.uint8)}
            us = median_us(torch, lambda: rb.insert(block), 10, args.reps)
            print(f"RESULT op=insert batch={B} capacity={C} us={us:.3f}", flush=True)
            us = median_us(torch, lambda: rb.sample(B), 10, args.reps)
            print(f"RESULT op=sample batch={B} capacity={C} us={us:.3f}", flush=True)
            idx = rb.sample(B)[0]
            td = torch.empty(B, device=dev).uniform_(-3, 3)
            us = median_us(torch, lambda: rb.update(idx, td), 10, args.reps)
            print(f"RESULT op=update batch={B} capacity={C} us={us:.3f}", flush=True)
        del rb
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
