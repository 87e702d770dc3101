"""The Docker engine: one place that connects, and says how to start one when none answers."""

from __future__ import annotations

import functools
import shutil
import subprocess

from kit.core.errors import DockerUnavailable

HOW_TO_START = ("start one: `bash scripts/setup-host.sh` (installs Debian's docker.io and starts dockerd), "
                "or `systemctl start docker`")


@functools.cache
def docker_client():  # noqa: ANN201 - docker.DockerClient
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except DockerException as exc:
        raise DockerUnavailable(f"no Docker engine answers ({str(exc).splitlines()[0][:120]})", hint=HOW_TO_START) from None
    return client


def compose_argv() -> list[str]:
    """`docker compose` (v2); refuse the v1 `docker-compose` python tool, whose file handling differs."""
    docker = shutil.which("docker")
    if docker is None:
        raise DockerUnavailable("the docker CLI is not installed", hint=HOW_TO_START)
    probe = subprocess.run([docker, "compose", "version", "--short"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise DockerUnavailable("Compose v2 (`docker compose`) is not installed",
                                hint="`bash scripts/setup-host.sh` installs it as a CLI plugin")
    return [docker, "compose"]
