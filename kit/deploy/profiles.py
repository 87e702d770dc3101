"""Profiles: extra services that `kit render preset=NAME --with PROFILE` adds to a one-node compose stack.

The names and their help come from kit/data/profiles.yaml; each has one builder here. A builder is pure: it gets
the stack's RenderContext and the compose service names of its vLLM servers, and returns ProfileParts, which the
render merges into compose.yaml, .env.example and the files it writes (in the same all-or-nothing write).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.core.datafiles import load_yaml
from kit.core.errors import PresetError
from kit.deploy.monitoring import monitoring_profile
from kit.deploy.profile_parts import Builder, ProfileParts
from kit.deploy.webui import webui_profile

if TYPE_CHECKING:
    from kit.deploy.render import RenderContext


def profile_help() -> dict[str, str]:
    return {name: entry["help"] for name, entry in load_yaml("profiles.yaml").items()}


def builders() -> dict[str, Builder]:
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
