"""Which variables of the stack's .env (compose) or Secret (Kubernetes) each container gets: kit/data/service_env.yaml.

Public entry points: ``env_names(role, d, target)`` (the names, in the table's order) and ``compose_environment``
(those names as compose `environment` entries with no value, which compose resolves from .env at `up`).
"""

from __future__ import annotations

from typing import Any

from kit.core.datafiles import load_yaml

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
