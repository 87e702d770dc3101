"""The KV cache: bytes per token on one rank, the blocks a budget holds, the CPU backend's budget, and vLLM's own
error texts when one request does not fit (wording per release: kit/data/vllm.yaml `kv_error_wording`)."""

from __future__ import annotations

from pydantic import BaseModel

from kit.config.modelinfo import ModelSpec
from kit.core.errors import PlanError
from kit.memory.inputs import GIB, Resolved
from kit.memory.rules import rules_for


def kv_bytes_per_token_per_layer(model: ModelSpec, tp: int, kv_bytes: int) -> int:
    """Bytes of KV cache one token takes in one layer on one rank."""
    if model.is_mla:
        # compressed latent + decoupled RoPE key, shared by all heads: no factor 2, not split by TP
        assert model.kv_lora_rank is not None  # is_mla
        return (model.kv_lora_rank + (model.qk_rope_head_dim or 0)) * kv_bytes
    kv_rank = max(model.num_kv_heads // tp, 1)  # split, or replicated when fewer KV heads than ranks
    return 2 * kv_rank * model.head_dim * kv_bytes



def extensible_hint(utilization: float) -> str:
    """vLLM 0.34's advice after the extensible KV cache was sized (vllm/v1/core/kv_cache_planning.py
    `_more_kv_cache_memory_hint`, after_warmup=True, v0.34.0 wheel)."""
    graphs = " CUDA graphs take less with fewer or smaller capture sizes in the compilation config."
    used_by = "the model, its activations, CUDA graphs and warmup"
    if utilization < 1.0:
        return (f"The KV cache gets what is left after {used_by} within `gpu_memory_utilization`={utilization:g}; "
                "increase it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or "
                f"`max_num_seqs`.{graphs}")
    return (f"The extensible KV cache already takes all device memory left after {used_by}; decrease "
            f"`max_model_len` or `max_num_seqs`, or the model needs a device with more memory.{graphs}")


def kv_error_text(vllm_version: str, max_len: int, needed: float, available: float, estimate: int,
                  extensible_utilization: float | None = None) -> str:
    """vLLM's refusal when one request of ``max_len`` tokens needs more KV cache than the budget holds
    (``extensible_utilization``: the utilization, where the release's extensible KV cache sized the budget)."""
    wording = rules_for(vllm_version).kv_error_wording
    new = wording in ("model-s", "extensible")
    based = f"Based on the available memory, the estimated maximum model length is {estimate}. " if estimate > 0 else ""
    if wording == "extensible":
        hint = (extensible_hint(extensible_utilization) if extensible_utilization is not None else
                "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU "
                "memory reservation on the CPU backend, despite its name).")
        return (
            f"To serve at least one request with the model's max seq len ({max_len}), "
            f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({available / GIB:.2f} GiB). {based}{hint} Decreasing `max_model_len` also reduces what is needed."
        )
    if new:
        return (
            f"To serve at least one request with the model's max seq len ({max_len}), "
            f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({available / GIB:.2f} GiB). {based}Try increasing `gpu_memory_utilization` (which also controls "
            f"CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine."
        )
    return (
        f"To serve at least one request with the models's max seq len ({max_len}), "
        f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({available / GIB:.2f} GiB). {based}Try increasing `gpu_memory_utilization` or decreasing "
        f"`max_model_len` when initializing the engine."
    )


NO_MEMORY_ERROR = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
)


def cpu_kv_bytes(r: Resolved, weights: float) -> float:
    """The CPU backend's KV budget: VLLM_CPU_KVCACHE_SPACE, or (from 0.13) host RAM at the utilisation less the
    weights and the process's own footprint (`cpu_process_overhead_gib`)."""
    if r.cpu_kvcache_space_gib is not None:
        return r.cpu_kvcache_space_gib * GIB
    if r.gpu_memory_gib is None:
        raise PlanError(
            f"vLLM {r.vllm_version} sizes the CPU KV cache from host memory, and none was given",
            hint="give --cpu-kvcache-space-gib G (VLLM_CPU_KVCACHE_SPACE) or the host RAM as --gpu-memory-gib",
        )
    overhead = rules_for(r.vllm_version).cpu_process_overhead_gib
    return r.gpu_memory_gib * GIB * r.gpu_memory_utilization - weights - overhead * GIB


class KvLayout(BaseModel):
    """How vLLM lays a rank's KV cache out in blocks (vllm/v1/core/kv_cache_planning.py and kv_cache_utils.py at
    0.33.0): every block spans ``group_size`` layers (one layer of each KV cache group shares a tensor), and a request
    of max_model_len tokens takes ``blocks_per_request`` blocks summed over the groups."""

    bytes_per_block: int
    blocks_per_request: int
    groups: int = 1
    sliding_groups: int = 0


def full_attention_layout(block: int, per_token: int, max_len: int) -> KvLayout:
    """One group of full-attention layers: a block holds ``block`` tokens of every layer (``per_token`` bytes a
    token on the rank), a request takes every block of max_model_len."""
    return KvLayout(bytes_per_block=block * per_token, blocks_per_request=-(-max_len // block))


def _layer_kinds(model: ModelSpec) -> list[str] | None:
    """"full" or "sliding" per decoder layer, or None where a layer is of another kind (linear attention, state
    space, chunked local attention...), which the planner does not lay out."""
    if model.layer_types:
        kinds = {"full_attention": "full", "sliding_attention": "sliding"}
        if any(t not in kinds for t in model.layer_types) or len(model.layer_types) != model.num_layers:
            return None
        return [kinds[t] for t in model.layer_types]
    return ["sliding" if model.sliding_window else "full"] * model.num_layers


def kv_layout(model: ModelSpec, r: Resolved, per_token_per_layer: int, layers: int) -> KvLayout | None:
    """The block layout of a rank holding ``layers`` decoder layers, or None where the planner cannot say it (then
    every layer is planned as full attention). Sliding-window layers (SlidingWindowSpec, vllm/v1/kv_cache_interface.py)
    keep min(window - 1 + in-flight tokens, max_model_len) tokens plus one block per request, where the in-flight
    tokens are max_concurrent_batches x max_num_batched_tokens (vllm/config/vllm.py: 2 with async scheduling on the
    V2 runner; kit/data/vllm.yaml `kv_in_flight_batches`); each attention type is a group, split into groups of the
    smallest type's size, or of the largest's when it is under 1.5 x the smallest
    (kv_cache_planning.py `_get_kv_cache_groups_uniform_page_size`)."""
    block, max_len = r.block_size, r.max_model_len
    full_blocks = -(-max_len // block)
    kinds = _layer_kinds(model) if not model.is_mla else ["full"] * model.num_layers
    if kinds is None:
        return None
    if "sliding" not in kinds:
        return full_attention_layout(block, per_token_per_layer * layers, max_len)
    batches = rules_for(r.vllm_version).kv_in_flight_batches
    if not batches or r.pipeline_parallel_size > 1 or layers != model.num_layers or not model.sliding_window:
        return None
    counts = {kind: kinds.count(kind) for kind in ("full", "sliding") if kind in kinds}
    smallest, largest = min(counts.values()), max(counts.values())
    size = largest if largest < smallest * 1.5 else smallest
    groups = {kind: -(-count // size) for kind, count in counts.items()}
    in_flight = int(batches) * r.max_num_batched_tokens
    sliding_blocks = -(-min(model.sliding_window - 1 + in_flight, max_len) // block) + 1
    per_request = groups.get("full", 0) * full_blocks + groups.get("sliding", 0) * sliding_blocks
    return KvLayout(bytes_per_block=block * per_token_per_layer * size, blocks_per_request=per_request,
                    groups=sum(groups.values()), sliding_groups=groups.get("sliding", 0))
