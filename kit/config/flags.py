"""Which `vllm serve` flags exist, per pinned vLLM version, and how to pass them.

The facts come from snapshots that `kit.config.flagsnap` takes from vLLM's own parser
(`kit/data/flags/vllm-<version>.json`) plus a small table of flags that vLLM
removed or renamed (`kit/data/flags/renamed.yaml`). This module only reads them:

* `check_engine()` finds every problem with a preset's `engine:` mapping.
* `engine_to_argv()` turns a valid mapping into `vllm serve` arguments.
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from kit.config.vllmint import AUTO, EXAMPLES, converter_of, read_vllm_int
from kit.core.datafiles import DATA_DIR
from kit.core.errors import KitError
from kit.core.secretrules import secret_flag_env
from kit.core.userdata import UserDataError, load_user_snapshot_data, user_file, user_snapshot_versions
from kit.core.versions import version_or_oldest

SNAPSHOT_DIR = DATA_DIR / "flags"
RENAMED_FILE = SNAPSHOT_DIR / "renamed.yaml"

# Keys the kit sets itself from other parts of the preset; `engine` may not set them.
# Key -> where the preset says it instead.
KIT_OWNED_KEYS: dict[str, str] = {
    "model": "set the model with model.id",
    "model_tag": "set the model with model.id",
    "served_model_name": "set it with model.served_model_name (model.id is served by default)",
    "revision": "set it with model.revision",
    "host": "the server listens on all addresses inside the container; publish it with runtime.bind_address",
    "port": "the server listens on 8000 inside the container; publish it with runtime.port",
}



class FlagError(KitError):
    """A preset's engine flags do not fit the pinned vLLM.

    `field` names the offending preset field (e.g. ``engine.max_model_len``),
    `hint` says what to do; `problems` holds every problem found.
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        hint: str | None = None,
        problems: tuple["Problem", ...] = (),
    ) -> None:
        super().__init__(message, hint=hint)
        self.field = field
        self.flag_problems = problems


@dataclass(frozen=True)
class Problem:
    field: str
    message: str
    hint: str | None = None
    severity: str = "error"  # "error" or "warning" (deprecated but accepted)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" + (f" ({self.hint})" if self.hint else "")


@dataclass(frozen=True)
class FlagSpec:
    """One `vllm serve` option, as the snapshot describes it."""

    dest: str
    options: tuple[str, ...]
    kind: str
    type: str
    nargs: int | str | None
    choices: tuple[str, ...] | None = None
    default: Any = None
    const: Any = None
    optional: bool = False
    type_detail: str | None = None
    negative_options: tuple[str, ...] = ()
    hidden_options: tuple[str, ...] = ()
    deprecated: bool = False
    help: str = ""
    suggestions: tuple[str, ...] = ()  # values the parser names without enforcing them (e.g. tokenizer_mode)

    @property
    def flag(self) -> str:
        """The option string to emit for a positive value."""
        negatives = set(self.negative_options)
        for option in self.options:
            if option.startswith("--") and option not in negatives:
                return option
        return self.options[0]

    @property
    def negative_flag(self) -> str | None:
        visible = [o for o in self.options if o in self.negative_options]
        candidates = visible or list(self.negative_options)
        return candidates[0] if candidates else None

    @property
    def takes_list(self) -> bool:
        return self.kind == "append" or self.nargs in ("+", "*") or isinstance(self.nargs, int) and self.nargs > 1


