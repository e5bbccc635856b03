#!/usr/bin/env python3
"""PyTorch and JAX baselines for bench/ppo.cu: the same PPO on the same GPU.

Both train with the hyper-parameters of bench/ppo.cu (CleanRL's ppo.py: 64-64 tanh actor and
critic, orthogonal init, Adam 2.5e-4 eps 1e-5 annealed linearly to 0, GAE(0.99, 0.95), 4 epochs x
4 minibatches with per-minibatch advantage normalization, clip 0.2 on the policy and the value,
entropy 0.01, value 0.5, grad-norm clip 0.5) on environments written here on the GPU:
  CartPole-v1 (Gymnasium's dynamics, 500-step truncation, same-step autoreset);
  the benchmark OU market (configs/markets/bench_ou.toml, as bench/torch_baselines/envs.py
  writes it: one asset, levels -1/0/+1, 5 bps fees, 256-step episodes, 36-float observation, PnL
  / initial cash as the reward), with the reset of every row computed each step and selected by
  the done mask so that a step has no host decision.
torch: the rollout (T steps + GAE) and the whole update (epochs x minibatches, capturable Adam,
  grad clip) each captured once as a CUDA graph and replayed; the first iterations run eagerly
  as the capture's warm-up. The clock starts after the networks are built.
jax: PureJaxRL's form: env, rollout and update under one jax.jit (lax.scan over iterations);
  the clock times a second call, after compilation.
Like CleanRL, neither bootstraps truncations. Final return: the mean return of the episodes
that ended in the last 5% of the iterations.
Prints `RESULT <impl> <scenario> seconds=<s> sps=<env-steps/s> final_return=<r>` lines.
Usage: ppo.py [scenario ...] [--impl torch|jax]
"""
import math
import sys
import time

SCENARIOS = {  # name: (env, num_envs, steps, total env steps)
    "cleanrl_cartpole": ("cartpole", 4, 128, 500_000),
    "throughput_cartpole": ("cartpole", 2048, 16, 20_000_000),
    "ou_market": ("ou_market", 4096, 16, 20_000_000),
}
HIDDEN = 64
LR = 2.5e-4
EPOCHS, MINIBATCHES = 4, 4
GAMMA, LAM = 0.99, 0.95
CLIP, ENT, VF, MAX_NORM = 0.2, 0.01, 0.5, 0.5

# CartPole-v1
GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASSCART + MASSPOLE
POLEMASS_LENGTH = MASSPOLE * LENGTH
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4
MAX_STEPS = 500

# configs/markets/bench_ou.toml
KAPPA, THETA, SIGMA, DT = 5.0, 0.0, 0.2, 1.0 / 252.0
INITIAL_PRICE, INITIAL_CASH, MIN_EQUITY, FEE = 1.0, 1_000_000.0, 0.1, 5e-4
EPISODE, WINDOW = 256, 32
MEAN = math.log(INITIAL_PRICE) + THETA
DECAY = math.exp(-KAPPA * DT)
NOISE_SD = SIGMA * math.sqrt((1.0 - DECAY * DECAY) / (2.0 * KAPPA))
STAT_SD = SIGMA / math.sqrt(2.0 * KAPPA)
RET_SCALE = 1.0 / (SIGMA * math.sqrt(DT))


def history_matrix():
    """M (W+1, W+1): dev_j = sum_k M[j, k] z_k for z_0 ~ stationary sd and z_k (k >= 1) ~ the step noise."""
    return [[DECAY ** (j - k) if k <= j else 0.0 for k in range(WINDOW + 1)] for j in range(WINDOW + 1)]


