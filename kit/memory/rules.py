"""The planner's per-release rules of vLLM, read from kit/data/vllm.yaml and nowhere else.

A release's rules fold, oldest first, every `rule_changes` entry (releases the kit does not pin) and every pinned
release's `versions.X.defaults` at or below it: a later entry overrides an earlier one key by key, mappings merge,
lists and values replace. The folded mapping is checked as kit/core/tables.py ``Rules`` (the fields every release
has are required there), and the term modules (weights, activation, cudagraph, nontorch, kv) read what they need from
its attributes; none keeps a per-release constant of its own.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from kit.core import datafiles  # as a module: tests stand a changed table in for datafiles.vllm_table
from kit.core.errors import PlanError
from kit.core.tables import FoldedMemoryAccounting, Rules, SamplerRule, check_table
from kit.core.userdata import user_config_dir
from kit.core.versions import cc_tuple, version as version_of

if TYPE_CHECKING:
    from kit.config.modelinfo import ModelSpec

DEFAULT_VLLM_VERSION = "0.33.0"


def parse_version(text: str) -> Version:
    try:
        return version_of(text)
    except InvalidVersion:
        raise PlanError(f"vllm_version {text[:40]!r} is not a version", hint="write it like 0.19.0") from None


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _user_folder() -> Path | None:
    """What the rules depend on besides the shipped table: the user's config folder, whose rows join it."""
    return user_config_dir()


@lru_cache(maxsize=8)
def _entries(user_folder: Path | None = None) -> tuple[tuple[Version, str, dict[str, Any]], ...]:  # noqa: ARG001
    """(release, where, change) of every entry that may set a rule, oldest first (``user_folder``: the cache key)."""
    table = datafiles.vllm_table()
    found = [(parse_version(str(name)), f"rule_changes.{name}", dict(change or {}))
             for name, change in (table.get("rule_changes") or {}).items()]
    found += [(parse_version(str(name)), f"versions.{name}.defaults", dict(entry.get("defaults") or {}))
              for name, entry in (table.get("versions") or {}).items()]
    found.sort(key=lambda item: item[0])
    return tuple(found)


@lru_cache(maxsize=64)
def _rules_at(version: Version, user_folder: Path | None = None) -> Rules:
    folded: dict[str, Any] = {}
    for release, _, change in _entries(user_folder):
        if release <= version:
            folded = _merge(folded, change)
    return check_table(Rules, folded, f"kit/data/vllm.yaml (the rules folded at vLLM {version})", error=PlanError,
                       hint="every release needs the rules the oldest entry (rule_changes.0.0.0) sets")


def rules_for(version: str | Version) -> Rules:
    """The planner's rules of vLLM ``version`` (read-only: the model is frozen and shared)."""
    ver = parse_version(version) if isinstance(version, str) else version
    return _rules_at(ver, _user_folder())


def default_gpu_memory_utilization(vllm_version: str) -> float:
    return float(rules_for(vllm_version).gpu_memory_utilization)


def memory_accounting(version: Version) -> FoldedMemoryAccounting:
    """The profile run's accounting at ``version`` (`memory_accounting`, folded over the releases)."""
    return rules_for(version).memory_accounting


def flashinfer_sampler_used(sampler: SamplerRule | None, compute_capability: str | None,
                            sm_count: int | None) -> bool:
    """Whether vLLM samples with FlashInfer on a GPU (``sampler``: a release's `memory_accounting.sampler`): a
    compute capability in the range of its `flashinfer_when` and more SMs than its floor. The one rule the planner's
    sampler terms and a slim image's FlashInfer modules (kit/deploy/deployment.py) both read. A GPU outside the
    catalog (no compute capability), an unknown SM count or a release without the rule: taken to."""
    when = sampler.flashinfer_when if sampler is not None else None
    if not when or compute_capability is None:
        return True
    if not cc_tuple(when.min_cc) <= cc_tuple(compute_capability) <= cc_tuple(when.max_cc):
        return False
    return sm_count is None or int(sm_count) > int(when.more_than_sms)


# vLLM's DeepSeek attention (vllm/model_executor/models/deepseek_v2.py, the classes registered to it) turns a
# rope_scaling other than the default into `deepseek_yarn` or `deepseek_llama_scaling`, which get_rope builds as
# DeepseekScalingRotaryEmbedding; that calls FlashInfer's rope module (flashinfer/jit/rope.py gen_rope_module) where
# `use_flashinfer` holds (deepseek_scaling_rope.py: fp16 or bf16 on CUDA, a rotary head of 64, 128, 256 or 512, the
# custom op enabled, as in eager mode). Read in 0.33.0 and 0.34.0; seen building at first start on the H200
# (kit/data/calibration/h200-vllm-0.34.0/flashinfer-aot.txt, DeepSeek-V2-Lite).
DEEPSEEK_ROPE_ARCHITECTURES = frozenset({"DeepseekForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
                                         "GlmMoeDsaForCausalLM"})
