"""What the kit says about the Docker engine is true: `kit down` where nothing runs, a folder that is not a
deployment, an image that is not there. Cheap: no image is built and no container is started; the only things
made on the engine are a volume with Compose's labels (removed in the end whatever happens)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from tests.integration.conftest import BASE_IMAGE

pytestmark = pytest.mark.integration


def kit(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def kit_json(*args: str) -> tuple[int, dict]:
    result = kit(*args, "--json")
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def rendered(tmp_path, docker_client):
    """`kit render preset=cpu` into a folder whose name (the default compose project) no other test shares."""
    out = tmp_path / f"kit-truth-{os.getpid()}"
    result = kit("render", "preset=cpu", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def cache_volume(rendered, docker_client):
    """The cache volume `kit fetch` leaves (Compose's own labels), for the folder's own project (one per folder)."""
    from kit.deploy.record import compose_project

    project = compose_project(rendered)
    volume = docker_client.volumes.create(f"{project}_hf-cache", labels={
        "com.docker.compose.project": project, "com.docker.compose.volume": "hf-cache"})
    try:
        yield volume.name
    finally:
        for left in docker_client.volumes.list(filters={"name": volume.name}):
            left.remove(force=True)


def volume_names(docker_client) -> set[str]:
    return {v.name for v in docker_client.volumes.list()}


def test_down_where_nothing_runs_says_so(rendered):
    result = kit("down", "--out", str(rendered))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"nothing was running from {rendered}"
    assert "stopped" not in result.output
    code, env = kit_json("down", "--out", str(rendered))
    assert code == 0 and env["ok"] is True
    assert env["data"]["projects"] == [] and env["data"]["containers_removed"] == []


def test_down_volumes_with_nothing_running_removes_and_names_the_cache_volume(rendered, cache_volume, docker_client):
    code, env = kit_json("down", "--out", str(rendered), "--volumes")
    assert code == 0, env
    assert env["data"]["containers_removed"] == [] and env["data"]["volumes_removed"] == [cache_volume]
    assert cache_volume not in volume_names(docker_client)
    again = kit("down", "--out", str(rendered), "--volumes")
    assert again.exit_code == 0 and again.stdout.strip() == (
        f"nothing was running from {rendered}; no volume of it is left")


def test_down_refuses_a_folder_the_kit_did_not_render(rendered, cache_volume, docker_client, tmp_path):
    # The same compose file, copied without the manifest: not a deployment, so nothing is stopped or removed.
    stranger = tmp_path / "copy" / rendered.name
    stranger.mkdir(parents=True)
    shutil.copy(rendered / "compose.yaml", stranger / "compose.yaml")
    code, env = kit_json("down", "--out", str(stranger), "--volumes")
    assert code == 1 and env["ok"] is False
    assert env["problems"][0]["message"] == (
        f"{stranger}: not a vllm-kit deployment (compose.yaml here, but no .vllm-kit.json that lists it)")
    assert cache_volume in volume_names(docker_client)  # refused before acting: the same project's volume stays
    text = kit("down", "--out", str(stranger))
    assert text.exit_code == 1 and "not a vllm-kit deployment" in text.stderr and "hint:" in text.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    assert kit("down", "--out", str(empty)).exit_code == 1


MISSING = "vllm-kit/no-such-image:mistyped"


@pytest.mark.parametrize("args", [
    ("image-diff", BASE_IMAGE, MISSING),
    ("image-diff", MISSING, BASE_IMAGE),
    ("image-size", MISSING),
])
def test_a_missing_image_is_not_found(docker_client, args):
    code, env = kit_json(*args)
    assert code == 1 and env["ok"] is False
    assert env["problems"][0]["message"] == f"image {MISSING}: not found on this Docker engine"
    assert env["problems"][0]["hint"]
    text = kit(*args)
    assert text.exit_code == 1 and "bug in vllm-kit" not in text.stderr and "internal error" not in text.stderr


def test_push_of_an_image_never_built_is_not_found(docker_client):
    repository = f"vllm-kit/truth-never-built-{os.getpid()}"
    code, env = kit_json("push", "preset=cpu", f"image.repository={repository}", "--registry", "127.0.0.1:9")
    assert code == 1, env
    problem = env["problems"][0]
    assert problem["message"].startswith(f"image {repository}:") and problem["message"].endswith(
        ": not found on this Docker engine")
    assert "kit build" in problem["hint"]


def test_an_invalid_image_reference_is_the_inputs_problem(docker_client):
    code, env = kit_json("image-size", "Not A Reference!")
    assert code == 1 and "not a valid image reference" in env["problems"][0]["message"]
