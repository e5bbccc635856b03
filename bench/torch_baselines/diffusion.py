#!/usr/bin/env python3
"""PyTorch baseline for bench/diffusion.cu: the same DDPM denoiser, training step and samplers.

Denoiser (models/diffusion/denoiser.hpp): x_t (B, D), t (B) ->
  e = [sin(t f_k), cos(t f_k)], f_k = 10000^(-k / (E/2));  temb = time1(gelu(time0(e)));
  h = in(x_t);  h = h + fc2(gelu(fc1(h + temb))) per block;  eps = out(h)  (out starts at zero);
  gelu is the tanh approximation (foxhunt's GEMM epilogue). Hidden 128, 3 blocks, expand 2, E 64.
Schedule: linear betas 1e-4 .. 0.02 over T = 1000 steps.
Training step (pretrain/diffusion_trainer.hpp): t ~ U{0..T-1}, eps ~ N(0, I),
  x_t = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps, MSE(eps_hat, eps), backward, global gradient-norm clip
  at 1, AdamW (lr 1e-3, weight decay 0.01). foxhunt's step also generates its windows on the device
  (an OU market) and its learning rate there; here x0 is a fixed batch and lr constant.
Sampling (models/diffusion/sampler.hpp) of 4096 windows over S = 20 of the T steps,
  tau_i = round(i (T - 1) / (S - 1)), from x_T ~ N(0, I):
  ddim (eta 0): x' = sqrt(ab_prev) (x - sqrt(1 - ab) eps) / sqrt(ab) + sqrt(1 - ab_prev) eps;
  ddpm (ancestral over the subsequence): alpha = ab / ab_prev, beta = 1 - alpha,
    x' = (x - beta / sqrt(1 - ab) eps) / sqrt(alpha) + sigma z, sigma^2 = beta (1 - ab_prev) / (1 - ab).
Modes, the best of which is the baseline: eager; torch.compile (the model for training, the whole
sampling call for sampling); the whole step / sampling call captured as one CUDA graph; both.
Prints `RESULT diffusion <mode> <what> <batch> <D> <hidden> value=<v>` lines, what = train_sps
(windows/s), ddim_ms or ddpm_ms (milliseconds per sampling call of <batch> windows).
Usage: diffusion.py [--quick]   (quick: D = 64 and training batch 256 only)
"""
import math
import sys
import time

import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F

DEV = "cuda"
HIDDEN, BLOCKS, EXPAND, EMBED = 128, 3, 2, 64
T_STEPS, BETA_START, BETA_END = 1000, 1e-4, 0.02
SAMPLE_ROWS, SAMPLE_STEPS = 4096, 20
DIMS = [64, 128]  # 64 returns of 1 asset; 32 returns of 4 assets
BATCHES = [256, 1024]
MODES = ("eager", "compile", "cudagraph", "compile_cudagraph")


class Denoiser(nn.Module):
    def __init__(self, dim):
        super().__init__()
        half = EMBED // 2
        self.register_buffer("freqs", torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / half)
                             .to(torch.float32))
        self.time0 = nn.Linear(EMBED, HIDDEN)
        self.time1 = nn.Linear(HIDDEN, HIDDEN)
        self.inp = nn.Linear(dim, HIDDEN)
        self.fc1 = nn.ModuleList(nn.Linear(HIDDEN, HIDDEN * EXPAND) for _ in range(BLOCKS))
        self.fc2 = nn.ModuleList(nn.Linear(HIDDEN * EXPAND, HIDDEN) for _ in range(BLOCKS))
        self.out = nn.Linear(HIDDEN, dim)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x, t):
        angle = t.to(torch.float32)[:, None] * self.freqs
        e = torch.cat([torch.sin(angle), torch.cos(angle)], -1)
        temb = self.time1(F.gelu(self.time0(e), approximate="tanh"))
        h = self.inp(x)
        for fc1, fc2 in zip(self.fc1, self.fc2):
            h = h + fc2(F.gelu(fc1(h + temb), approximate="tanh"))
        return self.out(h)


def schedule():
    beta = torch.linspace(BETA_START, BETA_END, T_STEPS, dtype=torch.float64)
    return beta, torch.cumprod(1 - beta, 0)


