#!/usr/bin/env python3
"""PyTorch baselines for bench/tft_kan.cu: the TFT and KAN window models on the same GPU.

The same architectures as models/tft/tft.hpp and models/kan/kan_window.hpp, written as a strong
PyTorch user would write them without custom kernels:
  tft: variable selection over the C inputs of each step (per-variable linear embeddings, a GRN
       with the static context c_s giving softmax weights, per-variable GRNs), an LSTM (cuDNN)
       seeded from the learned contexts c_h, c_c, the gated skip LayerNorm(xi + GLU(l)), the
       static enrichment GRN with context c_e, interpretable multi-head attention (per-head Q, K,
       one shared V, causal, the heads' outputs averaged: scaled_dot_product_attention with V
       broadcast over the heads), its gate, the position-wise GRN, the output gate over phi.
       The four static contexts are a learned (4, hidden) parameter, as in foxhunt. nn.LSTM has two
       bias vectors where foxhunt's LSTM has one: 4 x hidden more parameters, the same work.
  kan: efficient-kan's layer, y = silu(x) W_base^T + B(x) C^T with B the Cox-de Boor B-spline
       bases (grid G, order k) of each input over a uniform knot vector; KAN_LAYERS layers of
       `width` outputs over the causal window of the last LAGS steps, applied at every step.
A training step is foxhunt pretrain's (pretrain/trainer.hpp): the model over (B, T, 1), its last
step through a linear head, MSE against a target, backward, global gradient-norm clip at 1,
AdamW (lr 1e-3, weight decay 0.01). foxhunt's step also generates its batch on the device (OU
windows) and computes its learning rate there; here the batch is fixed and lr constant (in
PyTorch's favour).
Modes, the best of which is the baseline: eager; torch.compile of the model (default mode); the
whole step captured as one CUDA graph (eager kernels; AdamW capturable); both (compiled model in
a captured step).
Per-step inference (the collector's use, 4096 rows): foxhunt's step form. tft: the state is the
last T inputs; a step shifts the new input in and recomputes the window, returning its last
position's features (as models/tft/tft.hpp). kan: the state is the last LAGS - 1 inputs; a step
evaluates the network on [state, x]. Modes: eager, compile, CUDA graph, compile + CUDA graph.
Prints `RESULT <family> <mode> <what> <batch> <T> <width> value=<v>` lines, what = train_sps
(samples/s) or step_us (microseconds per step).
Usage: tft_kan.py [tft|kan ...] [--quick]
"""
import math
import sys
import time

import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F

DEV = "cuda"
T_WINDOW = 64
TRAIN_CONFIGS = [(256, 64, 64), (256, 64, 256)]  # (batch, T, width)
STEP_CONFIGS = [(4096, 64), (4096, 256)]  # (rows, width)
TFT_HEADS = 4
KAN_LAGS, KAN_LAYERS, KAN_GRID, KAN_ORDER, KAN_RANGE = 16, 2, 8, 3, (-4.0, 4.0)
MODES = ("eager", "compile", "cudagraph", "compile_cudagraph")


# ---- TFT -------------------------------------------------------------------------------------

