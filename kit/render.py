"""Deployment -> files. ``render()`` is pure: it returns ``{relative path: text}`` and touches nothing."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from kit import deployment as dep
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
    cap_add: list[str] = field(default_factory=list)
    cap_add_reason: str = ""
    user: str = dep.APP_USER
    uid: int = dep.APP_UID
    home: str = dep.APP_HOME
    hf_home: str = dep.HF_HOME
    vllm_cache: str = dep.VLLM_CACHE
    venv: str = dep.VENV
    port: int = dep.CONTAINER_PORT

    @property
    def published_port(self) -> str:
        rt = self.d.preset.runtime
        return f"{rt.bind_address}:{rt.port}:{self.port}"

    @property
    def healthcheck_test(self) -> list[str]:
        probe = (
            "import urllib.request; "
            f"urllib.request.urlopen('http://127.0.0.1:{self.port}/health', timeout=5)"
        )
        return ["CMD", self.d.entrypoint[0], "-c", probe]


def requirements_text(d: Deployment) -> str:
    lines = [f"# Pinned by vllm-kit for preset {d.preset_name} (vLLM {d.vllm_version})."]
    lines += d.requirements
    return "\n".join(lines) + "\n"


def content_tag(dockerfile: str, requirements: str) -> str:
    """A tag that changes exactly when the image's inputs change (not with flags or the model)."""
    digest = hashlib.sha256((dockerfile + "\0" + requirements).encode()).hexdigest()
    return digest[:12]


def image_ref_for(d: Deployment, dockerfile: str, requirements: str) -> str:
    return f"{d.image_repository}:{d.vllm_version}-{content_tag(dockerfile, requirements)}"


def render(d: Deployment, plan_lines: list[str] | None = None) -> dict[str, str]:
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
        cap_add=cap_add,
        cap_add_reason=cap_reason,
    )
    return {
        "Dockerfile": dockerfile,
        "requirements.txt": requirements,
        ".dockerignore": DOCKERIGNORE,
        "compose.yaml": render_template("compose.yaml.j2", c=ctx),
        ".env.example": render_template("env.example.j2", c=ctx),
    }
