"""LoRA adapters and speculative draft models: the weight buffers (and a draft's KV cache) they add on one rank."""

from __future__ import annotations

from functools import lru_cache

from kit.config.modelinfo import DTYPE_BYTES, ModelSpec
from kit.core.datafiles import load_yaml
from kit.core.errors import PlanError
from kit.memory.inputs import DraftInputs, LoraInputs, Resolved
from kit.memory.kv import kv_bytes_per_token_per_layer
from kit.memory.rules import rules_for
from kit.memory.weights import stage_counts, stage_weight_bytes


@lru_cache(maxsize=1)
def _lora_embedding_modules() -> dict[str, list[str]]:
    return load_yaml("lora.yaml")["embedding_modules"]


def resolved_lora(lora: LoraInputs, vllm_version: str) -> LoraInputs:
    """``lora`` with vLLM's defaults of the release filled in where a field was not given."""
    defaults = rules_for(vllm_version).lora_defaults
    filled = {"max_loras": defaults.max_loras, "max_lora_rank": defaults.max_lora_rank}
    return lora.model_copy(update={k: v for k, v in filled.items() if getattr(lora, k) is None})


def lora_buffer_bytes(model: ModelSpec, r: Resolved, lora: LoraInputs, layers: int, first: bool, last: bool) -> float:
    """Bytes of the LoRA A/B buffers vLLM preallocates on one rank (kit/data/lora.yaml has the shapes' sources).

    Per decoder layer and LoRA slot, with rank R, hidden H, per-rank q/kv/MLP widths q, kv, I:
      qkv_proj (3 slices)  A 3*R*H         B R*(q + 2*kv)
      o_proj               A R*q           B R*H
      gate_up_proj (2)     A 2*R*H         B R*2*I
      down_proj            A R*I           B R*H
    fully_sharded_loras divides the column layers' A rank and the row layers' B output by TP.
    embed_tokens (first stage) A V*R, B H*R and lm_head (last stage) A R*H, B V*R where the architecture has them.
    """
    tp = r.tensor_parallel_size
    rank, slots, h = lora.max_lora_rank, lora.max_loras, model.hidden_size
    if rank is None or slots is None:
        raise PlanError("LoRA buffers are planned from resolved sizes (resolved_lora fills max_loras and "
                        "max_lora_rank from the release's rules)")
    col_a_rank = rank / tp if lora.fully_sharded_loras else rank
    row_b_out = h / tp if lora.fully_sharded_loras else h
    q = model.num_attention_heads * model.head_dim / tp
    kv = max(model.num_kv_heads // tp, 1) * model.head_dim
    inter = model.intermediate_size / tp
    per_layer = (3 * col_a_rank * h + rank * (q + 2 * kv)
                 + rank * q + rank * row_b_out
                 + 2 * col_a_rank * h + rank * 2 * inter
                 + rank * inter + rank * row_b_out)
    elements = per_layer * layers
    embedding = _lora_embedding_modules().get(model.architecture, [])
    if first and "embed_tokens" in embedding:
        elements += model.vocab_size * rank + h * rank
    if last and "lm_head" in embedding:
        elements += rank * h + model.vocab_size * rank
    dtype = r.dtype if lora.lora_dtype == "auto" else lora.lora_dtype
    return slots * elements * DTYPE_BYTES[dtype]


# Draft methods whose checkpoints are a few layers that reuse the target's embedding and lm_head when their own
# checkpoint lacks them (vllm/v1/spec_decode/llm_base_proposer.py at v0.33.0: _maybe_share_embeddings,
# _maybe_share_lm_head; the EAGLE family in vllm/config/speculative.py EagleModelTypes).
_SHARING_DRAFTS = ("eagle", "eagle3", "dflash")


def draft_terms(r: Resolved, draft: DraftInputs) -> tuple[float, int, list[str]]:
    """(weight bytes on one rank, KV bytes per token, approximation notes) of a draft model.

    The drafter is loaded inside the target's load_model (vllm/v1/worker/gpu_model_runner.py), so its weights
    count in "Model loading took"; its attention layers get KV cache specs beside the target's, and layers of one
    type share one block pool whose block holds every layer's page (vllm/v1/core/kv_cache_planning.py,
    UniformTypeKVCacheSpecs): the draft's per-token KV adds to the target's and both get the same token count.
    """
    spec = draft.spec
    if spec is None:
        return 0.0, 0, [f"draft model {draft.ref}: its shape is unknown offline, so its weights and KV cache are "
                        "not counted"]
    tp = r.tensor_parallel_size
    if spec.weights_bytes:
        weights = spec.weights_bytes / tp  # exact checkpoint bytes, split by TP (norms are replicated: negligible)
    else:
        quant = spec.quantization
        own = r.model_copy(update={"quantization": quant.method if quant else None,
                                   "weight_bits": quant.bits if quant else None})
        counts = stage_counts(spec, tp, range(spec.num_layers), True, True, 1)
        weights = stage_weight_bytes(own, spec, counts, rope=True)
    per_token = kv_bytes_per_token_per_layer(spec, tp, r.kv_cache_bytes) * spec.num_layers
    notes = []
    if (draft.method or "") in _SHARING_DRAFTS:
        notes.append(f"{draft.method} draft {draft.ref}: counted with its own embedding and lm_head; vLLM shares the "
                     "target's when the draft checkpoint lacks them, so the weights are an upper bound")
    return weights, per_token, notes


def lora_notes(model: ModelSpec) -> list[str]:
    notes = []
    if model.is_moe or model.is_mla:
        notes.append("LoRA buffers of MoE experts and MLA projections are not counted (dense layers only)")
    if model.architecture not in _lora_embedding_modules():
        notes.append(f"LoRA on embed_tokens/lm_head not counted: {model.architecture} is not in kit/data/lora.yaml")
    return notes
