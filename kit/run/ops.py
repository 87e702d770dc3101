"""Operate a running stack: find the compose projects started from a stack directory, list, read logs, ask its state.

A stack directory holds ``compose.yaml`` (one node) or ``compose.head.yaml`` + ``compose.worker.yaml`` (a Ray
cluster over several nodes). Whoever started it (``kit up``, a test fixture, or a user following CLUSTER.md with
plain ``docker compose -f compose.head.yaml up -d``) chose the project name, so the projects are found from the
labels Compose puts on every container it creates (``com.docker.compose.project.working_dir`` and
``...config_files``), not guessed. Every compose call is an argv list with ``-p`` and ``-f``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.core.datafiles import SAFE_LOADER
from kit.core import docker_engine
from kit.core.docker_engine import compose_argv
from kit.core.envfile import is_set, read_env_file
from kit.core.errors import KitError
from kit.core.write import MANIFEST, read_manifest
from kit.deploy.record import RECORD_FILE, RecordError, compose_project, read_record
from kit.deploy.service_env import required_variables
from kit.run.endpoint import LOOPBACK, LOOPBACK_REACHABLE, api_key_from, read_gauges

# What a render writes: one node, or the two roles of a multi-node cluster (kit/deploy/render.py).
COMPOSE_FILES = ("compose.yaml", "compose.head.yaml", "compose.worker.yaml")
SERVER_SERVICE = "vllm"  # the API server's service, in compose.yaml and compose.head.yaml alike
DOOR_SERVICE = "door"  # the front door that publishes a one-node stack's API (kit/deploy/door.py SERVICE)
# Labels Compose v2 sets on every container it creates (docker/compose pkg/api/labels.go).
LABEL_PROJECT = "com.docker.compose.project"
LABEL_WORKING_DIR = "com.docker.compose.project.working_dir"
LABEL_CONFIG_FILES = "com.docker.compose.project.config_files"
HTTP_TIMEOUT_S = 5.0
COMPOSE_TIMEOUT_S = 120.0


class StackNotFound(KitError):
    """The directory holds no rendered stack."""


class NotADeployment(StackNotFound):
    """The directory has compose files, but the kit did not render them (its manifest does not list them)."""


@dataclass(frozen=True)
class Project:
    """One compose project started from the stack directory, with the compose files it was started from."""

    name: str
    files: tuple[Path, ...]

    def argv(self, *args: str) -> list[str]:
        files = [arg for f in self.files for arg in ("-f", str(f))]
        return [*compose_argv(), "-p", self.name, *files, *args]


def rendered_compose_files(out_dir: Path) -> tuple[Path, ...]:
    files = tuple(out_dir.resolve() / name for name in COMPOSE_FILES if (out_dir / name).is_file())
    if not files:
        raise StackNotFound(f"{out_dir}: no {' or '.join(COMPOSE_FILES[:2])} here",
                            hint="pass the --out directory the stack was rendered into (`kit up --out DIR`)")
    return files


def deployment_compose_files(out_dir: Path) -> tuple[Path, ...]:
    """The compose files the kit rendered into ``out_dir``: those on disk that its manifest (``.vllm-kit.json``,
    kit/core/write.py) lists. A folder of compose files the kit did not write is refused: `kit down` stops and
    removes containers, and acts only on a deployment the kit made."""
    files = rendered_compose_files(out_dir)
    listed = read_manifest(out_dir)
    kit_made = tuple(f for f in files if f.name in listed)
    hint = ("pass the --out directory `kit render` or `kit up` wrote (copy the whole folder, "
            f"{MANIFEST} and {RECORD_FILE} included, to another host); to stop a stack the kit did not render: "
            "docker compose -f FILE down")
    if not kit_made:
        names = ", ".join(f.name for f in files)
        raise NotADeployment(f"{out_dir}: not a vllm-kit deployment ({names} here, but no {MANIFEST} that lists it)",
                             hint=hint)
    # The record is written in the same all-or-nothing write as the compose files: both, or it is not the kit's.
    if RECORD_FILE not in listed or read_record(out_dir) is None:
        raise NotADeployment(f"{out_dir}: not a vllm-kit deployment (no {RECORD_FILE}, the kit's record of the "
                             "render, beside its compose files)", hint=hint)
    return kit_made


def is_deployment(out_dir: Path) -> bool:
    """Whether ``out_dir`` is a deployment the kit rendered, as `kit down` and `kit logs` take it
    (``deployment_compose_files``): where the kit may name `kit down --out DIR` as the way to stop its stack."""
    try:
        deployment_compose_files(out_dir)
    except (KitError, OSError):
        return False
    return True


def declared_volumes(files: Iterable[Path]) -> set[str]:
    """The named volumes the rendered compose files declare (not external ones): all `down --volumes` removes."""
    import yaml

    names: set[str] = set()
    for path in files:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as error:
            raise KitError(f"{path}: cannot be read as compose YAML ({type(error).__name__})") from None
        volumes = data.get("volumes") if isinstance(data, dict) else None
        for key, spec in (volumes or {}).items() if isinstance(volumes, dict) else ():
            if not (isinstance(spec, dict) and spec.get("external")):
                names.add(str(key))
    return names


def projects_from_labels(out_dir: Path, labels: Iterable[Mapping[str, str]]) -> list[Project]:
    """The projects whose containers were started from ``out_dir``, each with the union of its compose files.

    A head and a worker started one after the other in the same directory (CLUSTER.md's commands on one host)
    share the directory's default project name but carry different config_files labels: stopping that project
    needs both files. Files no longer in the directory are left out (compose refuses a missing -f).
    """
    home = out_dir.resolve()
    found: dict[str, list[Path]] = {}
    for label in labels:
        name = label.get(LABEL_PROJECT)
        if not name:
            continue
        files = [Path(f) for f in label.get(LABEL_CONFIG_FILES, "").split(",") if f]
        working_dir = label.get(LABEL_WORKING_DIR)
        here = (working_dir and same_dir(Path(working_dir), home)) or any(same_dir(f.parent, home) for f in files)
        if not here:
            continue
        known = found.setdefault(name, [])
        for f in files:
            if same_dir(f.parent, home) and f.name in COMPOSE_FILES and (home / f.name) not in known:
                known.append(home / f.name)
    order = {name: i for i, name in enumerate(COMPOSE_FILES)}
    return [Project(name, tuple(sorted(files, key=lambda f: order[f.name]))) for name, files in sorted(found.items())]


def same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b
    except OSError:
        return False


class ProjectElsewhere(KitError):
    """A compose project of the folder's name holds containers started from another folder."""


def foreign_folders(project: str, out_dir: Path, labels: Iterable[Mapping[str, str]]) -> list[str]:
    """The folders (compose's working_dir label) other than ``out_dir`` that containers of ``project`` were started
    from: compose acts on a project by name, so `down` there would remove them too."""
    home = out_dir.resolve()
    return sorted({label.get(LABEL_WORKING_DIR) or "an unknown folder" for label in labels
                   if label.get(LABEL_PROJECT) == project
                   and not (label.get(LABEL_WORKING_DIR) and same_dir(Path(label[LABEL_WORKING_DIR]), home))})


def refuse_foreign_project(project: str, out_dir: Path, labels: Iterable[Mapping[str, str]] | None = None) -> None:
    """Refuse to run compose for ``project`` from ``out_dir`` when another folder started containers under it."""
    if labels is None:
        labels = [c.labels for c in docker_engine.docker_client().containers.list(all=True, filters={
            "label": f"{LABEL_PROJECT}={project}"})]
    elsewhere = foreign_folders(project, out_dir, labels)
    if elsewhere:
        raise ProjectElsewhere(
            f"{out_dir}: compose project {project} was started from {', '.join(elsewhere)}, not from this folder; "
            "the kit acts only on the stack of the folder it is given",
            hint=f"stop it from its own folder (kit down --out {elsewhere[0]}), or docker compose -p {project} down "
                 "if you mean to remove it")


def find_projects(out_dir: Path) -> list[Project]:
    """The projects running (or stopped) from ``out_dir``; when none exists, the directory's default project."""
    rendered = rendered_compose_files(out_dir)
    containers = docker_engine.docker_client().containers.list(all=True, filters={"label": LABEL_PROJECT})
    projects = projects_from_labels(out_dir, [c.labels for c in containers])
    return [Project(p.name, p.files or rendered) for p in projects] or [Project(compose_project(out_dir), rendered)]


INSPECTION_PLACEHOLDER = "not-read-by-ps-logs-down"


def inspection_env(files: Iterable[Path]) -> dict[str, str]:
    """The environment for a compose command that only looks at a project or removes it (ps, logs, down): each
    required variable that neither the environment nor the folder's .env sets gets a placeholder, which these
    commands never use. Without it, a folder whose .env lost the key (or was rendered before the kit wrote one)
    could not even be listed or stopped. Commands that start containers (up, run) never get it."""
    env = dict(os.environ)
    files = list(files)
    dotenv = read_env_file(files[0].parent / ".env") if files else {}
    for path in files:
        for name in required_variables(path.read_text(encoding="utf-8", errors="replace")):
            if not is_set(env.get(name)) and not is_set(dotenv.get(name)):
                env[name] = INSPECTION_PLACEHOLDER
    return env


def run_compose(project: Project, *args: str, timeout: float = COMPOSE_TIMEOUT_S) -> str:
    """`docker compose ARGS` for ps, logs and down (``inspection_env``); its stdout, or KitError with its last line."""
    if args[0] not in ("ps", "logs", "down"):
        raise ValueError(f"run_compose runs ps, logs and down, not {args[0]}")
    argv = project.argv(*args)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                            cwd=project.files[0].parent, env=inspection_env(project.files))
    if result.returncode != 0:
        last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise KitError(f"docker compose {args[0]} (project {project.name}) failed: {last[0][:300]}")
    return result.stdout


