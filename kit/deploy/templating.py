"""The one Jinja environment, and the small filters that quote values for their target.

Templates remain only for Dockerfiles and text files (YAML files are data, serialised by kit/core/yamlwrite.py). Every value
a template writes passes one filter for its target; each filter applies the rules of kit/core/safevalue.py (the
same ones preset validation applies) and refuses without echoing the value, since it may be a secret.
StrictUndefined: a misspelled variable fails instead of rendering empty.
"""

from __future__ import annotations

import functools
import json
import re
import shlex

import jinja2

from kit.core.datafiles import COMPOSE_DIR, IMAGES_DIR, TEMPLATES_DIR
from kit.core.safevalue import UnsafeValue, check_image_ref, check_text

__all__ = ["UnsafeValue", "comment", "dockerfile_str", "environment", "exec_form", "image_ref", "render_template",
           "shell_quote", "word"]


_refuse_control = check_text


def dockerfile_str(value: object) -> str:
    """A double-quoted Dockerfile word for LABEL/ENV/ARG; ``$`` and quotes are escaped."""
    text = _refuse_control(value, "a value for a Dockerfile")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def exec_form(values: list[object]) -> str:
    """A JSON array for exec-form ENTRYPOINT/CMD."""
    return json.dumps([_refuse_control(v, "a value for an exec-form list") for v in values], ensure_ascii=False)


def shell_quote(value: object) -> str:
    return shlex.quote(_refuse_control(value, "a value for a shell command"))


def comment(value: object) -> str:
    """Text safe inside a one-line # comment: no line break of any kind (U+2028, U+2029, U+0085 included)."""
    return _refuse_control(value, "a value for a comment")


def image_ref(value: object) -> str:
    """An image reference (FROM / ARG BASE_IMAGE), checked against Docker's grammar, as a quoted Dockerfile word."""
    return dockerfile_str(check_image_ref(value, "the base image (--base-image or image.base)"))


def word(value: object) -> str:
    """A bare Dockerfile/shell word the kit itself chose (paths, user names, package names from kit/data):
    refused unless it is plain, so a data-file mistake cannot become syntax."""
    text = _refuse_control(value, "a value for a Dockerfile")
    if not re.fullmatch(r"[A-Za-z0-9_./:+=@%-]+", text) or text.startswith("-"):
        raise UnsafeValue("a Dockerfile word holds a character that needs quoting (value not shown)")
    return text


def glob_word(value: object) -> str:
    """A shell glob the kit itself chose (files a layer deletes): a plain word that may also hold * and ?."""
    text = _refuse_control(value, "a value for a Dockerfile")
    if not re.fullmatch(r"[A-Za-z0-9_./:+=@%*?-]+", text) or not text.startswith("/"):
        raise UnsafeValue("a Dockerfile glob is not an absolute plain pattern (value not shown)")
    return text


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept between runs: parsing and compiling them is a tenth of a render (issue 14).

    jinja2's default directory is private to the user (created 0700 in the temp dir, its owner and mode checked
    before use) and entries are keyed by the template's source checksum, so an edited template is compiled again.
    Where no such directory can be made, templates are compiled every time, as before.
    """
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(IMAGES_DIR), str(COMPOSE_DIR), str(TEMPLATES_DIR)]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 - Dockerfiles and YAML, not HTML: values pass per-target quoting filters
        bytecode_cache=_bytecode_cache(),
    )
    env.filters.update(
        dockerfile_str=dockerfile_str,
        exec_form=exec_form,
        shell_quote=shell_quote,
        comment=comment,
        image_ref=image_ref,
        word=word,
        glob_word=glob_word,
    )
    return env


def render_template(name: str, **context: object) -> str:
    return environment().get_template(name).render(**context)
