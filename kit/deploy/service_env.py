"""Which variables of the stack's .env (compose) or Secret (Kubernetes) each container gets: kit/data/service_env.yaml.

Public entry points: ``env_names(role, d, target)`` (the names, in the table's order) and ``compose_environment``
(those names as compose `environment` entries with no value, which compose resolves from .env at `up`).
"""

from __future__ import annotations

import re
from typing import Any

from kit.core.datafiles import load_yaml
from kit.core.errors import Problem

ROLES = ("server", "ray_head", "ray_worker", "fetch", "model_make")
API_KEY_ENV = "VLLM_API_KEY"


def table() -> dict[str, Any]:
    return load_yaml("service_env.yaml")


def env_names(role: str, d: Any, target: str = "compose") -> list[str]:
    """The .env names the container of ``role`` reads. GPU-only names only on GPU stacks; the watchdog's only in
    compose (Kubernetes restarts on its liveness probe, and runs no watchdog)."""
    if role not in ROLES:
        raise ValueError(f"unknown container role {role!r}")
    data = table()
    names: list[str] = []
    for group in data["services"][role]:
        if group == "gpu_rank" and d.preset.hardware.gpu is None:
            continue
        if group == "watchdog" and target != "compose":
            continue
        names += data["groups"][group]
    return list(dict.fromkeys(names))


def api_key_required(d: Any) -> bool:
    return bool(d.preset.runtime.require_api_key)


def compose_environment(role: str, d: Any) -> dict[str, str | None]:
    """``{NAME: None}`` for each name (resolved by compose from .env, left out when unset); the API key, when the
    preset requires one, as a required interpolation, so `docker compose up` refuses to start without it."""
    out: dict[str, str | None] = {}
    for name in env_names(role, d):
        if name == API_KEY_ENV and api_key_required(d):
            # Fixed text, the one place compose interpolation is meant: the key itself lives in .env only.
            out[name] = f"${{{name}:?set {name} in .env: runtime.require_api_key is true (see .env.example)}}"
        else:
            out[name] = None
    return out


_INTERPOLATED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def names_compose_reads(files: dict[str, str]) -> set[str]:
    """Every .env name the rendered compose files take: listed with no value, or interpolated into a value."""
    import yaml

    names: set[str] = set()
    for rel, text in files.items():
        if not (rel.startswith("compose") and rel.endswith(".yaml")):
            continue
        for service in (yaml.safe_load(text) or {}).get("services", {}).values():
            env = service.get("environment") or {}
            names |= {k for k, v in env.items() if v is None}
        names |= set(_INTERPOLATED.findall(text))
    return names


def unread_env_names(files: dict[str, str], env_text: str) -> list[str]:
    """The names set in a stack's .env that no container takes (a shared env_file passed them all before). Only the
    names are read, never a value."""
    if not any(rel.startswith("compose") for rel in files):
        return []  # Kubernetes: the Secret is made from .env, and each container names its keys
    taken = names_compose_reads(files)
    unread = []
    for line in env_text.splitlines():
        name, sep, _ = line.strip().removeprefix("export ").partition("=")
        name = name.strip()
        if sep and name and not name.startswith("#") and name not in taken:
            unread.append(name)
    return list(dict.fromkeys(unread))


def unread_env_warnings(files: dict[str, str], env_path: Any) -> list[Problem]:
    """Warnings for ``unread_env_names`` of the folder's .env (none when there is no readable .env)."""
    try:
        text = env_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return [Problem(f"{env_path}: {name}", "reaches no container: each service gets only the .env names "
                    "compose.yaml lists (kit/data/service_env.yaml)",
                    "a setting for the server goes in the preset's runtime.env")
            for name in unread_env_names(files, text)]
