"""foxhunt.TorchMarket (GPU host: scripts/python-gpu-host.sh): bit-for-bit the DLPack Market, the
same output tensors every step, no copies, and refusals naming what was expected."""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive the market from torch")
import foxhunt  # noqa: E402

DEV = "cuda:0"


def bits(t):
    return t.view(torch.uint8) if t.dtype == torch.bool else t.view(torch.int32)


@pytest.mark.parametrize("name", ["bench_ou.toml", "ou4_continuous.toml", "regime_jumps.toml"])
def test_steps_equal_the_dlpack_market_bitwise(markets, random_actions, name):
    """300 steps (bench_ou's episodes end at 256) of TorchMarket and of Market on its own stream,
    same seed and actions: obs, reward and flags equal bit for bit at every step, and final_obs
    where an episode ended."""
    config = foxhunt.load_market_config(markets / name)
    n, steps, seed = 1000, 300, 4321
    acts = random_actions(config, steps, n, torch.Generator(device=DEV).manual_seed(11))
    ref = foxhunt.Market(config, n)
    ref_obs0 = torch.from_dlpack(ref.reset(seed)).clone()
    tm = foxhunt.TorchMarket(config, n)
    assert torch.equal(bits(tm.reset(seed)), bits(ref_obs0))
    ended_any = False
    for t in range(steps):
        got = [x.clone() for x in tm.step(acts[t])]
        want = [torch.from_dlpack(a).clone() for a in ref.step(acts[t])]
        for k in range(4):
            assert torch.equal(bits(got[k]), bits(want[k])), (t, k)
        ended = want[2] | want[3]
        ended_any |= bool(ended.any())
        assert torch.equal(bits(got[4][ended]), bits(want[4][ended])), t
    if name == "bench_ou.toml":
        assert ended_any


def test_outputs_are_the_same_views_every_step_and_nothing_is_copied(markets):
    config = foxhunt.load_market_config(markets / "bench_ou.toml")
    n = 4096
    tm = foxhunt.TorchMarket(config, n)
    tm.reset(1)
    actions = torch.zeros((n, 1), dtype=torch.int32, device=DEV)
    first = tm.step(actions)
    second = tm.step(actions)
    assert all(a is b for a, b in zip(first, second))
    assert first[0].shape == (n, config.obs_dim) and first[1].shape == (n,) and first[2].dtype == torch.bool
    # a multi-step Market call replaces the buffers: the next step's views follow
    tm.market.step(torch.zeros((4, n, 1), dtype=torch.int32, device=DEV))
    third = tm.step(actions)
    assert third[0].data_ptr() != first[0].data_ptr()
    torch.cuda.synchronize()

    ok, why = foxhunt.TransferAudit.available()
    if not ok:
        pytest.skip("CUPTI unavailable: " + why)
    audit = foxhunt.TransferAudit()
    audit.start()
    for _ in range(10):
        obs = tm.step(actions)[0]
        actions = (obs[:, :3] * 2.0).argmax(dim=1, keepdim=True).to(torch.int32)  # a stand-in policy
    counts = audit.stop()
    assert counts["total"] == 0, counts["summary"]


def test_refuses_wrong_actions_and_another_stream(markets):
    config = foxhunt.load_market_config(markets / "bench_ou.toml")
    tm = foxhunt.TorchMarket(config, 32)
    tm.reset(0)
    expected = r"actions must be torch.int32 of shape \(32, 1\) or \(32,\), contiguous, on cuda:0"
    with pytest.raises(ValueError, match=expected + r"; got torch.float32"):
        tm.step(torch.zeros((32, 1), device=DEV))
    with pytest.raises(ValueError, match=expected + r"; got torch.int32 of shape \(16, 1\)"):
        tm.step(torch.zeros((16, 1), dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match=expected + r"; got .* on cpu"):
        tm.step(torch.zeros((32, 1), dtype=torch.int32))
    with pytest.raises(ValueError, match="not contiguous"):
        tm.step(torch.zeros((32, 2), dtype=torch.int32, device=DEV)[:, :1])
    with pytest.raises(TypeError, match="actions must be a torch.Tensor"):
        tm.step([0] * 32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side), pytest.raises(RuntimeError, match="current stream"):
        tm.step(torch.zeros((32, 1), dtype=torch.int32, device=DEV))
    out = tm.step(torch.zeros(32, dtype=torch.int32, device=DEV))  # (N,) with one asset
    assert out[1].isfinite().all()


def test_vector_env_on_its_stream_equals_the_dlpack_path(markets):
    """MarketVectorEnv made on torch's stream steps through TorchMarket; one given another stream
    through Market and from_dlpack. Same seed and actions: the same observations, rewards and flags."""
    direct = foxhunt.MarketVectorEnv(markets / "bench_ou.toml", num_envs=256)
    side = torch.cuda.Stream()
    dlpack = foxhunt.MarketVectorEnv(markets / "bench_ou.toml", num_envs=256, stream=side.cuda_stream)
    assert direct._direct is not None and dlpack._direct is None
    a_obs, _ = direct.reset(seed=5)
    b_obs, _ = dlpack.reset(seed=5)
    assert torch.equal(a_obs, b_obs)
    gen = torch.Generator(device=DEV).manual_seed(2)
    for _ in range(300):  # past the 256-step episodes
        act = torch.randint(0, 3, (256, 1), generator=gen, dtype=torch.int32, device=DEV)
        a = direct.step(act)
        b = dlpack.step(act)
        for k in range(4):
            assert torch.equal(a[k], b[k])
        assert torch.equal(a[4]["_final_obs"], b[4]["_final_obs"])
        ended = a[4]["_final_obs"]
        assert torch.equal(a[4]["final_obs"][ended], b[4]["final_obs"][ended])
    direct.close()
    dlpack.close()


def test_the_random_policy_example_runs_and_agrees_with_the_markets_statistics(markets):
    """examples/python/random_policy.py (the README's example): its episode count and mean return,
    summed in torch, are the market's own statistics."""
    import importlib.util

    path = markets.parents[1] / "examples" / "python" / "random_policy.py"
    spec = importlib.util.spec_from_file_location("random_policy", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    finished, stats = example.main(str(markets / "bench_ou.toml"), num_envs=256, steps=600)
    assert finished.numel() == stats["episodes"] >= 256  # 600 steps > the 256-step episodes
    assert abs(finished.double().mean().item() - stats["mean_return"]) <= 1e-4 * max(1.0, abs(stats["mean_return"]))
