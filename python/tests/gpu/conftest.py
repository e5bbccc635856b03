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
