#!/usr/bin/env python3
"""The same market through the Gymnasium-style vector env (foxhunt.MarketVectorEnv).

    PYTHONPATH=build/python python3 examples/python/vector_env.py configs/markets/ou4_continuous.toml
"""
import sys

import torch

import foxhunt

env = foxhunt.MarketVectorEnv(sys.argv[1] if len(sys.argv) > 1 else "configs/markets/bench_ou.toml", num_envs=1024)
print("observation space", env.observation_space, "action space", env.action_space)
obs, info = env.reset(seed=42)
for t in range(512):
    if env.config.action == "discrete":
        actions = torch.randint(0, len(env.config.levels), tuple(env.action_space.shape), dtype=torch.int32,
                                device=env.device)
    else:
        actions = torch.rand(tuple(env.action_space.shape), device=env.device) * 2 - 1
    obs, reward, terminated, truncated, info = env.step(actions)
print(env.episode_stats())
env.close()
