"""A Hugging Face repository id, as huggingface_hub 2.4 validates one (utils/_validators.py `validate_repo_id`): an
optional namespace and a name, each [A-Za-z0-9_.-]{1,96} starting and ending with a word character, ASCII only, at
most one '/', no '--' or '..', not ending in '.git'. The one rule the preset's model.id and the planner's hub
look-ups both hold an id to, so nothing the kit accepts is refused by huggingface_hub afterwards."""

from __future__ import annotations

import re

_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"(?:{_PART}/)?{_PART}", re.ASCII)


def is_repo_id(text: str) -> bool:
    """An id huggingface_hub accepts, with or without a namespace ('gpt2', 'org/name')."""
    return bool(_REPO_ID.fullmatch(text)) and "--" not in text and ".." not in text and not text.endswith(".git")


def is_namespaced_repo_id(text: str) -> bool:
    """An org/name id (the form the planner looks up on the hub and in its cache)."""
    return "/" in text and is_repo_id(text)