def market_step_math(xp, where, s, action, z_step, z_reset, hist_m):
    """One market step for every row (xp: torch or jax.numpy). s: dict of float64 state arrays.
    Returns (new state, obs f32 (N, 36), reward f32, done bool, finished episode reward)."""
    S = xp.exp(s["x"])
    equity = s["q"] * S + s["cash"]
    w = (action.astype(xp.float64) if hasattr(action, "astype") else action.double()) - 1.0
    solvent = equity > 0.0
    target_q = where(solvent, w * equity / S, 0.0)
    dq = target_q - s["q"]
    notional = xp.abs(dq) * S
    fee = notional * FEE
    cash = s["cash"] - (dq * S + fee)
    x_new = MEAN + (s["x"] - MEAN) * DECAY + z_step * NOISE_SD
    S_new = xp.exp(x_new)
    equity_new = target_q * S_new + cash
    reward = (equity_new - equity) / INITIAL_CASH
    ep_reward = s["ep_reward"] + reward
    t = s["t"] + 1.0
    # cost basis of the position (for the unrealized PnL in the observation)
    traded = dq != 0.0
    added = (s["q"] == 0.0) | ((s["q"] > 0.0) == (dq > 0.0))
    avg = (s["q"] * s["cb"] + dq * S) / where(target_q == 0.0, 1.0, target_q)
    flipped = (target_q > 0.0) != (s["q"] > 0.0)
    cb = where(flipped, S, s["cb"])
    cb = where(target_q == 0.0, 0.0, cb)
    cb = where(added, avg, cb)
    cb = where(traded, cb, s["cb"])
    window = xp.concatenate([s["window"][:, 1:], ((x_new - s["x"]) * RET_SCALE)[:, None]], 1)
    terminated = equity_new < MIN_EQUITY * INITIAL_CASH
    done = terminated | (t >= EPISODE)
    # every row's reset, selected by done
    dev = z_reset @ hist_m.T  # (N, W+1)
    xs = MEAN + dev
    r_window = (xs[:, 1:] - xs[:, :-1]) * RET_SCALE
    d = done[:, None]
    new = {
        "x": where(done, xs[:, -1], x_new),
        "q": where(done, 0.0, target_q),
        "cb": where(done, 0.0, cb),
        "cash": where(done, INITIAL_CASH, cash),
        "t": where(done, 0.0, t),
        "ep_reward": where(done, 0.0, ep_reward),
        "window": where(d, r_window, window),
    }
    e = new["q"] * xp.exp(new["x"]) + new["cash"]
    tail = xp.stack([new["q"] * xp.exp(new["x"]) / e, new["q"] * (xp.exp(new["x"]) - new["cb"]) / e,
                     new["t"] / EPISODE, xp.log(e / INITIAL_CASH)], 1)
    obs = xp.concatenate([new["window"], tail], 1)
    return new, obs, reward, done, where(done, ep_reward, 0.0)


# ---------------------------------------------------------------------------------------- torch


