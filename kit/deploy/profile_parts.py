"""What a profile's builder returns (kit/deploy/profiles.py): the services, volumes, files, comments and .env.example
lines one `--with PROFILE` adds to the stack. Below the builders (monitoring.py, webui.py) and the table that names
them (profiles.py), so each imports it without a circle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProfileParts:
    services: dict[str, dict[str, Any]]
    volumes: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text, beside compose.yaml
    comments: dict[tuple[str, ...], list[str]] = field(default_factory=dict)  # compose key path -> comment lines
    env_example: list[str] = field(default_factory=list)  # lines appended to .env.example


Builder = Callable[[Any, list[str]], ProfileParts]
