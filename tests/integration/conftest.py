"""Session fixtures for the real-Docker layer: one wheelhouse, one CPU image, one running stack, shared.

Everything here talks to a real Docker engine (scripts/setup-host.sh starts one) and a real vLLM server.
Containers are reached only through ports published on 127.0.0.1 or `docker exec`.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.deploy.pipeline import Prepared, prepare
from kit.image.build import BuildRequest
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
    # Every rendered one-node stack has a front door; its pinned image cannot be pulled here, so each stack the
    # tests start (and each `kit up` they run) uses the stand-in, through the variable the door's image reads.
    from kit.deploy.door import IMAGE_ENV

    os.environ[IMAGE_ENV] = door_standin_image(client)
    return client


DOOR_STANDIN_DIR = Path(__file__).parent / "standins" / "haproxy"
HAPROXY_DEBS = CACHE / "debs" / "haproxy"  # scripts/setup-host.sh: apt-get download haproxy and three libraries


def door_standin_image(client) -> str:
    """Built once per content (Dockerfile + .debs + base) and kept, like the Prometheus stand-in."""
    import hashlib
    import shutil
    import tempfile

    from kit.image.build import build_image

    debs = sorted(HAPROXY_DEBS.glob("*.deb"))
    if not any(d.name.startswith("haproxy_") for d in debs):
        pytest.fail(f"no haproxy .deb in {HAPROXY_DEBS}; run scripts/setup-host.sh")
    dockerfile = (DOOR_STANDIN_DIR / "Dockerfile").read_bytes()
    digest = hashlib.sha256(b"\0".join([dockerfile, BASE_IMAGE.encode(), *(d.read_bytes() for d in debs)]))
    tag = f"vllm-kit/standin-haproxy:{digest.hexdigest()[:12]}"
    try:
        client.images.get(tag)
        return tag
    except Exception:  # noqa: BLE001 - not built yet
        pass
    with tempfile.TemporaryDirectory() as context, tempfile.TemporaryDirectory() as logs:
        shutil.copy2(DOOR_STANDIN_DIR / "Dockerfile", Path(context) / "Dockerfile")
        (Path(context) / "debs").mkdir()
        for deb in debs:
            shutil.copy2(deb, Path(context) / "debs" / deb.name)
        build_image(BuildRequest(context_dir=Path(context), tags=[tag], base_image=BASE_IMAGE), Path(logs),
                    progress=session_progress)
    session_progress(f"front door stand-in {tag} built")
    return tag


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


def step_images(log_text: str) -> set[str]:
    """The image IDs a classic-builder log names (` ---> <id>` after each step), builder stages included."""
    import re

    return set(re.findall(r"---> ([0-9a-f]{12})$", log_text, flags=re.MULTILINE))


def remove_untagged(client, image_ids: set[str]) -> None:
    """Remove those of a build's step images that nothing tags any more (a builder stage's result stays behind
    otherwise: 3 GB for the cpu image, more for a slim one); images other builds still use are refused and kept.
    Use this, never a prune: the engine is shared with other work."""
    for image_id in image_ids:
        try:
            if not client.images.get(image_id).tags:
                client.images.remove(image_id)
        except Exception:  # noqa: BLE001 - gone already, or a parent of an image in use
            pass


def build_cache_ids(client) -> set[str]:
    """The IDs of the records in the Engine's BuildKit cache (`docker system df -v`'s Build Cache)."""
    return {record["ID"] for record in client.df().get("BuildCache") or []}


def remove_build_cache(client, before: set[str]) -> None:
    """Remove the BuildKit cache records made since ``before`` was read (a slim build leaves its context, its inputs
    stage and its venv there: over 15 GB), one record at a time, children before parents (a record another one
    stands on is refused until that one is gone: a few passes); records other builds made before stay. Never a prune
    of the whole cache: the engine is shared with other work."""
    for _ in range(8):
        left = sorted(build_cache_ids(client) - before)
        for record_id in left:
            try:
                client.api.prune_builds(filters={"id": [record_id]}, all=True)
            except Exception:  # noqa: BLE001 - gone with its parent already, or in use by a build that is running
                pass
        if not left or build_cache_ids(client) - before == set(left):
            return


@pytest.fixture(scope="session")
def cpu_wheelhouse(docker_client) -> Path:
    """The CPU image's wheels, resolved and downloaded on the host once; reused across runs (host cache)."""
    from kit.image.wheelhouse import build_wheelhouse

    directory = CACHE / "wheelhouse-cpu"
    # Two pytest workers ask for it (the registry lock's unit and the engine's, tests/conftest.py DIST_UNITS): one
    # downloads, the other waits, then finds it complete.
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "wheelhouse-cpu.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
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
    from kit.run.workflow import image_exists

    made_here = not image_exists(prepared.image_ref)
    with removed_after(docker_client, prepared.image_ref):
        result = build(prepared, out, wheelhouse=cpu_wheelhouse, progress=session_progress)
        # Each step's seconds in the CI log (`-s` or a failure shows them): the build is most of the layer's time.
        from kit.image.build import step_table

        session_progress(f"cpu image built in {result.seconds:.0f} s:\n{step_table(result.steps)}")
        try:
            yield Built(prepared, out, result)
        finally:  # the builder stage (3.3 GB) is no parent of the image: removing the tag alone leaves it behind
            made = step_images(result.log_path.read_text()) if made_here else set()
    remove_untagged(docker_client, made)


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


