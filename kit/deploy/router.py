"""Replicas behind one endpoint: the replica layout, the router image's files and its compose services.

Building that image is the image stage's: kit/image/router_image.py.

A preset with ``runtime.replicas`` N > 1 renders N servers (``vllm-1`` .. ``vllm-N``, published nowhere) and the
vLLM project's router (``vllm-router``; kit/data/router.yaml says why that one), published nowhere either: the
front door (kit/deploy/door.py) publishes ``runtime.port`` and passes only the inference routes to the router.
CPU replicas share the host's cores; GPU replicas get disjoint GPUs, tensor x pipeline parallel each, in order
out of ``hardware.device_ids`` (or ids 0 .. count-1). The router runs from its own small image, built from the
stack's base with the kit's wheelhouse path (no index inside the build), and is hardened like the servers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kit.config.strategy import strategy_of
from kit.core.datafiles import load_yaml
from kit.core.errors import Problem
from kit.deploy.deployment import BUILT_PULL_POLICY
from kit.deploy.templating import render_template

if TYPE_CHECKING:
    from kit.config.preset import Preset
    from kit.deploy.deployment import Deployment
    from kit.deploy.render import RenderContext

ROUTER_SERVICE = "router"
ROUTER_DIR = "router"  # the router image's build context, beside compose.yaml
ROUTER_VENV = "/opt/vllm-router"
ROUTER_REPOSITORY = "vllm-kit/router"
ROUTER_DOCKERIGNORE = """\
# The router image's build context: its Dockerfile, requirements and (optional) wheels only.
*
!Dockerfile
!requirements.txt
!wheels/
"""


@dataclass(frozen=True)
class RouterSpec:
    """kit/data/router.yaml, with the preset's policy."""

    package: str
    version: str
    policy: str
    console_script: str
    container_port: int
    health_check_interval_secs: int
    health_failure_threshold: int
    health_success_threshold: int
    health_check_timeout_secs: int
    arches: tuple[str, ...]
    pids_limit: int
    tmpfs_size: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


def router_spec(preset: Preset) -> RouterSpec:
    data = load_yaml("router.yaml")
    return RouterSpec(
        package=data["package"], version=str(data["version"]),
        policy=preset.runtime.router_policy or data["default_policy"], console_script=data["console_script"],
        container_port=int(data["container_port"]),
        health_check_interval_secs=int(data["health_check_interval_secs"]),
        health_failure_threshold=int(data["health_failure_threshold"]),
        health_success_threshold=int(data["health_success_threshold"]),
        health_check_timeout_secs=int(data["health_check_timeout_secs"]),
        arches=tuple(data["arches"]),
        pids_limit=int(data["pids_limit"]),
        tmpfs_size=str(data["tmpfs_size"]),
    )


def replica_service(server_service: str, index: int) -> str:
    return f"{server_service}-{index}"


def replica_gpu_ids(preset: Preset) -> list[list[str]]:
    """Each replica's GPU ids (disjoint, in order); [] per replica on CPU. Assumes replica_problems() passed."""
    hw, eng = preset.hardware, preset.engine
    n = preset.runtime.replicas
    if hw.gpu is None or strategy_of(preset).nvidia_runtime:
        return [[] for _ in range(n)]
    ids = [str(i) for i in (hw.device_ids or range(hw.count))]
    per = eng.tp * eng.pp
    return [ids[i * per:(i + 1) * per] for i in range(n)]


def replica_problems(where: str, preset: Preset, target: str = "compose") -> list[Problem]:
    """Every reason ``runtime.replicas`` cannot be rendered as asked, each naming the field."""
    hw, eng, rt = preset.hardware, preset.engine, preset.runtime
    if rt.replicas == 1:
        if rt.router_policy is not None:
            return [Problem(f"{where}: runtime.router_policy", "has no effect with one replica (no router)",
                            "set runtime.replicas to 2 or more, or drop runtime.router_policy")]
        return []
    field = f"{where}: runtime.replicas"
    problems = []
    if target != "compose":
        problems.append(Problem(field, f"replicas behind a router are rendered for compose only, not {target}",
                                "render with --target compose, or set runtime.replicas to 1"))
    if hw.nodes > 1:
        problems.append(Problem(field, "replicas are servers on one host; a Ray cluster over several nodes is one server",
                                "set hardware.nodes to 1, or runtime.replicas to 1"))
    if hw.arch not in router_spec(preset).arches:
        problems.append(Problem(field, f"the router has no {hw.arch} build on record (kit/data/router.yaml)"))
    if hw.gpu is not None:
        per = eng.tp * eng.pp
        needed = per * rt.replicas
        if needed > hw.count:
            problems.append(Problem(
                field, f"{rt.replicas} replicas x {per} GPU(s) each (tensor x pipeline parallel) = {needed} GPUs, "
                f"but hardware.count is {hw.count}",
                f"lower runtime.replicas to {max(1, hw.count // per)} or raise hardware.count"))
    return problems


def router_args(spec: RouterSpec, worker_urls: list[str], startup_timeout: int) -> list[str]:
    """The router's command line: every replica, the policy, and health checks that drop a dead replica fast."""
    return [
        "--host", "0.0.0.0", "--port", str(spec.container_port),
        "--worker-urls", *worker_urls,
        "--policy", spec.policy,
        "--worker-startup-timeout-secs", str(startup_timeout),
        "--worker-startup-check-interval", "5",
        "--health-check-endpoint", "/health",
        "--health-check-interval-secs", str(spec.health_check_interval_secs),
        "--health-failure-threshold", str(spec.health_failure_threshold),
        "--health-success-threshold", str(spec.health_success_threshold),
        "--health-check-timeout-secs", str(spec.health_check_timeout_secs),
    ]


