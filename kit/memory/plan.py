"""Predict how vLLM will size memory at start, before anyone rents a GPU: the plan's assembly.

The model follows vLLM's own start-up (v1 engine, ``gpu_worker.determine_available_memory`` and ``kv_cache_utils``):

    requested = total * gpu_memory_utilization
    kv        = requested - (weights + peak activation + non-torch [+ CUDA graph estimate, >= 0.21])
    blocks    = kv // (block_size * KV bytes per token)       (per rank; the engine takes the minimum)

From 0.34 the extensible KV cache (on by default on CUDA) is sized after warm-up and CUDA-graph capture instead:
``kv = min(requested - non_kv, total - non_kv - margin) - peak`` with the margin max(1 GiB, 0.75 x peak) and a
default utilization of 1.0 (kit/data/vllm.yaml `kv_sizing` cites the source; `_extensible_kv` below).

Each figure is a sum of named terms from its own module, one per term: kit/memory/weights.py, activation.py,
nontorch.py, cudagraph.py, kv.py (adapters.py for LoRA and drafts), with the inputs resolved by kit/memory/inputs.py
and every per-release fact read from kit/data/vllm.yaml by kit/memory/rules.py. ``kit plan --explain`` prints the
terms. Pure: reads only the data files under ``kit/data``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kit.config.modelinfo import DTYPE_BYTES, ModelSpec
from kit.core.errors import PlanError
from kit.core.releaserules import quantization_min_cc
from kit.core.tables import FoldedKVSizing
from kit.core.versions import cc_tuple
from kit.memory.activation import activation_terms
from kit.memory.adapters import draft_terms, lora_buffer_bytes, lora_notes, resolved_lora
from kit.memory.cudagraph import cuda_graph_terms, full_graph_bytes, unmeasured_architecture_note
from kit.memory.inputs import (
    GIB,
    QUANT_FAMILY,
    DraftInputs,
    LoraInputs,
    PlanInputs,
    Resolved,
    resolve,
    resolve_gpu,
)
from kit.memory.kv import (NO_MEMORY_ERROR, KvLayout, cpu_kv_bytes, full_attention_layout, kv_bytes_per_token_per_layer,
                           kv_error_text, kv_layout)
from kit.memory.nontorch import non_torch_terms
from kit.memory.rules import rules_for
from kit.memory.shape import check_parallelism, padded_vocab, pp_layer_ranges
from kit.memory.terms import Term, peak_bytes, peak_phase
from kit.memory.weights import weight_terms

__all__ = ["DraftInputs", "LoraInputs", "Plan", "PlanInputs", "largest_max_model_len", "plan"]


class Plan(BaseModel):
    """Predicted start-up memory of one rank (the one with the least KV cache)."""

    model_config = ConfigDict(frozen=True)

    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    kv_cache_gib: float
    kv_cache_tokens: int
    max_concurrency: float
    fits: bool
    error: str | None
    suggestions: list[dict[str, Any]]
    inputs: dict[str, Any]
    approximate: dict[str, Any]
    # What vLLM 0.34's extensible KV cache keeps free beyond the transient peak when it sizes the cache after
    # warm-up (the margin, where the device rather than the utilization binds); 0 otherwise
    kv_reserve_gib: float = 0.0
    lora_gib: float = 0.0  # LoRA weight buffers, part of weights_gib
    draft_weights_gib: float = 0.0  # the draft model's weights, part of weights_gib
    # The binding rank's figures as named terms (kit/memory/terms.py), in the JSON only when asked (--explain)
    terms: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def sequences_at_once(self) -> int:
        """Whole sequences of max_model_len tokens the KV cache holds at once (vLLM's "Maximum concurrency",
        rounded down); vLLM starts with a larger max_num_seqs, and the sequences beyond these wait for room."""
        if not self.fits:
            return 0
        i = self.inputs
        per_request = -(-i["max_model_len"] // i["block_size"])
        # the concurrency is blocks / per_request: recover the whole blocks before dividing again
        return round(self.max_concurrency * per_request) // per_request

    @property
    def holds_every_sequence(self) -> bool:
        """The plan fits and its KV cache holds all max_num_seqs sequences of max_model_len tokens at once: the
        question `kit plan --fit` answers for max_num_seqs."""
        return self.fits and self.sequences_at_once >= self.inputs["max_num_seqs"]

    def to_json(self, explain: bool = False) -> dict[str, Any]:
        return {
            "weights_gib": round(self.weights_gib, 2),
            "activation_gib": round(self.activation_gib, 2),
            "non_torch_gib": round(self.non_torch_gib, 2),
            "cuda_graph_gib": round(self.cuda_graph_gib, 2),
            "kv_cache_gib": round(self.kv_cache_gib, 2),
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "sequences_at_once": self.sequences_at_once,
            "fits": self.fits,
            "error": self.error,
            "suggestions": [dict(s) for s in self.suggestions],
            "inputs": dict(self.inputs),
            "approximate": dict(self.approximate),
            # only when planned, so plans without LoRA or a draft keep their keys
            **({"kv_reserve_gib": round(self.kv_reserve_gib, 2)} if self.inputs.get("extensible_kv_cache") else {}),
            **({"lora_gib": round(self.lora_gib, 3)} if "lora" in self.inputs else {}),
            **({"draft_weights_gib": round(self.draft_weights_gib, 3)} if "draft" in self.inputs else {}),
            **({"terms": [dict(t) for t in self.terms]} if explain else {}),
        }




class _Stage(BaseModel):
    weights: float
    activation: float
    non_torch: float
    cuda_graph: float
    kv_bytes: float
    per_token: int  # KV bytes per token on this rank (all its layers)
    num_layers: int
    lora: float = 0.0  # LoRA buffers, included in weights
    draft_weights: float = 0.0  # draft model weights (last stage), included in weights
    kv_reserve: float = 0.0  # kept free by the extensible KV cache's margin (0.34), not in the figures above
    terms: list[Term] = []  # every figure above as named terms


def _compute(inputs: PlanInputs) -> tuple[Resolved, list[_Stage], list[str]]:
    r, gpu, notes = resolve(inputs)
    model = inputs.model
    tp, pp = r.tensor_parallel_size, r.pipeline_parallel_size
    group = model.quantization.group_size if model.quantization else None
    check_parallelism(model, tp, pp, group if r.quantization and model.quantization else None)
    stages: list[_Stage] = []
    ranges = pp_layer_ranges(model.num_layers, pp)
    # the release's KV sizing rules, read once for every stage
    sizing = rules_for(r.vllm_version).kv_sizing if r.extensible_kv_cache else None
    for i, layers in enumerate(ranges):
        first, last = i == 0, i == len(ranges) - 1
        terms = weight_terms(r, model, layers, first, last)
        per_token = kv_bytes_per_token_per_layer(model, tp, r.kv_cache_bytes) * len(layers)
        if r.encoder_only:
            per_token = 0  # encoder-only attention keeps no KV cache (kit/data/pooling.yaml)
        extras = {"lora": 0.0, "draft_weights": 0.0}
        if inputs.lora is not None:
            extras["lora"] = lora_buffer_bytes(model, r, resolved_lora(inputs.lora, r.vllm_version), len(layers),
                                               first, last)
            terms.append(Term(figure="weights", name="LoRA buffers", bytes=extras["lora"],
                              source="kit/memory/adapters.py lora_buffer_bytes (kit/data/lora.yaml)"))
        if inputs.draft is not None and last:
            extras["draft_weights"], draft_per_token, draft_notes = draft_terms(r, inputs.draft)
            per_token += draft_per_token
            notes = notes + [n for n in draft_notes if n not in notes]
            terms.append(Term(figure="weights", name="draft model", bytes=extras["draft_weights"],
                              source="kit/memory/adapters.py draft_terms"))
        weights = sum(t.bytes for t in terms)
        if r.device == "cpu":
            stages.append(_Stage(weights=weights, activation=0, non_torch=0, cuda_graph=0,
                                 kv_bytes=cpu_kv_bytes(r, weights), per_token=per_token, num_layers=len(layers),
                                 terms=terms, **extras))
            continue
        profiled = activation_terms(r, model, layers, last)
        activation = [t for t in profiled if t.figure == "activation"]
        non_torch = non_torch_terms(r, model) + [t for t in profiled if t.figure == "non_torch"]
        graph = cuda_graph_terms(r, model, layers)
        terms += activation + non_torch + graph
        figures = (peak_bytes(activation), sum(t.bytes for t in non_torch), sum(t.bytes for t in graph))
        requested = _gpu_gib(r) * GIB * r.gpu_memory_utilization
        kv = requested - weights - figures[0] - figures[1] - figures[2]
        reserve = 0.0
        if sizing is not None:
            sizing_peak = _sizing_logprobs_peak(r, model, sizing) if last else 0.0
            resident = _sizing_logprobs_resident(r, model, sizing) if last else 0.0
            kv, reserve, reserve_terms = _extensible_kv(r, sizing, requested, weights + figures[1] + figures[2],
                                                        figures[0], sizing_peak, resident)
            terms += reserve_terms
        stages.append(_Stage(weights=weights, activation=figures[0], non_torch=figures[1], cuda_graph=figures[2],
                             kv_bytes=kv, per_token=per_token, num_layers=len(layers), terms=terms,
                             kv_reserve=reserve, **extras))
    if inputs.lora is not None:
        notes = notes + lora_notes(model)
    return r, stages, notes


def _gpu_gib(r: Resolved) -> float:
    """The GPU's memory of a GPU plan (resolve refuses one without it; None only on the CPU backend)."""
    return r.gpu_memory_gib or 0.0


