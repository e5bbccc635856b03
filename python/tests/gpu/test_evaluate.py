"""foxhunt.evaluate and foxhunt.Agent on a checkpoint trained here for a few seconds (GPU host)."""

import subprocess

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive the market from torch")
import foxhunt  # noqa: E402

RUN_CONFIG = """
[run]
name = "python_eval_test"
seed = 3
total_env_steps = 32768

[env]
kind = "market"
market = "{market}"
num_envs = 256

[learner]
kind = "ppo"
rollout_steps = 64
epochs = 1
minibatches = 4
hidden = [32, 32]

[checkpoint]
every_env_steps = 16384
"""


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, markets):
    exe = foxhunt.find_foxhunt()
    if exe is None:
        pytest.skip("the foxhunt program was not found (set FOXHUNT_BIN to <dist>/bin/foxhunt)")
    d = tmp_path_factory.mktemp("eval")
    cfg = d / "run.toml"
    cfg.write_text(RUN_CONFIG.format(market=markets / "ou_mean_reversion.toml"))
    res = subprocess.run([exe, "train", "--config", str(cfg), "--run-dir", str(d / "run")], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return d / "run"


def test_evaluate_returns_the_report_of_foxhunt_eval(trained_run, tmp_path):
    report = foxhunt.evaluate(trained_run, episodes=64, cost_multipliers=(0.0, 1.0), report_dir=tmp_path / "py")
    assert report["schema"] == "foxhunt.eval.report" and report["episodes"] == 64
    policies = {(r["policy"], r["cost_multiplier"]) for r in report["runs"]}
    assert ("greedy", 0.0) in policies and ("greedy", 1.0) in policies and ("buy_and_hold", 1.0) in policies
    assert (tmp_path / "py" / "report.json").exists()
    # The same evaluation again (same default seed): the same numbers, run for run.
    again = foxhunt.evaluate(trained_run, episodes=64, cost_multipliers=(0.0, 1.0))
    assert [r["metrics"] for r in again["runs"]] == [r["metrics"] for r in report["runs"]]
    assert again["report_dir"] is None


@pytest.mark.skipif(not foxhunt.has_agent, reason="the module was built without python/agent (foxhunt.Agent)")
def test_agent_greedy_actions_reproduce_foxhunt_eval(trained_run, markets):
    """The checkpoint's greedy policy acting from Python, on a market stepped from Python, gives the
    episode statistics foxhunt eval reports for its greedy run (same seed, N and steps; eval runs
    one episode_length of steps from a reset, acting with the same policy code) bit for bit."""
    n = 64
    report = foxhunt.evaluate(trained_run, episodes=n, cost_multipliers=(1.0,))
    greedy = next(r for r in report["runs"] if r["policy"] == "greedy" and r["cost_multiplier"] == 1.0)
    config = foxhunt.load_market_config(markets / "ou_mean_reversion.toml")
    market = foxhunt.Market(config, n, stream=torch.cuda.current_stream().cuda_stream)
    agent = foxhunt.Agent(trained_run, market)
    assert agent.learner == "ppo"
    obs = torch.from_dlpack(market.reset(report["seed"]))
    for t in range(config.episode_length):
        actions = torch.from_dlpack(agent.act(obs, t))
        assert actions.shape == (n, config.assets)
        obs = torch.from_dlpack(market.step(actions)[0])
    stats = market.episode_stats()
    assert stats["episodes"] >= n
    for key, value in greedy["episode_stats"].items():
        assert stats[key] == value, (key, stats[key], value)


@pytest.mark.skipif(not foxhunt.has_agent, reason="the module was built without python/agent (foxhunt.Agent)")
def test_agent_refuses_wrong_obs(trained_run, markets):
    config = foxhunt.load_market_config(markets / "ou_mean_reversion.toml")
    market = foxhunt.Market(config, 16)
    agent = foxhunt.Agent(trained_run, market)
    with pytest.raises(ValueError, match=r"obs must be float32 observations of shape \(N, obs_dim\)"):
        agent.act(torch.zeros((8, config.obs_dim), device="cuda"), 0)
    with pytest.raises(ValueError, match=r"got bfloat16"):
        agent.act(torch.zeros((16, config.obs_dim), device="cuda", dtype=torch.bfloat16), 0)
    other = foxhunt.Market(foxhunt.load_market_config(markets / "ou4_continuous.toml"), 16)
    with pytest.raises(Exception):  # the network does not fit 4 assets
        foxhunt.Agent(trained_run, other)
