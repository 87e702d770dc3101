"""The Docker engine: one place that connects, and says how to start one when none answers."""

from __future__ import annotations

import functools
import shutil
import subprocess

from kit.core.errors import DockerUnavailable, KitError

HOW_TO_START = ("start one: `bash scripts/setup-host.sh` (installs Debian's docker.io and starts dockerd), "
                "or `systemctl start docker`")


@functools.cache
def docker_client():
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except DockerException as exc:
        raise DockerUnavailable(f"no Docker engine answers ({str(exc).splitlines()[0][:120]})", hint=HOW_TO_START) from None
    return client


class ImageNotFound(KitError):
    """An image the command names is not on this Docker engine (or its reference is not one)."""


LOCAL_IMAGE_HINT = "`docker images` lists the images on this engine; pull or build the one you mean first"


def local_image(ref: str, *, hint: str = LOCAL_IMAGE_HINT):  # noqa: ANN201 - docker.models.images.Image
    """The image ``ref`` on this engine. Missing, or not a valid reference: one error the user can act on (exit 1),
    never the SDK's exception."""
    from docker.errors import APIError
    from docker.errors import ImageNotFound as SdkImageNotFound

    from kit.core.errors import shown

    try:
        return docker_client().images.get(ref)
    except SdkImageNotFound:
        raise ImageNotFound(f"image {ref}: not found on this Docker engine", hint=hint) from None
    except APIError as exc:
        if exc.status_code != 400:
            raise
        reason = str(getattr(exc, "explanation", "") or exc).rsplit(": ", 1)[-1].strip(" )\"")
        raise ImageNotFound(f"image {shown(ref)}: not a valid image reference ({reason})",
                            hint="a reference is REPOSITORY[:TAG] or REPOSITORY@sha256:DIGEST, in lower case") from None


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
