"""The shape of a command-line override, ``SECTION.FIELD=VALUE``, read in one place.

The CLI reads it before anything else loads (a malformed one is a usage error, exit 2); ``load_preset`` reads it
for its other callers (a PresetError). A well-formed override with a bad value is a problem in the input (exit 1),
named as the override, not as the preset file: ``override engine.max_model_len: expects ..., got 'abc'``.
Light: no pydantic.
"""

from __future__ import annotations

EXAMPLE = "engine.max_model_len=16384"
WHERE_PREFIX = "override "


class MalformedOverride(ValueError):
    """Not ``SECTION.FIELD=VALUE``."""


def split_override(text: str, *, dotted: bool = False) -> tuple[list[str], str]:
    """(path, raw value) of ``text``; MalformedOverride when it has no ``=`` or an empty part in its key.
    ``dotted``: the key must name a field inside a section (the CLI's rule: ``preset=`` and ``model=`` are not
    overrides)."""
    key, sep, raw = text.partition("=")
    path = key.split(".")
    if not sep or any(not part.strip() for part in path):
        raise MalformedOverride(f"{text!r}: expected SECTION.FIELD=VALUE, e.g. {EXAMPLE}")
    if dotted and len(path) < 2:
        raise MalformedOverride(f"{text!r}: overrides name a field by its dotted path, e.g. {EXAMPLE}")
    return path, raw


def override_where(text: str) -> str:
    """How an error names the override ``text``: ``override KEY``. Never with its value, which may be a secret
    (``runtime.env.X=...``, ``engine.api_key=...``); the message quotes a value where it is safe to."""
    return f"{WHERE_PREFIX}{text.partition('=')[0]}"


def overridden_field(where: str) -> str | None:
    """The dotted field of an ``override KEY`` where, else None."""
    if not where.startswith(WHERE_PREFIX):
        return None
    return where[len(WHERE_PREFIX):]
