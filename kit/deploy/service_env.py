"""Which variables of the stack's .env (compose) or Secret (Kubernetes) each container gets: kit/data/service_env.yaml.

Public entry points: ``env_names(role, d, target)`` (the names, in the table's order) and ``compose_environment``
(those names as compose `environment` entries with no value, which compose resolves from .env at `up`);
``fill_stack_env`` writes into the folder's .env what a rendered stack requires and the kit can make (the table's
``generated``: random secrets, plain defaults) and the site's image choices the environment gives (the table's
``images_from_environment``), and says what is still missing.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.core.datafiles import load_yaml
from kit.core.envfile import EnvFileError, fill_env_values, is_set, read_env_file
from kit.core.errors import Problem
from kit.core.safevalue import UnsafeValue, check_image_ref

if TYPE_CHECKING:
    from kit.config.preset import Preset
    from kit.deploy.deployment import Deployment

ROLES = ("server", "ray_head", "ray_worker", "fetch", "model_make")
API_KEY_ENV = "VLLM_API_KEY"


def table() -> dict[str, Any]:
    return load_yaml("service_env.yaml")


def env_names(role: str, d: Deployment, target: str = "compose") -> list[str]:
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


def api_key_required(d: Deployment) -> bool:
    return bool(d.preset.runtime.require_api_key)


def compose_environment(role: str, d: Deployment) -> dict[str, str | None]:
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
# compose's required interpolation: `${NAME:?why}` (unset or empty stops compose) or `${NAME?why}` (unset stops it)
_REQUIRED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?\?")


def required_variables(text: str) -> list[str]:
    """The names a compose file's text requires (``${NAME:?...}``, ``${NAME?...}``), in order, each once."""
    return list(dict.fromkeys(_REQUIRED.findall(text)))


def required_names(files: dict[str, str], preset: Preset) -> list[str]:
    """The .env names without which the rendered stack does not start: compose's required interpolations
    (``${NAME:?...}``) in its compose files, and the API key when the preset requires one (Kubernetes: a
    non-optional secretKeyRef into the Secret made from .env)."""
    names: list[str] = []
    for rel in sorted(files):
        if rel.startswith("compose") and rel.endswith(".yaml"):
            names += required_variables(files[rel])
    if preset.runtime.require_api_key:
        names.append(API_KEY_ENV)
    return list(dict.fromkeys(names))


def generated_value(name: str) -> str | None:
    """A value the kit makes for ``name`` (service_env.yaml ``generated``), None for a name only the user knows."""
    generated = table()["generated"]
    if name in generated["secrets"]:
        return secrets.token_urlsafe(32)
    default = generated["defaults"].get(name)
    return None if default is None else str(default)


@dataclass
class EnvFill:
    """What ``fill_stack_env`` did: the names it wrote (secrets and defaults), the required names .env still lacks
    (the user's to set: the kit cannot make them), and why .env could not be read or written, if so."""

    path: Path
    written: list[str] = field(default_factory=list)
    defaults: dict[str, str] = field(default_factory=dict)  # of ``written``, those with a plain value (printable)
    missing: list[str] = field(default_factory=list)
    not_read: str | None = None
    carried: dict[str, str] = field(default_factory=dict)  # of ``written``, images taken from the environment
    # Site images the environment gives that .env sets otherwise (kept: compose takes the shell's where it is set)
    differs: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # site images the environment gives that are no image reference

    def lines(self) -> list[str]:
        """What to tell the user: the names written (a secret's value never), and what is left to set."""
        out = []
        made = [n for n in self.written if n not in self.defaults and n not in self.carried]
        if made:
            out.append(f"wrote {', '.join(made)} into {self.path} (random; it stays there, the kit never prints it)")
        if self.defaults:
            out.append(f"wrote {', '.join(f'{k}={v}' for k, v in self.defaults.items())} into {self.path} (a default; "
                       "change it there)")
        for name, value in self.carried.items():
            out.append(f"wrote {name}={value} into {self.path} (from this shell's environment, so `docker compose` "
                       "in that folder uses it without it; change it there)")
        for name in self.differs:
            out.append(f"note: {self.path} sets {name} to another image than this shell's; kept (`docker compose` "
                       "takes the shell's where the shell sets it)")
        for name in self.refused:
            out.append(f"warning: {name} in this shell's environment is not an image reference; not written into "
                       f"{self.path}")
        return out


