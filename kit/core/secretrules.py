"""What a secret looks like (kit/data/secrets.yaml), and the one function that hides one in printed text.

Public entry points: ``secret_flag_env(name, kind)`` (an engine flag that carries a secret -> the environment
variable that takes it instead), ``secret_values(data)`` (every field of raw preset data whose text looks like a
credential), ``redact(text)`` (text with URL passwords and token-shaped strings masked, for logs and errors).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from kit.core.dataread import load_yaml

MASK = "****"


@functools.cache
def _rules() -> dict[str, Any]:
    data = load_yaml("secrets.yaml")
    return {
        "flags": dict(data["secret_flags"]),
        "flag_name": re.compile(data["secret_flag_name"]),
        "tokens": {name: re.compile(pattern) for name, pattern in data["token_patterns"].items()},
    }


def secret_flag_env(name: str, value_type: str | None) -> str | None:
    """The environment variable for a flag that carries a secret (None: not a secret flag).

    A flag named in the data maps to its variable; any other text flag whose name says token/secret/password
    is a secret too, with no variable the server reads (then: a file or a Secret mounted into the container).
    """
    rules = _rules()
    if name in rules["flags"]:
        return rules["flags"][name]
    if value_type in (None, "str") and rules["flag_name"].search(name):
        return ""
    return None


def token_kind(text: str) -> str | None:
    """Which credential format ``text`` contains (huggingface, openai, github, url_password), or None."""
    for kind, pattern in _rules()["tokens"].items():
        if pattern.search(text):
            return kind
    return None


def secret_values(data: Any, path: str = "") -> list[tuple[str, str]]:
    """(dotted field, credential kind) for every key or string under ``data`` that holds a credential."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [(data, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                child = f"{where}.{key}" if where else str(key)
                kind = token_kind(key) if isinstance(key, str) else None
                if kind:
                    found.append((child, kind))
                stack.append((item, child))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, str):
            kind = token_kind(value)
            if kind:
                found.append((where, kind))
    return sorted(found)


def _mask_userinfo(match: re.Match[str]) -> str:
    user, colon, _password = match.group(1).partition(":")
    # user:password -> user:****; a lone userinfo is usually a token itself (https://TOKEN@host): all of it.
    return f"://{user}:{MASK}@" if colon else f"://{MASK}@"


# From "://" after a scheme character (the scheme itself stays as it is): linear, where a match tried from each
# letter of a long run of letters was quadratic (kit/data/secrets.yaml url_password says why).
_USERINFO = re.compile(r"(?<=[A-Za-z0-9+.-])://([^/?#@\s]+)@")


def redact(text: str) -> str:
    """``text`` with credentials in URLs and token-shaped strings replaced by ****: for every log and error."""
    text = _USERINFO.sub(_mask_userinfo, text)
    for kind, pattern in _rules()["tokens"].items():
        if kind != "url_password":
            text = pattern.sub(MASK, text)
    return text
