import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    # `preset=NAME` also finds presets in the user's config folder ($XDG_CONFIG_HOME/vllm-kit/presets): the suite,
    # and every kit it starts, must not see a developer's own. An empty folder of the suite's instead.
    config._kit_config_home = tempfile.mkdtemp(prefix="kit-test-config-")
    os.environ["XDG_CONFIG_HOME"] = config._kit_config_home


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "_kit_config_home", ""), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    # Mark by folder so each layer runs alone: -m unit, -m golden, -m integration.
    for item in items:
        parts = Path(str(item.fspath)).parts
        for layer in ("unit", "golden", "integration"):
            if layer in parts:
                item.add_marker(getattr(pytest.mark, layer))


def require_tool(name: str) -> str:
    """A tool the suite needs: skipped on a dev box without it, a failure in CI (where setup installs it)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed; scripts/setup-host.sh installs it")
        pytest.skip(f"{name} not installed (scripts/setup-host.sh installs it)")
    return path


@pytest.fixture
def repo() -> Path:
    return REPO
