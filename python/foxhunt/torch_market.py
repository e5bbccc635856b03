"""foxhunt.Market for torch code: torch tensors in and out with no per-step conversion.

    market = TorchMarket("configs/markets/bench_ou.toml", num_envs=4096, device=0)
    obs = market.reset(seed=1)
    obs, reward, terminated, truncated, final_obs = market.step(actions)  # int32 (N, assets) on cuda

The market runs on torch's current stream of the device at construction, and every reset and step
must be called with that stream current: torch's own ordering then covers the actions (written
by earlier torch work on the stream, their memory reused only by later work on it) and the
outputs (read by later torch work), so a step is one kernel launch with no event, no DLPack
capsule and no stream wait. The outputs are the same five tensors at every step, views of the
market's buffers that the next step rewrites (clone what you keep); final_obs rows are those of
the environments whose episode ended in the step (other rows are stale). For other frameworks,
other streams or T steps in one call, use foxhunt.Market (DLPack, any stream).
"""

from ._foxhunt import Market, load_market_config


class TorchMarket:
    def __init__(self, config, num_envs, device=0, obs_dtype="float32"):
        import torch  # the tensors are torch's; foxhunt itself needs no torch

        self._torch = torch
        if not hasattr(config, "obs_dim"):
            config = load_market_config(config)
        self.config = config
        self.num_envs = num_envs
        self.device = torch.device("cuda", device)
        self._stream = torch.cuda.current_stream(self.device)
        self.market = Market(config, num_envs, device=device, obs_dtype=obs_dtype, stream=self._stream.cuda_stream)
        self._action_dtype = torch.int32 if config.action == "discrete" else torch.float32
        shapes = [(num_envs, config.assets)] + ([(num_envs,)] if config.assets == 1 else [])
        self._action_shapes = [torch.Size(s) for s in shapes]
        self._storage, self._outputs = None, None

    def _check_stream(self, what):
        if not self.on_its_stream():
            raise RuntimeError(f"TorchMarket.{what}: torch's current stream on {self.device} must be the one the "
                               f"market was made on ({self._stream.cuda_stream:#x}); use foxhunt.Market for other "
                               "streams")

    def _refuse(self, actions):
        torch = self._torch
        expected = (f"{self._action_dtype} of shape " + " or ".join(str(tuple(s)) for s in self._action_shapes) +
                    f", contiguous, on {self.device}")
        if not isinstance(actions, torch.Tensor):
            raise TypeError(f"actions must be a torch.Tensor: {expected}; got {type(actions).__name__}")
        raise ValueError(f"actions must be {expected}; got {actions.dtype} of shape {tuple(actions.shape)}"
                         f"{'' if actions.is_contiguous() else ', not contiguous'}, on {actions.device}")

    def reset(self, seed=0):
        """Starts every environment from `seed`; returns the first observation (N, obs_dim)."""
        self._check_stream("reset")
        return self._torch.from_dlpack(self.market.reset(seed))

    def step(self, actions):
        """Advances every environment one step; returns (obs, reward, terminated, truncated, final_obs)."""
        self._check_stream("step")
        return self._step(actions)

    def on_its_stream(self):
        """Whether torch's current stream on the device is the market's (step may be called)."""
        return self._torch.cuda.current_stream(self.device) == self._stream

    def _step(self, actions):  # step once the caller has checked the stream
        if (not isinstance(actions, self._torch.Tensor) or actions.dtype is not self._action_dtype
                or actions.device != self.device or actions.shape not in self._action_shapes
                or not actions.is_contiguous()):
            self._refuse(actions)
        storage = self.market._step_in_order(actions.data_ptr())
        if storage != self._storage:  # the first step, or a multi-step Market call replaced the buffers
            self._outputs = tuple(self._torch.from_dlpack(a) for a in self.market._last_step())
            self._storage = storage
        return self._outputs

    def episode_stats(self, clear=False):
        return self.market.episode_stats(clear)
