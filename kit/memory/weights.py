"""Weights: what "Model loading took" counts on one rank, from parameter counts, the quantisation's packing (or the
checkpoint's exact bytes), the RoPE cache and the caching allocator's segment tails.

The per-release facts (Machete's compute capability, vLLM's max_split_size_mb around load_model) come from
kit/data/vllm.yaml through kit/memory/rules.py; the allocator's block sizes are PyTorch's, not vLLM's.
"""

from __future__ import annotations

from pydantic import BaseModel

from kit.config.modelinfo import DTYPE_BYTES, ModelSpec
from kit.memory.inputs import QUANT_FAMILY, Resolved, derived_max_model_len
from kit.memory.rules import rules_for
from kit.memory.shape import moe_layers_in, padded_vocab
from kit.memory.terms import Term

MIB = 1 << 20


def _linear_bytes_per_param(r: Resolved, model: ModelSpec) -> float:
    """Bytes per weight element of a quantised linear layer, scales and zeros included."""
    dtype_bytes = DTYPE_BYTES[r.dtype]
    method = QUANT_FAMILY.get(r.quantization or "", r.quantization)
    if method is None:
        return dtype_bytes
    q = model.quantization
    bits = r.weight_bits or 8
    group = (q.group_size if q else None) or 0
    if method in ("awq", "gptq"):
        # packed int32 weights + fp16 scale + packed zero point per group and output column
        zero_bytes = bits / 8
        residual = 0.0
        if method == "awq" and machete_runs(r):
            # Machete stores AWQ's zero points pre-multiplied by the scales, in the activation dtype
            # (vllm/model_executor/kernels/linear/mixed_precision/machete.py process_weights_after_loading,
            # transform_w_zp, read at 0.26.0 and 0.33.0), and holds a little more than that per weight (kit/data/vllm.yaml
            # `machete_awq_residual_bytes_per_param`, fitted)
            zero_bytes = dtype_bytes
            residual = float(rules_for(r.vllm_version).machete_awq_residual_bytes_per_param or 0.0)
        per_group = (2 + zero_bytes) / group if group > 0 else 0.0
        return bits / 8 + per_group + residual
    if method == "fp8":
        return 1.0  # scales are per tensor, per channel or per 128x128 block: negligible
    if method == "bitsandbytes":
        return bits / 8 + 4 / 64  # fp32 absmax per 64 weights
    if method in ("compressed-tensors", "modelopt"):
        return bits / 8 + (2 / group if group > 0 else 0.0)
    return bits / 8


def machete_runs(r: Resolved) -> bool:
    """vLLM picks Machete for AWQ/GPTQ checkpoints on compute capability 9.0 only (machete.py:35 can_implement:
    "Machete requires compute capability of 90"; kit/data/vllm.yaml `machete_capability`, per release); the H200
    logs at 0.26.0 say "Using MacheteLinearKernel"."""
    capability = rules_for(r.vllm_version).machete_capability
    return capability is not None and r.compute_capability == str(capability)


# PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp: round_size, get_allocation_size,
# should_split): blocks are multiples of 512 B; a request of 10 MiB or more gets a new segment rounded up to
# 2 MiB, and the segment's tail is split off as a free block only when it is larger than 1 MiB, so a tail of
# 1 MiB or less stays with the tensor and torch.cuda.memory_allocated() counts it. vLLM's "Model loading took"
# is that counter's growth over load_model (vllm/v1/worker/gpu/model_runner.py:282-306 with vllm/utils/mem_utils.py:86
# DeviceMemoryProfiler; vllm/platforms/cuda.py:351-356: max_memory_allocated right after reset_peak_memory_stats;
# all at v0.26.0).
ALLOC_MIN_BLOCK = 512
ALLOC_SPLIT_TAIL = 1 << 20
ALLOC_OWN_SEGMENT = 10 << 20
ALLOC_SEGMENT_ROUND = 2 << 20
# vLLM wraps load_model in max_split_size_mb:20 (vllm/v1/worker/gpu_worker.py:273-294 and :429,
# "20 MiB is the minimum PyTorch allows", PR #41268 merged 2026-04-30; read at v0.26.0, absent from the 0.19 logs
# in kit/data/calibration.yaml). The allocator never splits a block of that size or more, so a weight of 20 MiB
# or more keeps its whole 2 MiB-rounded segment (Qwen2.5-7B's o_proj: 24.5 MiB in 26 MiB).
# The split size is per release: kit/data/vllm.yaml `load_max_split_mb` (20 from 0.26.0; 0.20-0.25 unverified).


