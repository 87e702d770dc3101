"""Per-release rules read from kit/data/compat.yaml that both the planner and the deploy checks need.

The planner (kit/memory) runs before kit/deploy, so the one reader of these rows lives here, below both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kit.core.tables import Since, compat_model
from kit.core.versions import version as pep440


def versioned(value: str | Sequence[Since | Mapping[str, str]], vllm_version: str) -> str:
    """A plain value, or the last ``{since, value}`` row whose ``since`` the release has reached (rows as the
    tables' models hold them, or as mappings)."""
    if isinstance(value, str):
        return value
    rows = [(row.since, row.value) if isinstance(row, Since) else (row["since"], row["value"]) for row in value]
    chosen = rows[0][1]
    for since, row_value in rows:
        if pep440(vllm_version) >= pep440(since):
            chosen = row_value
    return chosen


def quantization_min_cc(method: str, vllm_version: str) -> str | None:
    """The compute capability below which ``vllm_version`` refuses ``method`` (None: the kit has no rule)."""
    rule = compat_model().quantization.get(method.lower())
    return versioned(rule.min_cc, vllm_version) if rule else None


def quantization_method_gone(method: str, vllm_version: str, *, registry: bool = True) -> str | None:
    """Why ``vllm_version`` has no quantization method ``method`` (None when it has it, or the kit cannot tell).

    From the release's own registry (compat.yaml ``quantization_methods``) where the kit has read it, and from a
    rule's ``removed_in`` otherwise."""
    table = compat_model()
    name = method.lower()
    rule = table.quantization.get(name)
    if rule is not None and rule.removed_in and pep440(vllm_version) >= pep440(rule.removed_in):
        return f"vLLM removed quantization method {name} in {rule.removed_in}"
    known = table.quantization_methods.get(vllm_version) if registry else None
    if known is not None and name not in known:
        return f"quantization method {name} is not in vLLM {vllm_version}'s registry (QuantizationMethods)"
    return None


def quantization_spellings(method: str, vllm_version: str) -> list[str]:
    """The names close to ``method`` in ``vllm_version``'s registry, when ``method`` is in no release's registry the
    kit has read and has no rule of its own: a misspelling (awq4 for awq), not a method some release removed."""
    import difflib

    table = compat_model()
    name = method.lower()
    registries = table.quantization_methods
    if name in table.quantization or any(name in known for known in registries.values()):
        return []
    return difflib.get_close_matches(name, registries.get(vllm_version) or [], n=3, cutoff=0.6)
