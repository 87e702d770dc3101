"""Per-release rules read from kit/data/compat.yaml that both the planner and the deploy checks need.

The planner (kit/memory) runs before kit/deploy, so the one reader of these rows lives here, below both.
"""

from __future__ import annotations

from typing import Any

from kit.core.datafiles import load_yaml
from kit.core.versions import version as pep440


def versioned(value: Any, vllm_version: str) -> Any:
    """A plain value, or the last ``{since, value}`` row whose ``since`` the release has reached."""
    if not isinstance(value, list):
        return value
    chosen = value[0]["value"]
    for row in value:
        if pep440(vllm_version) >= pep440(row["since"]):
            chosen = row["value"]
    return chosen


def quantization_min_cc(method: str, vllm_version: str) -> str | None:
    """The compute capability below which ``vllm_version`` refuses ``method`` (None: the kit has no rule)."""
    rule = load_yaml("compat.yaml")["quantization"].get(method.lower())
    return versioned(rule["min_cc"], vllm_version) if rule else None


def quantization_method_gone(method: str, vllm_version: str, *, registry: bool = True) -> str | None:
    """Why ``vllm_version`` has no quantization method ``method`` (None when it has it, or the kit cannot tell).

    From the release's own registry (compat.yaml ``quantization_methods``) where the kit has read it, and from a
    rule's ``removed_in`` otherwise."""
    table = load_yaml("compat.yaml")
    name = method.lower()
    rule = table["quantization"].get(name) or {}
    if rule.get("removed_in") and pep440(vllm_version) >= pep440(rule["removed_in"]):
        return f"vLLM removed quantization method {name} in {rule['removed_in']}"
    known = (table.get("quantization_methods") or {}).get(vllm_version) if registry else None
    if known is not None and name not in known:
        return f"quantization method {name} is not in vLLM {vllm_version}'s registry (QuantizationMethods)"
    return None


def quantization_spellings(method: str, vllm_version: str) -> list[str]:
    """The names close to ``method`` in ``vllm_version``'s registry, when ``method`` is in no release's registry the
    kit has read and has no rule of its own: a misspelling (awq4 for awq), not a method some release removed."""
    import difflib

    table = load_yaml("compat.yaml")
    name = method.lower()
    registries = table.get("quantization_methods") or {}
    if name in table["quantization"] or any(name in known for known in registries.values()):
        return []
    return difflib.get_close_matches(name, registries.get(vllm_version) or [], n=3, cutoff=0.6)
