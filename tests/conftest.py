import importlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType

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


# Every skip for something missing goes through missing() below: on a dev box it skips, in CI (CI=true; .ci/run on
# a fresh machine after `make setup`) it fails, so a test CI claims to run cannot quietly not run. A skip that
# depends on the machine rather than on what setup installs (arm64 emulation refused, no root) is
# `environment_refuses()`, which says so and is listed by `-rs`.


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(what: str, installed_by: str) -> None:
    """Skip (dev box) or fail (CI) for a tool or module the suite needs; ``installed_by`` says what provides it."""
    if in_ci():
        pytest.fail(f"{what} is not installed; {installed_by} installs it", pytrace=False)
    pytest.skip(f"{what} not installed ({installed_by} installs it)")


def require_tool(name: str, installed_by: str = "scripts/setup-host.sh") -> str:
    """A program on PATH the suite needs: skipped on a dev box without it, a failure in CI (where setup installs it)."""
    path = shutil.which(name)
    if path is None:
        missing(name, installed_by)
    return path


def require_module(name: str, installed_by: str = "the test extra (pip install -e '.[test]')") -> ModuleType:
    """An importable module the suite needs, the same way: skipped on a dev box, a failure in CI."""
    try:
        return importlib.import_module(name)
    except ImportError:
        missing(f"Python module {name}", installed_by)
        raise  # not reached: missing() skips or fails


def require_compose() -> str:
    """The docker CLI with the Compose v2 plugin (`docker compose config` needs no engine); returns docker's path."""
    docker = require_tool("docker")
    if subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        missing("docker compose (v2)", "scripts/setup-host.sh")
    return docker


def environment_refuses(reason: str) -> None:
    """A skip that depends on this machine, not on what setup installs (stated in the reason, listed by -rs)."""
    pytest.skip(f"this machine refuses: {reason}")


@pytest.fixture
def repo() -> Path:
    return REPO
