#!/usr/bin/env python3
"""The benchmark market of bench/envs.cu written in PyTorch, one tensor op per line, on the GPU.

The same market as rl::MarketEnv on configs/markets/bench_ou.toml, step for step as
rl/envs/market.hpp specifies it (accounting in float64, observations f32):
  one asset, log price x on OU around log(initial_price) + theta (kappa 5, theta 0, sigma 0.2,
  dt 1/252, exact transition); actions int32 in {0, 1, 2} = target weight {-1, 0, +1} x
  position_limit 1; equity E = cash + q S; the trade to q* = w E / S pays 5 bps of notional
  (no spread, impact or borrow in this file); reward = (E' - E) / initial_cash after the price
  moves; terminated when E' < 0.1 initial_cash, truncated after 256 steps; the episode statistics
  the env keeps (peak, drawdown, sum and sum of squares of returns, turnover, trades, return);
  observation (36 f32, every step) = the last 32 log returns / (sigma sqrt(dt)), oldest first,
  then the weight q S / E, the unrealized PnL q (S - cost basis) / E, the progress t / 256 and
  log(E / initial_cash); a reset starts x from the stationary law and simulates 32 steps of
  history for the window, flat book, cash = initial_cash.
Only the random numbers differ (torch.randn, not Philox).

Usage: envs.py [N ...]   (default 2^12 .. 2^22). Prints one line per size:
    RESULT env=bench_ou n=<N> steps_per_s=<float> ms_per_step=<float>
or a single line `SKIP <reason>` when torch or CUDA is missing (exit status 0).
FOXHUNT_BASELINE_DEVICE=cpu runs it on the CPU (to check the script on a machine without a GPU).
"""
import math
import os
import sys
import time

# configs/markets/bench_ou.toml
KAPPA = 5.0
THETA = 0.0
SIGMA = 0.2
DT = 1.0 / 252.0
INITIAL_PRICE = 1.0
INITIAL_CASH = 1_000_000.0
MIN_EQUITY = 0.1
FEE = 5e-4
POSITION_LIMIT = 1.0
EPISODE = 256
WINDOW = 32
LEVELS = (-1.0, 0.0, 1.0)

MEAN = math.log(INITIAL_PRICE) + THETA
DECAY = math.exp(-KAPPA * DT)
NOISE_SD = SIGMA * math.sqrt((1.0 - DECAY * DECAY) / (2.0 * KAPPA))
STAT_SD = SIGMA / math.sqrt(2.0 * KAPPA)
RET_SCALE = 1.0 / (SIGMA * math.sqrt(DT))


