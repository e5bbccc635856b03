#!/usr/bin/env python3
"""Host time per call of each piece of a Python-driven market step, at a size where the GPU work
is negligible (N=256), so the loop is bound by the host: where bench/python_market.py's one-step-
per-call gap to C++ goes. Usage: step_overhead.py <configs/markets/bench_ou.toml> [N]"""
import sys
import time

import torch

import foxhunt


def per_call(fn, iters=4000):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    host = (time.perf_counter() - t0) / iters
    torch.cuda.synchronize()
    return host * 1e6


def main():
    config = foxhunt.load_market_config(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    stream = torch.cuda.current_stream()
    m = foxhunt.Market(config, n, stream=stream.cuda_stream)
    m.reset(7)
    acts = torch.randint(0, len(config.levels), (64, n, config.assets), dtype=torch.int32, device="cuda")
    a0 = acts[0]
    out = m.step(a0)
    flags = [torch.from_dlpack(out[2]), torch.from_dlpack(out[3])]
    env = foxhunt.MarketVectorEnv(config, n)
    env.reset(seed=7)
    tm = foxhunt.TorchMarket(config, n)
    tm.reset(7)
    rows = [
        ("acts[t] (torch indexing)", lambda: acts[3]),
        ("tensor.__dlpack__(stream=s)", lambda: a0.__dlpack__(stream=stream.cuda_stream or 1)),
        ("market.step(tensor)", lambda: m.step(a0)),
        ("torch.from_dlpack(out) x1", lambda: torch.from_dlpack(out[0])),
        ("market._time_cpp_steps 1 call", None),
        ("torch._C._to_dlpack(tensor) (no stream logic)", lambda: torch._C._to_dlpack(a0)),
        ("torch.cuda.current_stream(0).cuda_stream", lambda: torch.cuda.current_stream(0).cuda_stream),
        ("terminated | truncated (a torch op)", lambda: flags[0] | flags[1]),
        ("VectorEnv's key of the 5 arrays", lambda: tuple((a.data_ptr, a.shape) for a in out)),
        ("VectorEnv.step(tensor)", lambda: env.step(a0)),
        ("TorchMarket.step(tensor)", lambda: tm.step(a0)),
        ("bench py_step (Market.step + 4 from_dlpack)",
         lambda: [torch.from_dlpack(x) for x in m.step(acts[3])[:4]]),
    ]
    for name, fn in rows:
        if fn is None:
            print(f"{name:40s} {m._time_cpp_steps(acts[:1], 2000) * 1e6:8.2f} us (GPU time per call)")
        else:
            print(f"{name:40s} {per_call(fn):8.2f} us host")


if __name__ == "__main__":
    main()
