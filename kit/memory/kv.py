"""The KV cache: bytes per token on one rank, the blocks a budget holds, the CPU backend's budget, and vLLM's own
error texts when one request does not fit (wording per release: kit/data/vllm.yaml `kv_error_wording`)."""

from __future__ import annotations

from kit.config.modelinfo import ModelSpec
from kit.core.errors import PlanError
from kit.memory.inputs import GIB, Resolved
from kit.memory.rules import rules_for


def kv_bytes_per_token_per_layer(model: ModelSpec, tp: int, kv_bytes: int) -> int:
    """Bytes of KV cache one token takes in one layer on one rank."""
    if model.is_mla:
        # compressed latent + decoupled RoPE key, shared by all heads: no factor 2, not split by TP
        return (model.kv_lora_rank + (model.qk_rope_head_dim or 0)) * kv_bytes
    kv_rank = max(model.num_kv_heads // tp, 1)  # split, or replicated when fewer KV heads than ranks
    return 2 * kv_rank * model.head_dim * kv_bytes



def kv_error_text(vllm_version: str, max_len: int, needed: float, available: float, estimate: int) -> str:
    """vLLM's refusal when one request of ``max_len`` tokens needs more KV cache than the budget holds."""
    new = rules_for(vllm_version)["kv_error_wording"] == "model-s"
    based = f"Based on the available memory, the estimated maximum model length is {estimate}. " if estimate > 0 else ""
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
    overhead = rules_for(r.vllm_version)["cpu_process_overhead_gib"]
    return r.gpu_memory_gib * GIB * r.gpu_memory_utilization - weights - overhead * GIB


def blocks_in(kv_bytes: float, per_token: int, block: int) -> int:
    """Whole KV blocks of ``block`` tokens a budget of ``kv_bytes`` holds on a rank with ``per_token`` bytes/token."""
    if kv_bytes <= 0 or per_token == 0:
        return 0
    return int(kv_bytes // (block * per_token))
