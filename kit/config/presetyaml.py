"""Preset YAML: text -> data by a preset's rules, every problem one line naming the file (or override) and where.

``read_preset_file(path)`` reads a preset file (capped, UTF-8, a mapping); ``load_preset_yaml(text, where)`` parses
preset YAML text (a file's, or an override's list or mapping); ``read_plain_scalar(text)`` types one plain scalar as
a preset file would. Safe YAML without aliases, duplicate keys or YAML 1.1's guessed types (``PresetLoader``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kit.config.preset_files import display_path
from kit.core.errors import PresetError
from kit.core.inputfiles import decode_utf8, input_limits, read_capped

# Python's parser recurses per nesting level; presets nest four deep. Deeper input is refused, not crashed on.
PRESET_MAX_DEPTH = 32


class PresetLoader(yaml.SafeLoader):
    """Safe YAML with a preset's rules.

    - No aliases: ``*name`` can expand a few hundred bytes into gigabytes (the "billion laughs"), and a
      preset this small gains nothing from them.
    - YAML 1.1's extra scalar types are not guessed: ``yes``/``no``/``on``/``off``, ``0x1f``, ``0o17``,
      ``1:30``, ``.inf``, ``.nan`` and dates stay text, so the field's type decides (pydantic reads
      ``yes`` as true for a boolean field, and ``no`` stays the string "no" for a name). Only ``true``/``false``,
      ``null``/``~``, decimal integers and decimal fractions are typed here.
    """

    yaml_implicit_resolvers: dict = {}
    values_composed = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"YAML alias *{event.anchor} is not allowed in a preset; write the value out",
                event.start_mark,
            )
        # Counted while the text is read, so a file of many small values stops at the first one too many
        # (kit/data/input_limits.yaml preset_max_items, preset_max_values): reading it all costs seconds.
        limits = input_limits()["files"]
        self.values_composed += 1
        if self.values_composed > limits["preset_max_values"]:
            raise yaml.composer.ComposerError(
                None, None, f"more than {limits['preset_max_values']} values in one preset (a preset has a few dozen)",
                self.peek_event().start_mark)
        entries = len(parent.value) if isinstance(parent, (yaml.MappingNode, yaml.SequenceNode)) else 0
        if entries >= limits["preset_max_items"] and (index is None or isinstance(parent, yaml.SequenceNode)):
            raise yaml.composer.ComposerError(
                None, None, f"more than {limits['preset_max_items']} entries in one mapping or list (a preset sets a "
                "few dozen)", self.peek_event().start_mark)
        return super().compose_node(parent, index)


PresetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
PresetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
# At most 18 digits: longer numbers stay text (and fail as the field's type), never a giant int.
PresetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]{0,17})$"), list("-+0123456789"))
PresetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]{1,18}\.[0-9]{0,18}|\.[0-9]{1,18})(?:[eE][-+]?[0-9]{1,3})?$"),
    list("-+0123456789."))


def _yaml_error(exc: yaml.YAMLError) -> str:
    """One line: where in the text, and what."""
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character #x{exc.character:04x} at offset {exc.position} is not allowed in YAML"
    mark = getattr(exc, "problem_mark", None)
    at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return at + (getattr(exc, "problem", None) or "malformed YAML")


def _duplicate_key(node: yaml.Node) -> str | None:
    """The first mapping key given twice anywhere under ``node``, as 'path (lines a and b)'."""
    stack: list[tuple[yaml.Node, str, int]] = [(node, "", 0)]
    while stack:
        current, path, depth = stack.pop()
        if depth > PRESET_MAX_DEPTH:
            raise RecursionError
        if isinstance(current, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in current.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                if isinstance(key, yaml.ScalarNode) and name in seen:
                    return (f"{path + '.' if path else ''}{name}: given twice (lines {seen[name] + 1} and "
                            f"{key.start_mark.line + 1}); a later value would silently win")
                seen[name] = key.start_mark.line
                stack.append((value, f"{path + '.' if path else ''}{name}", depth + 1))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(current.value))
    return None


_TEXT_TAG = "tag:yaml.org,2002:str"
_GUESSED_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")


def _plain_scalars_as_text(node: yaml.Node) -> None:
    """Every unquoted number or true/false under ``node`` read as the text it is (null stays null)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, yaml.ScalarNode):
            if current.style is None and current.tag in _GUESSED_TAGS:
                current.tag = _TEXT_TAG
        elif isinstance(current, yaml.MappingNode):
            stack.extend(value for _, value in current.value)  # keys keep their type: a key is checked as a name
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)


def load_preset_yaml(text: str, where: str, *, malformed_as_text: bool = False, text_scalars: bool = False) -> Any:
    """Parse preset YAML text by PresetLoader's rules; every problem is one PresetError line naming ``where``.

    ``malformed_as_text``: text that is not well-formed YAML is returned as it is (an override value); aliases,
    duplicate keys and too deep nesting are refused all the same. ``text_scalars``: unquoted numbers and
    true/false are text (the items of an override for a list or mapping of text: ``hardware.device_ids=[0, 1]``).
    """
    loader = None
    try:
        loader = PresetLoader(text)  # refuses unprintable characters already
        node = loader.get_single_node()
        if node is None:
            return None
        duplicate = _duplicate_key(node)
        if duplicate:
            raise PresetError(f"{where}: {duplicate}", hint="keep one of them")
        if text_scalars:
            _plain_scalars_as_text(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        if malformed_as_text and isinstance(exc, (yaml.scanner.ScannerError, yaml.parser.ParserError)):
            return text
        syntax = not isinstance(exc, yaml.composer.ComposerError)  # an alias is refused, not misspelt
        raise PresetError(f"{where}: {_yaml_error(exc)}", hint="fix the YAML syntax" if syntax else None) from None
    except RecursionError:
        raise PresetError(f"{where}: nested more than {PRESET_MAX_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_plain_scalar(text: str) -> Any:
    """``text`` whole, typed by a preset file's rules for a plain scalar (``16`` an int, ``true`` a bool, ``a #1``
    the text it is): no YAML syntax is read in it."""
    loader = PresetLoader("")
    try:
        tag = loader.resolve(yaml.ScalarNode, text, (True, False))
        return loader.construct_object(yaml.ScalarNode(tag, text))
    finally:
        loader.dispose()


def read_preset_file(path: Path) -> dict[str, Any]:
    where = display_path(path)
    raw = read_capped(path, where, input_limits()["files"]["preset_max_bytes"], error=PresetError, what="preset file")
    data = load_preset_yaml(decode_utf8(raw, where, error=PresetError), where)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PresetError(f"{where}: a preset is a mapping of sections (hardware, model, engine, image, runtime)")
    return data