def _sizing_logprobs_peak(r: Resolved, model: ModelSpec, sizing: FoldedKVSizing) -> float:
    """The allocated peak of 0.34's sizing warm-up step with prompt logprobs (vllm/v1/worker/gpu/warmup.py
    run_kv_cache_sizing_warmup: one prompt of min(max_num_batched_tokens, max_model_len) tokens asking for
    max_logprobs, 20 by default): the prompt's hidden states, and one chunk of its logits at a time
    (vllm/v1/worker/gpu/sample/prompt_logprob.py compute_prompt_logprobs_with_chunking, CHUNK_SIZE rows) in the
    model's dtype, two of them alive at once where the model caps its logits (LogitsProcessor.forward: divide, tanh,
    multiply). 0 where the release has no such step (``sizing``, the release's kv_sizing: prompt_logprobs_chunk_rows
    unset)."""
    rows = int(sizing.prompt_logprobs_chunk_rows or 0)
    if not rows:
        return 0.0
    act = DTYPE_BYTES[r.dtype]
    prompt = min(r.max_num_batched_tokens, r.max_model_len)
    copies = 2 if model.final_logit_softcapping else 1
    return prompt * model.hidden_size * act + min(rows, prompt) * padded_vocab(model.vocab_size) * act * copies


def _sizing_logprobs_resident(r: Resolved, model: ModelSpec, sizing: FoldedKVSizing) -> float:
    """Non-KV memory the sizing warm-up's prompt-logprobs step leaves reserved after warm-up, charged as
    ``prompt_logprobs_chunks_resident`` x one chunk of its logits, [min(CHUNK_SIZE, prompt), padded vocab] in the
    model dtype (vllm/v1/worker/gpu/sample/prompt_logprob.py compute_prompt_logprobs_with_chunking: ``prompt_logits =
    logits_fn(prompt_hidden_states[start_idx:end_idx])``). vLLM frees the chunk; that its memory stays with torch
    after measure_kv_cache_blocks' empty_cache (vllm/v1/worker/extensible_kv_cache.py) is the caching allocator's
    doing, not an allocation vLLM's source makes, so the count is measured (kit/data/vllm.yaml kv_sizing): approximate.
    0 where the release has no such step, or for a pooling runner (vllm/v1/worker/gpu/warmup.py
    run_mixed_prefill_decode_warmup returns before any step for a pooling model)."""
    rows = int(sizing.prompt_logprobs_chunk_rows or 0)
    chunks = float(sizing.prompt_logprobs_chunks_resident or 0.0)
    if not rows or not chunks or r.runner == "pooling":
        return 0.0
    prompt = min(r.max_num_batched_tokens, r.max_model_len)
    return chunks * min(rows, prompt) * padded_vocab(model.vocab_size) * DTYPE_BYTES[r.dtype]


