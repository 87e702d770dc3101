"""A rendered stack on the Docker engine: compose up/down, waiting for health, the model directory.

Every compose command is an argv list, logged with its output to ``DIR/.kit/compose.log`` so it can be
re-run by hand.
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kit.config import tinymodel
from kit.core.docker_engine import compose_argv, docker_client
from kit.core.envfile import read_env_file
from kit.core.errors import KitError, SmokeError, WriteError
from kit.core.safepaths import open_nofollow, refuse_link, work_folder
from kit.image.build import KIT_DIR
from kit.run.ops import LABEL_PROJECT, LABEL_WORKING_DIR, is_deployment, same_dir

SERVICE = "vllm"


def port_is_free(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class PortHolder:
    """A running container that publishes a host port: its name, and the compose project and folder it came from."""
    name: str
    project: str | None
    folder: Path | None


def port_holder(port: int) -> PortHolder | None:
    """The running container publishing host ``port`` (any address), or None: none does, or the engine cannot be
    asked (the port is then held by something outside Docker, or the engine is down; either way nothing to name)."""
    import docker

    try:
        containers = docker_client().containers.list()
    except (docker.errors.DockerException, OSError):
        return None
    for container in containers:
        published = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
        if any(str(binding.get("HostPort")) == str(port) for bindings in published.values() for binding in bindings or ()):
            labels = container.labels or {}
            folder = labels.get(LABEL_WORKING_DIR)
            return PortHolder(container.name, labels.get(LABEL_PROJECT), Path(folder) if folder else None)
    return None


def _stop_hint(holder: PortHolder, out_dir: Path | None) -> str:
    if holder.folder is not None and is_deployment(holder.folder):  # where `kit down` stops it
        stop = f"`kit down --out {shlex.quote(str(holder.folder))}`"
        if out_dir is not None and same_dir(holder.folder, Path(out_dir).resolve()):
            # not --port: that would re-render the folder's port under the stack that runs from it
            return f"this folder's own stack holds it (container {holder.name}, compose project {holder.project}): stop it with {stop} first"
        return (f"the kit stack of {holder.folder} holds it (container {holder.name}, compose project "
                f"{holder.project}): stop it with {stop}, or pick another port with --port N")
    if holder.project:
        return (f"container {holder.name} of compose project {holder.project} holds it: stop it with "
                f"`docker compose -p {shlex.quote(holder.project)} down`, or pick another port with --port N")
    return f"container {holder.name} holds it: stop it with `docker stop {holder.name}`, or pick another port with --port N"


def require_free_port(address: str, port: int, out_dir: Path | None = None) -> None:
    """Refuse a port something holds, naming the container that publishes it (and how to stop it) where one does."""
    if port_is_free(address, port):
        return
    holder = port_holder(port)
    hint = _stop_hint(holder, out_dir) if holder else "pick another with --port N"
    raise KitError(f"port {port} on {address} is in use", hint=hint)


@dataclass
class Stack:
    directory: Path
    project: str

    def __post_init__(self) -> None:
        # compose runs with cwd=directory; a relative -f path would be resolved twice.
        self.directory = Path(self.directory).resolve()

    @property
    def log_path(self) -> Path:
        return self.directory / KIT_DIR / "compose.log"

    def argv(self, *args: str) -> list[str]:
        return [*compose_argv(), "-p", self.project, "-f", str(self.directory / "compose.yaml"), *args]

    def run(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        argv = self.argv(*args)
        work_folder(self.directory)  # made, or refused when a link stands there
        result = subprocess.run(argv, capture_output=True, text=True, cwd=self.directory, timeout=timeout)
        with open_nofollow(self.log_path, "a") as log:
            log.write(f"$ {shlex.join(argv)}\n{result.stdout}{result.stderr}(exit {result.returncode})\n")
        if check and result.returncode != 0:
            last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise KitError(f"docker compose {args[0]} failed: {last[0][:300]}", hint=f"full log: {self.log_path}")
        return result

    def up(self) -> None:
        self.run("up", "-d", "--no-build", "--remove-orphans")

    def down(self, *, volumes: bool = False) -> None:
        args = ["down", "--remove-orphans", "--timeout", "20"]
        if volumes:
            args.append("--volumes")
        self.run(*args, check=False)

    def container(self, service: str = SERVICE):  # noqa: ANN201 - docker Container
        found = docker_client().containers.list(all=True, filters={
            "label": [f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]})
        if not found:
            raise SmokeError(f"no {service} container in compose project {self.project}")
        return found[0]

    def logs_tail(self, lines: int = 40, service: str = SERVICE) -> str:
        try:
            return self.container(service).logs(tail=lines).decode("utf-8", errors="replace")
        except Exception as exc:  # noqa: BLE001 - best effort on a failure path
            return f"(no logs: {exc})"

    def wait_healthy(self, deadline_s: float, progress: Callable[[str], None] | None = None,
                     poll_s: float = 2.0, service: str = SERVICE) -> float:
        """Poll the container's health until healthy; fail early if it keeps restarting. Returns seconds."""
        started = time.monotonic()
        last_report = -30.0
        while True:
            elapsed = time.monotonic() - started
            container = self.container(service)
            container.reload()
            state = container.attrs["State"]
            health = (state.get("Health") or {}).get("Status", "none")
            if health == "healthy":
                return elapsed
            if state.get("Status") in ("exited", "dead") and container.attrs.get("RestartCount", 0) == 0 \
                    and self._restart_policy(container) == "no":
                raise SmokeError(f"the server exited (code {state.get('ExitCode')}) before it was healthy",
                                 hint="its last log lines are above")
            if elapsed > deadline_s:
                raise SmokeError(f"not healthy after {deadline_s:.0f} s (health: {health})",
                                 hint="the container's last log lines are above; raise --timeout on slow hosts")
            if progress and elapsed - last_report >= 10:
                progress(f"waiting for /health: {elapsed:4.0f} s, container {state.get('Status')}, health {health}")
                last_report = elapsed
            time.sleep(poll_s)

    @staticmethod
    def _restart_policy(container) -> str:  # noqa: ANN001
        return ((container.attrs.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no"


def write_smoke_env(directory: Path) -> dict[str, str]:
    """A .env with sentinel secrets, so checks can prove they stay out of the image. Keeps a user's .env."""
    env_path = directory / ".env"
    if os.path.islink(env_path) and not env_path.exists():
        # A dangling link: writing would create its target, wherever it points. A link to a file is the user's
        # .env (compose reads it through the link too) and is only read.
        raise refuse_link(env_path, "the stack's .env")
    if env_path.exists():
        return {key: value for key, value in read_env_file(env_path).items() if value is not None}
    values = {"HF_TOKEN": "hf_kitsmoke" + secrets.token_hex(12), "VLLM_API_KEY": "kit-smoke-" + secrets.token_hex(12)}
    try:
        fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # a link or a file put there since the check: the user's, never written through
        raise WriteError(f"{env_path}: appeared while the kit was writing it", hint="run the command again") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{k}={v}\n" for k, v in values.items()))
    return values


def ensure_tiny_model(model_dir: Path, image_ref: str, progress: Callable[[str], None] | None = None,
                      kind: str = "tiny-llama") -> Path:
    """Make the tiny test model with the image's own torch and transformers (nothing needed on the host)."""
    if (model_dir / "config.json").is_file():
        return model_dir
    if progress:
        progress(f"making the tiny test model in {model_dir} (inside {image_ref})")
    model_dir.mkdir(parents=True, exist_ok=True)
    script = Path(tinymodel.__file__).resolve()
    client = docker_client()
    try:
        client.containers.run(
            image_ref,
            entrypoint=["python3", "/opt/kit/tinymodel.py", "/out", "--kind", kind],
            command=[],
            user="0:0",
            remove=True,
            network_disabled=True,
            volumes={str(script): {"bind": "/opt/kit/tinymodel.py", "mode": "ro"},
                     str(model_dir.resolve()): {"bind": "/out", "mode": "rw"}},
            environment={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        )
    except Exception as exc:  # noqa: BLE001 - docker.errors.ContainerError and friends
        raise KitError(f"could not make the tiny model in {model_dir}: {str(exc)[-300:]}") from None
    if not (model_dir / "config.json").is_file():
        raise KitError(f"could not make the tiny model in {model_dir}: no config.json written")
    return model_dir
