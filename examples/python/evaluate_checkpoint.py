#!/usr/bin/env python3
"""Evaluates a checkpoint two ways: foxhunt eval's report as a dict, and the checkpoint's greedy
policy acting from Python on a market stepped from Python (the same episodes eval runs).

    PYTHONPATH=build/python python3 examples/python/evaluate_checkpoint.py runs/<run dir>
"""
import pathlib
import sys

import torch

import foxhunt

run = sys.argv[1]
report = foxhunt.evaluate(run, episodes=256, cost_multipliers=(0.0, 1.0, 2.0))
print(report["table"])
greedy = next(r for r in report["runs"] if r["policy"] == "greedy" and r["cost_multiplier"] == 1.0)
print("eval's greedy run:", greedy["episode_stats"])

if foxhunt.has_agent:
    market_file = pathlib.Path(report["market"])  # as the run config names it: relative to that file
    if not market_file.is_absolute():
        market_file = pathlib.Path(report["checkpoints"][0]["config"]).parent / market_file
    config = foxhunt.load_market_config(market_file)
    market = foxhunt.Market(config, 256, stream=torch.cuda.current_stream().cuda_stream)
    agent = foxhunt.Agent(run, market)
    obs = torch.from_dlpack(market.reset(report["seed"]))
    for t in range(config.episode_length):
        actions = torch.from_dlpack(agent.act(obs, t))
        obs = torch.from_dlpack(market.step(actions)[0])
    print("the same policy from Python:", market.episode_stats())
