"""Every preset's rendered output, compared exactly with the reviewed golden files.

UPDATE_GOLDEN=1 regenerates them (`make golden`); review the diff before committing.
Rendered Dockerfiles must pass hadolint and compose files `docker compose config -q`.
"""

import os
import subprocess
from pathlib import Path

import pytest

from kit.pipeline import prepare
from kit.preset import preset_names
from tests.conftest import require_tool

GOLDEN = Path(__file__).resolve().parent / "files"
PRESETS = preset_names()


@pytest.fixture(scope="module", params=PRESETS)
def rendered(request):
    return request.param, prepare(request.param).files


def test_matches_golden(rendered):
    name, files = rendered
    folder = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for rel, text in files.items():
            (folder / rel).write_text(text)
    on_disk = {p.name: p.read_text() for p in folder.iterdir()} if folder.is_dir() else {}
    assert set(on_disk) == set(files), f"golden files for {name} are stale: run `make golden` and review the diff"
    for rel, text in files.items():
        assert text == on_disk[rel], f"{name}/{rel} differs from its golden file: run `make golden` and review"


def test_render_is_deterministic(rendered):
    name, files = rendered
    assert prepare(name).files == files


def test_dockerfile_passes_hadolint(rendered, tmp_path):
    hadolint = require_tool("hadolint")
    _, files = rendered
    (tmp_path / "Dockerfile").write_text(files["Dockerfile"])
    result = subprocess.run([hadolint, "--no-color", str(tmp_path / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_config_is_valid(rendered, tmp_path):
    docker = require_tool("docker")
    if subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("docker compose (v2) is not installed; scripts/setup-host.sh installs it")
        pytest.skip("docker compose v2 not installed")
    _, files = rendered
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    result = subprocess.run([docker, "compose", "-f", str(tmp_path / "compose.yaml"), "config", "-q"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
