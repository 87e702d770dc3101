"""Compose itself decides what `docker compose up` of a rendered stack does with the kit's image (issue 23, item 2):
asked with `--dry-run` (it consults the engine's image list, builds nothing and starts nothing), it never pulls a
built image from a registry; an image `kit build` made is used as it is; a missing one is built. Cheap: no image
is built and no container started."""

from __future__ import annotations

import subprocess

import yaml

from kit.deploy.pipeline import prepare
from tests.conftest import require_compose

from .conftest import BASE_IMAGE


def dry_run_up(tmp_path, overrides: list[str], services: list[str]) -> str:
    docker = require_compose()
    files = prepare("cpu", overrides).files
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / ".env").write_text("VLLM_API_KEY=pull-policy-test\n")  # required by default; `kit render` writes one
    result = subprocess.run([docker, "compose", "-p", f"kit-dry-{tmp_path.name.lower()}", "--dry-run", "up", "-d",
                             "--no-deps", *services], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_a_missing_kit_image_is_built_never_pulled(tmp_path):
    # A repository no one has built here: the tag is absent, as after a fresh render.
    out = dry_run_up(tmp_path, ["image.repository=vllm-kit/never-built-here"], ["vllm"])
    assert "Pulling" not in out and "registry-1.docker.io" not in out, out
    assert "naming to vllm-kit/never-built-here:" in out, out


def test_an_image_already_here_is_used_not_rebuilt(tmp_path, docker_client):
    # Stands in for the image `kit build` made: any local image, tagged as the render names it (a tag, no build),
    # and untagged afterwards.
    overrides = ["image.repository=vllm-kit/pull-policy-test"]
    ref = yaml.safe_load(prepare("cpu", overrides).files["compose.yaml"])["services"]["vllm"]["image"]
    local = docker_client.images.get(BASE_IMAGE)  # scripts/setup-host.sh makes it; the docker_client fixture checks
    repository, tag = ref.rsplit(":", 1)
    local.tag(repository, tag)
    try:
        out = dry_run_up(tmp_path, overrides, ["vllm"])
    finally:
        docker_client.images.remove(ref, noprune=True)
    assert "Pulling" not in out and "naming to" not in out, out  # neither pulled nor rebuilt over