class Glu(nn.Module):
    """(x W_v^T + b_v) * sigmoid(x W_g^T + b_g), value rows then gate rows in one Linear."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.out = d_out
        self.linear = nn.Linear(d_in, 2 * d_out)

    def forward(self, x):
        v, g = self.linear(x).split(self.out, -1)
        return v * torch.sigmoid(g)


class GateAddNorm(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.glu = Glu(d_in, d_out)
        self.norm = nn.LayerNorm(d_out)

    def forward(self, x, skip):
        return self.norm(skip + self.glu(x))


class Grn(nn.Module):
    """LayerNorm(skip(a) + GLU(fc2(ELU(fc1(a) + context(c))))); c: one vector broadcast over rows."""

    def __init__(self, d_in, hidden, d_out, context=0):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.context = nn.Linear(context, hidden) if context else None
        self.fc2 = nn.Linear(hidden, hidden)
        self.gate = GateAddNorm(hidden, d_out)
        self.skip = nn.Linear(d_in, d_out) if d_in != d_out else None

    def forward(self, a, c=None):
        h = self.fc1(a)
        if self.context is not None:
            h = h + self.context(c)
        h = self.fc2(F.elu(h))
        return self.gate(h, a if self.skip is None else self.skip(a))


class VariableSelection(nn.Module):
    def __init__(self, n_vars, hidden):
        super().__init__()
        self.embed_weight = nn.Parameter(torch.empty(n_vars, hidden).uniform_(-1, 1))
        self.embed_bias = nn.Parameter(torch.empty(n_vars, hidden).uniform_(-1, 1))
        self.weights = Grn(n_vars * hidden, hidden, n_vars, context=hidden)
        self.vars = nn.ModuleList(Grn(hidden, hidden, hidden) for _ in range(n_vars))

    def forward(self, x, c):  # x (..., V) -> (..., hidden)
        xi = x[..., None] * self.embed_weight + self.embed_bias  # (..., V, hidden)
        w = torch.softmax(self.weights(xi.flatten(-2), c), -1)  # (..., V)
        per = torch.stack([g(xi[..., v, :]) for v, g in enumerate(self.vars)], -2)
        return (w[..., None] * per).sum(-2)


class InterpretableAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, self.d)
        self.out = nn.Linear(self.d, hidden)

    def forward(self, x):  # (B, T, hidden)
        b, t, _ = x.shape
        q = self.query(x).view(b, t, self.heads, self.d).transpose(1, 2)
        k = self.key(x).view(b, t, self.heads, self.d).transpose(1, 2)
        v = self.value(x)[:, None].expand(b, self.heads, t, self.d)
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True).mean(1)  # (B, T, d)
        return self.out(mixed)


class Tft(nn.Module):
    def __init__(self, n_in, hidden, heads, T):
        super().__init__()
        self.hidden, self.T, self.n_in = hidden, T, n_in
        self.static_contexts = nn.Parameter(torch.empty(4, hidden).uniform_(-0.1, 0.1))
        self.selection = VariableSelection(n_in, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.lstm_gate = GateAddNorm(hidden, hidden)
        self.enrichment = Grn(hidden, hidden, hidden, context=hidden)
        self.attention = InterpretableAttention(hidden, heads)
        self.attention_gate = GateAddNorm(hidden, hidden)
        self.positionwise = Grn(hidden, hidden, hidden)
        self.output_gate = GateAddNorm(hidden, hidden)

    def forward(self, x):  # (B, T, C) -> (B, T, hidden)
        c_s, c_h, c_c, c_e = self.static_contexts.unbind(0)
        b = x.shape[0]
        xi = self.selection(x, c_s)
        h0 = c_h.expand(1, b, self.hidden).contiguous()
        c0 = c_c.expand(1, b, self.hidden).contiguous()
        l, _ = self.lstm(xi, (h0, c0))
        phi = self.lstm_gate(l, xi)
        theta = self.enrichment(phi, c_e)
        delta = self.attention_gate(self.attention(theta), theta)
        return self.output_gate(self.positionwise(delta), phi)

    def init_state(self, rows):
        return torch.zeros(rows, self.T, self.n_in, device=DEV)

    def step(self, x, state):  # x (rows, C); state (rows, T, C): the window, shifted in place
        window = torch.cat([state[:, 1:], x[:, None]], 1)
        state.copy_(window)
        return self.forward(window)[:, -1]


# ---- KAN -------------------------------------------------------------------------------------

class KanLayer(nn.Module):
    def __init__(self, d_in, d_out, grid, order, lo, hi):
        super().__init__()
        self.order = order
        h = (hi - lo) / grid
        knots = torch.arange(-order, grid + order + 1, dtype=torch.float32) * h + lo  # G + 2k + 1
        self.register_buffer("grid", knots.expand(d_in, -1).contiguous())
        bound = 1 / math.sqrt(d_in)
        self.base_weight = nn.Parameter(torch.empty(d_out, d_in).uniform_(-bound, bound))
        self.spline_weight = nn.Parameter(torch.empty(d_out, d_in, grid + order).uniform_(-0.1, 0.1) * bound)

    def bases(self, x):  # (N, in) -> (N, in, G + k), Cox-de Boor
        g = self.grid
        x = x[..., None]
        b = ((x >= g[:, :-1]) & (x < g[:, 1:])).to(x.dtype)
        for p in range(1, self.order + 1):
            b = ((x - g[:, :-(p + 1)]) / (g[:, p:-1] - g[:, :-(p + 1)]) * b[..., :-1]
                 + (g[:, p + 1:] - x) / (g[:, p + 1:] - g[:, 1:-p]) * b[..., 1:])
        return b

    def forward(self, x):  # (N, in) -> (N, out)
        return F.linear(F.silu(x), self.base_weight) + F.linear(self.bases(x).flatten(1), self.spline_weight.flatten(1))


class KanWindow(nn.Module):
    def __init__(self, n_in, width, lags, layers):
        super().__init__()
        self.n_in, self.lags = n_in, lags
        widths = [lags * n_in] + [width] * layers
        self.layers = nn.ModuleList(KanLayer(a, b, KAN_GRID, KAN_ORDER, *KAN_RANGE) for a, b in zip(widths, widths[1:]))

    def net(self, w):
        for layer in self.layers:
            w = layer(w)
        return w

    def forward(self, x):  # (B, T, C) -> (B, T, width): every step's window of the last lags inputs
        b, t, c = x.shape
        xp = F.pad(x, (0, 0, self.lags - 1, 0))  # zeros before the sequence start
        w = xp.unfold(1, self.lags, 1).transpose(-1, -2).reshape(b * t, self.lags * c)  # oldest first
        return self.net(w).view(b, t, -1)

    def init_state(self, rows):
        return torch.zeros(rows, self.lags - 1, self.n_in, device=DEV)

    def step(self, x, state):  # state (rows, lags - 1, C): the last inputs, oldest first
        window = torch.cat([state, x[:, None]], 1)
        state.copy_(window[:, 1:])
        return self.net(window.reshape(x.shape[0], -1))


# ---- the model of a pretrain run -------------------------------------------------------------

class Forecaster(nn.Module):
    def __init__(self, family, width, T):
        super().__init__()
        self.body = Tft(1, width, TFT_HEADS, T) if family == "tft" else KanWindow(1, width, KAN_LAGS, KAN_LAYERS)
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.body(x)[:, -1])


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


def note(family, mode, what, e):
    print(f"NOTE {family} {mode} {what}: {type(e).__name__}: {str(e)[:300]}", flush=True)


def train_modes(family, batch, T, width, iters):
    results = {}
    for mode in MODES:
        try:
            torch.manual_seed(0)
            torch._dynamo.reset()  # each compiled mode compiles afresh (no cache limit, no stale guards)
            model = Forecaster(family, width, T).to(DEV)
            x = torch.randn(batch, T, 1, device=DEV)
            y = torch.randn(batch, 1, device=DEV)
            graphed = mode.endswith("cudagraph")
            params = list(model.parameters())
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=not graphed, capturable=graphed)
            fwd = torch.compile(model) if mode.startswith("compile") else model

            def step():
                opt.zero_grad(set_to_none=False)
                F.mse_loss(fwd(x), y).backward()
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
        except Exception as e:  # a mode that cannot run this model is reported, not fatal
            note(family, mode, f"train {batch}x{T}x{width}", e)
    return results


def step_modes(family, rows, width, iters):
    results = {}
    for mode in MODES:
        try:
            torch.manual_seed(0)
            torch._dynamo.reset()  # each compiled mode compiles afresh (no cache limit, no stale guards)
            model = Forecaster(family, width, T_WINDOW).to(DEV)
            x = torch.randn(rows, 1, device=DEV)
            state = model.body.init_state(rows)
            fn = torch.compile(model.body.step) if mode.startswith("compile") else model.body.step
            with torch.no_grad():
                run = lambda: fn(x, state)
                if mode.endswith("cudagraph"):
                    run = capture(run)
                else:
                    for _ in range(3):
                        run()
                run()
                results[mode] = timed(run, iters) * 1e6
        except Exception as e:
            note(family, mode, f"step {rows}x{width}", e)
    return results


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    families = args or ["tft", "kan"]
    for f in families:
        if f not in ("tft", "kan"):
            sys.exit(f"tft_kan.py: unknown family '{f}' (allowed: tft, kan)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    for family in families:
        for batch, T, width in TRAIN_CONFIGS[:1] if quick else TRAIN_CONFIGS:
            for mode, sps in train_modes(family, batch, T, width, 10 if quick else 30).items():
                print(f"RESULT {family} {mode} train_sps {batch} {T} {width} value={sps:.1f}", flush=True)
        for rows, width in STEP_CONFIGS[:1] if quick else STEP_CONFIGS:
            for mode, us in step_modes(family, rows, width, 20 if quick else 100).items():
                print(f"RESULT {family} {mode} step_us {rows} 1 {width} value={us:.2f}", flush=True)


if __name__ == "__main__":
    main()