FLASHINFER_ROPE_HEADS = (64, 128, 256, 512)


def flashinfer_rope_used(architecture: str, rope_scaling: dict[str, Any] | None, rope_head_dim: int | None) -> bool:
    """Whether vLLM applies a model's RoPE with FlashInfer's rope module (DEEPSEEK_ROPE_ARCHITECTURES above): in eager
    mode; a compiled start takes the native path, so there the module is compiled and not used."""
    kind = (rope_scaling or {}).get("rope_type") or (rope_scaling or {}).get("type")
    return (architecture in DEEPSEEK_ROPE_ARCHITECTURES and kind not in (None, "default")
            and rope_head_dim in FLASHINFER_ROPE_HEADS)


def batch_defaults(version: Version, device: str, memory_gib: float | None, gpu_name: str,
                   entrypoint: str, world_size: int = 1) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM's EngineArgs.get_batch_defaults picks them: on the CPU backend
    its `cpu_batch` (times the world size) where the release has one, else the first `batch_tiers` tier the GPU
    matches."""
    rules = rules_for(version)
    cpu = rules.cpu_batch
    if device == "cpu" and cpu:
        tokens, seqs = cpu.llm if entrypoint == "llm" else cpu.serve
        scale = world_size if cpu.per_world_size else 1
        return int(tokens) * scale, int(seqs) * scale
    name = gpu_name.lower()
    for tier in rules.batch_tiers:
        conditional = any(v is not None for v in (tier.min_memory_gib, tier.name_contains, tier.name_excludes))
        if conditional:
            if device != "cuda" or memory_gib is None:
                continue
            if memory_gib < (tier.min_memory_gib or 0):
                continue
            if tier.name_contains is not None and not any(n in name for n in tier.name_contains):
                continue
            if any(n in name for n in tier.name_excludes or []):
                continue
        tokens, seqs = tier.llm if entrypoint == "llm" else tier.serve
        return int(tokens), int(seqs)
    raise PlanError(f"kit/data/vllm.yaml: no batch_tiers tier matches at vLLM {version}")


def planned_versions() -> list[str]:
    """The releases the kit's tables describe: the pinned ones (kit/data/vllm.yaml `versions`) and those whose real
    start-ups the planner was checked on (kit/data/calibration.yaml). Oldest first."""
    known = {str(v) for v in datafiles.vllm_table()["versions"]}
    for point in datafiles.load_yaml("calibration.yaml").get("cases") or []:
        if isinstance(point, dict) and (point.get("inputs") or {}).get("vllm_version"):
            known.add(str(point["inputs"]["vllm_version"]))
    return sorted(known, key=version_of)


def version_gate(text: str, approximate: bool) -> str | None:
    """Refuse a release outside the kit's tables, or (``approximate``) say which known release's rules stand in.

    Returns the note for the plan's `approximate` reason, or None when the release is in the tables."""
    version = parse_version(text)
    known = planned_versions()
    if any(version_of(k) == version for k in known):
        return None
    older = [k for k in known if version_of(k) < version]
    where = ("older than the oldest" if not older else
             "newer than the newest" if version > version_of(known[-1]) else "between two")
    if not approximate:
        raise PlanError(f"vLLM {text[:40]} is not in the kit's tables ({where} of the releases it knows: "
                        f"{', '.join(known)}); its defaults and memory rules are unknown, so it is not planned",
                        hint=f"plan for one of {', '.join(known)}, or add --approximate-version to plan with the "
                             "rules of the nearest older release, marked approximate")
    nearest = f"the nearest older known release, {older[-1]}" if older else f"the oldest known, {known[0]}, a later one"
    return (f"vLLM {text[:40]} is not in the kit's tables ({where} of the releases it knows): planned with rules and "
            f"defaults borrowed from the rows the kit has for other releases ({nearest}), which it may not follow")


def model_runner_for(model: ModelSpec, version: Version) -> str:
    """"V2" where vLLM picks its V2 model runner, else "V1" (kit/data/vllm.yaml `model_runner_v2`, per release)."""
    rule = rules_for(version).model_runner_v2
    if not rule:
        return "V1"
    if model.is_hybrid:
        return "V2" if rule.hybrid else "V1"
    if model.is_moe:
        every = rule.moe == "all"
        return "V2" if every or model.architecture in (rule.moe_architectures or []) else "V1"
    return "V2" if rule.dense else "V1"


def cuda_graphs_charged_by(model: ModelSpec, version: Version) -> bool:
    """Whether the model runner vLLM picks subtracts its CUDA-graph estimate from the KV budget (from 0.21): V1
    always; V2 where the release's rule says so (0.26's V2 runner estimated 0, 0.32's and 0.33's capture and charge)."""
    rules = rules_for(version)
    if not rules.cuda_graph_memory_profiled:
        return False
    if model_runner_for(model, version) == "V1":
        return True
    return bool(rules.model_runner_v2 and rules.model_runner_v2.charges_cuda_graphs)
