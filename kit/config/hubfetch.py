"""What the one-shot fetch gets: the model and every other hub artefact the engine flags name.

Public entry point: ``fetch_spec(preset, model_arg)`` -> the JSON argument of the in-image fetch script
(kit/launch/fetch_files.py, whose source kit/config/fetchscript.py ``fetch_script()`` returns). The rules (which weight files vLLM
loads, its ignore patterns) are data in kit/data/fetch.yaml, with their upstream sources.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from kit.config.preset import Preset
from kit.core.datafiles import load_yaml
from kit.config.hubrevision import revision_problem
from kit.core.errors import PresetError, Problem

# Speculative methods that need no model of their own (vllm/config/speculative.py at v0.33.0): n-gram and suffix
# proposers look at the prompt; mtp/dspark read the target's own checkpoint when no model is given.
SPEC_METHODS_WITHOUT_MODEL = ("ngram", "[ngram]", "ngram_gpu", "suffix", "extract_hidden_states", "mtp", "dspark")

LOCAL_PREFIXES = ("/", "./", "../", "~")


LORA_HINT = 'e.g. lora_modules: ["sql=org/sql-lora", "{\\"name\\": \\"chat\\", \\"path\\": \\"/adapters/chat\\"}"]'


class ArtefactError(PresetError):
    """An engine flag names a hub artefact in a form vLLM would not accept."""

    def __init__(self, field: str, message: str, hint: str | None = None):
        super().__init__(f"{field}: {message}", hint=hint)
        self.field, self.reason = field, message


@dataclass(frozen=True)
class Artefact:
    role: str  # model | tokenizer | lora NAME | draft model
    ref: str  # hub id, or a path as the container sees it
    revision: str | None
    mode: str  # weights | tokenizer | all (see fetch_files.select_files)
    field: str  # the preset field that names it, for messages
    marker: str | None = None  # a local path must hold this file

    @property
    def is_local(self) -> bool:
        return self.ref.startswith(LOCAL_PREFIXES)


def fetch_rules() -> dict[str, Any]:
    return load_yaml("fetch.yaml")


def lora_adapters(value: Any) -> list[tuple[str, str]]:
    """(name, path) of each adapter in engine.lora_modules, in any form vLLM's LoRAParserAction takes."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    found: list[tuple[str, str]] = []
    for item in items:
        entries: list[Any]
        if isinstance(item, dict):
            entries = [item]
        elif isinstance(item, str) and item.lstrip().startswith(("{", "[")):
            try:
                parsed = json.loads(item)
            except json.JSONDecodeError as exc:
                raise ArtefactError("engine.lora_modules", f"not valid JSON ({exc.msg})") from None
            entries = parsed if isinstance(parsed, list) else [parsed]
        elif isinstance(item, str) and "=" in item:
            name, _, path = item.partition("=")
            entries = [{"name": name, "path": path}]
        else:
            raise ArtefactError("engine.lora_modules", "each entry is name=path or a JSON object with name and path",
                                LORA_HINT)
        for entry in entries:
            if not isinstance(entry, dict) or not entry.get("name") or not entry.get("path"):
                raise ArtefactError("engine.lora_modules", "each adapter needs a name and a path", LORA_HINT)
            found.append((str(entry["name"]), str(entry["path"])))
    return found


def speculative_config(spec: Any) -> dict[str, Any] | None:
    """engine.speculative_config as a dict (vLLM takes it as JSON text or a mapping), else None."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError:
            raise ArtefactError("engine.speculative_config", "not valid JSON") from None
    return spec if isinstance(spec, dict) else None


def draft_model(spec: Any) -> tuple[str, str | None] | None:
    """(model, revision) of the speculative draft when it is a checkpoint of its own, else None."""
    spec = speculative_config(spec)
    if spec is None:
        return None
    model, method = spec.get("model"), spec.get("method")
    if not model or model in SPEC_METHODS_WITHOUT_MODEL or (method in SPEC_METHODS_WITHOUT_MODEL and not model):
        return None
    return str(model), spec.get("revision")


def artefacts_for(preset: Preset, model_arg: str) -> list[Artefact]:
    """Everything the server will read from the hub (or from a local path), model first."""
    eng = preset.engine.flags()
    rules = fetch_rules()
    model = preset.model
    field = "model.host_path" if model.host_path else "model.generate" if model.generate else "model.id"
    out = [Artefact("model", model_arg, preset.model.revision, "weights", field, marker="config.json")]
    tokenizer, tokenizer_revision = eng.get("tokenizer"), eng.get("tokenizer_revision")
    if tokenizer and tokenizer not in (preset.model.id, model_arg):
        out.append(Artefact("tokenizer", str(tokenizer), tokenizer_revision, "tokenizer", "engine.tokenizer"))
    elif tokenizer_revision and tokenizer_revision != preset.model.revision and not preset.model.is_local:
        # vLLM reads the model repo's tokenizer files at that other revision
        out.append(Artefact("tokenizer", model_arg, str(tokenizer_revision), "tokenizer", "engine.tokenizer_revision"))
    for name, path in lora_adapters(eng.get("lora_modules")):
        # vLLM downloads an adapter at its default revision, so the kit cannot pin one either.
        out.append(Artefact(f"lora {name}", path, None, "all", "engine.lora_modules", marker=rules["adapter_marker"]))
    draft = draft_model(eng.get("speculative_config"))
    if draft is not None and draft[0] not in (preset.model.id, model_arg):
        out.append(Artefact("draft model", draft[0], draft[1], "weights", "engine.speculative_config.model",
                            marker="config.json"))
    for artefact in out:  # each revision becomes a file under the cache's refs/ folder (fetch_files._point_ref)
        problem = artefact.revision is not None and revision_problem(str(artefact.revision))
        if problem:
            field = "engine.tokenizer_revision" if artefact.role == "tokenizer" else (
                "model.revision" if artefact.role == "model" else "engine.speculative_config.revision")
            raise ArtefactError(field, f"{artefact.revision!r} {problem}: a revision is a 40-hex commit or a branch "
                                "or tag name", "e.g. main, v1.0, or the commit's 40-hex id")
    return out


def artefact_problems(where: str, preset: Preset) -> list[Problem]:
    """The engine flags' artefacts as `kit validate` problems (file and field), before anything renders."""
    try:
        artefacts_for(preset, preset.model.local_path or preset.model.id)
    except ArtefactError as exc:
        return [Problem(f"{where}: {exc.field}", exc.reason, exc.hint)]
    return []


def fetch_spec(preset: Preset, model_arg: str) -> str:
    """The fetch script's one argument: the rules and the artefacts, as compact JSON."""
    eng = preset.engine.flags()
    rules = fetch_rules()
    spec: dict[str, Any] = {
        "rules": {k: rules[k] for k in ("default_ignore_patterns", "load_formats", "mistral_probe",
                                        "safetensors_index", "not_needed", "weight_suffixes")},
        "load_format": str(eng.get("load_format") or "auto").lower(),
        "artefacts": [asdict(a) for a in artefacts_for(preset, model_arg)],
    }
    ignore = eng.get("ignore_patterns")
    if ignore is not None:
        spec["ignore_patterns"] = [ignore] if isinstance(ignore, str) else list(ignore)
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))
