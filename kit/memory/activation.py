"""Peak activation: what vLLM's profile run allocates on one rank, as named terms.

vLLM sizes the KV cache after a profile run (vllm/v1/worker/gpu_worker.py `determine_available_memory` ->
model runner `profile_run`): at 0.33.0, vllm/v1/worker/gpu/model_runner.py `profile_run` calls `_dummy_run` over
`max_num_batched_tokens` dummy tokens (skip_attn=True: the attention kernels are skipped, the projections around them
run), then on the last pipeline stage `_dummy_sampler_run` over `min(max_num_seqs, max_num_batched_tokens)` rows of
full-vocabulary logits (or `_dummy_pooler_run` for a pooling runner), and the torch peak of that is the activation
figure ("peak activation" in vllm/utils/mem_utils.py `memory_profiling`). The forward pass's buffers are freed before
the sampler runs, so the peak is the larger of the phases below, plus what lives through both (fused-MoE workspaces,
the residuals). Sizes come from the model config and the batch; the per-release parts (how many hidden-size buffers
the forward holds, which buffers the sampler keeps, the residuals the source cannot say) from kit/data/vllm.yaml
`memory_accounting`, through kit/memory/rules.py.
"""

from __future__ import annotations

from typing import Any

from kit.config.modelinfo import DTYPE_BYTES, ModelSpec
from kit.memory.inputs import GIB, Resolved
from kit.memory.rules import rules_for
from kit.memory.shape import moe_layers_in
from kit.memory.terms import Term, peak_bytes

RUNNER = "vllm/v1/worker/gpu/model_runner.py"


def _sampler_terms(r: Resolved, model: ModelSpec, sampler: dict[str, Any]) -> list[Term]:
    """The dummy sampler run's [rows, vocab] buffers (rows: one per dummy request, `_dummy_run`'s
    min(num_tokens, max_num_reqs))."""
    rows = min(r.max_num_seqs, r.max_num_batched_tokens)
    logits = rows * model.vocab_size
    terms = []
    if sampler.get("logits_in_model_dtype"):
        terms.append(Term(figure="activation", name="logits", phase="sampler",
                          bytes=logits * DTYPE_BYTES[r.dtype],
                          source=f"{RUNNER} _dummy_sampler_run: model.compute_logits(hidden_states), [rows, vocab] in "
                                 "the model dtype, held through both sampler passes"))
    if sampler.get("fp32_copy"):
        terms.append(Term(figure="activation", name="logits fp32 copy", phase="sampler", bytes=logits * 4,
                          source="vllm/v1/worker/gpu/sample/sampler.py apply_sampling_params: 'Copy logits to a new "
                                 "FP32 tensor' (the warm-up pass, SamplingParams.for_sampler_warmup, needs logits "
                                 "processing)"))
    if sampler.get("flashinfer_topk_mask_and_probs"):
        # vllm/v1/worker/gpu/sample/sampler.py _sample_random -> vllm/v1/sample/ops/topk_topp_sampler.py
        # flashinfer_sample -> flashinfer.sampling.top_k_top_p_sampling_from_logits (flashinfer-python 0.7.2.post1,
        # the 0.33.0 image's): with a top_k tensor, top_k_mask_logits(logits, top_k) (torch.empty_like: fp32) then
        # torch.softmax(masked_logits) (fp32), both alive while top_p_sampling_from_probs runs.
        terms += [
            Term(figure="activation", name="top-k masked logits", phase="sampler", bytes=logits * 4,
                 source="flashinfer/sampling.py top_k_top_p_sampling_from_logits: top_k_mask_logits, fp32 "
                        "[rows, vocab] (via vllm/v1/sample/ops/topk_topp_sampler.py flashinfer_sample)"),
            Term(figure="activation", name="top-k probabilities", phase="sampler", bytes=logits * 4,
                 source="flashinfer/sampling.py top_k_top_p_sampling_from_logits: torch.softmax(masked_logits), fp32 "
                        "[rows, vocab]"),
        ]
    residual = float(sampler.get("residual_bytes_per_logit", 0.0))
    if residual:
        terms.append(Term(figure="activation", name="sampler buffers (fitted)", phase="sampler",
                          bytes=logits * residual, fitted=True,
                          source=f"kit/data/vllm.yaml memory_accounting.sampler.residual_bytes_per_logit "
                                 f"({residual:g} B per logit): {sampler.get('residual_is', 'the rest of the sampler')}"))
    return terms


