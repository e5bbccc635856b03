import os
import pathlib

import pytest

import foxhunt

try:
    import torch
except ImportError:  # the tests themselves skip (pytest.importorskip)
    torch = None

ROOT = pathlib.Path(os.environ.get("FOXHUNT_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[3]))
MARKETS = ROOT / "configs" / "markets"
HERE = pathlib.Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    if foxhunt.device_count() > 0 and torch is not None and torch.cuda.is_available():
        return
    why = foxhunt.cuda_unavailable_reason() or "torch sees no CUDA device"
    skip = pytest.mark.skip(reason="no CUDA device: " + why)
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def markets():
    return MARKETS


@pytest.fixture(scope="session")
def random_actions():
    """make(config, steps, n, gen): (steps, n, assets) random actions on cuda:0 for the market
    `config`: int32 levels with -1 (hold) included, or float32 weights, some clamped, 5% NaN holds."""

    def make(config, steps, n, gen):
        dev = "cuda:0"
        if config.action == "discrete":
            # -1 (hold) included: every branch of the action decoding is exercised
            return torch.randint(-1, len(config.levels), (steps, n, config.assets), generator=gen, device=dev,
                                 dtype=torch.int32)
        a = torch.rand((steps, n, config.assets), generator=gen, device=dev) * 2.4 - 1.2  # some clamped
        a[torch.rand(a.shape, generator=gen, device=dev) < 0.05] = float("nan")  # NaN holds
        return a

    return make
