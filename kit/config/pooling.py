"""Pooling models (embeddings, scores): what vLLM's runner makes of a preset's model, from kit/data/pooling.yaml.

Public entry point: ``pooling_profile(flags, spec)``; the planner, the smoke checks and the side-by-side stack
read its answer, so they agree on which task a server runs and whether it keeps a KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from kit.core.datafiles import load_yaml

if TYPE_CHECKING:
    from kit.config.modelinfo import ModelSpec


@lru_cache(maxsize=1)
def pooling_table() -> dict[str, Any]:
    return load_yaml("pooling.yaml")


@dataclass(frozen=True)
class PoolingProfile:
    runner: str  # generate | pooling
    task: str | None  # embed | classify (pooling only)
    encoder_only: bool  # no KV cache
    score: str | None  # bi-encoder | cross-encoder: /score and /rerank answer; None: no score routes

    @property
    def pooling(self) -> bool:
        return self.runner == "pooling"


def _suffix_default(architecture: str) -> tuple[str, str] | None:
    for suffix, runner, convert in pooling_table()["suffix_defaults"]:
        if architecture.endswith(suffix):
            return runner, convert
    return None


def resolve_runner(architecture: str, runner: str | None, convert: str | None) -> tuple[str, str | None]:
    """(runner, pooling task) as vLLM resolves --runner/--convert for this architecture."""
    default = _suffix_default(architecture)
    if runner in (None, "auto"):
        runner = default[0] if default else "generate"
    if runner != "pooling":
        return runner, None
    if convert in ("embed", "classify"):
        return runner, convert
    if default and default[0] == "pooling":
        return runner, default[1]
    return runner, pooling_table()["pooling_fallback_convert"]


def pooling_profile(flags: dict[str, Any], spec: ModelSpec | None) -> PoolingProfile:
    """``flags``: the preset's engine flags; ``spec``: the model's ModelSpec (architecture, is_causal, num_labels),
    or None when its shape is unknown offline (then only the flags decide)."""
    architecture = spec.architecture if spec is not None else ""
    runner, task = resolve_runner(architecture, flags.get("runner"), flags.get("convert"))
    if runner != "pooling":
        return PoolingProfile(runner, None, False, None)
    table = pooling_table()
    encoder_only = spec is not None and (architecture in table["encoder_only_architectures"] or not spec.is_causal)
    row = table["tasks"][task]
    needs = row.get("score_needs_num_labels")
    score = row["score"] if needs is None or (spec is not None and spec.num_labels == needs) else None
    return PoolingProfile(runner, task, encoder_only, score)