@dataclass(frozen=True)
class FlagSnapshot:
    version: str
    package: str
    generator_version: int
    flags: Mapping[str, FlagSpec]
    # snake_case spelling of every option string -> (dest, means False?)
    aliases: Mapping[str, tuple[str, bool]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FlagSnapshot":
        flags: dict[str, FlagSpec] = {}
        aliases: dict[str, tuple[str, bool]] = {}
        for key, entry in data["flags"].items():
            spec = FlagSpec(
                dest=entry["dest"],
                options=tuple(entry["options"]),
                kind=entry["kind"],
                type=entry["type"],
                nargs=entry.get("nargs"),
                choices=tuple(entry["choices"]) if entry.get("choices") is not None else None,
                default=entry.get("default"),
                const=entry.get("const"),
                optional=bool(entry.get("optional", False)),
                type_detail=entry.get("type_detail"),
                negative_options=tuple(entry.get("negative_options") or ()),
                hidden_options=tuple(entry.get("hidden_options") or ()),
                deprecated=bool(entry.get("deprecated", False)),
                help=entry.get("help", ""),
                suggestions=tuple(entry.get("suggestions") or ()),
            )
            flags[key] = spec
            for option in (*spec.options, *spec.hidden_options):
                alias = _snake(option)
                if alias != key:
                    aliases.setdefault(alias, (key, option in spec.negative_options))
        return cls(
            version=data["vllm"]["version"],
            package=data["vllm"].get("package", "unknown"),
            generator_version=data["generator"]["version"],
            flags=flags,
            aliases=aliases,
        )


def _snake(name: str) -> str:
    return name.strip().lstrip("-").replace("-", "_")


def available_versions(directory: Path = SNAPSHOT_DIR) -> list[str]:
    """vLLM versions that have a flag snapshot, oldest first: the kit's, and (for the kit's folder) the user's
    (kit/core/userdata.py: $XDG_CONFIG_HOME/vllm-kit/flags/)."""
    found = {p.name[len("vllm-") : -len(".json")] for p in Path(directory).glob("vllm-*.json")}
    if Path(directory) == SNAPSHOT_DIR:
        found.update(user_snapshot_versions())
    return sorted(found, key=version_or_oldest)  # packaging's order: 0.26.0rc1 before 0.26.0


@functools.lru_cache(maxsize=None)
def _load_snapshot(path: Path) -> FlagSnapshot:
    return FlagSnapshot.from_dict(json.loads(path.read_text(encoding="utf-8")))


def _load_user_snapshot(version: str) -> FlagSnapshot | None:
    """The user's snapshot of ``version``, None when there is none; a file the kit cannot use is UserDataError,
    naming it and the field."""
    path = user_file(f"flags/vllm-{version}.json")
    return None if path is None else _user_snapshot_at(path, version)


@functools.lru_cache(maxsize=16)
def _user_snapshot_at(path: Path, version: str) -> FlagSnapshot:

    data = load_user_snapshot_data(path, version)
    try:
        return FlagSnapshot.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UserDataError(f"{path}: flags: not a snapshot the kit reads ({type(exc).__name__}: {exc})",
                            hint=f"regenerate it: `python -m kit.config.flagsnap --regenerate {version}`") from None


def load_snapshot(version: str, directory: Path = SNAPSHOT_DIR) -> FlagSnapshot:
    """The flag snapshot of ``version``: the kit's own when it ships one (it wins over a user's copy), else the
    user's from their config folder."""
    path = Path(directory) / f"vllm-{version}.json"
    if path.is_file():
        return _load_snapshot(path)
    user = _load_user_snapshot(version) if Path(directory) == SNAPSHOT_DIR else None
    if user is not None:
        return user
    known = ", ".join(available_versions(directory)) or "none"
    raise FlagError(
        f"no vLLM flag snapshot for version {version} (have: {known})",
        field="vllm.version",
        hint="pin one of those versions, or generate a snapshot with "
        "`python -m kit.config.flagsnap --regenerate VERSION`",
    )


@functools.lru_cache(maxsize=1)
def _renamed_table() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(RENAMED_FILE.read_text(encoding="utf-8")) or {}
    return dict(data.get("flags") or {})


def renamed_flag(key: str) -> dict[str, Any] | None:
    """What kit/data/flags/renamed.yaml says of a flag vLLM dropped (status, replacement, value, note), or None."""
    entry = _renamed_table().get(key)
    return dict(entry) if entry is not None else None


# --------------------------------------------------------------------------
# Checking
# --------------------------------------------------------------------------


def _closest(word: str, candidates: list[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(word, candidates, n=n, cutoff=0.6)


def _describe(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_problem(spec: FlagSpec, item: Any) -> str | None:
    """Why `item` cannot be one value of `spec`, or None when it can."""
    if spec.optional and (item == "None"):
        return None
    if spec.type == "int":
        return _int_problem(spec, item)
    if spec.type == "float":
        return _float_problem(item)
    if spec.type == "json":
        return _json_problem(spec, item)
    return _text_problem(item)


def _int_problem(spec: FlagSpec, item: object) -> str | None:
    converter = converter_of(spec.type_detail)
    if isinstance(item, bool) or not isinstance(item, (int, str)):
        return f"expects {EXAMPLES[converter]}, got {_describe(item)}"
    if isinstance(item, str):
        try:
            read_vllm_int(item, converter)
        except ValueError as exc:
            return str(exc)
    return None


def _float_problem(item: object) -> str | None:
    if isinstance(item, bool) or not isinstance(item, (int, float, str)):
        return f"expects a number, got {_describe(item)}"
    if isinstance(item, str):
        try:
            float(item)
        except ValueError:
            return f"expects a number, got {_describe(item)}"
    return None


def _json_problem(spec: FlagSpec, item: object) -> str | None:
    if isinstance(item, (dict, list)):
        return None
    if isinstance(item, str):
        if spec.type_detail == "json_or_str":
            return None
        try:
            json.loads(item)
        except ValueError:
            return f"expects a mapping or JSON text, got text that is not JSON: {_describe(item)}"
        return None
    return f"expects a mapping (JSON object), got {_describe(item)}"


def _text_problem(item: object) -> str | None:
    """str and opaque converters: any scalar that is not a boolean."""
    if isinstance(item, bool):
        return (
            f"expects text, got the boolean {str(item).lower()} "
            "(YAML reads yes/no/on/off/true/false as booleans; quote the value)"
        )
    if not isinstance(item, (str, int, float)):
        return f"expects a single value, got {_describe(item)}"
    return None


def _choice_problem(spec: FlagSpec, item: Any) -> tuple[str, str | None] | None:
    if spec.choices is None:
        return None
    text = _format_scalar(item)
    if text in spec.choices:
        return None
    if spec.type == "other":
        # An opaque converter may normalise the text (vLLM lower-cases and
        # maps dashes to underscores for its kernel backend names).
        normal = text.lower().replace("-", "_")
        if normal in spec.choices:
            return None
    shown = [c for c in spec.choices if c != "None"]
    close = _closest(text, shown, n=1)
    hint = f"did you mean {close[0]!r}?" if close else None
    return f"{text!r} is not one of: {', '.join(shown)}", hint


# The kinds of flag that take no value: the option alone says true (or false).
_SWITCH_KINDS = ("store_true", "store_false", "boolean_optional", "store_const")


def _value_problems(spec: FlagSpec, key: str, value: Any) -> list[Problem]:
    where = f"engine.{key}"
    if value is None:
        return []
    if spec.kind in _SWITCH_KINDS:
        return _switch_problems(spec, where, value)
    if spec.kind == "count":
        return _count_problems(where, value)
    if spec.nargs == "?" and isinstance(value, bool):
        if value is True and spec.const is not True:
            return [Problem(where, f"expects a value, got {_describe(value)}")]
        return []
    shape = _shape_problem(spec, where, value)
    if shape is not None:
        return [shape]
    items = list(value) if spec.takes_list and isinstance(value, (list, tuple)) else [value]
    return [problem for item in items if (problem := _item_problem(spec, where, item)) is not None]


def _switch_problems(spec: FlagSpec, where: str, value: object) -> list[Problem]:
    if not isinstance(value, bool):
        return [Problem(where, f"expects true or false, got {_describe(value)}")]
    if spec.kind == "store_true" and value is False and spec.default is True:
        return [Problem(where, "is on by default and this vLLM has no option to turn it off")]
    if spec.kind == "store_false" and value is True and spec.default is False:
        return [Problem(where, "is off by default and this vLLM has no option to turn it on")]
    return []


def _count_problems(where: str, value: object) -> list[Problem]:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return [Problem(where, f"expects a count (0 or more), got {_describe(value)}")]
    return []


def _shape_problem(spec: FlagSpec, where: str, value: object) -> Problem | None:
    """A list where one value goes, or a list of the wrong length."""
    if not spec.takes_list:
        if isinstance(value, (list, tuple, dict)) and spec.type != "json":
            return Problem(where, f"expects a single value, got {_describe(value)}")
        return None
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items and spec.nargs == "+":
        return Problem(where, "needs at least one value")
    if isinstance(spec.nargs, int) and len(items) != spec.nargs:
        return Problem(where, f"needs exactly {spec.nargs} values, got {len(items)}")
    return None


def _item_problem(spec: FlagSpec, where: str, item: object) -> Problem | None:
    """What is wrong with one value: its type first, then whether it is one of the choices."""
    message = _type_problem(spec, item)
    if message:
        return Problem(where, message)
    choice = _choice_problem(spec, item)
    return Problem(where, choice[0], choice[1]) if choice else None


def _unknown_key_problem(snapshot: FlagSnapshot, key: str) -> Problem:
    where = f"engine.{key}"
    label = f"vLLM {snapshot.version}"
    renamed = _renamed_table().get(key)
    if renamed is not None:
        replacement = renamed.get("replacement")
        note = renamed.get("note") or ""
        if replacement and replacement in snapshot.flags:
            verb = "was renamed" if renamed.get("status") == "renamed" else "was removed"
            hint = f"use {renamed.get('value') or replacement}"
            return Problem(where, f"{verb} before {label}: {note}".rstrip(": "), hint)
        return Problem(where, f"was removed before {label}: {note}".rstrip(": "), "delete it")
    candidates = sorted(set(snapshot.flags) | set(snapshot.aliases))
    close = _closest(key, candidates)
    # Point aliases at their canonical key.
    suggestions = []
    for name in close:
        canonical = snapshot.aliases.get(name, (name, False))[0]
        if canonical not in suggestions:
            suggestions.append(canonical)
    return Problem(where, f"is not a `vllm serve` flag in {label}",
                   ("did you mean " + " or ".join(suggestions) + "?") if suggestions else None)


def _secret_flag_problem(snapshot: FlagSnapshot, key: str, where: str) -> Problem | None:
    """A flag that carries a secret (kit/data/secrets.yaml) is refused whatever its value, which is never quoted."""
    canonical = snapshot.aliases.get(key, (key, False))[0]
    spec = snapshot.flags.get(canonical)
    env = secret_flag_env(canonical, spec.type if spec else None)
    if env is None:
        return None
    if spec is None and not env and _closest(key, [n for n in set(snapshot.flags) | set(snapshot.aliases)
                                                 if secret_flag_env(n, None) is None]):
        # Not a flag, and its name only looks like a secret's (max_num_batched_token, a typo of a flag that is
        # none): refused as an unknown flag, with the flag it is close to; its value is not quoted there either.
        return None
    place = (f"put it in .env as {env} (see .env.example); on Kubernetes, in the <name>-secrets Secret made "
             "from .env (`kubectl create secret generic ... --from-env-file=.env`, see k8s/)" if env else
             "pass it through .env or a Kubernetes Secret, never the preset")
    return Problem(where, "carries a secret: a preset is committed and rendered into compose files and "
                   "manifests, so secrets never go in engine", place)


def check_engine(engine: Mapping[str, object], version: str) -> list[Problem]:
    """Every problem with a preset's `engine:` mapping for the given vLLM."""
    snapshot = load_snapshot(version)
    problems: list[Problem] = []
    for raw_key in sorted(engine, key=str):
        value = engine[raw_key]
        where = f"engine.{raw_key}"
        if not isinstance(raw_key, str):
            problems.append(Problem(where, "keys must be text"))
            continue
        key = _snake(raw_key)
        secret = _secret_flag_problem(snapshot, key, where)
        if secret is not None:
            problems.append(secret)
            continue
        if key in KIT_OWNED_KEYS:
            problems.append(Problem(where, "is set by the kit, not in engine", KIT_OWNED_KEYS[key]))
            continue
        if key != raw_key:
            if key in snapshot.flags or key in snapshot.aliases:
                canonical = snapshot.aliases.get(key, (key, False))[0]
                problems.append(
                    Problem(where, "engine keys are written in snake_case", f"write it as {canonical}")
                )
            else:
                problems.append(_unknown_key_problem(snapshot, key))
            continue
        spec = snapshot.flags.get(key)
        if spec is None and key in snapshot.aliases:
            canonical, negative = snapshot.aliases[key]
            if negative:
                hint = f"write {canonical}: false"
                message = f"is the command-line form of {canonical}: false"
            else:
                hint = f"write {canonical}"
                message = f"is another name for {canonical}"
            problems.append(Problem(where, message, hint))
            continue
        if spec is None:
            problems.append(_unknown_key_problem(snapshot, key))
            continue
        problems.extend(_value_problems(spec, key, value))
        if spec.deprecated and value is not None:
            problems.append(
                Problem(where, f"is deprecated in vLLM {snapshot.version}: {spec.help}", severity="warning")
            )
    return problems


# --------------------------------------------------------------------------
# Reading values as vLLM reads them
# --------------------------------------------------------------------------


class UnreadInteger(str):
    """Text given for an integer flag that vLLM's converter refuses; ``reason`` says why (Engine reports it)."""

    reason: str

    def __new__(cls, text: str, reason: str) -> "UnreadInteger":
        made = super().__new__(cls, text)
        made.reason = reason
        return made


def integer_spec(key: str, version: str) -> FlagSpec | None:
    """The snapshot's entry for ``key`` when vLLM ``version`` reads it as one integer; None otherwise."""
    try:
        snapshot = load_snapshot(version)
    except FlagError:
        return None
    spec = snapshot.flags.get(key)
    if spec is None or spec.type != "int" or spec.kind != "store" or spec.takes_list:
        return None
    return spec


def read_engine_integers(engine: Mapping[str, Any], version: Any) -> dict[str, Any]:
    """``engine`` with every text value of an integer flag read as the pinned vLLM reads it (``16k`` is 16000,
    ``auto`` -1 for ``max_model_len``): a preset file and an override take what `vllm serve` takes. Text the
    converter refuses becomes an ``UnreadInteger`` carrying vLLM's reason; other values are left as they are."""
    if not isinstance(version, str):
        return dict(engine)
    out: dict[str, Any] = {}
    for key, value in engine.items():
        spec = integer_spec(key, version) if isinstance(key, str) and isinstance(value, str) else None
        if spec is None or (spec.optional and value == "None"):
            out[key] = value
            continue
        converter = converter_of(spec.type_detail)
        try:
            out[key] = read_vllm_int(value, converter)
        except ValueError as exc:
            out[key] = UnreadInteger(value, str(exc))
    return out


# --------------------------------------------------------------------------
# Mapping to argv
# --------------------------------------------------------------------------


def _format_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, float):
        return repr(value)  # shortest round-trip text: 0.9 -> "0.9"
    return str(value)


def _with_value(flag: str, value: str) -> list[str]:
    # argparse would read a value starting with "-" as another option.
    return [f"{flag}={value}"] if value.startswith("-") else [flag, value]


def engine_to_argv(engine: Mapping[str, object], version: str) -> list[str]:
    """`vllm serve` arguments for a preset's `engine:` mapping, sorted by key.

    Raises FlagError if `check_engine` finds any error (warnings pass).
    """
    errors = tuple(p for p in check_engine(engine, version) if p.severity == "error")
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise FlagError(f"{first.field}: {first.message}{more}", field=first.field, hint=first.hint, problems=errors)

    snapshot = load_snapshot(version)
    argv: list[str] = []
    for key in sorted(engine):
        value = engine[key]
        if value is not None:
            argv.extend(_flag_argv(snapshot.flags[key], key, value))
    return argv


def _flag_argv(spec: FlagSpec, key: str, value: object) -> list[str]:
    """The arguments for one checked, non-null engine value."""
    if spec.kind in _SWITCH_KINDS:
        return _switch_argv(spec, key, value)
    flag = spec.flag
    if spec.kind == "count":
        return [flag] * (value if isinstance(value, int) else int(str(value)))
    if spec.kind == "append":
        items = value if isinstance(value, (list, tuple)) else [value]
        return [part for item in items for part in _with_value(flag, _format_scalar(item))]
    if spec.nargs == "?" and isinstance(value, bool):
        return [flag] if value else []
    if spec.takes_list:
        items = value if isinstance(value, (list, tuple)) else [value]
        return [flag, *(_format_scalar(item) for item in items)]
    if value == AUTO and converter_of(spec.type_detail) == "human_readable_int_or_auto":
        return [flag, "auto"]  # what -1 means, in the word vLLM takes for it
    return _with_value(flag, _format_scalar(value))


def _switch_argv(spec: FlagSpec, key: str, value: object) -> list[str]:
    """The option that says the value, or none where leaving it out says it."""
    if spec.kind == "boolean_optional":
        chosen = spec.flag if value else spec.negative_flag
        if chosen is None:
            raise FlagError(f"engine.{key}: this vLLM has no option to turn it off", field=f"engine.{key}")
        return [chosen]
    if spec.kind == "store_false":
        return [] if value else [spec.flag]
    return [spec.flag] if value else []  # store_true, store_const
