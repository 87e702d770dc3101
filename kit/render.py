"""Deployment -> files. ``render()`` is pure: it returns ``{relative path: text}`` and touches nothing."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

from kit import deployment as dep
from kit.composefile import cluster_compose_file, compose_file
from kit.deployment import Deployment
from kit.templating import render_template

DOCKERIGNORE = """\
# The build context is only what the image needs: never .env, models or caches.
*
!Dockerfile
!requirements.txt
!wheels/
"""

@dataclass(frozen=True)
class RenderContext:
    """The one object the templates receive."""

    d: Deployment
    image_ref: str
    plan_lines: list[str] = field(default_factory=list)
    plan: Any = None  # kit.plan.Plan when the planner ran (sizes the Kubernetes claims and requests)
    cap_add: list[str] = field(default_factory=list)
    cap_add_reason: str = ""
    user: str = dep.APP_USER
    uid: int = dep.APP_UID
    home: str = dep.APP_HOME
    hf_home: str = dep.HF_HOME
    vllm_cache: str = dep.VLLM_CACHE
    venv: str = dep.VENV
    port: int = dep.CONTAINER_PORT
    role: str = ""  # several nodes: head | worker
    head_service: str = dep.HEAD_SERVICE
    worker_service: str = dep.WORKER_SERVICE
    node_env: dict[str, str] = field(default_factory=lambda: dict(dep.NODE_ENV))
    ray_worker_ports: tuple[int, int] = dep.RAY_WORKER_PORTS

    @property
    def service(self) -> str:
        return self.worker_service if self.role == "worker" else self.head_service

    @property
    def launcher_mount(self) -> str:
        return f"./{dep.LAUNCHER_FILE}:{dep.LAUNCHER_DIR}/{dep.LAUNCHER_FILE}"

    @property
    def published_port(self) -> str:
        rt = self.d.preset.runtime
        return f"{rt.bind_address}:{rt.port}:{self.port}"

    @property
    def health_url(self) -> str:
        """Where the server answers from inside its own container (its host's, with host networking)."""
        cl = self.d.cluster
        if cl is not None and cl.host_network:
            address = self.d.preset.runtime.bind_address
            host = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(address, f"[{address}]" if ":" in address else address)
            return f"http://{host}:{cl.server_port}/health"
        return f"http://127.0.0.1:{self.port}/health"

    @property
    def healthcheck_test(self) -> list[str]:
        probe = f"import urllib.request; urllib.request.urlopen('{self.health_url}', timeout=5)"
        return ["CMD", self.d.python, "-c", probe]


def requirements_text(d: Deployment) -> str:
    lines = [f"# Pinned by vllm-kit for preset {d.preset_name} (vLLM {d.vllm_version})."]
    lines += d.requirements
    return "\n".join(lines) + "\n"


def content_tag(dockerfile: str, requirements: str) -> str:
    """A tag that changes exactly when the image's inputs change (not with flags or the model)."""
    digest = hashlib.sha256((dockerfile + "\0" + requirements).encode()).hexdigest()
    return digest[:12]


def image_ref_for(d: Deployment, dockerfile: str, requirements: str) -> str:
    if d.preset.image.pin_digest:  # production: the exact image `kit push` recorded
        return f"{d.image_repository}@{d.preset.image.pin_digest}"
    return f"{d.image_repository}:{d.vllm_version}-{content_tag(dockerfile, requirements)}"


TARGETS = ("compose", "k8s")


def launcher_text() -> str:
    """The Ray node launcher, shipped beside the stack as it is in the kit (it runs in the image)."""
    from importlib import resources

    return resources.files("kit.launch").joinpath(dep.LAUNCHER_FILE).read_text(encoding="utf-8")


def render(d: Deployment, plan_lines: list[str] | None = None, target: str = "compose",
           plan: Any = None) -> dict[str, str]:
    """compose: one compose.yaml, or compose.head.yaml + compose.worker.yaml for several nodes.
    k8s: Kubernetes manifests in k8s/ (see kit/k8s.py). The image's files are the same for both."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}")
    template = "official.Dockerfile.j2" if d.strategy == "official" else "venv.Dockerfile.j2"
    cap_add, cap_reason = [], ""
    if d.strategy == "cpu":
        cap_add = ["SYS_NICE"]
        cap_reason = "the CPU backend binds threads and memory to NUMA nodes (mbind/set_mempolicy need SYS_NICE)"

    requirements = requirements_text(d)
    draft = RenderContext(d=d, image_ref="")
    dockerfile = render_template(template, c=draft)
    ctx = RenderContext(
        d=d,
        image_ref=image_ref_for(d, dockerfile, requirements),
        plan_lines=list(plan_lines or []),
        plan=plan,
        cap_add=cap_add,
        cap_add_reason=cap_reason,
    )
    files = {
        "Dockerfile": dockerfile,
        "requirements.txt": requirements,
        ".dockerignore": DOCKERIGNORE,
        ".env.example": render_template("env.example.j2", c=ctx),
    }
    if target == "k8s":
        from kit.k8s import render_manifests

        files.update(render_manifests(ctx, launcher_text()))
    elif d.cluster is None:
        files["compose.yaml"] = compose_file(ctx)
    else:
        for role in ("head", "worker"):
            files[f"compose.{role}.yaml"] = cluster_compose_file(replace(ctx, role=role))
        files[dep.LAUNCHER_FILE] = launcher_text()
        files["CLUSTER.md"] = render_template("cluster.md.j2", c=ctx)
    return files
