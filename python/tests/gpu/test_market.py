"""The market driven from torch (GPU host: scripts/python-gpu-host.sh). Bit-for-bit equality with
the C++ call path, zero copies across the boundary, DLPack stream semantics, refused inputs."""

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests drive the market from torch")
import foxhunt  # noqa: E402

DEV = "cuda:0"


def outputs(arrays):
    return [torch.from_dlpack(a).clone() for a in arrays]


@pytest.mark.parametrize("name", ["bench_ou.toml", "ou4_continuous.toml", "regime_jumps.toml", "gbm8_correlated.toml"])
def test_torch_driven_steps_equal_one_cpp_call_bitwise(markets, random_actions, name):
    """T steps from Python, one call each with a torch tensor of actions, against one C++ call of T
    steps (MarketEnv::step with the (T, N, assets) buffer): obs, reward, flags and final_obs equal
    bit for bit, episode ends included (T > episode_length for bench_ou's 256 steps)."""
    config = foxhunt.load_market_config(markets / name)
    n, steps, seed = 1000, 300 if name == "bench_ou.toml" else 80, 12345
    gen = torch.Generator(device=DEV).manual_seed(7)
    acts = random_actions(config, steps, n, gen)

    ref = foxhunt.Market(config, n)
    ref_obs0 = torch.from_dlpack(ref.reset(seed)).clone()
    ref_out = outputs(ref.step(acts))  # one call: (T, N, ...)
    py = foxhunt.Market(config, n, stream=torch.cuda.current_stream().cuda_stream)
    obs0 = torch.from_dlpack(py.reset(seed)).clone()
    assert torch.equal(obs0, ref_obs0)
    seen = [[] for _ in range(5)]
    for t in range(steps):
        out = outputs(py.step(acts[t]))  # (N, ...) each
        for k in range(5):
            seen[k].append(out[k])
    obs, reward, term, trunc, final = (torch.stack(s) for s in seen)
    assert torch.equal(obs.view(torch.int32), ref_out[0].view(torch.int32))
    assert torch.equal(reward.view(torch.int32), ref_out[1].view(torch.int32))
    assert torch.equal(term, ref_out[2]) and torch.equal(trunc, ref_out[3])
    ended = term | trunc
    if name == "bench_ou.toml":
        assert ended.any()  # the final_obs rows were exercised
    assert torch.equal(final[ended].view(torch.int32), ref_out[4][ended].view(torch.int32))
    assert obs.isfinite().all() and reward.isfinite().all()


def test_same_seed_and_actions_repeat_bitwise_and_other_seed_differs(markets, random_actions):
    config = foxhunt.load_market_config(markets / "bench_ou.toml")
    gen = torch.Generator(device=DEV).manual_seed(3)
    acts = random_actions(config, 20, 256, gen)
    runs = []
    for seed in (5, 5, 6):
        m = foxhunt.Market(config, 256)
        m.reset(seed)
        runs.append(outputs(m.step(acts)))
    # final_obs rows of environments that did not end are stale memory: compared where ended only
    for a, b in zip(runs[0][:4], runs[1][:4]):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    ended = runs[0][2] | runs[0][3]
    assert torch.equal(runs[0][4][ended].view(torch.int32), runs[1][4][ended].view(torch.int32))
    assert not torch.equal(runs[0][0], runs[2][0])


def test_outputs_are_views_without_copies(markets):
    """torch.from_dlpack shares the market's memory (same pointer), and a step driven from Python
    (actions made by torch, outputs read by torch) makes no memcpy at all."""
    config = foxhunt.load_market_config(markets / "bench_ou.toml")
    n = 4096
    m = foxhunt.Market(config, n, stream=torch.cuda.current_stream().cuda_stream)
    obs_arr = m.reset(1)
    obs = torch.from_dlpack(obs_arr)
    assert obs.data_ptr() == obs_arr.data_ptr and obs.device == torch.device(DEV)
    assert obs.shape == (n, config.obs_dim) and obs.dtype == torch.float32
    actions = torch.zeros((n, 1), dtype=torch.int32, device=DEV)
    arrays = m.step(actions)
    tensors = [torch.from_dlpack(a) for a in arrays]
    assert [t.data_ptr() for t in tensors] == [a.data_ptr for a in arrays]
    assert tensors[1].dtype == torch.float32 and tensors[2].dtype == torch.bool and tensors[3].dtype == torch.bool
    torch.cuda.synchronize()

    ok, why = foxhunt.TransferAudit.available()
    if not ok:
        pytest.skip("CUPTI unavailable: " + why)
    audit = foxhunt.TransferAudit()
    audit.start()
    for _ in range(10):
        logits = torch.from_dlpack(m.step(actions)[0])[:, :3] * 2.0  # a stand-in policy on the obs
        actions = logits.argmax(dim=1, keepdim=True).to(torch.int32)
    counts = audit.stop()
    assert counts["total"] == 0, counts["summary"]