# ---------------------------------------------------------------- ps

def parse_ps(text: str) -> list[dict[str, Any]]:
    """`docker compose ps --format json`: one object per line (Compose >= 2.21) or one array (older)."""
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def ports_text(publishers: list[dict[str, Any]] | None) -> str:
    shown = [f"{p.get('URL') or ''}:{p['PublishedPort']}->{p.get('TargetPort')}/{p.get('Protocol', 'tcp')}"
             for p in publishers or [] if p.get("PublishedPort")]
    return ", ".join(dict.fromkeys(shown))


def ps_rows(project: Project, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"project": project.name, "service": e.get("Service"), "container": e.get("Name"),
             "state": e.get("State"), "health": e.get("Health") or None, "status": e.get("Status"),
             "exit_code": e.get("ExitCode"), "ports": ports_text(e.get("Publishers")),
             "publishers": e.get("Publishers") or []} for e in entries]


def ps(out_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for project in find_projects(out_dir):
        rows += ps_rows(project, parse_ps(run_compose(project, "ps", "--all", "--format", "json")))
    return rows


RUNNING_STATES = ("running", "restarting", "paused")


def running_services(out_dir: Path) -> list[dict[str, Any]]:
    """The ps rows of the containers running from ``out_dir`` (any project); none for a folder with no compose
    file (nothing can run from it, and Docker is not asked)."""
    if not any((out_dir / name).is_file() for name in COMPOSE_FILES):
        return []
    return [r for r in ps(out_dir) if r["state"] in RUNNING_STATES]


# ---------------------------------------------------------------- logs

def logs_argv(project: Project, *, services: tuple[str, ...], follow: bool, tail: int | None,
              timestamps: bool) -> list[str]:
    args = ["logs", "--no-color"]
    if follow:
        args.append("--follow")
    if tail is not None:
        args += ["--tail", str(tail)]
    if timestamps:
        args.append("--timestamps")
    return project.argv(*args, *services)


# ---------------------------------------------------------------- status

def server_url(row: Mapping[str, Any] | None, compose_file: Path | None) -> str:
    """Where the API server answers from this host, on 127.0.0.1 only (the kit sends traffic nowhere else; docs/guide/commands.md):
    the running container's published port; with nothing running, the port the compose file publishes; with host
    networking (a multi-node head), the `--port` its command gives vLLM; else vLLM's default 8000."""
    for pub in (row or {}).get("publishers") or []:
        if pub.get("PublishedPort"):
            return _loopback_url(pub.get("URL") or LOOPBACK, int(pub["PublishedPort"]))
    service = _server_service(compose_file)
    for entry in service.get("ports") or []:  # "ADDRESS:HOST_PORT:CONTAINER_PORT", as kit/deploy/render.py writes it
        parts = str(entry).rsplit(":", 2)
        if len(parts) == 3 and parts[1].isdigit():
            return _loopback_url(parts[0].strip("[]") or LOOPBACK, int(parts[1]))
    return f"http://{LOOPBACK}:{_command_port(service) or 8000}"


def _loopback_url(address: str, port: int) -> str:

    if address not in LOOPBACK_REACHABLE:
        raise KitError(f"the server publishes on {address}, and kit status asks {LOOPBACK} only")
    return f"http://{LOOPBACK}:{port}"


def _server_service(compose_file: Path | None) -> dict[str, Any]:
    import yaml

    if compose_file is None or not compose_file.is_file():
        return {}
    doc = yaml.load(compose_file.read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}  # noqa: S506 - safe loader
    services = doc.get("services") or {}
    # A one-node stack publishes the API through its front door (kit/deploy/door.py); a cluster's head itself.
    return services.get(DOOR_SERVICE) or services.get(SERVER_SERVICE) or {}


def _command_port(service: Mapping[str, Any]) -> int | None:
    command = [str(a) for a in service.get("command") or []]
    if "--" in command:  # the cluster launcher's own options (Ray's --port) come before `-- vllm serve ...`
        command = command[command.index("--") + 1:]
    if "--port" in command[:-1]:
        value = command[command.index("--port") + 1]
        return int(value) if value.isdigit() else None
    return None


def http_get(url: str, api_key: str | None) -> tuple[int | None, str]:
    """(status, body); status None when nothing answers. No proxy: the target is this host's loopback."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})  # noqa: S310 - http://127.0.0.1:PORT, built here
    try:
        with opener.open(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, response.read(4 * 2**20).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, ""
    except (OSError, ValueError):
        return None, ""


def read_status(base_url: str, api_key: str | None) -> dict[str, Any]:
    """Health, served models and the engine's gauges, from the server's own endpoints."""
    health_code, _ = http_get(f"{base_url}/health", None)
    health = "ok" if health_code == 200 else ("unreachable" if health_code is None else f"HTTP {health_code}")
    models_code, models_body = http_get(f"{base_url}/v1/models", api_key)
    models: list[str] = []
    if models_code == 200:
        try:
            models = [m["id"] for m in json.loads(models_body).get("data") or [] if m.get("id")]
        except (ValueError, AttributeError, TypeError):
            models = []
    metrics_code, metrics_body = http_get(f"{base_url}/metrics", api_key)
    gauges = read_gauges(metrics_body) if metrics_code == 200 else {}
    return {"url": base_url, "health": health, "models": models,
            "models_http": models_code, "metrics_http": metrics_code,
            "kv_cache_usage_perc": gauges.get("kv_cache_usage_perc"),
            "requests_running": gauges.get("num_requests_running"),
            "requests_waiting": gauges.get("num_requests_waiting")}


def status(out_dir: Path) -> dict[str, Any]:

    rows = ps(out_dir)
    server = next((r for r in rows if r["service"] == SERVER_SERVICE), None)
    files = rendered_compose_files(out_dir)
    head = next((f for f in files if f.name in ("compose.yaml", "compose.head.yaml")), None)
    door = next((r for r in rows if r["service"] == DOOR_SERVICE), None)
    url = server_url(door or server, head)
    data = {"out": str(out_dir), "project": server["project"] if server else None,
            "container": server["container"] if server else None,
            "state": server["state"] if server else None,
            "container_health": server["health"] if server else None,
            **read_status(url, api_key_from(out_dir, dict(os.environ))),
            "services": [{k: r[k] for k in ("project", "service", "state", "health")} for r in rows]}
    data["model"] = data["models"][0] if data["models"] else None
    return data


# ---------------------------------------------------------------- down

class KubernetesFolder(StackNotFound):
    """`kit down` of a folder that a render switched to --target k8s: no compose file is left to stop with."""


def kubernetes_folder_refusal(out_dir: Path, labels: list[Mapping[str, str]] | None) -> KubernetesFolder | None:
    """Why `kit down` cannot stop ``out_dir``'s stack because the folder is a Kubernetes render now, or None.
    ``labels``: the labels of this host's compose containers, None when Docker did not answer. What compose
    started here before the switch still runs under its project name, and `docker compose -p NAME down` removes it
    without a compose file (run where none is, the folder itself now)."""
    import shlex

    if any((out_dir / name).is_file() for name in COMPOSE_FILES):
        return None
    try:
        record = read_record(out_dir)
    except (RecordError, OSError):
        return None
    if record is None or record.target != "k8s":
        return None
    where, manifests = shlex.quote(str(out_dir)), shlex.quote(str(out_dir / "k8s"))
    cluster = f"the Kubernetes deployment is removed with `kubectl delete -k {manifests}`"
    message = (f"{out_dir}: a Kubernetes render now (its vllm-kit.yaml records --target k8s; the switch removed "
               "compose.yaml): `kit down` stops compose stacks, and no part of a Kubernetes deployment runs here")
    if labels is None:
        command = f"cd {where} && docker compose -p {compose_project(out_dir)} down --remove-orphans"
        return KubernetesFolder(message, hint=f"Docker did not answer: if the compose stack started here before the "
                                f"switch still runs, remove it with `{command}`; {cluster}")
    projects = [p.name for p in projects_from_labels(out_dir, labels)]
    if not projects:
        return KubernetesFolder(message, hint=f"no container of a compose stack from this folder is left; {cluster}")
    commands = " and ".join(f"`cd {where} && docker compose -p {name} down --remove-orphans`" for name in projects)
    return KubernetesFolder(message + f"; compose project {', '.join(projects)} started here before the switch "
                            "still has containers", hint=f"remove them with {commands}; {cluster}")


def down(out_dir: Path, *, volumes: bool = False) -> list[dict[str, Any]]:
    """Stop every project started from ``out_dir`` (a cluster's head and worker alike) and remove its containers;
    with ``volumes``, its named volumes too. Each project as ``{project, files, containers, volumes}``: what was
    there to remove, so a caller can say what happened. Nothing running: no project, unless ``volumes`` and the
    directory's default project still has volumes (a `kit fetch` fills the cache volume without starting the stack).
    Refuses a directory the kit did not render (``NotADeployment``)."""
    from docker.errors import DockerException

    if not any((out_dir / name).is_file() for name in COMPOSE_FILES):
        try:
            found: list[Mapping[str, str]] | None = [
                c.labels for c in docker_engine.docker_client().containers.list(all=True, filters={"label": LABEL_PROJECT})]
        except (KitError, OSError, DockerException):  # no engine, or one that fails: say what to run by hand
            found = None
        refusal = kubernetes_folder_refusal(out_dir, found)
        if refusal is not None:
            raise refusal
    rendered = deployment_compose_files(out_dir)
    client = docker_engine.docker_client()
    containers = client.containers.list(all=True, filters={"label": LABEL_PROJECT})
    projects = projects_from_labels(out_dir, [c.labels for c in containers])
    in_project = {p.name: sorted(c.name for c in containers if c.labels.get(LABEL_PROJECT) == p.name) for p in projects}
    for project in projects:  # a project this folder shares with another: `down` by name would remove both
        refuse_foreign_project(project.name, out_dir, [c.labels for c in containers])
    if not projects and volumes:
        default = compose_project(out_dir)
        # The folder's project name in use by a stack started from another folder: its volumes are that stack's,
        # whatever this folder's compose file declares.
        refuse_foreign_project(default, out_dir, [c.labels for c in containers])
        projects = [Project(default, ())]
    declared = declared_volumes(rendered) if volumes else set()
    done = []
    for project in projects:
        files = project.files or rendered
        names = ([v.name for v in client.volumes.list(filters={"label": f"{LABEL_PROJECT}={project.name}"})
                  if (v.attrs.get("Labels") or {}).get("com.docker.compose.volume") in declared]
                 if volumes else [])
        if not in_project.get(project.name) and not names:
            continue  # nothing of it is left to remove
        args = ["down", "--remove-orphans", "--timeout", "20"] + (["--volumes"] if volumes else [])
        run_compose(Project(project.name, files), *args)
        done.append({"project": project.name, "files": [f.name for f in files],
                     "containers": in_project.get(project.name, []), "volumes": sorted(names)})
    return done
