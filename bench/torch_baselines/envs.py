#!/usr/bin/env python3
"""The benchmark market of bench/envs.cu written in PyTorch, one tensor op per line, on the GPU.

Same market as rl/envs/bench_market.hpp: OU log price (kappa 5, theta 0, sigma 0.2, dt 1/252,
exact transition), 3 actions (short, flat, long), 5 bps fees on traded notional,
reward = position * (e^r - 1) - cost, 256-step episodes (truncated) with auto-reset, observation =
last 32 log returns / (sigma sqrt(dt)) plus the position (33 f32) written every step.

Usage: envs.py [N ...]   (default 2^12 .. 2^22). Prints one line per size:
    RESULT env=bench_market n=<N> steps_per_s=<float> ms_per_step=<float>
or a single line `SKIP <reason>` when torch or CUDA is missing (exit status 0).
FOXHUNT_BASELINE_DEVICE=cpu runs it on the CPU (to check the script on a machine without a GPU).
"""
import math
import os
import sys
import time

KAPPA = 5.0
THETA = 0.0
SIGMA = 0.2
DT = 1.0 / 252.0
FEE = 5e-4
EPISODE = 256
WINDOW = 32
DECAY = math.exp(-KAPPA * DT)
NOISE_SD = SIGMA * math.sqrt((1.0 - DECAY * DECAY) / (2.0 * KAPPA))
STAT_SD = SIGMA / math.sqrt(2.0 * KAPPA)
INV_SCALE = 1.0 / (SIGMA * math.sqrt(DT))


class BenchMarket:
    def __init__(self, torch, n, device):
        self.torch = torch
        self.n = n
        self.device = device
        self.x = torch.randn(n, device=device) * STAT_SD + THETA
        self.pos = torch.zeros(n, device=device)
        self.t = torch.zeros(n, dtype=torch.int32, device=device)
        self.window = torch.zeros(n, WINDOW, device=device)
        self.obs = torch.zeros(n, WINDOW + 1, device=device)

    def step(self, action):
        torch = self.torch
        new_pos = action.to(torch.float32)
        new_pos = new_pos - 1.0
        trade = new_pos - self.pos
        trade = trade.abs()
        cost = trade * FEE
        z = torch.randn(self.n, device=self.device)
        dev = self.x - THETA
        dev = dev * DECAY
        noise = z * NOISE_SD
        x_new = dev + noise
        x_new = x_new + THETA
        r = x_new - self.x
        ret = torch.expm1(r)
        reward = new_pos * ret
        reward = reward - cost
        scaled = r * INV_SCALE
        window = torch.roll(self.window, -1, dims=1)
        window[:, -1] = scaled
        t = self.t + 1
        truncated = t >= EPISODE
        terminated = torch.zeros_like(truncated)
        z0 = torch.randn(self.n, device=self.device)
        x0 = z0 * STAT_SD
        x0 = x0 + THETA
        self.x = torch.where(truncated, x0, x_new)
        self.pos = torch.where(truncated, 0.0, new_pos)
        self.t = torch.where(truncated, 0, t)
        keep = truncated.logical_not()
        keep = keep.unsqueeze(1)
        self.window = window * keep
        self.obs[:, :WINDOW] = self.window
        self.obs[:, WINDOW] = self.pos
        return self.obs, reward, terminated, truncated


def main(argv):
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "no baseline"
        print(f"SKIP torch not importable: {e}")
        return 0
    device_name = os.environ.get("FOXHUNT_BASELINE_DEVICE", "cuda")
    if device_name == "cuda" and not torch.cuda.is_available():
        print("SKIP torch sees no CUDA device")
        return 0
    sizes = [int(a) for a in argv[1:]] or [1 << k for k in range(12, 23)]
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    torch.manual_seed(1234)
    for n in sizes:
        env = BenchMarket(torch, n, device)
        steps = max(20, min(300, (1 << 24) // n))
        actions = [torch.randint(0, 3, (n,), dtype=torch.int32, device=device) for _ in range(8)]
        for k in range(10):
            env.step(actions[k % 8])
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for k in range(steps):
                env.step(actions[k % 8])
            stop.record()
            stop.synchronize()
            ms = start.elapsed_time(stop) / steps
        else:
            t0 = time.perf_counter()
            for k in range(steps):
                env.step(actions[k % 8])
            ms = (time.perf_counter() - t0) * 1e3 / steps
        print(f"RESULT env=bench_market n={n} steps_per_s={n / (ms * 1e-3):.6e} ms_per_step={ms:.6f}", flush=True)
        del env, actions
        if cuda:
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