def activation_terms(r: Resolved, model: ModelSpec, layers: range, last: bool) -> list[Term]:
    """The profile run's activation on one rank of the pipeline stage holding ``layers``, as named terms (a term of
    figure "non_torch" is a buffer the profile run leaves allocated: the plan moves it to that figure)."""
    rule = rules_for(r.vllm_version)["memory_accounting"]
    tokens = r.max_num_batched_tokens
    tp = r.tensor_parallel_size
    act = DTYPE_BYTES[r.dtype]
    h = model.hidden_size
    moe_layers = moe_layers_in(model, layers)
    has_dense, has_moe = moe_layers < len(layers), moe_layers > 0
    buffers = rule["hidden_buffers"]
    terms: list[Term] = []
    if has_dense:
        inter = model.intermediate_size / tp
        terms += [
            Term(figure="activation", name="hidden-size buffers", phase="mlp", bytes=tokens * buffers * h * act,
                 fitted=buffers != 2,
                 source=f"{buffers} x [tokens, hidden] (residual, hidden states, norm and projection outputs; "
                        "memory_accounting.hidden_buffers, measured per release)"),
            Term(figure="activation", name="MLP gate_up output", phase="mlp", bytes=tokens * 2 * inter * act,
                 source="vllm/model_executor/models/llama.py LlamaMLP.forward: gate_up_proj -> [tokens, "
                        "2 x intermediate / TP]"),
            Term(figure="activation", name="MLP activation output", phase="mlp", bytes=tokens * inter * act,
                 source="vllm/model_executor/models/llama.py LlamaMLP.forward: act_fn (SiluAndMul) -> [tokens, "
                        "intermediate / TP]"),
        ]
    q_heads = model.num_attention_heads / tp
    terms += [
        Term(figure="activation", name="attention input", phase="attention", bytes=tokens * h * act,
             source="[tokens, hidden] into qkv_proj"),
        Term(figure="activation", name="q, k, v projections", phase="attention",
             bytes=tokens * q_heads * model.head_dim * 3 * act,
             source=f"3 x [tokens, heads / TP x head_dim] (qkv_proj output; {RUNNER} profile_run skips the attention "
                    "kernel itself, skip_attn=True)"),
    ]
    if has_moe:
        n = (model.moe_intermediate_size or model.intermediate_size) / tp
        topk = model.num_experts_per_tok or 1
        scale = rule["moe_cache_scale"]
        # memory_accounting.moe_workspace "persistent": allocated at the first forward and kept, so vLLM's profile
        # counts them in the memory consumed (the plan's non-torch figure), not in the transient peak; absent: alive
        # through the whole profile run and on the peak (the 0.26 rule). Either way they are charged once.
        persistent = rule.get("moe_workspace") == "persistent"
        terms += [
            Term(figure="non_torch" if persistent else "activation", name="fused-MoE workspaces",
                 bytes=tokens * topk * (3 * n + h) * act * scale, fitted=scale != 1.0,
                 source="vllm/model_executor/layers/fused_moe: intermediate caches [tokens, topk, 2N], "
                        "[tokens x topk, N], [tokens, topk, hidden]"),
            Term(figure="activation", name="MoE layer hidden buffers", phase="moe", bytes=tokens * 2 * h * act,
                 source="2 x [tokens, hidden] around the MoE block"),
        ]
    # A pooling runner profiles with a dummy pooler run ([tokens, hidden] at most), not the sampler, so no
    # vocabulary-wide logits (vllm/v1/worker/gpu_model_runner.py at 0.32.0: _dummy_pooler_run vs _dummy_sampler_run).
    if last and r.runner != "pooling":
        terms += _sampler_terms(r, model, rule["sampler"])
    fixed = rule["activation_fixed_gib"]
    if fixed:
        terms.append(Term(figure="activation", name="fixed (fitted)", bytes=fixed * GIB, fitted=True,
                          source="memory_accounting.activation_fixed_gib: small buffers of the profile run"))
    compiled = 0.0 if r.enforce_eager or r.compile_cache_warm else rule["compile_cold_gib"]
    if compiled:
        # memory_accounting.compile_cold_phase "forward": the buffers live beside the forward pass's (the sampler
        # phase after it does not see them); absent: on top of the whole peak (the 0.26 fit).
        phase = ("mlp" if has_dense else "moe") if rule.get("compile_cold_phase") == "forward" else None
        terms.append(Term(figure="activation", name="torch.compile, cold cache (fitted)", bytes=compiled * GIB,
                          fitted=True, phase=phase,
                          source="memory_accounting.compile_cold_gib: inductor's buffers in the first profile run on "
                                 "a cold compile cache (the plan charges the first start; a warm cache gives it back)"))
        floor = float(rule.get("compile_cold_floor_gib", 0.0))
        if floor:
            # memory_accounting.compile_cold_floor_gib: a cold first profile run peaks at no less than this, whatever
            # the token budget (a phase of its own: the peak is the larger of it and the others).
            terms.append(Term(figure="activation", name="torch.compile, cold cache: the first run's floor (fitted)",
                              bytes=floor * GIB, fitted=True, phase="compile",
                              source="memory_accounting.compile_cold_floor_gib: the peak of a cold first profile "
                                     "run at small token budgets, measured per release"))
    return terms


def activation_bytes(r: Resolved, model: ModelSpec, layers: range, last: bool) -> float:
    """The profile run's peak activation on one rank (the terms of ``activation_terms`` at their peak)."""
    return peak_bytes([t for t in activation_terms(r, model, layers, last) if t.figure == "activation"])


def sampler_bytes_per_logit(vllm_version: str, dtype: str) -> float:
    """Bytes the dummy sampler run holds per element of its [rows, vocab] logits at ``vllm_version`` in ``dtype``."""
    sampler = rules_for(vllm_version)["memory_accounting"]["sampler"]
    return (DTYPE_BYTES[dtype] * bool(sampler.get("logits_in_model_dtype")) + 4 * bool(sampler.get("fp32_copy"))
            + 8 * bool(sampler.get("flashinfer_topk_mask_and_probs"))
            + float(sampler.get("residual_bytes_per_logit", 0.0)))