class BenchOuMarket:
    def __init__(self, torch, n, device):
        self.torch = torch
        self.n = n
        self.device = device
        f64 = torch.float64
        self.levels = torch.tensor(LEVELS, dtype=f64, device=device) * POSITION_LIMIT
        self.x = torch.zeros(n, dtype=f64, device=device)
        self.q = torch.zeros(n, dtype=f64, device=device)
        self.cb = torch.zeros(n, dtype=f64, device=device)
        self.cash = torch.zeros(n, dtype=f64, device=device)
        self.peak = torch.zeros(n, dtype=f64, device=device)
        self.sum_ret = torch.zeros(n, dtype=f64, device=device)
        self.sum_ret_sq = torch.zeros(n, dtype=f64, device=device)
        self.max_dd = torch.zeros(n, dtype=f64, device=device)
        self.turnover = torch.zeros(n, dtype=f64, device=device)
        self.ep_reward = torch.zeros(n, dtype=f64, device=device)
        self.trades = torch.zeros(n, dtype=torch.int32, device=device)
        self.t = torch.zeros(n, dtype=torch.int32, device=device)
        self.window = torch.zeros(n, WINDOW, device=device)
        self.tail = torch.zeros(n, 4, device=device)
        self.episodes = torch.zeros((), dtype=f64, device=device)
        self.return_total = torch.zeros((), dtype=f64, device=device)
        self.reset(torch.arange(n, device=device))

    def reset(self, idx):
        """A fresh episode for the environments idx: stationary start, 32 steps of history."""
        torch = self.torch
        m = idx.numel()
        z0 = torch.randn(m, dtype=torch.float64, device=self.device)
        x = z0 * STAT_SD
        x = x + MEAN
        hist = torch.empty(m, WINDOW, device=self.device)
        for j in range(WINDOW):
            z = torch.randn(m, dtype=torch.float64, device=self.device)
            dev = x - MEAN
            dev = dev * DECAY
            noise = z * NOISE_SD
            x_new = dev + noise
            x_new = x_new + MEAN
            r = x_new - x
            hist[:, j] = r * RET_SCALE
            x = x_new
        self.x[idx] = x
        self.window[idx] = hist
        self.q[idx] = 0.0
        self.cb[idx] = 0.0
        self.cash[idx] = INITIAL_CASH
        self.peak[idx] = INITIAL_CASH
        self.sum_ret[idx] = 0.0
        self.sum_ret_sq[idx] = 0.0
        self.max_dd[idx] = 0.0
        self.turnover[idx] = 0.0
        self.ep_reward[idx] = 0.0
        self.trades[idx] = 0
        self.t[idx] = 0
        self.tail[idx] = 0.0

    def step(self, action):
        torch = self.torch
        # Trade to the target weight at the mid price.
        S = torch.exp(self.x)
        equity = self.q * S
        equity = equity + self.cash
        w = self.levels[action]
        solvent = equity > 0.0
        target_q = w * equity
        target_q = target_q / S
        target_q = torch.where(solvent, target_q, 0.0)
        dq = target_q - self.q
        notional = dq.abs()
        notional = notional * S
        fee = notional * FEE
        paid = dq * S
        paid = paid + fee
        cash = self.cash - paid
        # Cost basis: opened or added, closed, flipped, reduced.
        traded = dq != 0.0
        added = (self.q == 0.0) | ((self.q > 0.0) == (dq > 0.0))
        avg = self.q * self.cb
        avg = avg + paid - fee
        avg = avg / torch.where(target_q == 0.0, 1.0, target_q)
        flipped = (target_q > 0.0) != (self.q > 0.0)
        cb = torch.where(flipped, S, self.cb)
        cb = torch.where(target_q == 0.0, 0.0, cb)
        cb = torch.where(added, avg, cb)
        cb = torch.where(traded, cb, self.cb)
        step_turnover = notional / torch.where(solvent, equity, 1.0)
        step_turnover = torch.where(solvent, step_turnover, 0.0)
        q = target_q
        # The price moves.
        z = torch.randn(self.n, dtype=torch.float64, device=self.device)
        dev = self.x - MEAN
        dev = dev * DECAY
        noise = z * NOISE_SD
        x_new = dev + noise
        x_new = x_new + MEAN
        S_new = torch.exp(x_new)
        equity_new = q * S_new
        equity_new = equity_new + cash
        # Reward and statistics.
        ratio = equity_new / torch.where(solvent, equity, 1.0)
        ret = torch.where(solvent, ratio - 1.0, 0.0)
        reward = equity_new - equity
        reward = reward / INITIAL_CASH
        peak = torch.maximum(self.peak, equity_new)
        drawdown = equity_new / peak
        drawdown = 1.0 - drawdown
        self.sum_ret = self.sum_ret + ret
        ret_sq = ret * ret
        self.sum_ret_sq = self.sum_ret_sq + ret_sq
        self.max_dd = torch.maximum(self.max_dd, drawdown)
        self.turnover = self.turnover + step_turnover
        self.trades = self.trades + traded.to(torch.int32)
        self.ep_reward = self.ep_reward + reward
        # Observation parts.
        r = x_new - self.x
        scaled = r * RET_SCALE
        window = torch.roll(self.window, -1, dims=1)
        window[:, -1] = scaled
        t = self.t + 1
        inv_e = 1.0 / equity_new
        weight = q * S_new
        weight = weight * inv_e
        upnl = S_new - cb
        upnl = q * upnl
        upnl = upnl * inv_e
        progress = t.to(torch.float64) / EPISODE
        log_equity = equity_new / INITIAL_CASH
        log_equity = torch.log(log_equity)
        tail = torch.stack([weight, upnl, progress, log_equity], dim=1)
        self.window = window
        self.tail = tail.to(torch.float32)
        self.x = x_new
        self.q = q
        self.cb = cb
        self.cash = cash
        self.peak = peak
        self.t = t
        # Episode ends: statistics out, then a reset of those environments.
        terminated = equity_new < MIN_EQUITY * INITIAL_CASH
        truncated = t >= EPISODE
        done = terminated | truncated
        if bool(done.any()):  # one host sync per step; resets are 1 step in 256
            self.episodes = self.episodes + done.sum()
            self.return_total = self.return_total + torch.where(done, self.ep_reward, 0.0).sum()
            self.reset(done.nonzero(as_tuple=True)[0])
        obs = torch.cat([self.window, self.tail], dim=1)
        return obs, reward.to(torch.float32), terminated, truncated


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
        env = BenchOuMarket(torch, n, device)
        steps = max(20, min(300, (1 << 24) // n))
        actions = [torch.randint(0, 3, (n,), device=device) for _ in range(8)]
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
        print(f"RESULT env=bench_ou n={n} steps_per_s={n / (ms * 1e-3):.6e} ms_per_step={ms:.6f}", flush=True)
        del env, actions
        if cuda:
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
