"""Deployment -> files. ``render()`` is pure: it returns ``{relative path: text}`` and touches nothing."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import TYPE_CHECKING, Any

from kit.config.fetchscript import fetch_script
from kit.config.strategy import strategy_for
from kit.core.datafiles import IMAGES_DIR, prune_rules
from kit.deploy import deployment as dep, door
from kit.deploy.composefile import cluster_compose_file, compose_file
from kit.deploy.deployment import Deployment
from kit.deploy.door import client_host, door_routes
from kit.deploy.k8s import render_manifests
from kit.deploy.profiles import build_profiles
from kit.deploy.router import ROUTER_SERVICE, replica_service, router_files, router_spec
from kit.deploy.templating import render_template

if TYPE_CHECKING:
    from kit.memory.plan import Plan

DOCKERIGNORE = """\
# The build context is only what the image needs: never .env, models or caches.
*
!Dockerfile
!requirements.txt
!fetch_files.py
!prune_site.py
!prune-rules.json
!cuda_jit_layout.sh
!flashinfer_aot.py
!amx_permission.py
!wheels/
"""

@dataclass(frozen=True)
class RenderContext:
    """The one object the templates receive."""

    d: Deployment
    image_ref: str
    plan_lines: list[str] = field(default_factory=list)
    plan: Plan | None = None  # when the planner ran (sizes the Kubernetes claims and requests)
    user: str = dep.APP_USER
    uid: int = dep.APP_UID
    home: str = dep.APP_HOME
    hf_home: str = dep.HF_HOME
    vllm_cache: str = dep.VLLM_CACHE
    venv: str = dep.VENV
    fetch_script_path: str = dep.FETCH_SCRIPT_PATH
    port: int = dep.CONTAINER_PORT
    role: str = ""  # several nodes: head | worker
    service_suffix: str = ""  # a server beside another preset's in one stack: "-<preset>"
    included_by: str = ""  # that stack's main file, for the header
    includes: list[str] = field(default_factory=list)  # compose files of the servers beside this one
    door: bool = False  # the API behind the front door (kit/deploy/door.py): a one-node compose stack
    profile_parts: tuple[Any, ...] = ()  # kit.deploy.profile_parts.ProfileParts of `--with PROFILE`, merged into compose.yaml
    head_service: str = dep.HEAD_SERVICE
    worker_service: str = dep.WORKER_SERVICE
    node_env: dict[str, str] = field(default_factory=lambda: dict(dep.NODE_ENV))
    ray_worker_ports: tuple[int, int] = dep.RAY_WORKER_PORTS
    ray_client_port: int = dep.RAY_CLIENT_PORT
    ray_dashboard_agent_port: int = dep.RAY_DASHBOARD_AGENT_PORT
    # The folder's compose project (vllm-kit.yaml `project`, one per folder), written as compose.yaml's top-level
    # `name`, so a `docker compose ...` typed in the folder acts on this stack; "" when rendered for no folder.
    project: str = ""

    @property
    def door_paths(self) -> str:
        return ", ".join(r.path for r in door_routes(self.d.preset) if not r.open)

    @property
    def service(self) -> str:
        return self.worker_service if self.role == "worker" else self.head_service

    @property
    def server_service(self) -> str:
        return dep.HEAD_SERVICE + self.service_suffix

    @property
    def fetch_service(self) -> str:
        return FETCH_SERVICE + self.service_suffix

    @property
    def model_make_service(self) -> str:
        return MODEL_MAKE_SERVICE + self.service_suffix

    @property
    def launcher_mount(self) -> str:
        return f"./{dep.LAUNCHER_FILE}:{dep.LAUNCHER_DIR}/{dep.LAUNCHER_FILE}"

    @property
    def tiny_model_mount(self) -> str:
        return f"./{dep.TINY_MODEL_FILE}:{dep.LAUNCHER_DIR}/{dep.TINY_MODEL_FILE}:ro"

    @property
    def watchdog_mount(self) -> str:
        return f"./{dep.WATCHDOG_FILE}:{dep.LAUNCHER_DIR}/{dep.WATCHDOG_FILE}:ro"

    @property
    def published_port(self) -> str:
        rt = self.d.preset.runtime
        return f"{rt.bind_address}:{rt.port}:{self.port}"

    @property
    def health_url(self) -> str:
        """Where the server answers from inside its own container (its host's, with host networking)."""
        cl = self.d.serve.cluster
        if cl is not None and cl.host_network:
            return f"http://{client_host(self.d.preset.runtime.bind_address)}:{cl.server_port}/health"
        return f"http://127.0.0.1:{self.port}/health"

    @property
    def healthcheck_test(self) -> list[str]:
        probe = f"import urllib.request; urllib.request.urlopen('{self.health_url}', timeout=5)"
        return ["CMD", self.d.serve.python, "-c", probe]


def requirements_text(d: Deployment) -> str:
    # No preset name: the file is COPYed before the venv is installed, so a name here would make every renamed copy
    # of a preset install its venv again instead of taking the cached layer (images/venv.Dockerfile.j2).
    lines = [f"# Pinned by vllm-kit (vLLM {d.image.vllm_version})."]
    lines += d.image.requirements
    return "\n".join(lines) + "\n"


def content_tag(dockerfile: str, requirements: str, fetch_script: str, *build_files: str) -> str:
    """A tag that changes exactly when the image's inputs change (not with flags or the model): the fetch
    script is COPYed into the image, and the prune script and rules decide its files, so a change to any of
    them must rebuild."""
    digest = hashlib.sha256("\0".join((dockerfile, requirements, fetch_script, *build_files)).encode()).hexdigest()
    return digest[:12]


# The rendered files an image's tag is the content hash of (content_tag), in its order: then dep.BUILD_FILES.
TAGGED_FILES = ("Dockerfile", "requirements.txt", dep.FETCH_FILE)


def image_inputs(files: Mapping[str, str]) -> tuple[str, ...]:
    """The texts of a render's ``files`` that its image's tag hashes, in content_tag's order (the build files only
    where the render has them); KeyError where one of TAGGED_FILES is missing."""
    return (*(files[name] for name in TAGGED_FILES), *(files[name] for name in dep.BUILD_FILES if name in files))


def image_tag(files: Mapping[str, str]) -> str | None:
    """The content tag of the image rendered ``files`` build (image_ref_for's, unpinned); None without one of
    TAGGED_FILES (a folder someone emptied)."""
    if any(name not in files for name in TAGGED_FILES):
        return None
    return content_tag(*image_inputs(files))


def image_ref_for(d: Deployment, dockerfile: str, requirements: str, fetch_script: str, *build_files: str) -> str:
    if d.preset.image.pin_digest:  # production: the exact image `kit push` recorded
        return f"{d.image.image_repository}@{d.preset.image.pin_digest}"
    tag = content_tag(dockerfile, requirements, fetch_script, *build_files)
    return f"{d.image.image_repository}:{d.image.vllm_version}-{tag}"


def build_files(d: Deployment) -> dict[str, str]:
    """The image's build files beyond the Dockerfile, requirements and fetch script, in dep.BUILD_FILES order: the
    prune step's (kit/image/prune.py, kit/data/prune.yaml as JSON) for images that prune, and the CUDA_HOME layout
    script (images/cuda_jit_layout.sh) for images with FlashInfer's JIT toolchain, and the script that compiles
    FlashInfer's modules while the image is built (images/flashinfer_aot.py) for those that name a GPU."""
    files: dict[str, str] = {}
    if d.image.prune:
        source = resources.files("kit.image").joinpath("prune.py").read_text(encoding="utf-8")
        # The rules this image applies: the features it leaves out are already in its distributions.
        applied = {k: v for k, v in prune_rules(d.image.cuda, d.preset.image.leave_out).items() if k != "features"}
        files[dep.PRUNE_RULES_FILE] = json.dumps(applied, indent=1, sort_keys=True) + "\n"
        files[dep.PRUNE_SCRIPT_FILE] = source
    if d.image.cuda_jit:
        files[dep.JIT_LAYOUT_FILE] = (IMAGES_DIR / dep.JIT_LAYOUT_FILE).read_text(encoding="utf-8")
    if d.image.flashinfer_aot:
        files[dep.FLASHINFER_AOT_FILE] = (IMAGES_DIR / dep.FLASHINFER_AOT_FILE).read_text(encoding="utf-8")
    if d.image.amx_permission:
        files[dep.AMX_PERMISSION_FILE] = (IMAGES_DIR / dep.AMX_PERMISSION_FILE).read_text(encoding="utf-8")
    return {name: files[name] for name in dep.BUILD_FILES if name in files}


TARGETS = ("compose", "k8s")
FETCH_SERVICE = "model-fetch"
MODEL_MAKE_SERVICE = "model-make"


def side_by_side_file(name: str) -> str:
    return f"compose.{name}.yaml"


@dataclass(frozen=True)
class Companion:
    """Another preset's server in the same compose stack (``kit render ... --with-preset NAME``)."""

    d: Deployment
    plan_lines: list[str] = field(default_factory=list)


def launcher_text(name: str = dep.LAUNCHER_FILE) -> str:
    """A launcher (Ray node, serve watchdog), shipped beside the stack as it is in the kit (it runs in the image)."""
    from importlib import resources

    return resources.files("kit.launch").joinpath(name).read_text(encoding="utf-8")


def tiny_model_text() -> str:
    """kit/config/tinymodel.py as the stack's model-make service runs it (standard library at import)."""
    from importlib import resources

    return resources.files("kit.config").joinpath("tinymodel.py").read_text(encoding="utf-8")


def _api_servers(ctx: RenderContext) -> list[str]:
    """The compose services that run vLLM's API server for this preset: the server, or its replicas."""
    n = ctx.d.preset.runtime.replicas
    if n > 1:
        return [replica_service(ctx.server_service, i) for i in range(1, n + 1)]
    return [ctx.server_service]


def door_files(ctx: RenderContext) -> dict[str, str]:
    """The front door's HAProxy config for this server (kit/deploy/door.py): to the router with replicas."""
    if ctx.d.preset.runtime.replicas > 1:
        backend, port = ROUTER_SERVICE, router_spec(ctx.d.preset).container_port
    else:
        backend, port = ctx.server_service, ctx.port
    text = door.door_config(backend, port, door.door_routes(ctx.d.preset), f"preset {ctx.d.preset_name}",
                            hosts=door.served_hosts(ctx.d.preset, ctx.d.preset.runtime.port))
    return {door.config_file(ctx.service_suffix): text}


def render(d: Deployment, plan_lines: list[str] | None = None, target: str = "compose",
           plan: Plan | None = None, companions: tuple[Companion, ...] = (), profiles: tuple[str, ...] = (),
           project: str = "") -> dict[str, str]:
    """compose: one compose.yaml, or compose.head.yaml + compose.worker.yaml for several nodes; each companion
    adds compose.NAME.yaml (its servers, on the same image), which compose.yaml includes; each profile
    (kit/deploy/profiles.py) adds its services to compose.yaml and its files beside it.
    k8s: Kubernetes manifests in k8s/ (see kit/deploy/k8s.py). The image's files are the same for both."""
    # Callers' contract: kit/deploy/pipeline.py refuses these for users (PresetError naming the option) before
    # it calls render(); these guard the function for other callers (tests, bench) and never reach a user.
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}")
    if companions and (target != "compose" or d.serve.cluster is not None):
        raise ValueError("side-by-side servers need the compose target of a one-node stack")
    if profiles and target != "compose":
        raise ValueError("profiles need the compose target")
    template = strategy_for(d.image.strategy).dockerfile_template

    requirements = requirements_text(d)
    script = fetch_script()
    extra_files = build_files(d)
    draft = RenderContext(d=d, image_ref="")
    dockerfile = render_template(template, c=draft)
    ctx = RenderContext(
        d=d,
        image_ref=image_ref_for(d, dockerfile, requirements, script, *extra_files.values()),
        plan_lines=list(plan_lines or []),
        plan=plan,
        includes=[side_by_side_file(c.d.preset_name) for c in companions],
        door=target == "compose" and d.serve.cluster is None,
        project=project,
    )
    if profiles:
        # The API servers of the stack: with several nodes only the head serves (workers run Ray alone).
        servers = _api_servers(ctx) + [dep.HEAD_SERVICE + f"-{c.d.preset_name}" for c in companions]
        profile_ctx = ctx if d.serve.cluster is None else replace(ctx, role="head")
        ctx = replace(ctx, profile_parts=build_profiles(profile_ctx, profiles, servers))
    files = {
        "Dockerfile": dockerfile,
        "requirements.txt": requirements,
        dep.FETCH_FILE: script,
        ".dockerignore": DOCKERIGNORE,
        ".env.example": render_template("env.example.j2", c=ctx),
        **extra_files,
    }
    if target == "k8s":
        files.update(render_manifests(ctx, launcher_text(), tiny_model_text() if d.serve.model_make_command else None))
    elif d.serve.cluster is None:
        files["compose.yaml"] = compose_file(ctx)
        files.update(door_files(ctx))
        files[dep.WATCHDOG_FILE] = launcher_text(dep.WATCHDOG_FILE)
        if d.serve.model_make_command or any(c.d.serve.model_make_command for c in companions):
            files[dep.TINY_MODEL_FILE] = tiny_model_text()
        for parts in ctx.profile_parts:
            files.update(parts.files)
        if d.preset.runtime.replicas > 1:
            files.update(router_files(d, ctx.uid, ctx.user))
        for companion in companions:
            # Same image reference: the companion's image inputs equal this one's (deployment.side_by_side_problems).
            other = replace(ctx, d=companion.d, plan_lines=list(companion.plan_lines), includes=[], profile_parts=(),
                            service_suffix=f"-{companion.d.preset_name}", included_by="compose.yaml", project="")
            files[side_by_side_file(companion.d.preset_name)] = compose_file(other)
            files.update(door_files(other))
    else:
        for role in ("head", "worker"):  # profiles' services run on the head's host, in its stack
            files[f"compose.{role}.yaml"] = cluster_compose_file(
                replace(ctx, role=role, profile_parts=ctx.profile_parts if role == "head" else ()))
        for parts in ctx.profile_parts:
            files.update(parts.files)
        files[dep.LAUNCHER_FILE] = launcher_text()
        if d.serve.model_make_command:
            files[dep.TINY_MODEL_FILE] = tiny_model_text()
        files["CLUSTER.md"] = render_template("cluster.md.j2", c=ctx)
    return files