def _extensible_kv(r: Resolved, sizing: FoldedKVSizing, requested: float, non_kv: float, profiled: float,
                   sizing_peak: float = 0.0, resident: float = 0.0) -> tuple[float, float, list[Term]]:
    """(KV bytes, margin kept free, its terms) where vLLM sizes an extensible KV cache after warm-up (0.34:
    vllm/v1/worker/extensible_kv_cache.py `measure_kv_cache_bytes`): the least of the utilization's budget and the
    device's free memory less a margin, less the transient peak; ``sizing`` is the release's kv_sizing rules,
    ``non_kv`` weights, non-torch and graph pool.
    The transient peak is the larger of the profile run's (``profiled``) and the sizing warm-up's (``sizing_peak``:
    gpu_worker.py seeds reserved_headroom_bytes with the profile's peak, each sizing step raises it). ``resident`` is
    non-KV memory the sizing warm-up leaves reserved (``_sizing_logprobs_resident``): vLLM measures it inside non-KV
    after warm-up (measure_kv_cache_bytes: init_free_memory - free_memory - committed_bytes), so it comes off both
    bounds."""
    peak = max(profiled, sizing_peak)
    margin = max(float(sizing.margin_floor_gib) * GIB, float(sizing.margin_fraction) * peak)
    baseline = float(sizing.startup_baseline_gib or 0.0) * GIB
    budget = requested - non_kv
    device = _gpu_gib(r) * GIB - baseline - non_kv - margin
    # What warm-up leaves beyond the terms above and the resident chunk, measured at 0.34 (kit/data/vllm.yaml
    # kv_sizing.post_warmup_allowance_gib): torch's reservation growth beyond the allocated peak over a sizing step
    # (allocator fragmentation, which vLLM's source does not size). Charged in full: the plan stays on the side where
    # vLLM gives at least as much.
    allowance = float(sizing.post_warmup_allowance_gib or 0.0) * GIB
    kv = min(budget, device) - peak - resident - allowance
    # what the device's bound (the margin, the baseline) takes beyond the budget, the sizing step's peak beyond the
    # profile's, the memory the sizing step leaves reserved, and the post-warm-up allowance
    reserve = max(budget - device, 0.0) + (peak - profiled) + resident + allowance
    source = ("vllm/v1/worker/extensible_kv_cache.py measure_kv_cache_bytes: min(total x utilization - non-KV, "
              "free at start - non-KV - max(KV_CACHE_MARGIN_FLOOR_BYTES, KV_CACHE_MARGIN_FRACTION x peak)) - peak "
              "(kit/data/vllm.yaml kv_sizing)")
    terms = []
    if reserve > 0:
        terms.append(Term(figure="kv_reserve", name="extensible KV cache margin", bytes=reserve, source=source))
    if peak > profiled:
        terms.append(Term(figure="kv_reserve", name="of which: the sizing warm-up's prompt-logprobs peak over the "
                          "profile's", bytes=peak - profiled,
                          source="vllm/v1/worker/gpu/warmup.py run_kv_cache_sizing_warmup, "
                                 "vllm/v1/worker/gpu/sample/prompt_logprob.py (kv_sizing.prompt_logprobs_chunk_rows)"))
    if resident > 0:
        terms.append(Term(figure="kv_reserve", name="of which: a prompt-logprobs chunk left reserved after the sizing "
                          "warm-up (approximate)", bytes=resident, fitted=True,
                          source="vllm/v1/worker/gpu/sample/prompt_logprob.py compute_prompt_logprobs_with_chunking: "
                                 "[min(CHUNK_SIZE, prompt), vocab] in the model dtype; kept by torch's caching "
                                 "allocator past measure_kv_cache_blocks' empty_cache "
                                 "(kv_sizing.prompt_logprobs_chunks_resident, measured)"))
    if baseline > 0:
        terms.append(Term(figure="kv_reserve", name="of which: memory in use at vLLM's first snapshot",
                          bytes=baseline, fitted=True, source="kv_sizing.startup_baseline_gib"))
    if allowance > 0:
        terms.append(Term(figure="kv_reserve", name="post-warm-up allowance (measured, not modelled)", bytes=allowance,
                          fitted=True, source="kv_sizing.post_warmup_allowance_gib (kit/data/calibration/h200-vllm-0.34.0)"))
    return kv, reserve, terms