def door_request(port: int, method: str, path: str, *, key: str | None = None,
                 headers: dict[str, str] | None = None, body: dict | None = None) -> tuple[int, dict[str, str], str]:
    """One request to a stack's published port on 127.0.0.1, no proxy: (status, lower-cased headers, body)."""
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
    for name, value in {**({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {}),
                        **({"Content-Type": "application/json"} if body is not None else {})}.items():
        request.add_header(name, value)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=60) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read().decode(errors="replace")


DOOR_START_S = 30


def assert_door_closed(port: int, key: str, model: str) -> dict[str, int]:
    """What the front door must do on a stack's published port (kit/deploy/door.py); returns the statuses seen."""
    seen: dict[str, int] = {}

    def status(label: str, *args, **kwargs) -> int:
        seen[label] = door_request(port, *args, **kwargs)[0]
        return seen[label]

    # The door starts once its backend is healthy, so it may still be binding when the backend's health returns
    # (seen behind the router: the first request was reset). Poll it with a deadline.
    import time

    deadline = time.monotonic() + DOOR_START_S
    while True:
        try:
            if status("GET /health, no key", "GET", "/health") == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, f"the door on 127.0.0.1:{port} did not answer /health in {DOOR_START_S} s"
        time.sleep(0.5)
    assert status("GET /v1/models, no key", "GET", "/v1/models") == 401
    assert status("GET /v1/models, wrong key", "GET", "/v1/models", key=key + "x") == 401
    assert status("GET /v1/models, key", "GET", "/v1/models", key=key) == 200
    completion = {"model": model, "prompt": "Hello", "max_tokens": 4}
    assert status("POST /v1/completions, no key", "POST", "/v1/completions", body=completion) == 401
    # Routes vLLM answers without its key, and the router's own API: refused with the key and without.
    for path in ("/invocations", "/tokenize", "/detokenize", "/v1/load_lora_adapter", "/add_worker?url=http://x",
                 "/remove_worker?url=http://x", "/flush_cache", "/reset_prefix_cache"):
        for with_key in (None, key):
            label = f"POST {path}, {'key' if with_key else 'no key'}"
            assert status(label, "POST", path, key=with_key, body=completion) == 403, label
    assert status("GET /workers, key", "GET", "/workers", key=key) == 403
    # CORS closed: no preflight, and a foreign Origin gets no grant.
    assert status("OPTIONS preflight", "OPTIONS", "/v1/completions", headers={
        "Origin": "http://elsewhere.invalid", "Access-Control-Request-Method": "POST"}) == 403
    code, headers, text = door_request(port, "POST", "/v1/completions", key=key, body=completion,
                                       headers={"Origin": "http://elsewhere.invalid"})
    assert code == 200 and '"completion_tokens"' in text, text[:300]
    assert not [h for h in headers if h.startswith("access-control-")], headers
    seen["POST /v1/completions, key, foreign Origin"] = code
    return seen
