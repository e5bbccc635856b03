#!/usr/bin/env python3
"""Steps a foxhunt market with a uniformly random policy in torch, everything on the GPU.

    PYTHONPATH=build/python python3 examples/python/random_policy.py configs/markets/bench_ou.toml
"""
import sys

import torch

import foxhunt


def main(path, num_envs=4096, steps=1024):
    config = foxhunt.load_market_config(path)
    print(config)
    # TorchMarket runs on torch's current stream: its kernels and torch's are ordered by the stream,
    # and every step returns the same five tensors (views of the market's buffers, no copy).
    market = foxhunt.TorchMarket(config, num_envs, device=0)
    obs = market.reset(seed=1)  # (N, obs_dim) float32 on cuda:0
    episode_return = torch.zeros(num_envs, device="cuda")
    returns = []
    for _ in range(steps):
        if config.action == "discrete":
            actions = torch.randint(0, len(config.levels), (num_envs, config.assets), dtype=torch.int32, device="cuda")
        else:
            actions = torch.rand((num_envs, config.assets), device="cuda") * 2 - 1
        obs, reward, terminated, truncated, final_obs = market.step(actions)
        episode_return += reward
        done = terminated | truncated
        returns.append(episode_return[done])  # stays on the device
        episode_return = torch.where(done, 0.0, episode_return)
    finished = torch.cat(returns)
    stats = market.episode_stats()
    print(f"{finished.numel()} episodes finished, mean return {finished.mean().item():.5f} "
          f"(the market's own statistics: {stats})")
    return finished, stats


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "configs/markets/bench_ou.toml")
