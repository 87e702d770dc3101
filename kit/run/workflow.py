"""The long jobs, composed from the one-way steps: build, smoke, up (kit/run/ops.py stops and reads a stack).

render (pure) -> write -> wheelhouse (optional) -> build context -> build -> model -> compose up -> checks.
Each function cleans up what it started when it fails.
"""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kit.core.docker_engine import docker_client
from kit.core.errors import BuildError, KitError, SmokeError
from kit.core.safepaths import work_folder
from kit.core.write import write_files
from kit.deploy.door import client_host
from kit.deploy.pipeline import Prepared
from kit.deploy.record import compose_project
from kit.deploy.render import MODEL_MAKE_SERVICE
from kit.deploy.router import ROUTER_SERVICE, replica_service, router_image_ref
from kit.deploy.service_env import fill_stack_env
from kit.image.build import BuildRequest, BuildResult, build_image, prepare_build_context
from kit.image import wheelhouse as wheels  # a module: tests stand in for its build_wheelhouse
from kit.image.router_image import build_router_image, router_wheelhouse
from kit.run import ops
from kit.run.ops import LABEL_PROJECT
from kit.run.smoke import Check, http, run_checks
from kit.run.stack import SERVICE, Stack, require_free_port, write_smoke_env

Progress = Callable[[str], None]


def image_exists(ref: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        docker_client().images.get(ref)
        return True
    except ImageNotFound:
        return False


def render_into(prepared: Prepared, out_dir: Path, *, force: bool = False, remove_stale: bool = False,
                progress: Progress | None = None) -> list:
    """Write the render. ``remove_stale`` (every command that renders a folder from its record): files an earlier
    render wrote that this one does not are removed when unedited and kept when edited, each said to ``progress``."""
    results = write_files(prepared.files, out_dir, force=force, remove_stale=remove_stale, notify=progress)
    if progress:
        for r in results:
            if r.status in ("removed", "kept"):
                what = "removed (no longer rendered)" if r.status == "removed" else "kept (edited; no longer rendered)"
                progress(f"{what}: {out_dir / r.path}")
    return results


def fill_env(prepared: Prepared, out_dir: Path, progress: Progress | None = None) -> None:
    """Before compose reads the folder: its .env gets what the stack requires and the kit makes (the API key, an
    add-on's passwords; kit/deploy/service_env.py fill_stack_env). A name only the user knows is left to compose,
    whose refusal names it."""
    import os

    env = fill_stack_env(prepared.files, prepared.preset, out_dir / ".env", os.environ)
    if progress:
        for line in env.lines():
            progress(line)


def build(prepared: Prepared, out_dir: Path, *, wheelhouse: Path | None = None, extra_tags: list[str] | None = None,
          no_cache: bool = False, progress: Progress | None = None) -> BuildResult:
    d = prepared.deployment
    context = prepare_build_context(out_dir, work_folder(out_dir) / "build-context", wheelhouse, d.image.requirements)
    tags = [prepared.image_ref, f"{d.image.image_repository}:{d.image.vllm_version}", *(extra_tags or [])]
    request = BuildRequest(context_dir=context, tags=tags, no_cache=no_cache, offline=wheelhouse is not None,
                           platform=d.image.platform if d.image.platform != "linux/amd64" else None,
                           builder=d.image.builder)
    try:
        return build_image(request, work_folder(out_dir), progress=progress)
    except BuildError as error:
        if wheelhouse is None and _index_certificate_refused(work_folder(out_dir) / "build.log"):
            folder = shlex.quote(str(out_dir))
            error.hint = (f"pip inside the build did not trust the package index's TLS certificate (a proxy that "
                          f"re-signs TLS, whose CA the image lacks?): fetch the wheels on this host and build from them, "
                          f"`kit wheelhouse --out {folder} --wheelhouse WHEELHOUSE`, then `kit build --out {folder} "
                          f"--wheelhouse WHEELHOUSE`; {error.hint}")
        raise


def _index_certificate_refused(log: Path) -> bool:
    """Whether a failed build's log shows pip refusing the index's certificate (the build reached the index through a
    TLS-intercepting proxy whose CA the image does not hold)."""
    try:
        return "CERTIFICATE_VERIFY_FAILED" in log.read_text(errors="replace")
    except OSError:
        return False


def ensure_image(prepared: Prepared, out_dir: Path, *, wheelhouse: Path | None, progress: Progress | None) -> None:
    if image_exists(prepared.image_ref):
        if progress:
            progress(f"image {prepared.image_ref} is built")
        return
    if wheelhouse is not None and not (wheelhouse / "requirements.lock.txt").is_file():
        wheels.build_wheelhouse(prepared.deployment, wheelhouse, progress=progress)
    result = build(prepared, out_dir, wheelhouse=wheelhouse, progress=progress)
    if progress:
        progress(f"built {prepared.image_ref} in {result.seconds:.0f} s ({result.size_bytes / 2**30:.2f} GiB)")


def ensure_router_image(prepared: Prepared, out_dir: Path, *, wheelhouse: Path | None,
                        progress: Progress | None) -> None:
    """Replicas: the router's own small image (kit/image/router_image.py), from a wheelhouse beside the server's."""
    ref = router_image_ref(prepared.deployment, prepared.files)
    if image_exists(ref):
        return
    wheels = None
    if wheelhouse is not None:
        wheels = router_wheelhouse(prepared.deployment, wheelhouse.with_name(f"{wheelhouse.name}-{ROUTER_SERVICE}"),
                                   progress)
    build_router_image(prepared.deployment, out_dir, wheels, progress)


def ensure_model(prepared: Prepared, out_dir: Path, progress: Progress | None) -> None:
    """A host folder must hold a model before the stack starts. A generated model (model.generate) is made by the
    stack's own model-make service, which `compose up` runs before the fetch and the server (the one path: `make run`,
    `kit up`, `kit smoke` and a user's own `docker compose up` all make it there, as the server's non-root user)."""
    model = prepared.preset.model
    if model.local_path is None:
        if model.generate and progress:
            progress(f"the stack's model-make service makes the {model.generate} model in volume "
                     f"{prepared.preset.runtime.models_volume} when it is missing")
        return
    path = Path(model.local_path).expanduser()
    path = path if path.is_absolute() else out_dir / path
    if not (path / "config.json").is_file():
        raise KitError(f"model.host_path {model.local_path}: no config.json in {path}",
                       hint="point model= at a model directory")


def make_generated_model(prepared: Prepared, stack: Stack, progress: Progress | None) -> None:
    """The stack's own model-make, on its own (`kit fetch` runs model-fetch without its dependencies): the same
    service `compose up` runs first, so there is one way the generated model is made."""
    if not prepared.deployment.serve.model_make_command:
        return
    if progress:
        progress(f"making the generated model if it is missing: {shlex.join(stack.argv('run', '--rm', '--no-deps', '-T', MODEL_MAKE_SERVICE))}")
    stack.run("run", "--rm", "--no-deps", "-T", MODEL_MAKE_SERVICE)


@dataclass
class SmokeResult:
    checks: list[Check]
    ready_seconds: float
    total_seconds: float
    logs_tail: str
    out_dir: Path
    project: str

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)