def run_torch(name, env_kind, n, T, total):
    import torch
    import torch.nn as nn

    dev = torch.device("cuda")
    torch.manual_seed(1)
    f32, f64 = torch.float32, torch.float64
    obs_dim, actions = (4, 2) if env_kind == "cartpole" else (WINDOW + 4, 3)

    def layer(i, o, gain):
        lin = nn.Linear(i, o)
        nn.init.orthogonal_(lin.weight, gain)
        nn.init.zeros_(lin.bias)
        return lin

    def mlp(out, gain):
        return nn.Sequential(layer(obs_dim, HIDDEN, math.sqrt(2)), nn.Tanh(), layer(HIDDEN, HIDDEN, math.sqrt(2)),
                             nn.Tanh(), layer(HIDDEN, out, gain)).to(dev)

    actor, critic = mlp(actions, 0.01), mlp(1, 1.0)
    params = list(actor.parameters()) + list(critic.parameters())
    lr = torch.tensor(LR, device=dev)
    opt = torch.optim.Adam(params, lr=lr, eps=1e-5, capturable=True)
    iterations = total // (n * T)
    rows = n * T
    mb = rows // MINIBATCHES

    # environment state (static tensors, updated in place)
    if env_kind == "cartpole":
        state = (torch.rand(n, 4, device=dev) * 0.1 - 0.05)
        steps = torch.zeros(n, device=dev)
        ep_ret = torch.zeros(n, device=dev)
    else:
        hist_m = torch.tensor(history_matrix(), dtype=f64, device=dev)
        z = torch.randn(n, WINDOW + 1, dtype=f64, device=dev)
        z[:, 0] *= STAT_SD / NOISE_SD
        xs = MEAN + (z * NOISE_SD) @ hist_m.T
        ms = {"x": xs[:, -1].clone(), "q": torch.zeros(n, dtype=f64, device=dev),
              "cb": torch.zeros(n, dtype=f64, device=dev), "cash": torch.full((n,), INITIAL_CASH, dtype=f64, device=dev),
              "t": torch.zeros(n, dtype=f64, device=dev), "ep_reward": torch.zeros(n, dtype=f64, device=dev),
              "window": ((xs[:, 1:] - xs[:, :-1]) * RET_SCALE).clone()}
        reset_scale = torch.full((WINDOW + 1,), NOISE_SD, dtype=f64, device=dev)
        reset_scale[0] = STAT_SD
    finished = torch.zeros(2, dtype=f64, device=dev)  # episodes, return sum
    next_obs = torch.zeros(n, obs_dim, device=dev)
    next_done = torch.zeros(n, device=dev)
    if env_kind == "cartpole":
        next_obs.copy_(state)
    else:
        next_obs.zero_()

    def env_step(a):
        if env_kind == "cartpole":
            x, x_dot, th, th_dot = state.unbind(1)
            force = torch.where(a == 1, FORCE, -FORCE)
            c, s = torch.cos(th), torch.sin(th)
            temp = (force + POLEMASS_LENGTH * th_dot * th_dot * s) / TOTAL_MASS
            thacc = (GRAVITY * s - c * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * c * c / TOTAL_MASS))
            xacc = temp - POLEMASS_LENGTH * thacc * c / TOTAL_MASS
            new = torch.stack([x + TAU * x_dot, x_dot + TAU * xacc, th + TAU * th_dot, th_dot + TAU * thacc], 1)
            steps.add_(1.0)
            ep_ret.add_(1.0)
            term = (new[:, 0].abs() > X_LIMIT) | (new[:, 2].abs() > THETA_LIMIT)
            done = term | (steps >= MAX_STEPS)
            finished[0].add_(done.sum())
            finished[1].add_(torch.where(done, ep_ret, 0.0).sum())
            fresh = torch.rand(n, 4, device=dev) * 0.1 - 0.05
            state.copy_(torch.where(done[:, None], fresh, new))
            steps.copy_(torch.where(done, 0.0, steps))
            ep_ret.copy_(torch.where(done, 0.0, ep_ret))
            return state, torch.ones(n, device=dev), done
        z_step = torch.randn(n, dtype=f64, device=dev)
        z_reset = torch.randn(n, WINDOW + 1, dtype=f64, device=dev) * reset_scale
        new, obs, reward, done, fin = market_step_math(torch, torch.where, ms, a, z_step, z_reset, hist_m)
        for k in ms:
            ms[k].copy_(new[k])
        finished[0].add_(done.sum())
        finished[1].add_(fin.sum())
        return obs.to(f32), reward.to(f32), done

    b_obs = torch.zeros(T, n, obs_dim, device=dev)
    b_act = torch.zeros(T, n, dtype=torch.long, device=dev)
    b_logp, b_val, b_rew, b_done = (torch.zeros(T, n, device=dev) for _ in range(4))
    b_adv, b_ret = torch.zeros(T, n, device=dev), torch.zeros(T, n, device=dev)

    def rollout():
        with torch.no_grad():
            for t in range(T):
                b_obs[t].copy_(next_obs)
                b_done[t].copy_(next_done)
                logits = actor(next_obs)
                b_val[t].copy_(critic(next_obs).squeeze(1))
                u = torch.rand_like(logits).clamp_(1e-20, 1.0)
                a = torch.argmax(logits - torch.log(-torch.log(u)), dim=1)
                b_act[t].copy_(a)
                b_logp[t].copy_(torch.log_softmax(logits, 1).gather(1, a[:, None]).squeeze(1))
                o, r, d = env_step(a)
                next_obs.copy_(o)
                b_rew[t].copy_(r)
                next_done.copy_(d.to(torch.float32))
            next_value = critic(next_obs).squeeze(1)
            last = torch.zeros(n, device=dev)
            for t in reversed(range(T)):
                nonterminal = 1.0 - (next_done if t == T - 1 else b_done[t + 1])
                nv = next_value if t == T - 1 else b_val[t + 1]
                delta = b_rew[t] + GAMMA * nv * nonterminal - b_val[t]
                last = delta + GAMMA * LAM * nonterminal * last
                b_adv[t].copy_(last)
            b_ret.copy_(b_adv + b_val)

    def update():
        obs, act, logp = b_obs.reshape(rows, obs_dim), b_act.reshape(rows), b_logp.reshape(rows)
        adv, ret, val = b_adv.reshape(rows), b_ret.reshape(rows), b_val.reshape(rows)
        for _ in range(EPOCHS):
            perm = torch.argsort(torch.rand(rows, device=dev))
            for m in range(MINIBATCHES):
                idx = perm[m * mb:(m + 1) * mb]
                logits = actor(obs[idx])
                lsm = torch.log_softmax(logits, 1)
                new_logp = lsm.gather(1, act[idx][:, None]).squeeze(1)
                entropy = -(lsm.exp() * lsm).sum(1).mean()
                ratio = torch.exp(new_logp - logp[idx])
                a = adv[idx]
                a = (a - a.mean()) / (a.std() + 1e-8)
                pg = torch.max(-a * ratio, -a * torch.clamp(ratio, 1 - CLIP, 1 + CLIP)).mean()
                v = critic(obs[idx]).squeeze(1)
                v_clipped = val[idx] + torch.clamp(v - val[idx], -CLIP, CLIP)
                v_loss = 0.5 * torch.max((v - ret[idx]) ** 2, (v_clipped - ret[idx]) ** 2).mean()
                loss = pg - ENT * entropy + VF * v_loss
                opt.zero_grad(set_to_none=False)
                loss.backward()
                nn.utils.clip_grad_norm_(params, MAX_NORM, foreach=True)
                opt.step()

    def set_lr(i):
        lr.fill_(LR * (1.0 - i / iterations))

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    warmup = 3
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(warmup):
            set_lr(i)
            rollout()
            update()
    torch.cuda.current_stream().wait_stream(side)
    g_roll, g_upd = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_roll):
        rollout()
    with torch.cuda.graph(g_upd):
        update()
    tail_from = iterations - max(1, iterations // 20)
    for i in range(warmup, iterations):
        if i == tail_from:
            finished.zero_()
        set_lr(i)
        g_roll.replay()
        g_upd.replay()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    eps, ret_sum = finished.tolist()
    return seconds, iterations * rows / seconds, ret_sum / max(eps, 1.0)


# ------------------------------------------------------------------------------------------ jax


def run_jax(name, env_kind, n, T, total):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    obs_dim, actions = (4, 2) if env_kind == "cartpole" else (WINDOW + 4, 3)
    iterations = total // (n * T)
    rows = n * T
    mb = rows // MINIBATCHES
    hist_m = jnp.array(history_matrix(), dtype=jnp.float64)
    reset_scale = jnp.array([STAT_SD] + [NOISE_SD] * WINDOW, dtype=jnp.float64)

    def ortho(key, i, o, gain):
        a = jax.random.normal(key, (max(i, o), min(i, o)), dtype=jnp.float32)
        q, r = jnp.linalg.qr(a)
        q = q * jnp.sign(jnp.diag(r))  # orthonormal columns, uniform over the group
        w = q if i >= o else q.T  # (i, o): x @ w
        return {"w": w * gain, "b": jnp.zeros(o, jnp.float32)}

    def init_mlp(key, out, gain):
        k = jax.random.split(key, 3)
        return [ortho(k[0], obs_dim, HIDDEN, math.sqrt(2)), ortho(k[1], HIDDEN, HIDDEN, math.sqrt(2)),
                ortho(k[2], HIDDEN, out, gain)]

    def mlp(p, x):
        x = jnp.tanh(x @ p[0]["w"] + p[0]["b"])
        x = jnp.tanh(x @ p[1]["w"] + p[1]["b"])
        return x @ p[2]["w"] + p[2]["b"]

    def env_reset(key):
        if env_kind == "cartpole":
            s = jax.random.uniform(key, (n, 4), jnp.float32, -0.05, 0.05)
            return {"s": s, "steps": jnp.zeros(n, jnp.float32), "ep_ret": jnp.zeros(n, jnp.float32)}, s
        z = jax.random.normal(key, (n, WINDOW + 1), dtype=jnp.float64) * reset_scale
        xs = MEAN + z @ hist_m.T
        st = {"x": xs[:, -1], "q": jnp.zeros(n, jnp.float64), "cb": jnp.zeros(n, jnp.float64),
              "cash": jnp.full(n, INITIAL_CASH, jnp.float64), "t": jnp.zeros(n, jnp.float64),
              "ep_reward": jnp.zeros(n, jnp.float64), "window": (xs[:, 1:] - xs[:, :-1]) * RET_SCALE}
        return st, jnp.zeros((n, obs_dim), jnp.float32)

    def env_step(st, a, key):
        if env_kind == "cartpole":
            x, x_dot, th, th_dot = st["s"].T
            force = jnp.where(a == 1, FORCE, -FORCE)
            c, s = jnp.cos(th), jnp.sin(th)
            temp = (force + POLEMASS_LENGTH * th_dot * th_dot * s) / TOTAL_MASS
            thacc = (GRAVITY * s - c * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * c * c / TOTAL_MASS))
            xacc = temp - POLEMASS_LENGTH * thacc * c / TOTAL_MASS
            new = jnp.stack([x + TAU * x_dot, x_dot + TAU * xacc, th + TAU * th_dot, th_dot + TAU * thacc], 1)
            steps, ep_ret = st["steps"] + 1.0, st["ep_ret"] + 1.0
            done = (jnp.abs(new[:, 0]) > X_LIMIT) | (jnp.abs(new[:, 2]) > THETA_LIMIT) | (steps >= MAX_STEPS)
            fresh = jax.random.uniform(key, (n, 4), jnp.float32, -0.05, 0.05)
            s_new = jnp.where(done[:, None], fresh, new)
            fin = jnp.where(done, ep_ret, 0.0)
            st = {"s": s_new, "steps": jnp.where(done, 0.0, steps), "ep_ret": jnp.where(done, 0.0, ep_ret)}
            return st, s_new, jnp.ones(n, jnp.float32), done, fin
        k1, k2 = jax.random.split(key)
        z_step = jax.random.normal(k1, (n,), dtype=jnp.float64)
        z_reset = jax.random.normal(k2, (n, WINDOW + 1), dtype=jnp.float64) * reset_scale
        new, obs, reward, done, fin = market_step_math(jnp, jnp.where, st, a, z_step, z_reset, hist_m)
        return new, obs.astype(jnp.float32), reward.astype(jnp.float32), done, fin

    def adam_init(p):
        z = jax.tree_util.tree_map(jnp.zeros_like, p)
        return {"m": z, "v": z, "t": jnp.zeros((), jnp.int32)}

    def adam_step(p, g, s, lr):
        gn = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(g)))
        scale = jnp.minimum(1.0, MAX_NORM / (gn + 1e-6))
        g = jax.tree_util.tree_map(lambda x: x * scale, g)
        t = s["t"] + 1
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, s["m"], g)
        v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, s["v"], g)
        tf = t.astype(jnp.float32)
        c1, c2 = 1 - jnp.float32(0.9) ** tf, 1 - jnp.float32(0.999) ** tf
        p = jax.tree_util.tree_map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + 1e-5), p, m, v)
        return p, {"m": m, "v": v, "t": t}

    def loss_fn(p, b):
        logits = mlp(p["actor"], b["obs"])
        lsm = jax.nn.log_softmax(logits)
        new_logp = jnp.take_along_axis(lsm, b["act"][:, None], 1)[:, 0]
        entropy = -(jnp.exp(lsm) * lsm).sum(1).mean()
        ratio = jnp.exp(new_logp - b["logp"])
        a = (b["adv"] - b["adv"].mean()) / (b["adv"].std() + 1e-8)
        pg = jnp.maximum(-a * ratio, -a * jnp.clip(ratio, 1 - CLIP, 1 + CLIP)).mean()
        v = mlp(p["critic"], b["obs"])[:, 0]
        vc = b["val"] + jnp.clip(v - b["val"], -CLIP, CLIP)
        v_loss = 0.5 * jnp.maximum((v - b["ret"]) ** 2, (vc - b["ret"]) ** 2).mean()
        return pg - ENT * entropy + VF * v_loss

    grad_fn = jax.grad(loss_fn)

    def iteration(carry, i):
        p, opt, st, obs, done, key = carry
        lr = LR * (1.0 - i / iterations)

        def step(c, _):
            st, obs, done, key = c
            key, k_act, k_env = jax.random.split(key, 3)
            logits = mlp(p["actor"], obs)
            val = mlp(p["critic"], obs)[:, 0]
            a = jax.random.categorical(k_act, logits)
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits), a[:, None], 1)[:, 0]
            st, nobs, r, d, fin = env_step(st, a, k_env)
            return (st, nobs, d.astype(jnp.float32), key), (obs, a, logp, val, r, done, fin, d)

        (st, obs, done, key), (b_obs, b_act, b_logp, b_val, b_rew, b_done, fin, d_all) = jax.lax.scan(
            step, (st, obs, done, key), None, T)
        next_value = mlp(p["critic"], obs)[:, 0]

        def gae_step(c, x):
            last, nv, nd = c
            rew, val, dn = x
            delta = rew + GAMMA * nv * (1 - nd) - val
            last = delta + GAMMA * LAM * (1 - nd) * last
            return (last, val, dn), last

        _, adv = jax.lax.scan(gae_step, (jnp.zeros(n, jnp.float32), next_value, done), (b_rew, b_val, b_done), reverse=True)
        batch = {"obs": b_obs.reshape(rows, obs_dim), "act": b_act.reshape(rows), "logp": b_logp.reshape(rows),
                 "adv": adv.reshape(rows), "ret": (adv + b_val).reshape(rows), "val": b_val.reshape(rows)}

        def epoch(c, _):
            p, opt, key = c
            key, k = jax.random.split(key)
            perm = jax.random.permutation(k, rows)
            shuffled = jax.tree_util.tree_map(lambda x: x[perm].reshape((MINIBATCHES, mb) + x.shape[1:]), batch)

            def minibatch(c, b):
                p, opt = c
                p, opt = adam_step(p, grad_fn(p, b), opt, lr)
                return (p, opt), None

            (p, opt), _ = jax.lax.scan(minibatch, (p, opt), shuffled)
            return (p, opt, key), None

        (p, opt, key), _ = jax.lax.scan(epoch, (p, opt, key), None, EPOCHS)
        stats = jnp.stack([d_all.sum().astype(jnp.float64), fin.sum().astype(jnp.float64)])
        return (p, opt, st, obs, done, key), stats

    def train(key):
        k_a, k_c, k_env, key = jax.random.split(key, 4)
        p = {"actor": init_mlp(k_a, actions, 0.01), "critic": init_mlp(k_c, 1, 1.0)}
        st, obs = env_reset(k_env)
        carry = (p, adam_init(p), st, obs, jnp.zeros(n, jnp.float32), key)
        _, stats = jax.lax.scan(iteration, carry, jnp.arange(iterations, dtype=jnp.float32))
        return stats

    compiled = jax.jit(train).lower(jax.random.PRNGKey(0)).compile()
    jax.block_until_ready(compiled(jax.random.PRNGKey(0)))
    t0 = time.perf_counter()
    stats = jax.block_until_ready(compiled(jax.random.PRNGKey(1)))
    seconds = time.perf_counter() - t0
    tail = stats[iterations - max(1, iterations // 20):].sum(0)
    return seconds, iterations * rows / seconds, float(tail[1]) / max(float(tail[0]), 1.0)


def main(argv):
    args = argv[1:]
    impls = ["torch", "jax"]
    if "--impl" in args:
        k = args.index("--impl")
        impls = [args[k + 1]]
        del args[k:k + 2]
    names = args or list(SCENARIOS)
    for impl in impls:
        try:
            if impl == "torch":
                import torch
                if not torch.cuda.is_available():
                    print("SKIP torch sees no CUDA device")
                    continue
            else:
                import jax
                if jax.default_backend() != "gpu":
                    print(f"SKIP jax backend is {jax.default_backend()}, not gpu")
                    continue
        except Exception as e:  # noqa: BLE001 - any import failure means "no baseline"
            print(f"SKIP {impl} not importable: {e}")
            continue
        for name in names:
            env_kind, n, T, total = SCENARIOS[name]
            try:
                run = run_torch if impl == "torch" else run_jax
                seconds, sps, ret = run(name, env_kind, n, T, total)
                print(f"RESULT {impl} {name} seconds={seconds:.4f} sps={sps:.6e} final_return={ret:.4f}", flush=True)
            except Exception as e:  # noqa: BLE001 - report and go on with the next run
                print(f"FAILED {impl} {name}: {type(e).__name__}: {e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
