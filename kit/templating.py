"""The one Jinja environment, and the small filters that quote values for their target.

StrictUndefined: a misspelled variable fails instead of rendering empty. Filters refuse newlines and
control characters without echoing the value, since it may be a secret.
"""

from __future__ import annotations

import functools
import json
import shlex
from pathlib import Path

import jinja2

from kit.datafiles import COMPOSE_DIR, IMAGES_DIR, TEMPLATES_DIR


class UnsafeValue(ValueError):
    """A value cannot be written safely into the target format."""


def _refuse_control(value: object, target: str) -> str:
    text = str(value)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UnsafeValue(f"a value for {target} contains a newline or control character (value not shown)")
    return text


def yaml_str(value: object) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML). ``$`` is doubled: compose interpolates it."""
    text = _refuse_control(value, "YAML")
    return json.dumps(text.replace("$", "$$"), ensure_ascii=False)


def dockerfile_str(value: object) -> str:
    """A double-quoted Dockerfile word for LABEL/ENV/ARG; ``$`` and quotes are escaped."""
    text = _refuse_control(value, "a Dockerfile")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def exec_form(values: list[object]) -> str:
    """A JSON array for exec-form ENTRYPOINT/CMD."""
    return json.dumps([_refuse_control(v, "an exec-form list") for v in values], ensure_ascii=False)


def shell_quote(value: object) -> str:
    return shlex.quote(_refuse_control(value, "a shell command"))


def comment(value: object) -> str:
    """Text safe inside a one-line # comment."""
    return _refuse_control(value, "a comment")


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(IMAGES_DIR), str(COMPOSE_DIR), str(TEMPLATES_DIR)]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(
        yaml_str=yaml_str,
        dockerfile_str=dockerfile_str,
        exec_form=exec_form,
        shell_quote=shell_quote,
        comment=comment,
    )
    return env


def render_template(name: str, **context: object) -> str:
    return environment().get_template(name).render(**context)


def template_path(name: str) -> Path:
    for folder in (IMAGES_DIR, COMPOSE_DIR):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(name)
