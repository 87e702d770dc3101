"""The Docker engine: one place that connects, and says how to start one when none answers."""

from __future__ import annotations

import functools
import shutil
import subprocess

from kit.core.errors import DockerUnavailable, KitError, shown

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
# How long a yes/no question to the engine may wait (image_on_engine): a note, not a command, waits on the answer.
ENGINE_QUESTION_TIMEOUT_S = 15


def image_on_engine(ref: str) -> bool:
    """Whether this host's Docker engine has ``ref`` (`docker image inspect`): the one yes/no question about an image
    (`kit render`'s offline note leaves out what the engine has). False when there is no docker CLI or no engine
    answers within ENGINE_QUESTION_TIMEOUT_S: the caller then does what it would without the check. The docker CLI,
    not the SDK (docker_client): a render loads no SDK and never waits on a hung engine past the bound."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        done = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", "--", ref], capture_output=True,
                              text=True, timeout=ENGINE_QUESTION_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def local_image(ref: str, *, hint: str = LOCAL_IMAGE_HINT):  # noqa: ANN201 - docker.models.images.Image
    """The image ``ref`` on this engine, for a command that goes on to use it (its attributes, a container from it).
    Missing, or not a valid reference: one error the user can act on (exit 1), never the SDK's exception. Only asking
    whether the engine has it: image_on_engine."""
    from docker.errors import APIError
    from docker.errors import ImageNotFound as SdkImageNotFound

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