def test_dlpack_stream_semantics_order_consumer_after_producer(markets):
    """The market runs on its own stream; a consumer on another stream asking __dlpack__(stream=s)
    waits for the step (a large T makes the step long enough for a missing wait to show)."""
    config = foxhunt.load_market_config(markets / "bench_ou.toml")
    n, steps = 1 << 16, 64
    m = foxhunt.Market(config, n)  # its own stream
    assert m.stream != torch.cuda.current_stream().cuda_stream
    acts = torch.ones((steps, n, 1), dtype=torch.int32, device=DEV)
    ref = foxhunt.Market(config, n)
    ref.reset(9)
    expect = outputs(ref.step(acts))
    ref.synchronize()
    m.reset(9)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out = m.step(acts)  # actions: the market's stream waits for torch's work on `side`
        reward = torch.from_dlpack(out[1])  # side waits for the market's stream
        total = reward.sum()  # on `side`, right after the step was enqueued
    torch.cuda.synchronize()
    assert torch.equal(total, expect[1].sum())


def test_versioned_and_legacy_capsules(markets):
    m = foxhunt.Market(foxhunt.load_market_config(markets / "bench_ou.toml"), 16)
    arr = m.reset(0)
    a = torch.from_dlpack(arr)
    legacy = arr.__dlpack__(stream=-1)
    versioned = arr.__dlpack__(stream=-1, max_version=(1, 0))
    b = torch.utils.dlpack.from_dlpack(legacy)
    assert b.data_ptr() == a.data_ptr()
    del versioned  # an unconsumed capsule frees itself
    with pytest.raises(BufferError):
        arr.__dlpack__(copy=True)
    with pytest.raises(ValueError, match="stream=0"):
        arr.__dlpack__(stream=0)


def test_wrong_actions_are_refused_with_what_was_expected(markets):
    config = foxhunt.load_market_config(markets / "bench_ou.toml")
    m = foxhunt.Market(config, 32)
    m.reset(0)
    with pytest.raises(ValueError, match=r"actions must be int32 .*got float32"):
        m.step(torch.zeros((32, 1), device=DEV))
    with pytest.raises(ValueError, match=r"actions must be int32 .*got int64"):
        m.step(torch.zeros((32, 1), dtype=torch.int64, device=DEV))
    with pytest.raises(ValueError, match=r"actions must have shape \(N, assets\) = \(32, 1\).*got \(16, 1\)"):
        m.step(torch.zeros((16, 1), dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match=r"actions must be on cuda:0 \(the market's device\); got cpu"):
        m.step(torch.zeros((32, 1), dtype=torch.int32))
    with pytest.raises(ValueError, match=r"contiguous"):
        m.step(torch.zeros((32, 2), dtype=torch.int32, device=DEV)[:, :1])  # strides (2, 1)
    # the market still steps after the refusals
    out = m.step(torch.zeros((32, 1), dtype=torch.int32, device=DEV))
    assert torch.from_dlpack(out[1]).isfinite().all()


def test_vector_env_wrapper(markets):
    env = foxhunt.MarketVectorEnv(markets / "bench_ou.toml", num_envs=512)
    obs, info = env.reset(seed=3)
    assert obs.shape == (512, env.config.obs_dim) and obs.is_cuda
    assert tuple(env.action_space.shape) == (512, 1)
    total = torch.zeros(512, device=DEV)
    for _ in range(300):
        a = torch.randint(0, 3, (512, 1), dtype=torch.int32, device=DEV)
        obs, reward, terminated, truncated, info = env.step(a)
        total += reward
    assert info["final_obs"].shape == obs.shape and info["_final_obs"].dtype == torch.bool
    stats = env.episode_stats()
    assert stats["episodes"] >= 512  # 300 steps > 256-step episodes: every env finished one
    assert stats["mean_length"] <= 256
    env.close()
