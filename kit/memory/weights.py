"""Weights: what "Model loading took" counts on one rank, from parameter counts, the quantisation's packing as the
kernel keeps it (AWQ/GPTQ: Machete, Marlin or Humming; or the checkpoint's exact bytes), the RoPE cache and what
PyTorch's caching allocator counts beyond the tensors (a replay of its large pool over vLLM's allocation order).

The per-release facts (Machete's and Humming's compute capability, vLLM's max_split_size_mb around load_model) come
from kit/data/vllm.yaml through kit/memory/rules.py; the allocator's block sizes are PyTorch's, not vLLM's.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from kit.config.modelinfo import DTYPE_BYTES, ModelSpec
from kit.memory.inputs import QUANT_FAMILY, Resolved, derived_max_model_len
from kit.memory.rules import rules_for
from kit.memory.shape import moe_layers_in, padded_vocab
from kit.memory.terms import Term

MIB = 1 << 20


def _linear_bytes_per_param(r: Resolved, model: ModelSpec) -> float:
    """Bytes per weight element of a quantised linear layer as the kernel keeps it after loading, scales and zero
    points included (AWQ/GPTQ: mixed_precision_kept_bytes per kernel)."""
    dtype_bytes = DTYPE_BYTES[r.dtype]
    method = QUANT_FAMILY.get(r.quantization or "", r.quantization)
    if method is None:
        return dtype_bytes
    q = model.quantization
    bits = r.weight_bits or 8
    group = (q.group_size if q else None) or 0
    if method in ("awq", "gptq"):
        return mixed_precision_kept_bytes(r, method, bits, group, dtype_bytes)
    if method == "fp8":
        return 1.0  # scales are per tensor, per channel or per 128x128 block: negligible
    if method == "bitsandbytes":
        return bits / 8 + 4 / 64  # fp32 absmax per 64 weights
    if method in ("compressed-tensors", "modelopt"):
        return bits / 8 + (2 / group if group > 0 else 0.0)
    return bits / 8


def mixed_precision_kernel(r: Resolved, group: int = 128) -> str:
    """The MPLinearKernel vLLM picks for an AWQ/GPTQ linear layer on CUDA (read at 0.33.0:
    vllm/model_executor/kernels/linear/__init__.py `_POSSIBLE_KERNELS[CUDA]` is CutlassW4A8 (W4A8 only), Machete,
    Marlin, Conch, Exllama, TritonW4A16, Humming, and `_resolve_backend_kernels` -> humming/priority.py
    `prioritize_humming` moves Humming ahead of Marlin on compute capability 9.0 only):

    - "machete": compute capability 9.0 (machete.py `can_implement`), group size -1, 64 or 128 for fp16/bf16
      activations (machete_utils.py `query_machete_supported_group_sizes`);
    - "humming": 9.0 where Machete does not run (a group size it cannot take, or VLLM_DISABLED_KERNELS naming it:
      the kit's H200 runs "with Machete disabled" logged "Using HummingLinearKernel", not Marlin);
    - "marlin": every other CUDA card from 7.5 (marlin.py `get_min_capability`), Blackwell included.
    The Humming preference is per release: kit/data/vllm.yaml `humming_capability` (0.33.0; earlier releases not
    re-read). A layer whose shape Machete cannot tile (machete_utils.py `check_machete_supports_shape`: in % 64,
    out % 128) also falls through; dense models of the catalog tile, so the whole model is taken as one kernel.
    A kernel named in VLLM_DISABLED_KERNELS (`r.disabled_kernels`) is skipped, as `choose_mp_linear_kernel` skips
    it ("disabled by environment variable"): MacheteLinearKernel and HummingLinearKernel make an H200 take Marlin,
    and log "Using MarlinLinearKernel for mixed-precision linear". Marlin disabled as well is not modelled (the
    next kernels, Conch, Exllama and TritonW4A16, keep other layouts): it is planned as Marlin.
    """
    if r.device != "cuda":
        return "cpu"
    folded = rules_for(r.vllm_version)
    disabled = set(r.disabled_kernels)
    if machete_runs(r) and group in (-1, 0, 64, 128) and "MacheteLinearKernel" not in disabled:
        return "machete"
    humming = folded.humming_capability
    if humming is not None and r.compute_capability == str(humming) and "HummingLinearKernel" not in disabled:
        return "humming"
    return "marlin"


def mixed_precision_kept_bytes(r: Resolved, method: str, bits: float, group: int, dtype_bytes: int) -> float:
    """Bytes per weight element an AWQ/GPTQ linear layer keeps after process_weights_after_loading, read at 0.33.0.

    Every kernel keeps the packed weight at bits/8 B per element: Machete's `machete_prepack_B` returns
    `torch::empty_like(B)` (csrc/quantization/machete/machete_prepack_launcher.cuh) and `replace_parameter` copies it
    into the loaded tensor; Marlin's `gptq_marlin_repack` and Humming's `transform_humming_weight` repack to the same
    bits, padded to their tiles (tile_padding_bytes). Scales stay one per group and output column in the activation
    dtype (Machete `transform_w_s`: contiguous; Marlin `marlin_permute_scales`; Humming `weight_scale` [n, groups] in
    `param_dtype`). Zero points differ by kernel and format:

    - AWQ (auto_awq.py `_convert_awq_to_standard_format` repacks qzeros in place, same bytes, then the kernel):
      Machete `transform_w_zp` unpacks them and stores `-scale * zero` in the activation dtype ([groups, n], 2 B);
      Marlin `marlin_zero_points` and Humming `transform_humming_zero_point` (two 4-bit values per uint8) keep them
      packed at bits/8 B.
    - GPTQ (auto_gptq.py `create_weights`: symmetric uint4b8, `zero_points=False`, yet `qzeros` [groups, n / 8]
      int32 is registered and loaded): Machete never touches it, so it stays (bits/8 B per group); Marlin replaces it
      with `marlin_make_empty` and Humming re-registers only the tensors it transformed, so there it is freed.
      No g_idx is registered at 0.33.0 (act-order checkpoints are not modelled).
    """
    kernel = mixed_precision_kernel(r, group)
    if kernel == "cpu":
        zero_bytes = bits / 8  # the CPU kernels were not re-read: packed zero points as stored
    elif method == "awq":
        zero_bytes = dtype_bytes if kernel == "machete" else bits / 8
    else:
        zero_bytes = bits / 8 if kernel == "machete" else 0.0
    per_group = (dtype_bytes + zero_bytes) / group if group > 0 else 0.0
    return bits / 8 + per_group


def machete_awq_residual_bytes(r: Resolved, model: ModelSpec, layers: range) -> float:
    """Fitted: what the H200 logs count for AWQ on Machete beyond the tensors it keeps and the allocator replay
    (allocator_slack_bytes), per quantised linear layer (kit/data/vllm.yaml `machete_awq_residual_mib_per_linear`).
    Only AWQ on Machete shows it (GPTQ on Machete and AWQ on Humming plan within 0.12 % without it); the one step
    particular to it is machete.py `transform_w_zp` replacing each layer's packed zero points with a fresh
    [groups, n] tensor in the activation dtype after the AWQ repack's temporaries, so it is taken per layer (an
    allocator effect is per allocation), not per weight. Approximate: two models (Qwen3-8B, Qwen2.5-1.5B)."""
    method = QUANT_FAMILY.get(r.quantization or "", r.quantization)
    q = model.quantization
    group = (q.group_size if q else None) or 0
    if method != "awq" or r.device != "cuda" or mixed_precision_kernel(r, group) != "machete":
        return 0.0
    mib = float(rules_for(r.vllm_version).machete_awq_residual_mib_per_linear or 0.0)
    moe = moe_layers_in(model, layers)
    dense = 0 if model.is_mla else len(layers) - moe
    linears = 4 * dense + 2 * (len(layers) - dense)  # qkv, o, gate_up, down; attention only where MoE or MLA
    return linears * mib * MIB


def humming_lock_bytes(r: Resolved, model: ModelSpec, layers: range) -> float:
    """Humming's per-layer lock buffer, read at 0.33.0: kernels/linear/mixed_precision/humming.py
    `HummingLinearKernel.process_weights_after_loading` ends with `self.locks = create_humming_locks(device)`, and
    vllm/utils/humming.py `create_humming_locks` is `torch.zeros(num_compute_units * 8, dtype=int32)`: SMs x 32 B per
    quantised linear layer, kept for the engine's life (H200, 132 SMs: 4,224 B, a 4,608 B block of the small pool).
    vLLM fuses q/k/v and gate/up, so a dense layer has 4 such linears (qkv, o, gate_up, down; Llama-3.1-70B: 320,
    1.41 MiB). Marlin has none per layer (marlin_utils.py `get_marlin_workspace`: one buffer per device and stream,
    from the workspace manager) and Machete none. Zero where the GPU's SM count is not in the catalog."""
    method = QUANT_FAMILY.get(r.quantization or "", r.quantization)
    q = model.quantization
    group = (q.group_size if q else None) or 0
    if method not in ("awq", "gptq") or r.device != "cuda" or not r.gpu_sm_count:
        return 0.0
    if mixed_precision_kernel(r, group) != "humming":
        return 0.0
    moe = moe_layers_in(model, layers)
    dense = 0 if model.is_mla else len(layers) - moe
    linears = 4 * dense + 2 * (len(layers) - dense)  # as machete_awq_residual_bytes: attention only where MoE/MLA
    block = -(-int(r.gpu_sm_count) * 8 * 4 // ALLOC_MIN_BLOCK) * ALLOC_MIN_BLOCK
    return linears * block


def machete_runs(r: Resolved) -> bool:
    """vLLM picks Machete for AWQ/GPTQ checkpoints on compute capability 9.0 only (machete.py:35 can_implement:
    "Machete requires compute capability of 90"; kit/data/vllm.yaml `machete_capability`, per release); the H200
    logs at 0.26.0 say "Using MacheteLinearKernel"."""
    capability = rules_for(r.vllm_version).machete_capability
    return capability is not None and r.compute_capability == str(capability)


def _round_up(value: float, multiple: int) -> float:
    return -(-int(value) // multiple) * multiple


def tile_padding_bytes(r: Resolved, model: ModelSpec, tp: int, layers: range) -> float:
    """Zero padding the Marlin and Humming repacks add to a dense layer's quantised matrices whose shapes are not
    multiples of their tiles (0 for the catalog's models, whose dimensions are multiples of 256).

    Marlin: vllm/model_executor/layers/quantization/utils/marlin_utils.py `marlin_padded_nk` pads (n, k) to
    (64, lcm(128, group)) or (128, lcm(64, group)), whichever is smaller, weight, scales and zero points alike.
    Humming: utils/humming/linear.py `prepare_humming_linear_layer_config` passes pad_n_to_multiple=256,
    pad_k_to_multiple=128 to humming's `check_and_pad_tensors` (humming-kernels 0.1.19, the 0.33.0 pin).
    Machete pads nothing (a shape it cannot tile goes to another kernel). MoE and MLA layers are left out."""
    method = QUANT_FAMILY.get(r.quantization or "", r.quantization)
    if method not in ("awq", "gptq") or r.device != "cuda" or model.is_moe or model.is_mla:
        return 0.0
    q = model.quantization
    group = (q.group_size if q else None) or 0
    kernel = mixed_precision_kernel(r, group)
    if kernel == "machete":
        return 0.0
    per_element = mixed_precision_kept_bytes(r, method, r.weight_bits or 8, group, DTYPE_BYTES[r.dtype])

    def padded(k: float, n: float) -> float:
        if kernel == "humming":
            pn, pk = _round_up(n, 256), _round_up(k, 128)
        else:
            g = group if group > 0 else 1
            a = (_round_up(n, 64), _round_up(k, math.lcm(128, g)))
            b = (_round_up(n, 128), _round_up(k, math.lcm(64, g)))
            pn, pk = min(a, b, key=lambda nk: (nk[0] * nk[1], nk[0] + nk[1]))
        return (pn * pk - n * k) * per_element

    h, hd = model.hidden_size, model.head_dim
    heads_rank = model.num_attention_heads / tp
    kv_rank = max(model.num_kv_heads // tp, 1)
    inter_rank = model.intermediate_size / tp
    per_layer = (padded(h, (heads_rank + 2 * kv_rank) * hd) + padded(heads_rank * hd, h)
                 + padded(h, 2 * inter_rank) + padded(inter_rank, h))
    return len(layers) * per_layer


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


class _LargePool:
    """PyTorch's CUDA caching allocator, large pool, as far as "Model loading took" sees it
    (c10/cuda/CUDACachingAllocator.cpp): requests of 1 MiB or less go to the small pool (2 MiB segments, always
    split: only the 512 B rounding counts); a larger request takes the best-fitting cached free block (a request
    under max_split_size never a block of max_split_size or more; one of max_split_size or more only a block less
    than kLargeBuffer (20 MiB) larger, get_free_block), else a new segment (20 MiB under 10 MiB, else rounded up to
    2 MiB, get_allocation_size); the block is split only when the request is under max_split_size and more than
    kSmallSize (1 MiB) would remain (should_split), so otherwise torch.cuda.memory_allocated() counts the whole
    block. Freed blocks return to the free list (no coalescing: an approximation)."""

    def __init__(self, max_split: float | None) -> None:
        self.max_split = float("inf") if max_split is None else max_split
        self.free: list[int] = []
        self.counted = 0
        self.requested = 0.0

    def alloc(self, size: float) -> int:
        """Allocate ``size`` bytes; returns the bytes memory_allocated() counts for it."""
        if size <= 0:
            return 0
        self.requested += size
        block = -(-int(size) // ALLOC_MIN_BLOCK) * ALLOC_MIN_BLOCK
        if block <= ALLOC_SPLIT_TAIL:
            self.counted += block
            return block
        below = block < self.max_split
        fits = [b for b in self.free if b >= block and (b < self.max_split if below else b < block + (20 << 20))]
        if fits:
            found = min(fits)
            self.free.remove(found)
        else:
            found = (20 << 20) if block < ALLOC_OWN_SEGMENT else -(-block // ALLOC_SEGMENT_ROUND) * ALLOC_SEGMENT_ROUND
        if below and found - block > ALLOC_SPLIT_TAIL:
            self.free.append(found - block)
            taken = block
        else:
            taken = found
        self.counted += taken
        return taken

    def release(self, size: float, taken: int) -> None:
        self.requested -= size
        self.counted -= taken
        if taken > ALLOC_SPLIT_TAIL:
            self.free.append(taken)


def _quantised_tensors(r: Resolved, method: str | None, k: float, n: float, group: int,
                       dtype_bytes: int) -> list[float]:
    """The tensors one linear layer allocates at construction, in create_weights' order (auto_awq.py and
    auto_gptq.py at 0.33.0: qweight, qzeros, scales; an unquantised layer its weight; FP8 its fp8 weight, the
    scales left out)."""
    if method is None:
        return [k * n * dtype_bytes]
    bits = r.weight_bits or 8
    if method not in ("awq", "gptq"):
        return [k * n * bits / 8]
    groups = k / group if group > 0 else 1
    return [k * n * bits / 8, groups * n * bits / 8, groups * n * dtype_bytes]


def allocator_slack_bytes(r: Resolved, model: ModelSpec, tp: int, layers: range, first: bool, last: bool,
                           pp: int) -> float:
    """What the caching allocator counts beyond the tensors' bytes on one rank: segment tails kept with the big
    tensors and the free fragments of shared 20 MiB segments handed whole to a request that leaves 1 MiB or less
    (_LargePool), replayed over vLLM's construction order (embedding, then each layer's qkv, o, gate_up and down
    linear layers with their bias, the lm_head) and, for AWQ/GPTQ, what process_weights_after_loading allocates
    afresh (Machete: AWQ's fp16 zero points; Marlin: the repacked weight and zero points; Humming: every tensor,
    padded). MoE experts, MLA and other quantisation layouts are left out of the layers (their tails are a smaller
    share of the weights)."""
    dtype_bytes = DTYPE_BYTES[r.dtype]
    pool = _LargePool(load_max_split_bytes(r.vllm_version))
    h = model.hidden_size
    vocab_rank = padded_vocab(model.vocab_size) / tp
    head = last and (not model.tie_word_embeddings or (pp > 1 and not first))
    if first:
        pool.alloc(vocab_rank * h * dtype_bytes)
    method = QUANT_FAMILY.get(r.quantization or "", r.quantization)
    if not (model.is_mla or model.is_moe or method not in (None, "awq", "gptq", "fp8")) and len(layers):
        q = model.quantization
        group = (q.group_size if q else None) or 0
        hd, heads_rank = model.head_dim, model.num_attention_heads / tp
        kv_rank = max(model.num_kv_heads // tp, 1)
        inter_rank = model.intermediate_size / tp
        qkv_out = (heads_rank + 2 * kv_rank) * hd
        shapes = ((h, qkv_out), (heads_rank * hd, h), (h, 2 * inter_rank), (inter_rank, h))
        built: list[list[tuple[float, int]]] = []
        for _ in layers:
            for index, (k, n) in enumerate(shapes):
                built.append([(size, pool.alloc(size)) for size in _quantised_tensors(r, method, k, n, group,
                                                                                       dtype_bytes)])
                if index == 0 and model.attention_bias:
                    pool.alloc(n * dtype_bytes)
        if method in ("awq", "gptq") and r.device == "cuda":
            _after_loading(r, method, pool, built, shapes, group, dtype_bytes)
    if head:
        pool.alloc(vocab_rank * h * dtype_bytes)
    return pool.counted - pool.requested


def _after_loading(r: Resolved, method: str, pool: _LargePool, built: list[list[tuple[float, int]]],
                   shapes: tuple[tuple[float, float], ...], group: int, dtype_bytes: int) -> None:
    """Replay process_weights_after_loading's fresh allocations layer by layer (0.33.0; temporaries left out)."""
    kernel = mixed_precision_kernel(r, group)
    bits = r.weight_bits or 8
    for index, tensors in enumerate(built):
        k, n = shapes[index % len(shapes)]
        groups = k / group if group > 0 else 1
        (w_size, w_taken), (z_size, z_taken), (s_size, s_taken) = tensors
        if kernel == "machete":
            if method == "awq":  # machete.py transform_w_zp: [groups, n] in the activation dtype replaces qzeros
                pool.alloc(groups * n * dtype_bytes)
                pool.release(z_size, z_taken)
        elif kernel == "marlin":  # gptq_marlin_repack / marlin_zero_points: new tensors; GPTQ's qzeros emptied
            pool.alloc(w_size)
            pool.release(w_size, w_taken)
            if method == "awq":
                pool.alloc(z_size)
            pool.release(z_size, z_taken)
        elif kernel == "humming":  # prepare_humming_linear_layer_config: every tensor anew, then the old freed
            pn, pk = _round_up(n, 256), _round_up(k, 128)
            pgroups = pk / group if group > 0 else 1
            pool.alloc(pn * pk * bits / 8)
            pool.alloc(pn * pgroups * dtype_bytes)
            if method == "awq":
                pool.alloc(pn * pgroups * bits / 8)
            pool.release(w_size, w_taken)
            pool.release(z_size, z_taken)
            pool.release(s_size, s_taken)


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
    terms = [
        Term(figure="weights", name="parameters", bytes=params,
             source=f"config.json shapes: parameter counts per rank x the quantisation's packing as the kernel keeps "
                    f"it{exact} (stage_counts, mixed_precision_kept_bytes)"),
        Term(figure="weights", name="RoPE cos/sin cache", bytes=rope_cache_bytes(model, dtype_bytes),
             source="vllm/model_executor/layers/rotary_embedding: [max_position, rotary_dim] in the model dtype"),
    ]
    padding = tile_padding_bytes(r, model, tp, layers) * scale
    if padding:
        terms.append(Term(figure="weights", name="Marlin/Humming tile padding", bytes=padding,
                          source="marlin_utils.py marlin_padded_nk; humming linear.py pad_n_to_multiple=256, "
                                 "pad_k_to_multiple=128 (tile_padding_bytes)"))
    residual = machete_awq_residual_bytes(r, model, layers)
    if residual:
        terms.append(Term(figure="weights", name="Machete AWQ residual (fitted)", bytes=residual, fitted=True,
                          source="kit/data/vllm.yaml machete_awq_residual_mib_per_linear: what Machete's AWQ loading "
                                 "leaves counted beyond its tensors and the allocator replay, per quantised linear "
                                 "layer (approximate)"))
    locks = humming_lock_bytes(r, model, layers)
    if locks:
        terms.append(Term(figure="weights", name="Humming per-layer locks", bytes=locks,
                          source="vllm/utils/humming.py create_humming_locks: SMs x 8 int32 per quantised linear "
                                 "layer (humming_lock_bytes)"))
    terms.append(Term(
        figure="weights", name="allocator segment tails",
        bytes=allocator_slack_bytes(r, model, tp, layers, first, last and not pooled_head_dropped, pp),
        source="c10/cuda/CUDACachingAllocator.cpp get_free_block, should_split: segment tails and 20 MiB segments' "
               "last fragments the allocator hands out whole, replayed over vLLM's allocation order "
               "(allocator_slack_bytes)"))
    return terms
