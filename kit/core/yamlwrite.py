"""The one YAML writer: compose files, Kubernetes manifests, the deployment record and the monitoring files.

Every file the kit writes as YAML is data serialised here, so one rule decides what is quoted. A string is
written plain only when it is a simple name (a letter, then letters, digits, ``_`` and ``-``) that no YAML
reader types: not a bool or null word of YAML 1.1 (PyYAML: ``yes``/``no``/``on``/``off``/``y``/``n``) or 1.2
(Compose's go-yaml, kubectl's: ``true``/``false``/``null`` in any case). Everything else is double-quoted,
non-ASCII and every line break escaped: numbers of either version (``1e3``, ``0x1F``, ``0o17``, ``1_000``,
``.inf``), dates and times (``2026-12-01``, ``12:30``), ``~``, the empty string, padded text and text that
starts with an indicator (``*``, ``&``, ``!``, ``%``, ``@``, a backquote) or holds ``#`` or ``: ``.

``dump_with_comments`` reads its own output back and fails when it differs from the data, so a serialiser
surprise is a bug report, never a silently different file. Comments are fixed text or text that passed
``check_text`` (no line break of any kind).
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from kit.core.datafiles import SAFE_LOADER
from kit.core.safevalue import check_text

Path = tuple[str, ...]

_PLAIN_OK = re.compile(r"[A-Za-z][A-Za-z0-9_-]*", re.ASCII)
# The words among those a YAML 1.1 or 1.2 reader types (compared lower-cased; nan and inf for readers that
# take them without the dot).
_TYPED_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf"}


def plain_ok(text: str) -> bool:
    """Whether ``text`` may be written as a plain scalar: every YAML 1.1 and 1.2 reader reads it as this string."""
    return _PLAIN_OK.fullmatch(text) is not None and text.lower() not in _TYPED_WORDS


class _Dumper(yaml.SafeDumper):
    """Strings plain only when ``plain_ok``; everything else double-quoted. No anchors and aliases: a repeated
    volume or mount is written twice, as compose and kubectl users expect."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 - PyYAML's signature
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=None if plain_ok(data) else '"')


_Dumper.add_representer(str, _represent_str)


def yaml_text(doc: Any) -> str:
    """``doc`` as YAML, block style, keys in their order."""
    # An infinite width: no scalar is folded over lines, so each value stays on its key's line.
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=math.inf,
                     allow_unicode=False)


def comment_lines(lines: list[str], indent: int = 0) -> str:
    pad = " " * indent
    return "".join(f"{pad}# {check_text(line, 'a comment')}\n".replace(" \n", "\n") for line in lines)


def _emit(doc: dict[str, Any], comments: dict[Path, list[str]], path: Path, indent: int, gap: bool) -> str:
    out = []
    for index, (key, value) in enumerate(doc.items()):
        here = (*path, key)
        if gap and index:
            out.append("\n")
        out.append(comment_lines(comments.get(here, []), indent))
        nested = isinstance(value, dict) and value and any(p[: len(here)] == here and p != here for p in comments)
        if nested:
            out.append(" " * indent + yaml_text({key: None}).rstrip("\n").removesuffix(" null") + "\n")
            out.append(_emit(value, comments, here, indent + 2, gap=len(here) == 1))
        else:
            out.append("".join(" " * indent + line + "\n" for line in yaml_text({key: value}).splitlines()))
    return "".join(out)


def checked(text: str, doc: Any) -> str:
    """``text``, after reading it back as ``doc``: a serialiser surprise fails here, never in a user's reader."""
    # Read back with libyaml where PyYAML has it (kit/core/datafiles.py): the same safe rules, a fraction of the time.
    if yaml.load(text, Loader=SAFE_LOADER) != doc:  # noqa: S506  # pragma: no cover - a serialiser bug, never the user's
        raise AssertionError("YAML serialisation does not read back as the data it was built from")
    return text


def dump_with_comments(doc: dict[str, Any], header: list[str], comments: dict[Path, list[str]]) -> str:
    """YAML text of ``doc`` with ``# comment`` lines before the keys named by path. Top-level keys and the
    entries under them are separated by a blank line, as a person lays a compose file out."""
    return checked(comment_lines(header) + _emit(doc, comments, (), 0, gap=True), doc)