def load_max_split_bytes(vllm_version: str) -> int | None:
    mib = rules_for(vllm_version).load_max_split_mb
    return None if mib is None else int(mib) * MIB


def allocator_block_bytes(size: float, max_split: float | None = None) -> float:
    """Bytes torch.cuda.memory_allocated() counts for one fresh tensor of ``size`` bytes."""
    block = -(-int(size) // ALLOC_MIN_BLOCK) * ALLOC_MIN_BLOCK
    if block < ALLOC_OWN_SEGMENT:
        return block  # packed into shared 2 MiB / 20 MiB segments and split to the block
    segment = -(-block // ALLOC_SEGMENT_ROUND) * ALLOC_SEGMENT_ROUND
    if max_split is not None and block >= max_split:
        return segment
    return segment if segment - block <= ALLOC_SPLIT_TAIL else block


def allocator_slack_bytes(r: Resolved, model: ModelSpec, tp: int, layers: range, first: bool, last: bool,
                           pp: int) -> float:
    """Segment tails the caching allocator leaves with the big tensors of one rank (embedding, lm_head, and each
    dense layer's fused qkv, o, gate_up and down matrices, which vLLM allocates one by one). MoE experts, MLA
    and other quantisation layouts are left out: their tails are a smaller share of the weights."""
    dtype_bytes = DTYPE_BYTES[r.dtype]
    max_split = load_max_split_bytes(r.vllm_version)

    def slack(elements: float, element_bytes: float = dtype_bytes) -> float:
        size = elements * element_bytes
        return allocator_block_bytes(size, max_split) - size

    h = model.hidden_size
    vocab_rank = padded_vocab(model.vocab_size) / tp
    total = 0.0
    if first:
        total += slack(vocab_rank * h)
    if last and (not model.tie_word_embeddings or (pp > 1 and not first)):
        total += slack(vocab_rank * h)
    method = QUANT_FAMILY.get(r.quantization or "", r.quantization)
    if model.is_mla or model.is_moe or method not in (None, "awq", "gptq", "fp8"):
        return total
    # the matrix itself: model dtype, or the packed int32 / fp8 weight of a quantised layer (scales and zero
    # points are small, or under 10 MiB and packed into shared segments)
    linear_bytes = dtype_bytes if method is None else (r.weight_bits or 8) / 8
    hd, heads_rank = model.head_dim, model.num_attention_heads / tp
    kv_rank = max(model.num_kv_heads // tp, 1)
    inter_rank = model.intermediate_size / tp
    per_layer = sum(slack(elements, linear_bytes) for elements in (
        (heads_rank + 2 * kv_rank) * hd * h, h * heads_rank * hd, 2 * inter_rank * h, h * inter_rank))
    return total + len(layers) * per_layer


class Counts(BaseModel):
    """Parameter counts of one rank of one pipeline stage."""

    linear: float = 0  # quantisable matmul weights
    dense16: float = 0  # embeddings, lm_head, routers: kept in the model dtype
    small: float = 0  # norms and biases (model dtype)


def stage_counts(model: ModelSpec, tp: int, layers: range, first: bool, last: bool, pp: int) -> Counts:
    """Parameter counts of one rank: every layer's attention is alike, and MLPs are MoE or dense, so one of
    each is counted and multiplied (constant cost whatever the layer count)."""
    h, nh, hd = model.hidden_size, model.num_attention_heads, model.head_dim
    heads_rank = nh / tp
    attn_linear = attn_small = 0.0
    if model.is_mla:
        nope, rope = model.qk_nope_head_dim or 128, model.qk_rope_head_dim or 64
        v = model.v_head_dim or 128
        kv_lora = model.kv_lora_rank or 0  # set: that is what is_mla means
        if model.q_lora_rank:
            attn_linear += h * model.q_lora_rank + model.q_lora_rank * heads_rank * (nope + rope)
            attn_small += model.q_lora_rank
        else:
            attn_linear += h * heads_rank * (nope + rope)
        attn_linear += h * (kv_lora + rope)  # kv_a_proj_with_mqa, replicated
        attn_linear += kv_lora * heads_rank * (nope + v)
        attn_linear += heads_rank * v * h
        attn_small += kv_lora
    else:
        kv_rank = max(model.num_kv_heads // tp, 1)
        q_out, kv_out = heads_rank * hd, 2 * kv_rank * hd
        attn_linear += h * (q_out + kv_out) + q_out * h
        if model.attention_bias:
            attn_small += q_out + kv_out
        if model.qk_norm:
            attn_small += 2 * hd
    moe_linear = moe_dense16 = 0.0
    if model.is_moe:
        n = (model.moe_intermediate_size or model.intermediate_size) / tp
        experts = model.num_experts or 0  # set: that is what is_moe means
        moe_linear += experts * 3 * h * n
        moe_dense16 += h * experts  # router
        if model.shared_expert_intermediate_size:
            moe_linear += 3 * h * model.shared_expert_intermediate_size / tp
            moe_dense16 += h  # shared expert gate
        elif model.num_shared_experts:
            moe_linear += model.num_shared_experts * 3 * h * n
    dense_linear = 3 * h * model.intermediate_size / tp
    moe_layers = moe_layers_in(model, layers)
    dense_layers = len(layers) - moe_layers
    c = Counts(
        linear=len(layers) * attn_linear + moe_layers * moe_linear + dense_layers * dense_linear,
        dense16=moe_layers * moe_dense16,
        small=len(layers) * (attn_small + 2 * h),
    )
    vocab_rank = padded_vocab(model.vocab_size) / tp
    if first:
        c.dense16 += vocab_rank * h
    if last:
        c.small += h
        if not model.tie_word_embeddings or (pp > 1 and not first):
            c.dense16 += vocab_rank * h
    return c


def rope_cache_bytes(model: ModelSpec, dtype_bytes: int) -> float:
    rotary = (model.qk_rope_head_dim or 0) if model.is_mla else model.head_dim  # a latent model has it (modelinfo)
    return derived_max_model_len(model) * rotary * dtype_bytes


def stage_weight_bytes(r: Resolved, model: ModelSpec, counts: Counts, rope: bool) -> float:
    dtype_bytes = DTYPE_BYTES[r.dtype]
    total = counts.linear * _linear_bytes_per_param(r, model) + (counts.dense16 + counts.small) * dtype_bytes
    if rope:
        total += rope_cache_bytes(model, dtype_bytes)
    return total


def exact_scale(r: Resolved, model: ModelSpec) -> float:
    """Ratio of the checkpoint's exact bytes to our count of the whole model, when they describe the same thing."""
    if r.quantization and model.quantization is None:
        return 1.0  # quantised at load: the checkpoint's bytes are not what lands on the GPU
    # hook: the checkpoint's stored tensor bytes (safetensors headers), as served in r.dtype, when they are known
    stored = model.stored_bytes_as_loaded(r.dtype)
    if not stored:
        return 1.0
    whole = stage_counts(model, 1, range(model.num_layers), True, True, 1)
    estimate = stage_weight_bytes(r, model, whole, rope=False)
    ratio = stored / estimate if estimate else 1.0
    return ratio if 0.8 < ratio < 1.25 else 1.0  # a wildly different figure means a different checkpoint layout


def weight_terms(r: Resolved, model: ModelSpec, layers: range, first: bool, last: bool) -> list[Term]:
    """What "Model loading took" counts on one rank of the pipeline stage holding ``layers``, as named terms."""
    tp, pp = r.tensor_parallel_size, r.pipeline_parallel_size
    dtype_bytes = DTYPE_BYTES[r.dtype]
    counts = stage_counts(model, tp, layers, first, last, pp)
    pooled_head_dropped = r.runner == "pooling" and last and not model.tie_word_embeddings
    scale = exact_scale(r, model)
    params = stage_weight_bytes(r, model, counts, rope=False) * scale
    if pooled_head_dropped:
        # vLLM's pooling adapter never allocates the LM head (model_executor/models/adapters.py at 0.32.0:
        # ParallelLMHead becomes a missing layer), so an untied head's weights are not loaded.
        params -= padded_vocab(model.vocab_size) / tp * model.hidden_size * dtype_bytes
    exact = " (scaled to the checkpoint's exact bytes)" if scale != 1.0 else ""
    return [
        Term(figure="weights", name="parameters", bytes=params,
             source=f"config.json shapes: parameter counts per rank x the quantisation's packing{exact} (stage_counts)"),
        Term(figure="weights", name="RoPE cos/sin cache", bytes=rope_cache_bytes(model, dtype_bytes),
             source="vllm/model_executor/layers/rotary_embedding: [max_position, rotary_dim] in the model dtype"),
        Term(figure="weights", name="allocator segment tails",
             bytes=allocator_slack_bytes(r, model, tp, layers, first, last and not pooled_head_dropped, pp),
             source="c10/cuda/CUDACachingAllocator.cpp round_size, should_split: the tails PyTorch's allocator leaves "
                    "with the large weight tensors (allocator_block_bytes)"),
    ]
