"""foxhunt.evaluate on a checkpoint trained here for a few seconds (GPU host)."""

import subprocess

import pytest

import foxhunt

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