def start(prepared: Prepared, out_dir: Path, project: str, *, wheelhouse: Path | None, progress: Progress | None,
          timeout: float | None = None) -> tuple[Stack, float]:
    """Build if needed, make the model, compose up, wait for health. On failure, tear down and raise."""
    rt = prepared.preset.runtime
    require_free_port(rt.bind_address, rt.port, out_dir)
    ensure_image(prepared, out_dir, wheelhouse=wheelhouse, progress=progress)
    front = _front_service(prepared)
    if rt.replicas > 1:
        ensure_router_image(prepared, out_dir, wheelhouse=wheelhouse, progress=progress)
    ensure_model(prepared, out_dir, progress)
    fill_env(prepared, out_dir, progress)
    stack = Stack(out_dir, project)
    deadline = timeout or prepared.deployment.runtime.healthcheck_start_period + 120
    try:
        if progress:
            progress(f"starting compose project {project} on {rt.bind_address}:{rt.port}")
        # From before `up`: compose itself waits for the server's health when the door depends on it.
        started = time.monotonic()
        stack.up()
        stack.wait_healthy(deadline, progress, service=front)
        wait_for_door(rt.bind_address, rt.port)
        ready = time.monotonic() - started
    except BaseException as exc:
        tail = stack.logs_tail(30)
        stack.down(volumes=False)
        if isinstance(exc, KitError):
            raise type(exc)(exc.message + "\n--- last log lines ---\n" + tail, hint=exc.hint) from None
        raise
    return stack, ready


DOOR_WAIT_S = 30


def wait_for_door(bind_address: str, port: int) -> None:
    """Ready means the published port answers: compose starts the front door once its backend is healthy, and the
    door has no healthcheck of its own (kit/deploy/door.py), so it may still be binding when the server's health
    turns (seen under load: the first request after `kit up` was reset). /health passes the door without a key."""
    host = client_host(bind_address)
    url = f"http://{host}:{port}/health"
    deadline = time.monotonic() + DOOR_WAIT_S
    last = "no answer"
    while True:
        try:
            code = http("GET", url, timeout=5)[0]
            if code == 200:
                return
            last = f"HTTP {code}"
        except OSError as error:
            last = type(error).__name__
        if time.monotonic() > deadline:
            raise SmokeError(f"the front door on {host}:{port} did not answer /health within {DOOR_WAIT_S} s ({last})",
                             hint="the door's log: docker compose logs door (in the deployment folder)")
        time.sleep(0.5)


