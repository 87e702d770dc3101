"""`kit completion bash|zsh|fish` prints click's completion script; the callbacks that complete a preset's arguments.

Completion runs the kit on every TAB, so it reads only light files: preset names from the preset folders
(kit/config/preset_files.py: ./presets, the user's, the shipped ones), and
``KEY=`` paths and enum values from presets/schema.json, which kit.config.schema generates from the pydantic preset model
(and a unit test keeps current), rather than importing pydantic itself.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import click
from click.shell_completion import CompletionItem, get_completion_class

from kit.cli.common import emit_json, standard_options

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_KIT_COMPLETE"  # click's default for prog_name "kit"


def preset_names() -> list[str]:
    """Every name `preset=` finds from here: ./presets, the user's config folder, the shipped ones."""
    from kit.config.preset_files import all_presets

    return [entry.name for entry in all_presets()]


@functools.cache
def preset_fields() -> dict[str, dict[str, Any]]:
    """``section.field`` -> {"help": description, "values": [enum values]} for every field of the preset model."""
    from kit.core.dataread import PRESETS_DIR

    schema = json.loads((PRESETS_DIR / "schema.json").read_text(encoding="utf-8"))
    definitions = schema.get("$defs", {})
    fields: dict[str, dict[str, Any]] = {}
    for section, ref in schema["properties"].items():
        target = _ref_target(ref)
        if target is None:
            continue
        for name, spec in definitions[target].get("properties", {}).items():
            fields[f"{section}.{name}"] = {"help": spec.get("description", ""), "values": _values(spec)}
    return fields


def _ref_target(spec: dict[str, Any]) -> str | None:
    for candidate in [spec, *spec.get("anyOf", [])]:
        if "$ref" in candidate:
            return candidate["$ref"].rsplit("/", 1)[1]
    return None


def _values(spec: dict[str, Any]) -> list[str]:
    values: list[str] = []
    for candidate in [spec, *spec.get("anyOf", [])]:
        values += [json.dumps(v) if not isinstance(v, str) else v for v in candidate.get("enum", [])]
        if "const" in candidate:
            values.append(str(candidate["const"]))
        if candidate.get("type") == "boolean":
            values += ["true", "false"]
    return values


def _value_choices(key: str) -> list[tuple[str, str | None]]:
    if key == "preset":
        return [(name, None) for name in preset_names()]
    field = preset_fields().get(key)
    return [(value, None) for value in field["values"]] if field else []


def complete_preset_args(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Complete ``preset=NAME`` and ``section.field=VALUE`` words.

    zsh and fish pass the whole word (``engine.dtype=bf``); bash splits at ``=``, so the word before may be
    ``engine.dtype`` and ``=``, and the word being completed is ``=`` itself or the value typed after it.
    """
    typed = list(ctx.params.get("args") or ())
    # click drops a lone "=" word, so bash's "preset" "=" arrives as typed[-1] == "preset" and nothing incomplete;
    # readline then replaces only what follows the "=", so the bare values are offered.
    if not incomplete and typed and "=" not in typed[-1] and _value_choices(typed[-1]):
        return [CompletionItem(value) for value, _ in _value_choices(typed[-1])]
    if len(typed) >= 2 and typed[-1] == "=":
        return [CompletionItem(value) for value, _ in _value_choices(typed[-2]) if value.startswith(incomplete)]
    key, sep, partial = incomplete.partition("=")
    if sep:
        return [CompletionItem(f"{key}={value}", help=help_text) for value, help_text in _value_choices(key)
                if value.startswith(partial)]
    items = []
    if not any(arg.startswith("preset=") for arg in typed) and "preset=".startswith(incomplete):
        items.append(CompletionItem("preset=", help="a preset name (kit presets) or a preset file"))
    fields = preset_fields()
    if "." in incomplete:
        items += [CompletionItem(f"{path}=", help=info["help"]) for path, info in fields.items()
                  if path.startswith(incomplete)]
    else:
        sections = sorted({path.split(".", 1)[0] for path in fields})
        items += [CompletionItem(f"{section}.") for section in sections if section.startswith(incomplete)]
    return items


def complete_preset_name(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(name) for name in preset_names() if name.startswith(incomplete)]


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
@standard_options
def completion(shell: str, as_json: bool) -> None:
    """Print the shell completion script: eval "$(kit completion bash)" (zsh, fish alike)."""
    root = click.get_current_context().find_root()
    shell_class = get_completion_class(shell)
    assert shell_class is not None  # SHELLS are the shells click registers
    script = shell_class(root.command, {}, "kit", COMPLETE_VAR).source()
    if as_json:
        emit_json({"shell": shell, "script": script})
        return
    click.echo(script)
