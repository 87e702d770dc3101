"""Session fixtures for the real-Docker layer: one wheelhouse, one CPU image, one running stack, shared.

Everything here talks to a real Docker engine (scripts/setup-host.sh starts one) and a real vLLM server.
Containers are reached only through ports published on 127.0.0.1 or `docker exec`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.deploy.pipeline import Prepared, prepare
from kit.image.build import BuildRequest  # noqa: F401 - re-exported for tests
from kit.run.stack import Stack, write_smoke_env
from kit.run.workflow import build, render_into, start
from tests.conftest import missing

BASE_IMAGE = os.environ.get("KIT_BASE_IMAGE", "vllm-kit/base:bookworm")
CACHE = Path(os.environ.get("KIT_CACHE_DIR", Path.home() / ".cache" / "vllm-kit"))


WATCHDOG_FAST = ["runtime.env.KIT_WATCHDOG_INTERVAL='5'", "runtime.env.KIT_WATCHDOG_TIMEOUT='10'",
                 "runtime.env.KIT_WATCHDOG_FAILURES='3'"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def docker_client():
    from kit.core.docker_engine import docker_client as connect
    from kit.core.errors import DockerUnavailable

    try:
        client = connect()
    except DockerUnavailable as exc:
        missing(f"a Docker engine ({exc.message})", "scripts/setup-host.sh (which starts one)")
    try:
        client.images.get(BASE_IMAGE)
    except Exception:  # noqa: BLE001
        pytest.fail(f"base image {BASE_IMAGE} is missing; run scripts/setup-host.sh")
    return client


def session_progress(message: str) -> None:
    print(f"[kit] {message}", flush=True)


@contextmanager
def removed_after(client, ref: str) -> Iterator[None]:
    """Remove image ``ref`` when the block ends if the block made it (an image the user already had stays).

    Images are shared between the tests of a session (session fixtures), then given back: a CPU image is
    several GB. Removing the tag also removes its untagged parent layers; the base images stay.
    """
    from kit.run.workflow import image_exists

    existed = image_exists(ref)
    try:
        yield
    finally:
        if not existed and image_exists(ref):
            try:
                client.images.remove(ref, force=True)
                session_progress(f"removed image {ref}")
            except Exception as exc:  # noqa: BLE001 - cleanup must not hide the test's own result
                session_progress(f"could not remove image {ref}: {exc}")


@pytest.fixture(scope="session")
def cpu_wheelhouse(docker_client) -> Path:
    """The CPU image's wheels, resolved and downloaded on the host once; reused across runs (host cache)."""
    from kit.image.wheelhouse import build_wheelhouse

    directory = CACHE / "wheelhouse-cpu"
    build_wheelhouse(prepare("cpu", base_image=BASE_IMAGE).deployment, directory, progress=session_progress)
    return directory


@dataclass
class Built:
    prepared: Prepared
    out_dir: Path
    result: object


@pytest.fixture(scope="session")
def cpu_image(docker_client, cpu_wheelhouse, tmp_path_factory) -> Iterator[Built]:
    """The `cpu` preset's image on the local base, built offline from the wheelhouse; removed at session end."""
    out = tmp_path_factory.mktemp("cpu-render")
    prepared = prepare("cpu", base_image=BASE_IMAGE)
    render_into(prepared, out)
    with removed_after(docker_client, prepared.image_ref):
        result = build(prepared, out, wheelhouse=cpu_wheelhouse, progress=session_progress)
        yield Built(prepared, out, result)


@dataclass
class Running:
    stack: Stack
    prepared: Prepared
    out_dir: Path
    port: int
    env: dict[str, str]
    ready_seconds: float


@pytest.fixture(scope="session")
def cpu_stack(cpu_image, cpu_wheelhouse, tmp_path_factory):
    """The `cpu` stack running with the tiny model; removed (with its volumes) at the end, even on failure."""
    port = free_port()
    out = tmp_path_factory.mktemp("cpu-stack")
    # The serve watchdog's polls shortened (5 s apart, 10 s timeout, 3 failures) so the hung-server test is quick.
    # A 3 s timeout was seen to fire on a healthy server while other stacks loaded on the 2 shared cores.
    prepared = prepare("cpu", [f"runtime.port={port}", *WATCHDOG_FAST], base_image=BASE_IMAGE)
    render_into(prepared, out)
    env = write_smoke_env(out)
    project = f"kit-test-cpu-{os.getpid()}"
    stack, ready = start(prepared, out, project, wheelhouse=cpu_wheelhouse, progress=session_progress)
    try:
        yield Running(stack, prepared, out, port, env, ready)
    finally:
        stack.down(volumes=True)