# ---------------------------------------------------------------------------------------------- the image


@dataclass(frozen=True)
class RouterImageContext:
    """The one object the router's Dockerfile template receives."""

    d: Deployment
    spec: RouterSpec
    venv: str
    uid: int
    user: str


def router_requirements_text(spec: RouterSpec) -> str:
    return f"# Pinned by vllm-kit (kit/data/router.yaml).\n{spec.requirement}\n"


def router_files(d: Deployment, uid: int, user: str) -> dict[str, str]:
    """The router image's build context, as files under router/ (pure)."""
    spec = router_spec(d.preset)
    ctx = RouterImageContext(d=d, spec=spec, venv=ROUTER_VENV, uid=uid, user=user)
    return {
        f"{ROUTER_DIR}/Dockerfile": render_template("router.Dockerfile.j2", c=ctx),
        f"{ROUTER_DIR}/requirements.txt": router_requirements_text(spec),
        f"{ROUTER_DIR}/.dockerignore": ROUTER_DOCKERIGNORE,
    }


def router_image_ref(d: Deployment, files: dict[str, str]) -> str:
    """A tag that changes exactly when the router image's inputs change."""
    spec = router_spec(d.preset)
    text = "\0".join(files[f"{ROUTER_DIR}/{name}"] for name in ("Dockerfile", "requirements.txt"))
    return f"{ROUTER_REPOSITORY}:{spec.version}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


# ---------------------------------------------------------------------------------------------- compose


def replicated_services(ctx: RenderContext, server: dict[str, Any],
                        s: Callable[[object], str]) -> tuple[dict[str, Any], list[str], dict[tuple[str, ...], list[str]]]:
    """The replicas (copies of ``server``, each with its own compile cache and GPUs, published nowhere) and the
    router in front of them. Returns (services, extra volume names, comments by path)."""
    d = ctx.d
    rt = d.preset.runtime
    spec = router_spec(d.preset)
    gpu_split = replica_gpu_ids(d.preset)
    services: dict[str, Any] = {}
    volumes: list[str] = []
    names = []
    for index in range(1, rt.replicas + 1):
        name = replica_service(ctx.server_service, index)
        names.append(name)
        replica = {k: v for k, v in server.items() if k != "ports"}
        # Its own compile cache: concurrent replicas writing one torch.compile cache race on its files.
        cache = f"{rt.compile_cache_volume}-{index}"
        volumes.append(cache)
        replica["volumes"] = [s(f"{cache}:{ctx.vllm_cache}") if v == s(f"{rt.compile_cache_volume}:{ctx.vllm_cache}")
                              else v for v in server["volumes"]]
        if "deploy" in server:
            device = dict(server["deploy"]["resources"]["reservations"]["devices"][0])
            device.pop("count", None)
            prefix = "nvidia.com/gpu=" if device["driver"] == "cdi" else ""
            ids = [s(i if i.startswith(prefix) else prefix + i) for i in gpu_split[index - 1]]
            device = {"driver": device["driver"], "device_ids": ids, "capabilities": ["gpu"]}
            replica["deploy"] = {"resources": {"reservations": {"devices": [device]}}}
        services[name] = replica
    urls = [f"http://{name}:{ctx.port}" for name in names]
    router: dict[str, Any] = {
        "image": s(router_image_ref(d, router_files(d, ctx.uid, ctx.user))),
        "build": {"context": ROUTER_DIR, "dockerfile": "Dockerfile"},
        "pull_policy": BUILT_PULL_POLICY,  # built here, never pulled: a registry's image of this name is not this one
        "platform": s(d.image.platform),
        # Started once every replica is healthy: the router refuses to serve before all its workers answer.
        "depends_on": {name: {"condition": "service_healthy"} for name in names},
        "command": [s(a) for a in router_args(spec, urls, int(d.runtime.healthcheck_start_period))],
    }
    # Hardened like the servers; the router needs no capability and writes nothing but /tmp.
    router["cap_drop"] = ["ALL"]
    router["security_opt"] = ["no-new-privileges:true"]
    router["read_only"] = True
    router["tmpfs"] = [s(f"/tmp:size={spec.tmpfs_size}")]
    router["pids_limit"] = spec.pids_limit
    router["init"] = True
    router["restart"] = rt.restart
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{spec.container_port}/health', timeout=5)"
    router["healthcheck"] = {"test": ["CMD", f"{ROUTER_VENV}/bin/python", "-c", probe], "interval": "10s",
                             "timeout": "6s", "retries": 3, "start_period": "30s"}
    services[ROUTER_SERVICE] = router
    comments: dict[tuple[str, ...], list[str]] = {
        ("services", ROUTER_SERVICE): [
            f"vLLM's router ({spec.requirement}, kit/data/router.yaml) in front of {rt.replicas} replicas, policy "
            f"{spec.policy}; published nowhere: its /add_worker, /remove_worker and /flush_cache take no key, so only",
            "the front door (door) reaches it, and passes the inference routes alone.",
            f"It checks each replica's /health every {spec.health_check_interval_secs} s and stops sending to one "
            f"after {spec.health_failure_threshold} failures.",
        ],
        ("services", names[0]): [
            f"Replica 1 of {rt.replicas}: published nowhere (the router, behind the door, is the endpoint); its own compile cache"
            + ("; GPUs " + ", ".join(gpu_split[0]) if gpu_split[0] else "; CPU replicas share the host's cores") + "."],
    }
    return services, volumes, comments