def _layout(model: ModelSpec, r: Resolved, stage: _Stage, uniform: bool) -> KvLayout:
    """The stage's block layout; every layer as full attention where kv_layout cannot say (then the plan says it is
    approximate) or where a draft model's layers share the rank."""
    per_layer = stage.per_token // stage.num_layers if stage.num_layers else 0
    layout = kv_layout(model, r, per_layer, stage.num_layers) if uniform and per_layer else None
    return layout or full_attention_layout(r.block_size, stage.per_token, r.max_model_len)


def _terms_json(terms: list[Term]) -> list[dict[str, Any]]:
    """Every term, marked whether it is on the activation peak (a phase other than the peak's is not)."""
    peak = peak_phase([t for t in terms if t.figure == "activation"])
    return [t.to_json(on_peak=t.figure != "activation" or t.phase is None or t.phase == peak) for t in terms]


# The model families whose parameter layout the planner counts (dense GQA decoders, Qwen/Mixtral MoE, DeepSeek
# MLA) and was checked against (kit/data/models, kit/data/calibration.yaml, tests/unit/test_plan.py). Others are
# planned as a generic decoder and the plan says so. Gemma-2 and Phi-3 joined after their start-ups on vLLM 0.33
# (h200-vllm-0.33.0-families: weights within 0.02 %, KV tokens within 1 %, held out of every fit).
PLANNED_ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
    "Gemma2ForCausalLM", "Phi3ForCausalLM",
})
# Quantisation families whose weight packing _linear_bytes_per_param models.
PLANNED_QUANT_FAMILIES = frozenset({"awq", "gptq", "fp8", "bitsandbytes", "compressed-tensors", "modelopt"})


