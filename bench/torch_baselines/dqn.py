#!/usr/bin/env python3
"""PyTorch baseline for bench/dqn.cu: the same DQN update on the same GPU.

Update: proportional prioritized sampling from a 2^20-transition device table (stratified
cumsum + searchsorted over p^alpha, IS weights normalised by the max weight, alpha 0.6, beta 0.4),
gathered rows with precomputed 3-step returns, forward online(s), online(s'),
target(s'), double-DQN 3-step targets, Huber weighted by IS weights, backward, grad-norm clip 10,
Adam (eps 1.5e-4), priority write-back (|td| + 1e-6)^alpha, Polyak tau 0.005.
Learners: standard (obs 64, 256-256 ReLU, dueling, 9 actions, batch 256), large (1024-1024,
batch 4096) in strict fp32, with TF32 (torch.backends.cuda.matmul.allow_tf32) and in bf16 (the
forwards under torch.autocast(bfloat16): bf16 GEMMs with f32 accumulation, f32 master weights,
gradients and Adam, Q values cast to f32 before the loss; cache_enabled=False so that the casts are
part of every captured update). Each in eager mode and captured whole in a CUDA graph.
Prints `RESULT <learner>_<mode> <updates per second>` lines that the C++ bench parses.
"""
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError as e:  # the C++ bench prints this and reports no baseline
    print(f"torch not available: {e}")
    sys.exit(0)

CAPACITY = 1 << 20
OBS = 64
ACTIONS = 9


class Dueling(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(OBS, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.value = nn.Linear(hidden, 1)
        self.adv = nn.Linear(hidden, ACTIONS)

    def forward(self, x):
        h = self.trunk(x)
        a = self.adv(h)
        return self.value(h) + a - a.mean(dim=1, keepdim=True)


def make_update(hidden, batch, dev, bf16=False):
    torch.manual_seed(0)
    online = Dueling(hidden).to(dev)
    target = Dueling(hidden).to(dev)
    target.load_state_dict(online.state_dict())
    opt = torch.optim.Adam(online.parameters(), lr=1e-4, eps=1.5e-4, capturable=True)
    t_obs = torch.rand(CAPACITY, OBS, device=dev) * 2 - 1
    t_next = torch.rand(CAPACITY, OBS, device=dev) * 2 - 1
    t_ret = torch.rand(CAPACITY, device=dev) * 2 - 1
    t_disc = 0.9 + 0.07 * torch.rand(CAPACITY, device=dev)
    t_act = torch.randint(0, ACTIONS, (CAPACITY,), device=dev)
    t_prio = 0.1 + 0.9 * torch.rand(CAPACITY, device=dev)
    online_params = list(online.parameters())
    target_params = list(target.parameters())

    alpha, beta = 0.6, 0.4
    strata = torch.arange(batch, device=dev, dtype=torch.float32)

    def gemms():
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False)

    def update():
        cdf = torch.cumsum(t_prio, 0)
        total = cdf[-1]
        u = (strata + torch.rand(batch, device=dev)) * (total / batch)
        idx = torch.searchsorted(cdf, u).clamp_max(CAPACITY - 1)
        obs, nxt = t_obs[idx], t_next[idx]
        act, ret, disc = t_act[idx], t_ret[idx], t_disc[idx]
        w = (CAPACITY * t_prio[idx] / total).pow(-beta) / (CAPACITY * t_prio.min() / total).pow(-beta)
        with torch.no_grad(), gemms():
            a_star = online(nxt).argmax(dim=1, keepdim=True)
            y = ret + disc * target(nxt).float().gather(1, a_star).squeeze(1)
        with gemms():
            q_all = online(obs)
        q = q_all.float().gather(1, act.unsqueeze(1)).squeeze(1)
        td = q - y
        loss = (w * nn.functional.huber_loss(q, y, reduction="none", delta=1.0)).mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(online_params, 10.0)
        opt.step()
        with torch.no_grad():
            t_prio[idx] = (td.abs() + 1e-6).pow(alpha)
            torch._foreach_lerp_(target_params, online_params, 0.005)

    return update


def timed(fn, reps, dev):
    for _ in range(3):
        fn()
    torch.cuda.synchronize(dev)
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize(dev)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return reps / best


def run(name, hidden, batch, tf32, reps, bf16=False):
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    update = make_update(hidden, batch, dev, bf16)
    print(f"RESULT {name}_eager {timed(update, reps, dev):.1f}", flush=True)

    update = make_update(hidden, batch, dev, bf16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up on a side stream before capture (PyTorch's recipe)
            update()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        update()
    print(f"RESULT {name}_graph {timed(g.replay, reps, dev):.1f}", flush=True)


def main():
    if not torch.cuda.is_available():
        print("CUDA not available to torch")
        return
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    run("standard_fp32", 256, 256, False, 500)
    run("large_fp32", 1024, 4096, False, 100)
    run("large_tf32", 1024, 4096, True, 100)
    run("large_bf16", 1024, 4096, False, 100, bf16=True)


if __name__ == "__main__":
    main()
