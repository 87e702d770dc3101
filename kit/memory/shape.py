"""A model's shape across ranks: pipeline stages, the padded vocabulary, MoE layers, and the divisibility rules vLLM
enforces at start for a tensor x pipeline parallel layout."""

from __future__ import annotations

from kit.config.modelinfo import ModelSpec
from kit.core.errors import PlanError


def pp_layer_ranges(num_layers: int, pp: int) -> list[range]:
    """vLLM's get_pp_indices: equal shares, the remainder going to the stages before the last."""
    per = num_layers // pp
    sizes = [per] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    ranges, start = [], 0
    for size in sizes:
        ranges.append(range(start, start + size))
        start += size
    return ranges


def padded_vocab(vocab: int) -> int:
    return -(-vocab // 64) * 64


def parallelism_problems(model: ModelSpec, tp: int, pp: int, group_size: int | None = None) -> list[tuple[str, str, str]]:
    """Every divisibility rule vLLM enforces at start that ``tp`` x ``pp`` breaks, as (field, message, fix)."""
    tp_field, pp_field = "engine.tensor_parallel_size", "engine.pipeline_parallel_size"
    found: list[tuple[str, str, str]] = []
    if model.num_attention_heads % tp:
        found.append((tp_field,
                      f"Total number of attention heads ({model.num_attention_heads}) must be divisible by "
                      f"tensor parallel size ({tp}).",
                      f"use a divisor of {model.num_attention_heads}"))
    if not model.is_mla:
        kv = model.num_kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            found.append((tp_field,
                          f"{model.num_kv_heads} KV heads cannot be split or replicated evenly over tensor parallel "
                          f"size {tp}",
                          f"use a divisor or a multiple of {kv}"))
    if padded_vocab(model.vocab_size) % tp:
        found.append((tp_field,
                      f"vocabulary ({model.vocab_size}, padded to {padded_vocab(model.vocab_size)}) is not divisible "
                      f"by tensor parallel size ({tp})",
                      "use a power of two"))
    for label, size in (("intermediate_size", model.intermediate_size if not model.is_moe or model.first_k_dense_replace else 0),
                        ("moe_intermediate_size", model.moe_intermediate_size or 0)):
        if size and size % tp:
            found.append((tp_field, f"{label} ({size}) is not divisible by tensor parallel size ({tp})",
                          f"use a divisor of {size}"))
        elif size and group_size and group_size > 0 and (size // tp) % group_size:
            found.append((tp_field,
                          f"{label} per rank ({size} / {tp} = {size // tp}) is not a multiple of the quantisation "
                          f"group size ({group_size}): the quantised weights cannot be split this way",
                          "use a smaller tensor parallel size"))
    if pp > model.num_layers:
        found.append((pp_field,
                      f"pipeline parallel size ({pp}) is larger than the number of layers ({model.num_layers})",
                      f"at most {model.num_layers}"))
    return found


def check_parallelism(model: ModelSpec, tp: int, pp: int, group_size: int | None = None) -> None:
    """The divisibility rules vLLM enforces at start, as a PlanError naming the field (the first one broken)."""
    for field, message, fix in parallelism_problems(model, tp, pp, group_size):
        raise PlanError(message, hint=f"{field}: {fix}")



def moe_layers_in(model: ModelSpec, layers: range) -> int:
    """How many of ``layers`` are MoE layers (index >= first_k_dense_replace and a multiple of moe_layer_freq),
    counted arithmetically: the planner's cost must not grow with the layer count."""
    if not model.is_moe or not layers:
        return 0
    freq = max(model.moe_layer_freq, 1)
    low = max(layers.start, model.first_k_dense_replace)
    first_moe = -(-low // freq) * freq
    return 0 if first_moe >= layers.stop else (layers.stop - 1 - first_moe) // freq + 1