def _unknown_inputs(model: ModelSpec, r: Resolved) -> list[str]:
    """What the planner does not know and sized by assumption: said in the plan, never silently."""
    reasons = []
    if model.architecture not in PLANNED_ARCHITECTURES:
        reasons.append(f"architecture {model.architecture[:60]} is not one the planner models: sized as a generic "
                       "decoder (attention and MLP per layer)")
    family = QUANT_FAMILY.get(r.quantization or "", r.quantization)
    if family is not None and family not in PLANNED_QUANT_FAMILIES:
        reasons.append(f"quantization method {str(r.quantization)[:40]} is unknown to the planner: linear weights sized "
                       f"as {r.weight_bits or 8:g}-bit without scales")
    if model.config_defaults is None:
        reasons.append(f"model_type {str(model.model_type)[:40]} is not in the kit's table of transformers' config "
                       "defaults (kit/data/model_defaults.yaml): config.json is read as given, keys it leaves out "
                       "are not filled as transformers would")
    if model.torch_dtype not in DTYPE_BYTES:
        reasons.append(f"torch_dtype {model.torch_dtype[:40]} is unknown to the planner: weights sized as {r.dtype}")
    return reasons


def _approximate(model: ModelSpec, r: Resolved, gpu_unified: bool, notes: list[str]) -> dict[str, Any]:
    reasons = list(notes) + _unknown_inputs(model, r)
    if model.non_attention_layers:
        reasons.append(
            f"layers that are not attention ({model.non_attention_layers}: state-space, linear attention or "
            "convolution): vLLM keeps a fixed state per request for them and a KV cache only for the attention "
            "layers; this plan sizes every layer as attention, so its KV tokens are not vLLM's"
        )
    elif model.is_hybrid and (r.device != "cuda" or kv_layout(model, r, 1, model.num_layers) is None):
        reasons.append(
            "sliding-window / hybrid attention: vLLM gives sliding-window layers their own KV groups; "
            "this plan sizes every layer as full attention (tokens are a lower bound)"
        )
    if r.device == "cpu" and r.cpu_kvcache_space_gib is None:
        reasons.append("CPU KV cache sized from host RAM minus an estimated process footprint")
    if gpu_unified:
        reasons.append("unified memory: the CPU shares this memory, and vLLM refuses to start when free memory "
                       "is below the requested fraction")
    if r.extensible_kv_cache:
        sizing = rules_for(r.vllm_version).kv_sizing
        uncalibrated = (sizing.uncalibrated if sizing is not None else None) or []
        if uncalibrated:
            reasons.append(f"vLLM {r.vllm_version} sizes the KV cache from the memory free after warm-up and CUDA-graph "
                           "capture (the extensible KV cache); not calibrated at this release: "
                           + "; ".join(str(u) for u in uncalibrated))
    return {"value": bool(reasons), "reason": "; ".join(reasons) if reasons else None}