def smoke(prepared: Prepared, out_dir: Path, *, wheelhouse: Path | None = None, keep: bool = False,
          timeout: float | None = None, force: bool = False, progress: Progress | None = None) -> SmokeResult:
    started = time.monotonic()
    refuse_running_folder(out_dir)  # before the render: the folder's files stay those its stack runs
    require_free_port(prepared.preset.runtime.bind_address, prepared.preset.runtime.port, out_dir)
    render_into(prepared, out_dir, force=force, remove_stale=True, progress=progress)
    write_smoke_env(out_dir)  # sentinel secrets where the folder has no .env yet: the checks prove they stay out of the image
    project = f"kit-smoke-{prepared.name}-{secrets.token_hex(3)}"
    stack, ready = start(prepared, out_dir, project, wheelhouse=wheelhouse, progress=progress, timeout=timeout)
    # read again: start() filled what the stack requires into a .env the user had already (the API key)
    env_values = write_smoke_env(out_dir)
    try:
        # With replicas the HTTP checks go through the router (the port); the container checks look at replica 1.
        service = replica_service(SERVICE, 1) if prepared.preset.runtime.replicas > 1 else None
        checks = run_checks(stack, prepared, env_values, prepared.preset.runtime.port, service=service)
        tail = "" if all(c.ok for c in checks) else stack.logs_tail(30)
    finally:
        if not keep:
            stack.down(volumes=True)
    return SmokeResult(checks, ready, time.monotonic() - started, tail, out_dir, project)


def refuse_running_folder(out_dir: Path) -> None:
    """`kit smoke --out DIR` renders into DIR, starts a stack of its own from it and removes that stack afterwards:
    with the folder's own stack (`kit up`, or the compose line render prints) running, it would rewrite the files
    that stack runs from and compete for its port. Refused, naming how to stop it."""
    project = project_for(out_dir)
    running = docker_client().containers.list(filters={"label": f"{LABEL_PROJECT}={project}"})
    if running:
        folder = shlex.quote(str(out_dir))
        raise KitError(f"{out_dir}: the folder's own stack runs (compose project {project}, "
                       f"{len(running)} container{'s' if len(running) != 1 else ''}); kit smoke renders into the "
                       "folder and starts and removes a stack of its own",
                       hint=f"stop it first with `kit down --out {folder}`, then run kit smoke again; "
                            f"`kit status --out {folder}` reports on the running one")


@dataclass
class UpResult:
    ready_seconds: float
    unchanged: bool = False  # a healthy stack ran what this render asks for: left as it was
    updated: tuple[str, ...] = ()  # a running stack's services recreated (or started) in place; the rest left running


def up(prepared: Prepared, out_dir: Path, *, wheelhouse: Path | None = None, force: bool = False,
       progress: Progress | None = None) -> UpResult:
    """Bring a stack up detached and leave it running (`make run`). A stack of the folder that runs already is not
    restarted: healthy and unchanged (the services compose would run, their configuration, images and mounted files),
    it is left as it is; otherwise only what changed is recreated, as compose does, with the services whose mounted
    files the kit rewrote since they started. A stack that is stopped or unhealthy is replaced, as before."""
    render_into(prepared, out_dir, force=force, remove_stale=True, progress=progress)
    fill_env(prepared, out_dir, progress)  # before `down` too: compose reads the whole file for any command
    project = project_for(out_dir)
    ops.refuse_foreign_project(project, out_dir)  # `down` below would stop another folder's containers
    stack = Stack(out_dir, project)
    front = _front_service(prepared)
    if _serving(stack, front):
        return _update_in_place(prepared, out_dir, stack, front, wheelhouse=wheelhouse, progress=progress)
    stack.down(volumes=False)  # a previous `up` of the same directory that no longer serves: replace it
    _, ready = start(prepared, out_dir, project, wheelhouse=wheelhouse, progress=progress)
    return UpResult(ready)


def _front_service(prepared: Prepared) -> str:
    if prepared.preset.runtime.replicas > 1:
        return ROUTER_SERVICE  # healthy only after every replica is
    return SERVICE


def _serving(stack: Stack, front: str) -> bool:
    """Whether the folder's stack runs with its front service up and not unhealthy (healthy, or still starting)."""
    try:
        state = stack.container(front).attrs["State"]
    except SmokeError:
        return False
    return state.get("Status") == "running" and (state.get("Health") or {}).get("Status") != "unhealthy"


