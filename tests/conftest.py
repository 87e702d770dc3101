import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    # `preset=NAME` also finds presets in the user's config folder ($XDG_CONFIG_HOME/vllm-kit/presets): the suite,
    # and every kit it starts, must not see a developer's own. An empty folder of the suite's instead.
    config._kit_config_home = tempfile.mkdtemp(prefix="kit-test-config-")
    os.environ["XDG_CONFIG_HOME"] = config._kit_config_home
    # A model id outside the catalog is looked up in the Hugging Face cache, then on the hub: the suite sees an
    # empty cache of its own and never the hub, unless a test points HF_ENDPOINT at its stand-in and clears this.
    os.environ["HF_HOME"] = os.path.join(config._kit_config_home, "huggingface")
    os.environ["HF_HUB_CACHE"] = os.path.join(os.environ["HF_HOME"], "hub")
    os.environ["HF_HUB_OFFLINE"] = "1"


# The images the session made are given back when it ends (tests/image_sweep.py): the controller (the one process
# without xdist, else the process that starts the workers) records the engine's images before any test runs, and
# once every worker has finished (their session fixtures torn down) removes what the session added under the kit's
# names, if integration tests ran. KIT_TEST_KEEP_IMAGES=1 keeps everything (to look at what a run built).


def is_controller(config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if is_controller(session.config):
        from tests.image_sweep import EngineRecord

        session.config._kit_images = EngineRecord.start()


INTEGRATION_RAN: list[str] = []  # the first integration test whose setup ran, if any


def pytest_runtest_logreport(report):
    # Under xdist the controller sees every worker's reports through this hook.
    if not INTEGRATION_RAN and report.when == "setup" and report.nodeid.startswith("tests/integration/"):
        INTEGRATION_RAN.append(report.nodeid)


def pytest_sessionfinish(session):
    record = getattr(session.config, "_kit_images", None)
    if record is None:
        return
    try:
        if INTEGRATION_RAN:
            session.config._kit_images_line = record.finish()
    except Exception as exc:  # noqa: BLE001 - giving images back must not change the session's result
        session.config._kit_images_line = f"images: the session's cleanup failed: {exc}"
    finally:
        record.close()


def pytest_terminal_summary(terminalreporter, config):
    line = getattr(config, "_kit_images_line", None)
    if line:
        terminalreporter.write_line(f"[kit] {line}")


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "_kit_config_home", ""), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    # Mark by folder so each layer runs alone: -m unit, -m golden, -m integration.
    for item in items:
        # the folders below the checkout only: a clone in a folder named `unit` must not mark every test unit
        parts = Path(str(item.fspath)).resolve().relative_to(REPO).parts
        for layer in ("unit", "golden", "integration"):
            if layer in parts:
                item.add_marker(getattr(pytest.mark, layer))


# Units of work for pytest-xdist (`make test`: -n 2 --dist loadgroup): every test below tests/integration/ shares the
# Docker engine's session fixtures (one CPU image, one running stack, the registry), so they are one unit that one
# worker runs in order, building each image once; tests/package/ (one wheel built per module) is another. Every other
# test is a unit of its own and goes to whichever worker is free: in practice the second one, while the first builds.
# The slim GPU image's module is a unit of its own: its wheelhouse, image and fixtures are its own (no session fixture
# of the others but the Docker client), and its 8 minutes of download and build run on the second worker meanwhile.
# So is the registry lock's module (two no-cache builds of its own image, its own registry on 127.0.0.1:5000; of the
# session fixtures only the cpu wheelhouse, which a file lock makes one download): about 9 minutes moved off the
# engine's unit, which sets the suite's length. xdist queues units largest first (--loadscope-reorder), the engine's
# first; each worker takes the next unit when it has two tests left.
# The units are made here by path, not by xdist_group marks: xdist 3.8 renames a marked test's `_nodeid`, which
# pytest 9.2 no longer reads (its nodeid comes from `_id`), so marks group nothing there. First match wins.
DIST_UNITS = {"tests/integration/test_slim_gpu_image.py": "slim-gpu-image",
              "tests/integration/test_registry_lock.py": "registry-lock", "tests/integration/": "docker-engine",
              "tests/package/": "package"}


def dist_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its folder's (DIST_UNITS), else its own."""
    return next((unit for folder, unit in DIST_UNITS.items() if nodeid.startswith(folder)), nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FolderUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return dist_unit(nodeid)

    return FolderUnits(config, log)


# Every skip for something missing goes through missing() below: on a dev box it skips, in CI (CI=true; .ci/run on
# a fresh machine after `make setup`) it fails, so a test CI claims to run cannot quietly not run. A skip that
# depends on the machine rather than on what setup installs (arm64 emulation refused, no root) is
# `environment_refuses()`, which says so and is listed by `-rs`.


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


# Property tests (hypothesis) in CI draw the same examples on every run: a red CI run is the code's, never the
# draw's, and a failure prints the blob that replays it (@reproduce_failure). On a dev box each run draws anew and
# keeps what failed in .hypothesis/ to replay first; an example found there is pinned with @example in its test.
# Time is no property (a shared machine is slow at random): speed targets are benchmarks. `--hypothesis-profile`
# picks one by hand. A test's own @settings (max_examples) still wins over the profile.
settings.register_profile("ci", derandomize=True, max_examples=100, deadline=None, print_blob=True, database=None)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if in_ci() else "dev")


def missing(what: str, installed_by: str) -> None:
    """Skip (dev box) or fail (CI) for a tool or module the suite needs; ``installed_by`` says what provides it."""
    if in_ci():
        pytest.fail(f"{what} is not installed; {installed_by} installs it", pytrace=False)
    pytest.skip(f"{what} not installed ({installed_by} installs it)")


def find_tool(name: str) -> str | None:
    """``name`` on PATH, else in the bin folder of the Python running the suite: pip puts uv, hadolint and
    docker-compose there, and a venv's python run by its path (.venv/bin/python -m pytest) leaves it off PATH."""
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def require_tool(name: str, installed_by: str = "scripts/setup-host.sh") -> str:
    """A program the suite needs (``find_tool``): skipped on a dev box without it, a failure in CI (where setup
    installs it)."""
    path = find_tool(name)
    if path is None:
        missing(name, installed_by)
    assert path is not None  # missing() skipped or failed
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
