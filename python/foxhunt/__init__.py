"""foxhunt's GPU markets from Python (docs/python.md).

    import foxhunt, torch
    config = foxhunt.load_market_config("configs/markets/bench_ou.toml")
    market = foxhunt.Market(config, num_envs=4096, device=0)
    obs = torch.from_dlpack(market.reset(seed=1))                 # (N, obs_dim) on cuda:0, no copy
    actions = torch.randint(0, len(config.levels), (4096, config.assets), dtype=torch.int32, device="cuda:0")
    obs, reward, terminated, truncated, final_obs = (torch.from_dlpack(a) for a in market.step(actions))

Arrays returned by reset/step view the market's output buffers: the next reset/step rewrites them
(clone what you keep). They carry DLPack's stream semantics: a consumer's stream waits for the
step that wrote them; actions are read on market.stream after their producer's stream.
foxhunt.TorchMarket is the same market for torch code on one stream, with no per-step conversion.
"""

from ._foxhunt import (  # noqa: F401
    Array,
    ConfigError,
    Market,
    MarketConfig,
    TransferAudit,
    check_actions,
    cuda_unavailable_reason,
    device_count,
    has_agent,
    load_market_config,
    parse_market_config,
)
if has_agent:  # built with python/agent (the foxhunt program's actors library)
    from ._foxhunt import Agent  # noqa: F401
from .evaluation import EvalError, evaluate, find_foxhunt  # noqa: F401
from .torch_market import TorchMarket  # noqa: F401
from .vector_env import Box, MarketVectorEnv, MultiDiscrete  # noqa: F401

__version__ = "0.1.0"