def _echo_inputs(r: Resolved, inputs: PlanInputs) -> dict[str, Any]:
    echo = r.model_dump()
    if inputs.lora is not None:
        echo["lora"] = resolved_lora(inputs.lora, r.vllm_version).model_dump()
        echo["lora"]["max_cpu_loras_note"] = "adapters beyond max_loras are cached in host memory, not on the GPU"
    if inputs.draft is not None:
        echo["draft"] = {"model": inputs.draft.ref, "method": inputs.draft.method,
                         "known": inputs.draft.spec is not None}
    return echo


def _evaluate(inputs: PlanInputs) -> tuple[Plan, Resolved, list[_Stage]]:
    r, stages, notes = _compute(inputs)
    max_len = r.max_model_len
    layouts = [_layout(inputs.model, r, s, inputs.draft is None) for s in stages]
    blocks = [int(s.kv_bytes // lay.bytes_per_block) if s.kv_bytes > 0 and lay.bytes_per_block else 0
              for s, lay in zip(stages, layouts, strict=True)]
    binding_index = min(range(len(stages)), key=lambda i: (blocks[i], stages[i].kv_bytes))
    binding = stages[binding_index]
    num_blocks = blocks[binding_index]
    blocks_per_request = layouts[binding_index].blocks_per_request
    concurrency = num_blocks / blocks_per_request if blocks_per_request else 0.0
    tokens = int(concurrency * max_len)  # vLLM logs max_concurrency * max_model_len (kv_cache_utils.py)
    error = None
    kv_gib = binding.kv_bytes / GIB
    if r.encoder_only:
        # No KV cache at all: nothing is reserved for it, and concurrency is the scheduler's max_num_seqs.
        tokens, concurrency, kv_gib = 0, float(r.max_num_seqs), 0.0
        if binding.kv_bytes < 0:
            error = NO_MEMORY_ERROR
    elif binding.kv_bytes <= 0 or num_blocks == 0:
        error = NO_MEMORY_ERROR
    else:
        uniform = inputs.draft is None
        for stage, lay in zip(stages, layouts, strict=True):
            needed = lay.blocks_per_request * lay.bytes_per_block
            available = _checked_budget(r, stage, lay)
            if needed > available:
                estimate = _longest_request(inputs.model, r, stage, uniform, available, cap=max_len)
                error = kv_error_text(r.vllm_version, max_len, needed, available, estimate,
                                      r.gpu_memory_utilization if r.extensible_kv_cache else None)
                break
    gpu = resolve_gpu(inputs)
    plan = Plan(
        weights_gib=binding.weights / GIB,
        activation_gib=binding.activation / GIB,
        non_torch_gib=binding.non_torch / GIB,
        cuda_graph_gib=binding.cuda_graph / GIB,
        kv_cache_gib=kv_gib,
        kv_cache_tokens=max(tokens, 0),
        max_concurrency=max(concurrency, 0.0),
        fits=error is None,
        error=error,
        suggestions=[],
        inputs=_echo_inputs(r, inputs),
        lora_gib=binding.lora / GIB,
        draft_weights_gib=binding.draft_weights / GIB,
        kv_reserve_gib=binding.kv_reserve / GIB,
        terms=_terms_json(binding.terms),
        approximate=_approximate(inputs.model, r, bool(gpu and gpu.unified_memory), notes + _graph_notes(
            inputs.model, r, binding)),
    )
    return plan, r, stages


def _graph_notes(model: ModelSpec, r: Resolved, binding: _Stage) -> list[str]:
    """The binding stage's CUDA-graph caveat, where its architecture's graph charge was never measured: read from
    the stage's own full-graph term (kit/memory/cudagraph.py `full_graph_bytes`, found by the rule that made it)."""
    full = full_graph_bytes(binding.terms)
    if r.device != "cuda" or full is None:
        return []
    note = unmeasured_architecture_note(r, model, full, binding.kv_bytes)
    return [note] if note else []


def _checked_budget(r: Resolved, stage: _Stage, layout: KvLayout) -> float:
    """What vLLM checks one request of max_model_len against: the stage's KV budget, less the null block BlockPool
    holds back where the release reserves it (kit/data/vllm.yaml `kv_check_reserves_null_block`)."""
    reserve = layout.bytes_per_block if rules_for(r.vllm_version).kv_check_reserves_null_block else 0
    return stage.kv_bytes - reserve


def _longest_request(model: ModelSpec, r: Resolved, stage: _Stage, uniform: bool, available: float,
                     cap: int | None = None) -> int:
    """vLLM's estimate_max_model_len (vllm/v1/core/kv_cache_planning.py at 0.33.0): the largest length one request
    of which fits ``available`` bytes, by a binary search over lengths with the stage's layout at each (a
    sliding-window layer needs min(window - 1 + in-flight tokens, length) tokens, so the answer is not the budget over
    the bytes per token); 0 where one token does not fit. vLLM searches up to the asked max_model_len (``cap``);
    without one the search first doubles past the answer (bounded: 64 doublings pass any length)."""
    def need(length: int) -> int:
        lay = _layout(model, r.model_copy(update={"max_model_len": length}), stage, uniform)
        return lay.blocks_per_request * lay.bytes_per_block

    if available <= 0 or need(1) > available:
        return 0
    low, high = 1, cap
    if high is None:
        high = max(r.max_model_len, r.block_size)
        for _ in range(64):
            if need(high) > available:
                break
            low, high = high, high * 2
        else:
            return low
    while low < high:  # low fits; the answer is in [low, high]
        middle = (low + high + 1) // 2
        if need(middle) <= available:
            low = middle
        else:
            high = middle - 1
    return low


def largest_max_model_len(inputs: PlanInputs) -> int:
    """The largest max_model_len whose one request fits the KV cache (vLLM's estimate_max_model_len and check)."""
    r, stages, _ = _compute(inputs)
    uniform = inputs.draft is None
    lengths = [_longest_request(inputs.model, r, s, uniform, _checked_budget(r, s, _layout(inputs.model, r, s, uniform)))
               if s.per_token else 0 for s in stages]
    return max(min(lengths), 0)


def _fits(inputs: PlanInputs) -> bool:
    try:
        return _evaluate(inputs)[0].fits
    except PlanError:
        return False


def _largest_fitting_budget(inputs: PlanInputs, r: Resolved) -> int | None:
    """The largest max_num_batched_tokens below the resolved one that fits, at least max_num_seqs (vLLM refuses
    less), or None. Fitting only gets harder as the budget grows, so a bisection finds it."""
    low, high = r.max_num_seqs, r.max_num_batched_tokens - 1
    if high < low or not _fits(inputs.model_copy(update={"max_num_batched_tokens": low})):
        return None
    while low < high:  # low fits; the answer is in [low, high]
        middle = (low + high + 1) // 2
        if _fits(inputs.model_copy(update={"max_num_batched_tokens": middle})):
            low = middle
        else:
            high = middle - 1
    return low


def _smaller_request_suggestions(inputs: PlanInputs, r: Resolved) -> list[dict[str, Any]]:
    """1. a shorter context; 1b. a smaller token budget (the profile run's activation and the sampler's rows grow
    with it)."""
    out: list[dict[str, Any]] = []
    longest = min(largest_max_model_len(inputs), r.max_model_len)
    if longest >= r.block_size:
        change: dict[str, object] = {"max_model_len": longest}
        if _fits(inputs.model_copy(update=change)):
            out.append({"kind": "max_model_len", "change": change,
                        "message": f"--max-model-len {longest} (the largest context that fits)"})
    budget = _largest_fitting_budget(inputs, r)
    if budget is not None:
        out.append({"kind": "max_num_batched_tokens", "change": {"max_num_batched_tokens": budget},
                    "message": f"--max-num-batched-tokens {budget} (the largest token budget that fits; the profile "
                               f"run's activation grows with it: {r.max_num_batched_tokens:,} now)"})
    return out


def _suggest(inputs: PlanInputs, r: Resolved) -> list[dict[str, Any]]:
    out = _smaller_request_suggestions(inputs, r)
    model = inputs.model
    # 2. a larger memory fraction
    if r.device == "cuda":
        util = round(r.gpu_memory_utilization + 0.01, 2)
        while util <= 0.98:
            change: dict[str, object] = {"gpu_memory_utilization": util}
            if _fits(inputs.model_copy(update=change)):
                out.append({"kind": "gpu_memory_utilization", "change": change,
                            "message": f"--gpu-memory-utilization {util} (needs an otherwise idle GPU)"})
                break
            util = round(util + 0.01, 2)
    # 3. fp8 KV cache
    gpu = resolve_gpu(inputs)
    if r.device == "cuda" and r.kv_cache_dtype == "auto" and (gpu is None or gpu.fp8):
        change = {"kv_cache_dtype": "fp8"}
        if _fits(inputs.model_copy(update=change)):
            out.append({"kind": "kv_cache_dtype", "change": change,
                        "message": "--kv-cache-dtype fp8 (halves the KV cache per token)"})
    # 4. more tensor parallelism
    if r.device == "cuda":
        for tp in (2, 4, 8):
            if tp <= r.tensor_parallel_size:
                continue
            if gpu is not None and gpu.per_host is not None and tp * r.pipeline_parallel_size > gpu.per_host:
                break  # more GPUs than one host of this kind has (a Jetson module is its own host)
            change = {"tensor_parallel_size": tp}
            if _fits(inputs.model_copy(update=change)):
                out.append({"kind": "tensor_parallel_size", "change": change,
                            "message": f"--tensor-parallel-size {tp} ({tp * r.pipeline_parallel_size} GPUs)"})
                break
    # 5. a quantised model
    if r.device == "cuda" and model.quantization is None and r.quantization is None:
        floor = quantization_min_cc("fp8", r.vllm_version)  # kit/data/compat.yaml quantization.fp8, per release
        cc_ok = gpu is None or floor is None or gpu.cc >= cc_tuple(floor)
        change = {"quantization": "fp8"}
        if cc_ok and _fits(inputs.model_copy(update=change)):
            out.append({"kind": "quantization", "change": change,
                        "message": "--quantization fp8 (weights quantised to FP8 at load)"})
        out.append({"kind": "quantized_checkpoint", "change": {},
                    "message": "a 4-bit AWQ/GPTQ checkpoint of this model takes about a quarter of the weight memory"})
    return out


def plan(inputs: PlanInputs, *, suggest: bool = True) -> Plan:
    """Predict vLLM's start-up memory for ``inputs``; raises PlanError for impossible inputs.

    ``suggest=False`` leaves out the fixes of a plan that does not fit (each is a search of its own): for callers
    that search themselves (kit/memory/fit.py)."""
    result, resolved, _ = _evaluate(inputs)
    if result.fits or not suggest:
        return result
    return result.model_copy(update={"suggestions": _suggest(inputs, resolved)})
