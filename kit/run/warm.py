"""Warm a one-host deployment before its first user start: fill the caches a restart reuses (issue 24).

Public entry point: ``warm(prepared, out_dir) -> WarmResult``. It starts the stack's API server(s) only (compose
starts the one-shot model-make / model-fetch they depend on), sends each one real request from inside its own
container (vLLM builds some kernels, FlashInfer's sampler JIT among them, on the first request), measures what the
vLLM cache volume now holds, and stops those services again: `docker compose stop`, so the volumes stay and the
next `kit up --out DIR` starts warm. The same compose project as `kit up` (kit/run/workflow.py ``project_for``),
so the volumes are the ones `kit up` mounts.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.config.pooling import pooling_profile, pooling_table
from kit.core.datafiles import load_yaml
from kit.core.errors import KitError
from kit.deploy.deployment import CONTAINER_PORT
from kit.deploy.pipeline import Prepared
from kit.deploy.router import replica_service
from kit.run import ops, workflow
from kit.run.smoke import model_spec_or_none
from kit.run.stack import SERVICE, Stack

Progress = Callable[[str], None]
STOP_TIMEOUT_S = 20
REQUEST_TIMEOUT_S = 600  # the first request may build kernels (FlashInfer's sampler JIT) before it answers
LOG_LINES = 30

# Run by the image's own python inside the server's container: argv is route, JSON body, container port, then the
# names of the cache variables (kit/data/startcache.yaml). The key is read from the container's env, never passed.
# Prints one JSON line: the request's status, its seconds, the cache variables' values, and the bytes below each
# top-level entry of VLLM_CACHE_ROOT, counted as `du -sb` counts them (apparent sizes of files and folders, each
# inode once, links not followed).
IN_CONTAINER_SCRIPT = r"""
import json, os, stat, sys, time, urllib.error, urllib.request
route, body, port, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
request = urllib.request.Request("http://127.0.0.1:%s%s" % (port, route), data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
if os.environ.get("VLLM_API_KEY"):
    request.add_header("Authorization", "Bearer " + os.environ["VLLM_API_KEY"])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
started = time.monotonic()
try:
    with opener.open(request, timeout=%(timeout)d) as response:
        status, text = response.status, response.read(65536)
except urllib.error.HTTPError as error:
    status, text = error.code, error.read(65536)
except OSError as error:
    status, text = None, str(error).encode()
seconds = time.monotonic() - started
root = os.environ.get("VLLM_CACHE_ROOT") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vllm")
seen = set()
def du(path):
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if (st.st_dev, st.st_ino) in seen:
        return 0
    seen.add((st.st_dev, st.st_ino))
    total = st.st_size
    if stat.S_ISDIR(st.st_mode):
        try:
            entries = list(os.scandir(path))
        except OSError:
            entries = []
        for entry in entries:
            total += du(entry.path)
    return total
try:
    names_here = sorted(os.listdir(root))
except OSError:
    names_here = []
sizes = {name: du(os.path.join(root, name)) for name in names_here}
print(json.dumps({"status": status, "seconds": seconds, "detail": text.decode("utf-8", "replace")[:300],
                  "cache_root": root, "cache_env": {n: os.environ.get(n) for n in names}, "cache_bytes": sizes}))
""".replace("%(timeout)d", str(REQUEST_TIMEOUT_S))


@dataclass(frozen=True)
class ServerWarm:
    service: str
    request: str  # "POST /v1/completions"
    status: int | None  # HTTP status; None when nothing answered
    seconds: float
    detail: str  # the start of the answer when it was not 200
    cache_root: str
    cache_env: dict[str, str | None]
    cache_bytes: dict[str, int]

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass
class WarmResult:
    out_dir: Path
    project: str
    services: list[str]
    ready_seconds: float
    servers: list[ServerWarm] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.servers) and all(s.ok for s in self.servers)


def refuse_unwarmable(prepared: Prepared, out_dir: Path) -> None:
    """Warm covers one-host compose stacks: a multi-node Ray cluster or a Kubernetes render is refused, before
    anything is written."""
    files = prepared.files
    if "compose.yaml" in files:
        return
    if "compose.head.yaml" in files or (out_dir / "compose.head.yaml").is_file():
        raise KitError(f"{out_dir}: a multi-node Ray cluster render (compose.head.yaml, compose.worker.yaml); "
                       "kit warm covers one-host compose stacks",
                       hint="start the head and the workers as CLUSTER.md says: each host's first start fills its "
                            "cache volume")
    if any(name.startswith("k8s/") for name in files):
        raise KitError(f"{out_dir}: a Kubernetes render (k8s/) only; kit warm covers one-host compose stacks",
                       hint="on Kubernetes the pod's first start fills the cache PVC, and later pods reuse it")
    raise KitError(f"{out_dir}: no compose.yaml in this render; kit warm covers one-host compose stacks")


def refuse_running(out_dir: Path) -> None:
    """Warm is for before the first start: a stack already running from the folder (any project) is refused."""
    running = ops.running_services(out_dir)
    if running:
        names = ", ".join(sorted({f"{r['service']} ({r['project']})" for r in running}))
        raise KitError(f"{out_dir}: the stack is already running ({names})",
                       hint=f"warm is for before the first start; to warm it again, stop it first: "
                            f"kit down --out {shlex.quote(str(out_dir))}")


def server_services(prepared: Prepared) -> list[tuple[str, Prepared]]:
    """The compose services that run vLLM's API server (the server or its replicas, and each server beside it),
    each with the preset it serves."""
    n = prepared.preset.runtime.replicas
    if n > 1:
        own = [(replica_service(SERVICE, i), prepared) for i in range(1, n + 1)]
    else:
        own = [(SERVICE, prepared)]
    return own + [(f"{SERVICE}-{c.name}", c) for c in prepared.companions]


def warm_request(prepared: Prepared, base_dir: Path) -> tuple[str, dict[str, Any]]:
    """The one request that exercises the server as a user will, by what it runs (as kit smoke picks its checks,
    kit/run/smoke.py): a completion for a generating model, its task's route for a pooling model."""
    name = prepared.deployment.serve.served_model_name
    profile = pooling_profile(prepared.preset.engine.flags(), model_spec_or_none(prepared, base_dir))
    if not profile.pooling:
        return "/v1/completions", {"model": name, "prompt": "The server", "max_tokens": 8, "temperature": 0}
    route = pooling_table()["tasks"][profile.task]["route"]
    return route, {"model": name, "input": ["The server starts."]}


def cache_variables() -> list[str]:

    return list(load_yaml("startcache.yaml")["caches"])


def warm(prepared: Prepared, out_dir: Path, *, wheelhouse: Path | None = None, force: bool = False,
         progress: Progress | None = None) -> WarmResult:
    """Render, build if needed, start the server(s), one request each, measure the cache, stop. On a failure,
    what warm started is stopped and the server's last log lines are in the error."""
    refuse_unwarmable(prepared, out_dir)
    refuse_running(out_dir)
    workflow.render_into(prepared, out_dir, force=force, remove_stale=True, progress=progress)
    workflow.ensure_image(prepared, out_dir, wheelhouse=wheelhouse, progress=progress)
    workflow.ensure_model(prepared, out_dir, progress)
    workflow.fill_env(prepared, out_dir, progress)
    servers = server_services(prepared)
    services = [s for s, _ in servers]
    stack = Stack(out_dir, workflow.project_for(out_dir))
    wait_s = prepared.deployment.runtime.healthcheck_start_period + 120
    result = WarmResult(out_dir, stack.project, services, 0.0)
    try:
        if progress:
            progress(f"starting {', '.join(services)} of compose project {stack.project} (and the one-shot services "
                     f"they depend on), waiting up to {wait_s} s for health")
        started = time.monotonic()
        try:
            stack.run("up", "-d", "--no-build", "--wait", "--wait-timeout", str(wait_s), *services,
                      timeout=wait_s + 120)
        except KitError as exc:
            tail = stack.logs_tail(LOG_LINES, service=services[0])
            raise KitError(f"{out_dir}: {services[0]} did not get healthy: {exc.message}\n--- last log lines ---\n"
                           f"{tail}", hint=exc.hint) from None
        result.ready_seconds = time.monotonic() - started
        if progress:
            progress(f"healthy in {result.ready_seconds:.0f} s")
        names = cache_variables()
        for service, served in servers:
            route, body = warm_request(served, out_dir)
            if progress:
                progress(f"{service}: POST {route} from inside its container")
            argv = ["exec", "-T", service, served.deployment.serve.python, "-c", IN_CONTAINER_SCRIPT, route,
                    json.dumps(body), str(CONTAINER_PORT), *names]
            answer = stack.run(*argv, check=False, timeout=REQUEST_TIMEOUT_S + 60)
            result.servers.append(read_answer(service, route, answer.returncode, answer.stdout, answer.stderr))
    finally:
        if progress:
            progress(f"stopping {stack.project} (docker compose stop: the volumes stay)")
        stack.run("stop", "--timeout", str(STOP_TIMEOUT_S), check=False)
    return result


def read_answer(service: str, route: str, code: int, stdout: str, stderr: str) -> ServerWarm:
    """The in-container script's JSON line; an exec that printed none is a request that got no answer."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    try:
        data = json.loads(lines[-1])
    except (IndexError, ValueError):
        last = (stderr.strip() or stdout.strip()).splitlines()[-1:] or [f"exit {code}, no output"]
        return ServerWarm(service, f"POST {route}", None, 0.0, last[0][:300], "", {}, {})
    return ServerWarm(service, f"POST {route}", data.get("status"), float(data.get("seconds") or 0.0),
                      "" if data.get("status") == 200 else str(data.get("detail") or ""),
                      str(data.get("cache_root") or ""), dict(data.get("cache_env") or {}),
                      {str(k): int(v) for k, v in (data.get("cache_bytes") or {}).items()})