def _update_in_place(prepared: Prepared, out_dir: Path, stack: Stack, front: str, *, wheelhouse: Path | None,
                     progress: Progress | None) -> UpResult:
    ensure_image(prepared, out_dir, wheelhouse=wheelhouse, progress=progress)
    if prepared.preset.runtime.replicas > 1:
        ensure_router_image(prepared, out_dir, wheelhouse=wheelhouse, progress=progress)
    changes = stale_services(stack)
    rt = prepared.preset.runtime
    deadline = prepared.deployment.runtime.healthcheck_start_period + 120
    started = time.monotonic()
    try:
        if changes:
            if progress:
                progress(f"compose project {stack.project} runs; updating in place: "
                         + ", ".join(f"{service} ({why})" for service, why in sorted(changes.items())))
            stack.up()  # compose recreates what its configuration or image changed, starts what is missing
            mounted = sorted(s for s, why in changes.items() if why == MOUNTED_FILE_CHANGED)
            if mounted:  # a file bind-mounted into a container stays the old one until it is recreated
                stack.run("up", "-d", "--no-build", "--no-deps", "--force-recreate", *mounted)
        elif progress:
            progress(f"compose project {stack.project} runs what this render asks for: left running")
        stack.wait_healthy(deadline, progress, service=front)
        wait_for_door(rt.bind_address, rt.port)
    except BaseException as exc:
        if not changes:
            raise  # nothing was touched: the stack stays as it ran
        tail = stack.logs_tail(30)
        stack.down(volumes=False)  # half updated: taken down, as a failed start is
        if isinstance(exc, KitError):
            raise type(exc)(exc.message + "\n--- last log lines ---\n" + tail, hint=exc.hint) from None
        raise
    if not changes:
        return UpResult(0.0, unchanged=True)
    return UpResult(time.monotonic() - started, updated=tuple(sorted(changes)))


MOUNTED_FILE_CHANGED = "a mounted file changed"


def stale_services(stack: Stack) -> dict[str, str]:
    """The services of the folder's running stack that `compose up` of its files would change, each with why: compose's
    own configuration hash (`config --hash`, the label it puts on each container), the image the tag names now,
    a container missing or stopped (a one-shot that completed is neither), a container of a service no longer in the
    files, and a bind-mounted file of the folder written after its container was made (compose cannot see that)."""
    import json

    hashes = dict(line.split(None, 1) for line in stack.run("config", "--hash", "*").stdout.split("\n") if line.strip())
    config = json.loads(stack.run("config", "--format", "json").stdout)
    client = docker_client()
    containers = {c.labels.get("com.docker.compose.service"): c for c in client.containers.list(
        all=True, filters={"label": f"{LABEL_PROJECT}={stack.project}"})}
    changes: dict[str, str] = {}
    for service, spec in (config.get("services") or {}).items():
        container = containers.get(service)
        if container is None:
            changes[service] = "not running"
            continue
        attrs = container.attrs
        state = attrs.get("State") or {}
        if container.labels.get("com.docker.compose.config-hash") != hashes.get(service, "").strip():
            changes[service] = "its configuration changed"
        elif spec.get("image") and attrs.get("Image") != _image_id(client, spec["image"]):
            changes[service] = "its image changed"
        elif state.get("Status") != "running" and not (state.get("Status") == "exited" and state.get("ExitCode") == 0
                                                        and (spec.get("restart") or "no") == "no"):
            changes[service] = "not running"
        elif _mounted_file_changed(stack.directory, spec, state.get("StartedAt") or attrs.get("Created") or ""):
            changes[service] = MOUNTED_FILE_CHANGED
    for service in containers.keys() - (config.get("services") or {}).keys():
        changes[service] = "no longer in the files"
    return changes


def _image_id(client, ref: str) -> str | None:  # noqa: ANN001 - docker.DockerClient
    from docker.errors import ImageNotFound

    try:
        return client.images.get(ref).id
    except ImageNotFound:
        return None


def _mounted_file_changed(directory: Path, spec: dict, since: str) -> bool:
    """A file of the folder bind-mounted into the service, modified after ``since`` (the container's start, as Docker
    writes it: RFC 3339 with nanoseconds)."""
    from datetime import datetime

    if not since:
        return True
    try:
        started = datetime.fromisoformat(since[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return True
    for volume in spec.get("volumes") or []:
        source = Path(volume.get("source") or "") if volume.get("type") == "bind" else None
        if source is None or not source.is_relative_to(directory) or not source.is_file():
            continue
        if source.stat().st_mtime > started:
            return True
    return False


def project_for(out_dir: Path) -> str:
    """The folder's own compose project (kit.deploy.record.compose_project): its name and a hash of its real path."""
    return compose_project(out_dir)
