"""A Gymnasium-style vector environment over foxhunt.Market, with torch tensors on the device.

The API of gymnasium.vector.VectorEnv (reset, step, observation_space, action_space, num_envs,
single_observation_space, single_action_space) with same-step autoreset: a finished environment
starts its next episode in the same step; its last observation is in info["final_obs"], marked by
info["_final_obs"]. Gymnasium is not required: when it is installed the spaces are gymnasium's,
otherwise the small Box and MultiDiscrete below (same attributes: shape, dtype, low, high, nvec).
Tensors stay on the device; the observation tensors view the market's buffers (clone to keep).
"""

try:  # optional: only for the space classes
    import gymnasium as _gym
except ImportError:  # pragma: no cover - depends on the machine
    _gym = None

from ._foxhunt import Market, load_market_config
from .torch_market import TorchMarket


class Box:
    """A box of shape `shape` between low and high (scalars), like gymnasium.spaces.Box."""

    def __init__(self, low, high, shape, dtype):
        self.low, self.high, self.shape, self.dtype = low, high, tuple(shape), dtype

    def __repr__(self):
        return f"Box({self.low}, {self.high}, {self.shape}, {self.dtype})"


class MultiDiscrete:
    """Independent choices 0 .. n-1 per entry of `shape`, like gymnasium.spaces.MultiDiscrete."""

    def __init__(self, n, shape):
        self.n, self.shape, self.dtype = n, tuple(shape), "int32"
        self.nvec = [n] * _count(shape)

    def __repr__(self):
        return f"MultiDiscrete({self.n} per entry, shape {self.shape})"


def _count(shape):
    c = 1
    for s in shape:
        c *= s
    return c


def spaces(config, num_envs):
    """(single_observation_space, single_action_space, observation_space, action_space) of a market."""
    inf = float("inf")
    d, a = config.obs_dim, config.assets
    if _gym is not None:
        import numpy as np

        obs1 = _gym.spaces.Box(-inf, inf, (d,), np.float32)
        obs = _gym.spaces.Box(-inf, inf, (num_envs, d), np.float32)
        if config.action == "discrete":
            n = len(config.levels)
            act1 = _gym.spaces.MultiDiscrete(np.full((a,), n, dtype=np.int32))
            act = _gym.spaces.MultiDiscrete(np.full((num_envs, a), n, dtype=np.int32))
        else:
            act1 = _gym.spaces.Box(-1.0, 1.0, (a,), np.float32)
            act = _gym.spaces.Box(-1.0, 1.0, (num_envs, a), np.float32)
        return obs1, act1, obs, act
    obs1, obs = Box(-inf, inf, (d,), "float32"), Box(-inf, inf, (num_envs, d), "float32")
    if config.action == "discrete":
        n = len(config.levels)
        return obs1, MultiDiscrete(n, (a,)), obs, MultiDiscrete(n, (num_envs, a))
    return obs1, Box(-1.0, 1.0, (a,), "float32"), obs, Box(-1.0, 1.0, (num_envs, a), "float32")


class MarketVectorEnv:
    """foxhunt.Market behind the gymnasium.vector.VectorEnv API, torch tensors in and out.

    env = MarketVectorEnv("configs/markets/bench_ou.toml", num_envs=4096, device=0)
    obs, info = env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step(actions)   # actions: int32 (N, assets) on cuda
    """

    metadata = {"autoreset_mode": "SameStep"}

    def __init__(self, config, num_envs, device=0, obs_dtype="float32", stream=None):
        import torch  # the tensors are torch's; foxhunt itself needs no torch

        self._torch = torch
        if not hasattr(config, "obs_dim"):
            config = load_market_config(config)
        if stream is None:
            # torch's current stream on the device: the market's kernels and the caller's torch work
            # are ordered by the stream itself, and a step on that stream goes through TorchMarket
            # (one launch, the same output tensors every step).
            self._direct = TorchMarket(config, num_envs, device=device, obs_dtype=obs_dtype)
            self.market = self._direct.market
        else:
            self._direct = None
            self.market = Market(config, num_envs, device=device, obs_dtype=obs_dtype, stream=stream)
        self.config = config
        self.num_envs = num_envs
        self.device = torch.device("cuda", device)
        (self.single_observation_space, self.single_action_space, self.observation_space,
         self.action_space) = spaces(config, num_envs)
        self._seed, self._reset_before = 0, False
        self._key, self._views = None, None

    def _tensors(self, arrays):
        # The market writes every step into the same buffers: while the caller's torch stream is
        # the market's, the torch views made once stay valid and need no wait (same stream), so
        # they are reused; otherwise each step's arrays go through from_dlpack (its stream wait).
        key = tuple((a.data_ptr, a.shape) for a in arrays)
        if key == self._key and self._torch.cuda.current_stream(self.device).cuda_stream == self.market.stream:
            return self._views
        views = [self._torch.from_dlpack(a) for a in arrays]
        self._key, self._views = key, views
        return views

    def reset(self, *, seed=None, options=None):
        # Without a seed, the next one (a reset starts the episodes afresh from its seed: reusing
        # the last one would replay the same price paths).
        if seed is not None:
            self._seed = seed
        elif self._reset_before:
            self._seed += 1
        self._reset_before = True
        self._key = None
        obs = self._torch.from_dlpack(self.market.reset(self._seed))
        return obs, {}

    def step(self, actions):
        if self._direct is not None and self._direct.on_its_stream():
            obs, reward, terminated, truncated, final_obs = self._direct._step(actions)
        else:
            obs, reward, terminated, truncated, final_obs = self._tensors(self.market.step(actions))
        done = terminated | truncated
        info = {"final_obs": final_obs, "_final_obs": done}
        return obs, reward, terminated, truncated, info

    def episode_stats(self, clear=False):
        return self.market.episode_stats(clear)

    def close(self):
        self.market.synchronize()
        self.market = None
