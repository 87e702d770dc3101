"""Overrides typed on the command line, ``SECTION.FIELD=VALUE``: each value read by the type of the field it sets,
set into a preset's data, and a problem with a value from the command line named as its override.

``apply_overrides(data, overrides)`` is what ``load_preset`` runs between reading the file and validating it;
``blame_overrides`` names the culprits. The shape of an override (read before anything loads, no pydantic) is
kit/core/overrides.py; the YAML rules a value is read by are kit/config/presetyaml.py's.
"""

from __future__ import annotations

import re
import types
from dataclasses import replace
from typing import Any, Literal, Union, get_args, get_origin

from kit.config.flags import FlagError, load_snapshot
from kit.config.preset import Engine, HostPath, Preset
from kit.config.presetyaml import load_preset_yaml, read_plain_scalar
from kit.core.errors import PresetError, Problem
from kit.core.overrides import MalformedOverride, override_where, split_override


def _strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings_in(k), *_strings_in(v))]
    if isinstance(value, list):
        return [s for item in value for s in _strings_in(item)]
    return []


# How an override's value is read, by the type of the field it sets (``value_kind``):
#   text        the field takes text: the value is the text typed (image.cuda=12.9, model.id=0.33, engine.x=true
#               for a text flag); null/~ unset it, and quotes are YAML's (image.cuda='null' is the text null)
#   path        a host folder (a field marked HostPath): as text, but ~ is the home folder (a shell's meaning,
#               which the field's check then refuses); only null unsets it
#   text-items  a list or mapping of text: a YAML flow list or mapping whose unquoted items stay text
#   yaml        anything else (numbers, booleans, JSON flags): typed like a preset file's plain scalar
_NULLS = ("~", "null", "Null", "NULL")
_PATH_NULLS = ("null", "Null", "NULL")


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


def _kind_of(annotation: Any) -> str:
    annotation = _without_none(annotation)
    if annotation is str or (get_origin(annotation) is Literal and all(isinstance(a, str) for a in get_args(annotation))):
        return "text"
    if get_origin(annotation) in (list, dict) and get_args(annotation):
        return "text-items" if _kind_of(get_args(annotation)[-1]) == "text" else "yaml"
    return "yaml"


def _engine_flag_kind(key: str, version: str | None) -> str | None:
    """How vLLM ``version`` reads flag ``key`` from its command line, as an override kind (None: no snapshot says)."""
    if not version:
        return None
    try:
        spec = load_snapshot(version).flags.get(key)
    except FlagError:
        return None
    if spec is None or spec.kind != "store" or spec.type in ("json", "float"):
        return None
    if spec.type == "int":
        return None if spec.takes_list else "text"  # vLLM's integer reader takes the text (16k, auto, 1_000)
    return "text-items" if spec.takes_list else "text"


def value_kind(path: list[str], version: str | None = None) -> str:
    """How the value of an override of ``path`` is read (see above); ``version``: the preset's pinned vLLM, whose
    flag snapshot types the engine's flags."""
    current: Any = Preset
    for index, part in enumerate(path):
        if current is Engine and index == len(path) - 1:
            flag = _engine_flag_kind(part, version)
            if flag is not None:
                return flag
        fields = getattr(current, "model_fields", None)
        if fields is None:
            if get_origin(current) is dict and get_args(current):
                current = _without_none(get_args(current)[-1])
                continue
            return "yaml"
        if part not in fields:
            return "yaml"
        if index == len(path) - 1 and any(isinstance(mark, HostPath) for mark in fields[part].metadata):
            return "path"
        current = _without_none(fields[part].annotation)
    return _kind_of(current)


