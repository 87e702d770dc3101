"""Presets: YAML file -> overrides -> validated, typed model.

Public entry point: ``load_preset(ref, overrides)``. Every problem found is reported at once, each
naming the file and the dotted field (or the override that set it), and nothing downstream ever sees an
unvalidated preset. Where ``ref`` is found: kit/config/preset_files.py; the YAML: kit/config/presetyaml.py; the
overrides: kit/config/overrides.py; the model: kit/config/preset.py.
"""

from __future__ import annotations

import copy
import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kit.config.overrides import apply_overrides, blame_overrides
from kit.config.preset import Preset
from kit.config.preset_files import display_path, find_preset
from kit.config.presetyaml import read_preset_file
from kit.core.errors import PresetError, Problem, shown
from kit.core.inputfiles import NUMBER_MAX
from kit.core.safevalue import UnsafeValue, check_text
from kit.core.secretrules import secret_values


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The valid field names at ``loc`` (for did-you-mean on unknown keys)."""
    current: Any = model
    for part in loc[:-1]:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return list(getattr(current, "model_fields", {}))


def problems_from_validation(exc: ValidationError, where: str) -> list[Problem]:
    problems: list[Problem] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc)
        hint = None
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(loc[-1]), _field_names(Preset, loc), n=1, cutoff=0.6)
            message = "unknown field"
            hint = f"did you mean {'.'.join([*map(str, loc[:-1]), close[0]])}?" if close else None
        elif err["type"] == "missing":
            message = "required field is missing"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] not in ("value_error",) and "input" in err and not isinstance(err["input"], (dict, list)):
                message += f" (got {shown(err['input'])})"
            if err["type"] == "string_type" and isinstance(err.get("input"), (bool, int, float)):
                hint = "YAML reads an unquoted number or true/false as one: quote the value"
        if not field:  # a check across sections (Preset._consistent) names the field it is about first
            named = _LEADING_FIELD.match(message)
            if named and named.group(1).split(".")[0] in Preset.model_fields:
                field, message = named.group(1), message[named.end():]
        problems.append(Problem(f"{where}: {field}" if field else where, message, hint))
    return problems


_LEADING_FIELD = re.compile(r"^([a-z_]+\.[a-z_]+) ")


def _out_of_range_numbers(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _out_of_range_numbers(item, f"{path}.{key}" if path else str(key))]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _out_of_range_numbers(item, f"{path}[{i}]")]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > NUMBER_MAX:
        return [path]
    return []


def secret_problems(data: Any, where: str) -> list[Problem]:
    """A credential anywhere in the preset (file or override, runtime.env included): refused, never quoted.

    A preset is committed, shared and rendered into compose files, manifests and image labels; a secret
    belongs in .env (compose) or a Secret (Kubernetes), which the kit never writes."""
    problems = []
    for field, kind in secret_values(data):
        what = "a password in a URL (user:password@)" if kind == "url_password" else f"a {kind} token"
        problems.append(Problem(
            f"{where}: {field}", f"holds {what}; secrets never go in a preset",
            "keep the URL here without credentials; the secret goes in .env (HF_TOKEN, VLLM_API_KEY, HF_ENDPOINT) "
            "or a Kubernetes Secret, an index's user:password in the PIP_INDEX_URL environment variable of the "
            "shell that runs `kit wheelhouse` / `kit lock`"))
    return problems


def load_preset(ref: str, overrides: list[str] | None = None) -> tuple[str, Path, Preset]:
    """Load, override and validate a preset. Returns (name, path, preset)."""
    path = find_preset(ref)
    where = display_path(path)
    data = read_preset_file(path)
    data.pop("$schema", None)
    overrides = list(overrides or [])
    file_data = copy.deepcopy(data)
    data = apply_overrides(data, overrides)
    try:  # the file's name is the preset's name, which rendered files carry (headers, labels, tags)
        check_text(path.stem, "the preset's file name")
    except UnsafeValue as exc:
        raise PresetError(f"{where}: {exc}") from None
    leaked = secret_problems(data, where)
    if leaked:
        raise PresetError(f"{where}: credentials in the preset",
                          problems=blame_overrides(leaked, where, overrides, file_data))
    try:
        preset = Preset.model_validate(data)
    except ValidationError as exc:
        raise PresetError(f"{where}: invalid preset", problems=blame_overrides(
            problems_from_validation(exc, where), where, overrides, file_data)) from None
    huge = _out_of_range_numbers(preset.model_dump())
    if huge:
        raise PresetError(f"{where}: invalid preset", problems=blame_overrides([
            Problem(f"{where}: {field}", f"beyond {NUMBER_MAX} (2**53), the largest number the kit takes")
            for field in huge], where, overrides, file_data))
    return path.stem, path, preset
