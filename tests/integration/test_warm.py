"""`kit warm` on a fresh folder, then the command it prints, run exactly as printed: the first start a user sees
is a warm one.

The cpu preset with the stack's own locally made model, on the session's cpu image (`cpu_image`: the same tag, so
nothing is built here). Warm starts the server (compose runs model-make and model-fetch first), sends one
completion from inside the container, and stops it; the vLLM cache volume keeps what that start wrote. Then
`kit up --out DIR` as printed serves /health through the published 127.0.0.1 port. About 3 minutes on 2 cores
(two server starts).
"""

from __future__ import annotations

import os
import re
import shlex
import time

import pytest

from kit.config.strategy import VLLM_CACHE
from kit.run.workflow import project_for
from tests.conftest import require_tool

from .conftest import BASE_IMAGE, door_request, free_port
from .test_journeys import COMPOSE_TIMEOUT_S, compose_down, kit, shell

pytestmark = pytest.mark.integration

HEALTH_WAIT_S = 60


def volume_files(docker_client, volume: str) -> list[str]:
    """A few files in a named volume, listed by a throwaway container of the base image (no network)."""
    output = docker_client.containers.run(BASE_IMAGE, ["find", "/cache", "-type", "f"], remove=True,
                                          network_disabled=True, volumes={volume: {"bind": "/cache", "mode": "ro"}})
    return output.decode().split()


def health_through_port(port: int) -> int | None:
    """/health on the published 127.0.0.1 port, polled with a deadline (the door may still be binding)."""
    deadline = time.monotonic() + HEALTH_WAIT_S
    status = None
    while time.monotonic() < deadline:
        try:
            status = door_request(port, "GET", "/health")[0]
        except OSError:
            status = None
        if status == 200:
            return status
        time.sleep(1)
    return status


def test_warm_fills_the_cache_and_its_printed_command_starts_it(cpu_image, cpu_wheelhouse, docker_client, tmp_path):
    require_tool("docker")
    port = free_port()
    out = tmp_path / f"warm-{os.getpid()}"
    project = project_for(out)
    try:
        warmed = kit("warm", "preset=cpu", f"runtime.port={port}", "--base-image", BASE_IMAGE, "--wheelhouse",
                     str(cpu_wheelhouse), "--out", str(out), timeout=COMPOSE_TIMEOUT_S)
        assert f"image {cpu_image.prepared.image_ref} is built" in warmed.stderr  # the session's image: no build
        text = warmed.stdout
        assert re.search(r"^healthy in \d+ s: vllm$", text, re.M), text
        assert re.search(r"^vllm: POST /v1/completions -> 200 in ", text, re.M), text
        # The folders of the container's VLLM_CACHE_ROOT, with their byte counts.
        root = re.search(r"^  vLLM cache (\S+): ([\d,]+) bytes in (\d+) folder", text, re.M)
        assert root and root.group(1) == VLLM_CACHE, text  # the container's VLLM_CACHE_ROOT: the volume
        folders = re.findall(r"^    +([\d,]+)  (\S+)$", text, re.M)
        assert folders and len(folders) == int(root.group(3)), text
        assert sum(int(size.replace(",", "")) for size, _ in folders) == int(root.group(2).replace(",", ""))
        # Stopped, not removed: no server runs, and the cache volume holds what the start wrote.
        assert not docker_client.containers.list(filters={"label": f"com.docker.compose.project={project}"})
        assert volume_files(docker_client, f"{project}_vllm-cache"), "the vllm-cache volume is empty after warm"

        last = text.splitlines()[-1]
        assert last == f"kit up --out {shlex.quote(str(out))}", text
        argv = shlex.split(last)
        assert argv[:2] == ["kit", "up"], last
        kit(*argv[1:], timeout=COMPOSE_TIMEOUT_S)  # the console script in a shell, as every journey runs it
        assert health_through_port(port) == 200

        # Warm is for before the first start: with the stack up, it refuses and says what to do.
        again = kit("warm", "--out", str(out), ok=False)
        assert again.returncode == 1
        assert f"{out}: the stack is already running (door ({project}), vllm ({project}))" in again.stderr, again.stderr
        assert "warm is for before the first start" in again.stderr
    finally:
        shell(shlex.join(["kit", "down", "--out", str(out), "--volumes"]), timeout=300)
        compose_down(out)
    assert not docker_client.volumes.list(filters={"label": f"com.docker.compose.project={project}"})
