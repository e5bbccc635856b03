#!/usr/bin/env python3
"""PyTorch baselines for bench/sequence_models.cu: the same sequence models on the same GPU.

Each family is written as a strong PyTorch user would write it without custom kernels:
  mamba2: in_proj, depthwise causal conv1d + SiLU, softplus dt, the chunked SSD algorithm of
          Mamba-2 (intra-chunk masked C B^T, chunk states, inter-chunk recurrence, state output)
          in einsums, D skip, gated RMSNorm, out_proj; pre-norm residual stack.
  xlstm:  mLSTM blocks (pre-up-projection, stabilized parallel mLSTM) and sLSTM blocks
          (post-up-projection, head-wise block-diagonal recurrence looped over time), alternating.
  cfc:    stacked CfC cells (backbone on [input, h], ff1, ff2, time gates) looped over time.
A model: input projection (1 feature -> width), 4 layers, final norm, a linear head on the last
step; the training step is MSE on a random target, backward and fused AdamW.
Modes, the best of which is the baseline: eager; torch.compile of the model (default mode); the
whole training step (forward, backward, AdamW with capturable=True) captured as one CUDA graph.
Per-step inference (the collector's use): one step of 4096 rows with the recurrent state, eager
and as a CUDA graph.
Prints `RESULT <family> <mode> <what> <batch> <T> <width> value=<v>` lines, what = train_sps
(samples/s) or step_us (microseconds per step).
Usage: sequence_models.py [family ...] [--quick]
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DEV = "cuda"
LAYERS = 4
TRAIN_CONFIGS = [(256, 64, 64), (256, 256, 64), (256, 64, 256), (256, 256, 256)]  # (batch, T, width)
STEP_CONFIGS = [(4096, 64), (4096, 256)]  # (rows, width)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


# ---- Mamba-2 ---------------------------------------------------------------------------------

def segsum(x):
    """x (..., L) -> (..., L, L): out[i, j] = sum_{j < k <= i} x_k for j <= i, -inf above."""
    L = x.size(-1)
    xe = x[..., None].expand(*x.shape, L)  # xe[..., i, j] = x_i
    strict = torch.tril(torch.ones(L, L, dtype=torch.bool, device=x.device), -1)
    xs = torch.cumsum(xe.masked_fill(~strict, 0), dim=-2)
    return xs.masked_fill(~torch.tril(torch.ones(L, L, dtype=torch.bool, device=x.device)), -math.inf)


def ssd(X, A, B, C, chunk):
    """X (b, T, h, p) = dt * x, A (b, T, h) = dt * A, B, C (b, T, h, n); T % chunk == 0."""
    b, T, h, p = X.shape
    c = T // chunk
    X = X.reshape(b, c, chunk, h, p)
    B = B.reshape(b, c, chunk, h, -1)
    C = C.reshape(b, c, chunk, h, -1)
    A = A.reshape(b, c, chunk, h).permute(0, 3, 1, 2)  # (b, h, c, l)
    A_cum = torch.cumsum(A, dim=-1)
    Lmask = torch.exp(segsum(A))  # (b, h, c, l, l)
    Y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, Lmask, X)
    decay_states = torch.exp(A_cum[..., -1:] - A_cum)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, decay_states, X)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(A_cum[..., -1], (1, 0))))  # (b, h, c + 1, c + 1)
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    Y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, torch.exp(A_cum))
    return (Y_diag + Y_off).reshape(b, T, h, p)


class Mamba2Layer(nn.Module):
    def __init__(self, d, d_state=16, head_dim=16, expand=2, conv=4, chunk=64):
        super().__init__()
        self.di, self.n, self.p, self.k, self.chunk = expand * d, d_state, head_dim, conv, chunk
        self.h = self.di // head_dim
        self.conv_dim = self.di + 2 * d_state
        self.in_proj = nn.Linear(d, 2 * self.di + 2 * d_state + self.h, bias=False)
        self.conv = nn.Conv1d(self.conv_dim, self.conv_dim, conv, groups=self.conv_dim, padding=conv - 1)
        dt = torch.exp(torch.rand(self.h) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.h).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.h))
        self.norm = RMSNorm(self.di)
        self.out_proj = nn.Linear(self.di, d, bias=False)

    def forward(self, u):
        b, T, _ = u.shape
        z, xBC, dt = torch.split(self.in_proj(u), [self.di, self.conv_dim, self.h], dim=-1)
        xBC = F.silu(self.conv(xBC.transpose(1, 2))[..., :T]).transpose(1, 2)
        x, B, C = torch.split(xBC, [self.di, self.n, self.n], dim=-1)
        dt = F.softplus(dt + self.dt_bias)
        A = -torch.exp(self.A_log)
        x = x.reshape(b, T, self.h, self.p)
        Bh = B[:, :, None, :].expand(b, T, self.h, self.n)
        Ch = C[:, :, None, :].expand(b, T, self.h, self.n)
        y = ssd(x * dt[..., None], A * dt, Bh, Ch, min(self.chunk, T))
        y = (y + x * self.D[:, None]).reshape(b, T, self.di)
        return self.out_proj(self.norm(y * F.silu(z)))

    def init_state(self, rows):
        return [torch.zeros(rows, self.conv_dim, self.k, device=DEV), torch.zeros(rows, self.h, self.p, self.n, device=DEV)]

    def step(self, u, state):
        conv_state, ssm = state
        z, xBC, dt = torch.split(self.in_proj(u), [self.di, self.conv_dim, self.h], dim=-1)
        conv_state.copy_(torch.roll(conv_state, -1, dims=-1))
        conv_state[:, :, -1] = xBC
        xBC = F.silu((conv_state * self.conv.weight[:, 0, :]).sum(-1) + self.conv.bias)
        x, B, C = torch.split(xBC, [self.di, self.n, self.n], dim=-1)
        dt = F.softplus(dt + self.dt_bias)
        dA = torch.exp(dt * -torch.exp(self.A_log))
        x = x.reshape(-1, self.h, self.p)
        ssm.mul_(dA[:, :, None, None]).add_(torch.einsum("bh,bhp,bn->bhpn", dt, x, B))
        y = torch.einsum("bhpn,bn->bhp", ssm, C) + x * self.D[:, None]
        return self.out_proj(self.norm(y.reshape(-1, self.di) * F.silu(z)))


# ---- xLSTM -----------------------------------------------------------------------------------

def mlstm_parallel(q, k, v, i_pre, f_pre):
    """q, k, v (b, h, T, d); i_pre, f_pre (b, h, T): the stabilized parallel mLSTM."""
    T, d = q.shape[-2], q.shape[-1]
    logf = F.logsigmoid(f_pre).cumsum(-1)  # (b, h, T)
    logD = logf[..., :, None] - logf[..., None, :] + i_pre[..., None, :]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=q.device))
    logD = logD.masked_fill(~causal, -math.inf)
    m = logD.amax(-1, keepdim=True)
    S = (q @ k.transpose(-1, -2)) / math.sqrt(d) * torch.exp(logD - m)
    n = torch.maximum(S.sum(-1, keepdim=True).abs(), torch.exp(-m))
    return (S / (n + 1e-6)) @ v


class MLstmBlock(nn.Module):
    def __init__(self, d, heads=4, conv=4):
        super().__init__()
        self.inner, self.heads, self.k = 2 * d, heads, conv
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 2 * self.inner)
        self.conv = nn.Conv1d(self.inner, self.inner, conv, groups=self.inner, padding=conv - 1)
        self.q = nn.Linear(self.inner, self.inner)
        self.kp = nn.Linear(self.inner, self.inner)
        self.v = nn.Linear(self.inner, self.inner)
        self.gates = nn.Linear(3 * self.inner, 2 * heads)
        self.gn = nn.GroupNorm(heads, self.inner)
        self.skip = nn.Parameter(torch.ones(self.inner))
        self.down = nn.Linear(self.inner, d)

    def forward(self, x):
        b, T, _ = x.shape
        xm, z = self.up(self.norm(x)).chunk(2, -1)
        xc = F.silu(self.conv(xm.transpose(1, 2))[..., :T]).transpose(1, 2)
        q, k, v = self.q(xc), self.kp(xc), self.v(xm)
        i_pre, f_pre = self.gates(torch.cat([q, k, v], -1)).chunk(2, -1)  # (b, T, h)
        hd = self.inner // self.heads
        split = lambda t: t.reshape(b, T, self.heads, hd).transpose(1, 2)
        h = mlstm_parallel(split(q), split(k), split(v), i_pre.transpose(1, 2), f_pre.transpose(1, 2))
        h = self.gn(h.transpose(1, 2).reshape(b * T, self.inner)).reshape(b, T, self.inner)
        return x + self.down((h + self.skip * xc) * F.silu(z))

    def init_state(self, rows):
        hd = self.inner // self.heads
        return [torch.zeros(rows, self.inner, self.k, device=DEV), torch.zeros(rows, self.heads, hd, hd, device=DEV),
                torch.zeros(rows, self.heads, hd, device=DEV), torch.zeros(rows, self.heads, device=DEV)]

    def step(self, x, state):
        conv_state, Cm, n, m = state
        xm, z = self.up(self.norm(x)).chunk(2, -1)
        conv_state.copy_(torch.roll(conv_state, -1, dims=-1))
        conv_state[:, :, -1] = xm
        xc = F.silu((conv_state * self.conv.weight[:, 0, :]).sum(-1) + self.conv.bias)
        q, k, v = self.q(xc), self.kp(xc), self.v(xm)
        i_pre, f_pre = self.gates(torch.cat([q, k, v], -1)).chunk(2, -1)
        hd = self.inner // self.heads
        q, k, v = (t.reshape(-1, self.heads, hd) for t in (q, k, v))
        k = k / math.sqrt(hd)
        logf = F.logsigmoid(f_pre)
        m_new = torch.maximum(logf + m, i_pre)
        i_g, f_g = torch.exp(i_pre - m_new), torch.exp(logf + m - m_new)
        Cm.mul_(f_g[..., None, None]).add_(i_g[..., None, None] * v[..., :, None] * k[..., None, :])
        n.mul_(f_g[..., None]).add_(i_g[..., None] * k)
        m.copy_(m_new)
        den = torch.maximum((n * q).sum(-1).abs(), torch.exp(-m_new))[..., None]
        h = (Cm @ q[..., None])[..., 0] / den
        h = self.gn(h.reshape(-1, self.inner))
        return x + self.down((h + self.skip * xc) * F.silu(z))


class SLstmBlock(nn.Module):
    def __init__(self, d, heads=4):
        super().__init__()
        self.d, self.heads = d, heads
        hd = d // heads
        self.norm = nn.LayerNorm(d)
        self.w = nn.Linear(d, 4 * d)
        self.r = nn.Parameter(torch.randn(4, heads, hd, hd) / math.sqrt(hd))
        self.gn = nn.GroupNorm(heads, d)
        self.norm2 = nn.LayerNorm(d)
        f = (4 * d // 3 + 63) // 64 * 64
        self.gate, self.upp, self.down = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)

    def cell(self, wx, state):
        h, c, n, m = state
        b = h.shape[0]
        hh = h.reshape(b, self.heads, -1)
        rh = torch.einsum("ghij,bhj->gbhi", self.r, hh).reshape(4, b, self.d)
        zt, it, ft, ot = (wx[:, g * self.d:(g + 1) * self.d] + rh[g] for g in range(4))
        logf = F.logsigmoid(ft)
        m_new = torch.maximum(logf + m, it)
        i_g, f_g = torch.exp(it - m_new), torch.exp(logf + m - m_new)
        c = f_g * c + i_g * torch.tanh(zt)
        n = f_g * n + i_g
        h = torch.sigmoid(ot) * c / n
        return h, (h, c, n, m_new)

    def mlp(self, x):
        return x + self.down(F.silu(self.gate(self.norm2(x))) * self.upp(self.norm2(x)))

    def forward(self, x):
        b, T, _ = x.shape
        wx = self.w(self.norm(x))
        state = self.init_state(b)
        hs = []
        for t in range(T):
            h, state = self.cell(wx[:, t], state)
            hs.append(h)
        y = x + self.gn(torch.stack(hs, 1).reshape(b * T, self.d)).reshape(b, T, self.d)
        return self.mlp(y)

    def init_state(self, rows):
        return tuple(torch.zeros(rows, self.d, device=DEV) for _ in range(4))

    def step(self, x, state):
        h, new = self.cell(self.w(self.norm(x)), tuple(state))
        for s, v in zip(state, new):
            s.copy_(v)
        return self.mlp(x + self.gn(h))


# ---- CfC -------------------------------------------------------------------------------------

class CfcLayer(nn.Module):
    def __init__(self, d_in, hidden, units):
        super().__init__()
        self.hidden = hidden
        self.backbone = nn.Linear(d_in + hidden, units)
        self.heads = nn.Linear(units, 4 * hidden)

    def cell(self, x, h, ts=1.0):
        bb = 1.7159 * torch.tanh(0.666 * self.backbone(torch.cat([x, h], -1)))
        ff1, ff2, ta, tb = self.heads(bb).chunk(4, -1)
        sig = torch.sigmoid(ta * ts + tb)
        return torch.tanh(ff1) * (1 - sig) + sig * torch.tanh(ff2)

    def forward(self, x):
        b, T, _ = x.shape
        h = torch.zeros(b, self.hidden, device=x.device)
        hs = []
        for t in range(T):
            h = self.cell(x[:, t], h)
            hs.append(h)
        return torch.stack(hs, 1)

    def init_state(self, rows):
        return [torch.zeros(rows, self.hidden, device=DEV)]

    def step(self, x, state):
        h = self.cell(x, state[0])
        state[0].copy_(h)
        return h


# ---- the models ------------------------------------------------------------------------------

class SequenceModel(nn.Module):
    def __init__(self, family, width):
        super().__init__()
        self.family = family
        self.inp = nn.Linear(1, width)
        if family == "mamba2":
            self.layers = nn.ModuleList(Mamba2Layer(width) for _ in range(LAYERS))
            self.norms = nn.ModuleList(RMSNorm(width) for _ in range(LAYERS))
        elif family == "xlstm":
            self.layers = nn.ModuleList(MLstmBlock(width) if i % 2 == 0 else SLstmBlock(width) for i in range(LAYERS))
        else:
            self.layers = nn.ModuleList(CfcLayer(width, width, width) for _ in range(LAYERS))
        self.final = RMSNorm(width)
        self.head = nn.Linear(width, 1)

    def features(self, x):
        y = self.inp(x)
        for i, layer in enumerate(self.layers):
            y = y + layer(self.norms[i](y)) if self.family == "mamba2" else layer(y)
        return self.final(y)

    def forward(self, x):
        return self.head(self.features(x)[:, -1])

    def init_state(self, rows):
        return [layer.init_state(rows) for layer in self.layers]

    def step(self, x, states):
        y = self.inp(x)
        for i, (layer, st) in enumerate(zip(self.layers, states)):
            y = y + layer.step(self.norms[i](y), st) if self.family == "mamba2" else layer.step(y, st)
        return self.final(y)


def timed(fn, iters):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def train_modes(family, batch, T, width, iters):
    results = {}
    for mode in ("eager", "compile", "cudagraph"):
        try:
            torch.manual_seed(0)
            model = SequenceModel(family, width).to(DEV)
            x = torch.randn(batch, T, 1, device=DEV)
            y = torch.randn(batch, 1, device=DEV)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=mode != "cudagraph",
                                    capturable=mode == "cudagraph")
            fwd = torch.compile(model) if mode == "compile" else model

            def step():
                opt.zero_grad(set_to_none=False)
                F.mse_loss(fwd(x), y).backward()
                opt.step()

            if mode == "cudagraph":
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    step()
                run = g.replay
            else:
                for _ in range(3):
                    step()
                run = step
            results[mode] = batch / timed(run, iters)
        except Exception as e:  # a mode that cannot run this model is reported, not fatal
            print(f"NOTE {family} {mode} {batch}x{T}x{width}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    return results


def step_modes(family, rows, width, iters):
    results = {}
    for mode in ("eager", "cudagraph"):
        try:
            torch.manual_seed(0)
            model = SequenceModel(family, width).to(DEV)
            x = torch.randn(rows, 1, device=DEV)
            states = model.init_state(rows)
            with torch.no_grad():
                run = lambda: model.step(x, states)
                for _ in range(3):
                    run()
                if mode == "cudagraph":
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        run()
                    run = g.replay
                results[mode] = timed(run, iters) * 1e6
        except Exception as e:
            print(f"NOTE {family} step {mode} {rows}x{width}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    return results


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    families = args or ["mamba2", "xlstm", "cfc"]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    for family in families:
        for batch, T, width in TRAIN_CONFIGS[:1] if quick else TRAIN_CONFIGS:
            for mode, sps in train_modes(family, batch, T, width, 5 if quick else 20).items():
                print(f"RESULT {family} {mode} train_sps {batch} {T} {width} value={sps:.1f}", flush=True)
        for rows, width in STEP_CONFIGS[:1] if quick else STEP_CONFIGS:
            for mode, us in step_modes(family, rows, width, 20 if quick else 200).items():
                print(f"RESULT {family} {mode} step_us {rows} 1 {width} value={us:.2f}", flush=True)


if __name__ == "__main__":
    main()