def sampler_steps(kind):
    """(t, cx, ce, cz) per reverse step, in the order they run: x' = cx x + ce eps + cz z."""
    _, ab = schedule()
    S = SAMPLE_STEPS
    tau = [round(i * (T_STEPS - 1) / (S - 1)) for i in range(S)]
    steps = []
    for i in range(S - 1, -1, -1):
        a = float(ab[tau[i]])
        a_prev = float(ab[tau[i - 1]]) if i > 0 else 1.0
        if kind == "ddim":
            cx = math.sqrt(a_prev) / math.sqrt(a)
            ce = math.sqrt(1 - a_prev) - math.sqrt(a_prev) * math.sqrt(1 - a) / math.sqrt(a)
            cz = 0.0
        else:
            alpha = a / a_prev
            beta = 1 - alpha
            cx = 1 / math.sqrt(alpha)
            ce = -beta / (math.sqrt(1 - a) * math.sqrt(alpha))
            cz = math.sqrt(beta * (1 - a_prev) / (1 - a)) if i > 0 else 0.0
        steps.append((tau[i], cx, ce, cz))
    return steps


def timed(fn, iters):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def capture(fn):
    """fn warmed up on a side stream, then captured as one CUDA graph; returns its replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def note(mode, what, e):
    print(f"NOTE diffusion {mode} {what}: {type(e).__name__}: {str(e)[:300]}", flush=True)


def train_modes(dim, batch, iters):
    _, ab = schedule()
    results = {}
    for mode in MODES:
        try:
            torch.manual_seed(0)
            torch._dynamo.reset()  # each compiled mode compiles afresh (no cache limit, no stale guards)
            model = Denoiser(dim).to(DEV)
            sqrt_ab = ab.sqrt().to(torch.float32).to(DEV)
            sqrt_1m = (1 - ab).sqrt().to(torch.float32).to(DEV)
            x0 = torch.randn(batch, dim, device=DEV)
            graphed = mode.endswith("cudagraph")
            params = list(model.parameters())
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=not graphed, capturable=graphed)
            fwd = torch.compile(model) if mode.startswith("compile") else model

            def step():
                opt.zero_grad(set_to_none=False)
                t = torch.randint(0, T_STEPS, (batch,), device=DEV)
                eps = torch.randn_like(x0)
                x_t = sqrt_ab[t, None] * x0 + sqrt_1m[t, None] * eps
                F.mse_loss(fwd(x_t, t), eps).backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
                opt.step()

            if graphed:
                run = capture(step)
            else:
                for _ in range(3):
                    step()
                run = step
            run()
            results[mode] = batch / timed(run, iters)
        except Exception as e:  # a mode that cannot run is reported, not fatal
            note(mode, f"train {batch}x{dim}", e)
    return results


def sample_modes(dim, kind, iters):
    steps = sampler_steps(kind)
    results = {}
    for mode in MODES:
        try:
            torch.manual_seed(0)
            torch._dynamo.reset()  # each compiled mode compiles afresh (no cache limit, no stale guards)
            model = Denoiser(dim).to(DEV)
            for p in model.parameters():  # a trained model's weights are not zero: no shortcut for anyone
                nn.init.normal_(p, std=0.05)
            ts = [torch.full((SAMPLE_ROWS,), t, dtype=torch.int32, device=DEV) for t, _, _, _ in steps]
            out = torch.empty(SAMPLE_ROWS, dim, device=DEV)

            def sample():
                x = torch.randn(SAMPLE_ROWS, dim, device=DEV)
                for t, (_, cx, ce, cz) in zip(ts, steps):
                    eps = model(x, t)
                    x = cx * x + ce * eps
                    if cz > 0:
                        x = x + cz * torch.randn_like(x)
                out.copy_(x)

            fn = torch.compile(sample) if mode.startswith("compile") else sample
            with torch.no_grad():
                if mode.endswith("cudagraph"):
                    run = capture(fn)
                else:
                    for _ in range(3):
                        fn()
                    run = fn
                run()
                results[mode] = timed(run, iters) * 1e3
        except Exception as e:
            note(mode, f"{kind} {SAMPLE_ROWS}x{dim}", e)
    return results


def main():
    quick = "--quick" in sys.argv
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    for dim in DIMS[:1] if quick else DIMS:
        for batch in BATCHES[:1] if quick else BATCHES:
            for mode, sps in train_modes(dim, batch, 20 if quick else 50).items():
                print(f"RESULT diffusion {mode} train_sps {batch} {dim} {HIDDEN} value={sps:.1f}", flush=True)
        for kind in ("ddim", "ddpm"):
            for mode, ms in sample_modes(dim, kind, 10 if quick else 25).items():
                print(f"RESULT diffusion {mode} {kind}_ms {SAMPLE_ROWS} {dim} {HIDDEN} value={ms:.3f}", flush=True)


if __name__ == "__main__":
    main()