def parse_override_value(raw: str, where: str, kind: str = "yaml") -> Any:
    """The value of ``KEY=VALUE``, read by ``kind`` (``value_kind``: the type of the field it sets).

    A plain value is taken whole: ``#``, ``: ``, quotes inside, a leading ``*`` or ``!`` are text, never YAML
    syntax (a shell user writing ``runtime.env.X=a #1`` means the eight characters). For a field of text it is the
    text typed (``image.cuda=12.9``); otherwise it is typed like a preset file's plain scalar. Only a value in
    brackets or braces is parsed as a YAML flow list or mapping, and one in matching quotes as a quoted
    string, by the same rules as the file; one that is not well-formed stays text, and the field's type
    judges it (a list field refuses ``[1, 2``; a JSON-string flag takes ``{not json`` to check later).
    """
    if raw == "":
        return ""
    quoted = len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\""
    if kind == "text" and not quoted:
        return None if raw in _NULLS else raw
    if kind == "path" and not quoted:
        return None if raw in _PATH_NULLS else raw
    flow = raw[0] in "[{" or quoted
    if not flow:  # the file's rules for a plain scalar, applied to the whole text
        return read_plain_scalar(raw)
    value = load_preset_yaml(raw, where, malformed_as_text=True, text_scalars=kind == "text-items")
    if sum(s.count("#") for s in _strings_in(value)) != raw.count("#"):
        raise PresetError(f"{where}: a # in this list or mapping starts a YAML comment",
                          hint="quote the item that holds the #")
    return value


def _split(text: str) -> tuple[list[str], str]:
    try:
        return split_override(text)
    except MalformedOverride as exc:
        raise PresetError(f"override {exc}") from None


def parse_override(text: str, version: str | None = None) -> tuple[list[str], Any]:
    path, raw = _split(text)
    return path, parse_override_value(raw, f"override {'.'.join(path)}", value_kind(path, version))


def _pinned_version(data: dict[str, Any], overrides: list[str]) -> str | None:
    """The vLLM release the preset pins once ``overrides`` apply: it decides how engine flags read their values."""
    version = None
    image = data.get("image")
    if isinstance(image, dict) and isinstance(image.get("vllm_version"), str):
        version = image["vllm_version"]
    for text in overrides:
        path, raw = _split(text)
        if path == ["image", "vllm_version"]:
            version = raw.strip("'\"")
    return version


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set each dotted path, its value read by the field's type; the result is validated exactly like the file."""
    version = _pinned_version(data, overrides)
    for text in overrides:
        path, value = parse_override(text, version)
        node: Any = data
        for part in path[:-1]:
            child = node.get(part) if isinstance(node, dict) else None
            if child is None:
                child = {}
                node[part] = child
            if not isinstance(child, dict):
                raise PresetError(f"{override_where(text)}: {part} is not a section")
            node = child
        if value is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    return data


def _field_parts(field: str) -> list[str]:
    """``image.leave_out[0]`` -> [image, leave_out]: the dotted path of a problem's field, list indexes dropped."""
    return [part for part in re.split(r"\.|\[\d+\]", field) if part]


def _has_path(data: Any, parts: list[str]) -> bool:
    for part in parts:
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def blame_overrides(problems: list[Problem], where: str, overrides: list[str] | None,
                    file_data: dict[str, Any] | None = None) -> list[Problem]:
    """``problems`` with each one about a value that came from the command line named as that override
    (``override engine.max_model_len``) instead of the preset file, which may not hold it. A problem is the
    override's when it is about the field the override set (or something inside it), or about a section or key
    the override brought in that ``file_data`` (the file, before overrides) lacks."""
    if not overrides:
        return problems
    paths = [(_split(text)[0], text) for text in overrides]
    prefix = f"{where}: "
    blamed = []
    for problem in problems:
        if not problem.where.startswith(prefix):
            blamed.append(problem)
            continue
        parts = _field_parts(problem.where[len(prefix):])
        culprit = None
        for path, text in reversed(paths):  # the last override of a field is the one that took effect
            introduced = (file_data is not None and parts and path[: len(parts)] == parts
                          and not _has_path(file_data, parts))
            if parts[: len(path)] == path or introduced:
                culprit = text
                break
        blamed.append(replace(problem, where=override_where(culprit)) if culprit else problem)
    return blamed
