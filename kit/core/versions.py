"""The one way the kit reads and compares versions: packaging.version (PEP 440).

vLLM releases, NVIDIA drivers, Docker and Compose versions all go through ``version``; so release candidates,
post and dev releases order as pip orders them (0.26.0.dev1 < 0.26.0rc1 < 0.26.0 < 0.26.0.post1).
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

# A release as a preset pins it and the kit ships or reads its data: X.Y.Z, or X.Y.Z.postN (never "latest").
VERSION_RE = r"^\d+\.\d+\.\d+(\.post\d+)?$"
# Hostile input (a preset's vllm_version, a tool's output) is refused before packaging turns digits into ints.
MAX_VERSION_LENGTH = 64
# Vendor spellings PEP 440 refuses ("24.0.7-ce", "2.24.0-desktop.1", "575.51.03-server"): their leading release.
_LEADING_RELEASE = re.compile(r"\s*[vV]?(\d{1,9}(?:\.\d{1,9})*)")


def version(text: str) -> Version:
    """``text`` as a Version; raises InvalidVersion when it does not start with a release number."""
    if len(text) > MAX_VERSION_LENGTH:
        raise InvalidVersion(f"{text[:40]!r}... is too long for a version")
    try:
        return Version(text)
    except InvalidVersion:
        found = _LEADING_RELEASE.match(text)
        if not found:
            raise
        return Version(found.group(1))


def version_or_oldest(text: str) -> Version:
    """For what a host tool printed: an unreadable version sorts before every real one (so checks say "too old")."""
    try:
        return version(text)
    except InvalidVersion:
        return Version("0")


def release_at_least(text_or_version: str | Version, since: tuple[int, ...]) -> bool:
    current = text_or_version if isinstance(text_or_version, Version) else version(text_or_version)
    return current >= Version(".".join(str(part) for part in since))


def cc_tuple(text: str) -> tuple[int, int]:
    """A compute capability ("8.6", "12.1") as (major, minor), so 12.1 orders after 9.0."""
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)
