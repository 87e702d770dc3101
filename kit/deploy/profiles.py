"""Profiles: extra services that `kit render preset=NAME --with PROFILE` adds to a one-node compose stack.

The names and their help come from kit/data/profiles.yaml; each has one builder here. A builder is pure: it gets
the stack's RenderContext and the compose service names of its vLLM servers, and returns ProfileParts, which the
render merges into compose.yaml, .env.example and the files it writes (in the same all-or-nothing write).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kit.core.datafiles import load_yaml
from kit.core.errors import PresetError

if TYPE_CHECKING:
    from kit.deploy.render import RenderContext


@dataclass(frozen=True)
class ProfileParts:
    services: dict[str, dict[str, Any]]
    volumes: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text, beside compose.yaml
    comments: dict[tuple[str, ...], list[str]] = field(default_factory=dict)  # compose key path -> comment lines
    env_example: list[str] = field(default_factory=list)  # lines appended to .env.example


Builder = Callable[[Any, list[str]], ProfileParts]


def profile_help() -> dict[str, str]:
    return {name: entry["help"] for name, entry in load_yaml("profiles.yaml").items()}


def builders() -> dict[str, Builder]:
    from kit.deploy.monitoring import monitoring_profile
    from kit.deploy.webui import webui_profile

    return {"monitoring": monitoring_profile, "webui": webui_profile}


def check_profiles(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The profiles asked for, each once, in the order given; an unknown name is one error line."""
    known = profile_help()
    for name in names:
        if name not in known:
            raise PresetError(f"--with {name}: no such profile (choose from {', '.join(sorted(known))})")
    return tuple(dict.fromkeys(names))


def build_profiles(ctx: RenderContext, names: tuple[str, ...], servers: list[str]) -> tuple[ProfileParts, ...]:
    table = builders()
    return tuple(table[name](ctx, servers) for name in names)