HEADER = ("Written by vllm-kit: what the stack requires, or the shell named as a site image, and .env did not set.",
          "Change a value here; the kit never replaces one that is set. Keep this file out of version control.")


def site_images(files: dict[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The ``images_from_environment`` names the rendered compose files read that ``environ`` sets (not empty)."""
    read = names_compose_reads(files)
    return {name: environ[name] for name in table().get("images_from_environment") or {}
            if name in read and environ.get(name, "").strip()}


def fill_stack_env(files: dict[str, str], preset: Preset, env_path: Path,
                   environ: Mapping[str, str] | None = None) -> EnvFill:
    """Give ``env_path`` (the folder's .env) every required name it does not set that the kit can make, and each
    site image ``environ`` (the command's environment) names that .env does not set; a .env that is a link, a FIFO
    or not a plain file is neither read nor written (``not_read`` says why)."""
    result = EnvFill(env_path)
    required = required_names(files, preset)
    try:
        current = read_env_file(env_path)
        wanted = {}
        for name in required:
            if is_set(current.get(name)):
                continue
            value = generated_value(name)
            if value is None:
                result.missing.append(name)
            else:
                wanted[name] = value
        for name, value in site_images(files, environ or {}).items():
            try:
                value = check_image_ref(value.strip(), name)
            except UnsafeValue:
                result.refused.append(name)
                continue
            if not is_set(current.get(name)):
                wanted[name] = result.carried[name] = value
            elif (current[name] or "").strip() != value:
                result.differs.append(name)
        result.written = fill_env_values(env_path, wanted, HEADER) if wanted else []
    except EnvFileError as exc:
        result.not_read = exc.message.removeprefix(f"{env_path}: ")
        result.missing, result.carried, result.differs = required, {}, []
        return result
    defaults = table()["generated"]["defaults"]
    result.defaults = {name: wanted[name] for name in result.written if name in defaults}
    return result


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


def unread_env_names(files: dict[str, str], env_names: list[str]) -> list[str]:
    """The names set in a stack's .env that no container takes (a shared env_file passed them all before)."""
    if not any(rel.startswith("compose") for rel in files):
        return []  # Kubernetes: the Secret is made from .env, and each container names its keys
    taken = names_compose_reads(files)
    # What the kit writes for an add-on stays when the add-on goes (--without): its data volume keeps the account
    # that password made, and --with takes it back. Not the user's stray setting, so not warned about.
    made = {*table()["generated"]["secrets"], *table()["generated"]["defaults"]}
    return [name for name in dict.fromkeys(env_names) if name not in taken and name not in made]


def unread_env_warnings(files: dict[str, str], env_path: Path) -> list[Problem]:
    """Warnings for ``unread_env_names`` of the folder's .env, read as compose reads it (python-dotenv; only the
    names are shown, never a value), or one warning when it is not a plain file the kit reads."""
    try:  # a bare name (no `=`) sets nothing
        names = [name for name, value in read_env_file(env_path).items() if value is not None]
    except EnvFileError as exc:
        return [Problem(str(env_path), f"not read: {exc.message.removeprefix(f'{env_path}: ')}", exc.hint)]
    return [Problem(f"{env_path}: {name}", "reaches no container: each service gets only the .env names "
                    "compose.yaml lists (kit/data/service_env.yaml)",
                    "a setting for the server goes in the preset's runtime.env")
            for name in unread_env_names(files, names)]
