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

from kit.config.modelinfo import DTYPE_BYTES, ModelSpec
from kit.core.tables import FoldedMemoryAccounting, MLAProfileWorkspace, SamplerRule
from kit.memory.inputs import GIB, Resolved
from kit.memory.rules import flashinfer_sampler_used, rules_for
from kit.memory.shape import moe_layers_in, padded_vocab
from kit.memory.terms import Term, peak_bytes

RUNNER = "vllm/v1/worker/gpu/model_runner.py"


def _sampler_terms(r: Resolved, model: ModelSpec, sampler: SamplerRule) -> list[Term]:
    """The dummy sampler run's [rows, vocab] buffers (rows: one per dummy request, `_dummy_run`'s
    min(num_tokens, max_num_reqs))."""
    rows = min(r.max_num_seqs, r.max_num_batched_tokens)
    logits = rows * model.vocab_size
    terms = []
    if sampler.logits_in_model_dtype:
        terms.append(Term(figure="activation", name="logits", phase="sampler",
                          bytes=logits * DTYPE_BYTES[r.dtype],
                          source=f"{RUNNER} _dummy_sampler_run: model.compute_logits(hidden_states), [rows, vocab] in "
                                 "the model dtype, held through both sampler passes"))
    if sampler.fp32_copy:
        terms.append(Term(figure="activation", name="logits fp32 copy", phase="sampler", bytes=logits * 4,
                          source="vllm/v1/worker/gpu/sample/sampler.py apply_sampling_params: 'Copy logits to a new "
                                 "FP32 tensor' (the warm-up pass, SamplingParams.for_sampler_warmup, needs logits "
                                 "processing)"))
    if sampler.flashinfer_topk_mask_and_probs and flashinfer_sampler_used(sampler, r.compute_capability,
                                                                                 r.gpu_sm_count):
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
    residual = float(sampler.residual_bytes_per_logit or 0.0)
    if residual:
        terms.append(Term(figure="activation", name="sampler buffers (fitted)", phase="sampler",
                          bytes=logits * residual, fitted=True,
                          source=f"kit/data/vllm.yaml memory_accounting.sampler.residual_bytes_per_logit "
                                 f"({residual:g} B per logit): {sampler.residual_is or 'the rest of the sampler'}"))
    return terms


def activation_terms(r: Resolved, model: ModelSpec, layers: range, last: bool) -> list[Term]:
    """The profile run's activation on one rank of the pipeline stage holding ``layers``, as named terms (a term of
    figure "non_torch" is a buffer the profile run leaves allocated: the plan moves it to that figure)."""
    rule = rules_for(r.vllm_version).memory_accounting
    tokens = r.max_num_batched_tokens
    tp = r.tensor_parallel_size
    act = DTYPE_BYTES[r.dtype]
    h = model.hidden_size
    moe_layers = moe_layers_in(model, layers)
    has_dense, has_moe = moe_layers < len(layers), moe_layers > 0
    buffers = rule.hidden_buffers
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
    mla = rule.mla_profile_workspace
    if model.is_mla and mla:
        terms.append(_mla_profile_workspace(r, model, mla, q_heads, act))
    if has_moe:
        n = (model.moe_intermediate_size or model.intermediate_size) / tp
        topk = model.num_experts_per_tok or 1
        scale = rule.moe_cache_scale
        # memory_accounting.moe_workspace "persistent": allocated at the first forward and kept, so vLLM's profile
        # counts them in the memory consumed (the plan's non-torch figure), not in the transient peak; absent: alive
        # through the whole profile run and on the peak (the 0.26 rule). Either way they are charged once.
        persistent = rule.moe_workspace == "persistent"
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
        terms += _sampler_terms(r, model, rule.sampler)
    fixed = rule.activation_fixed_gib
    if fixed:
        terms.append(Term(figure="activation", name="fixed (fitted)", bytes=fixed * GIB, fitted=True,
                          source="memory_accounting.activation_fixed_gib: small buffers of the profile run"))
    if not (r.enforce_eager or r.compile_cache_warm):
        terms += _cold_compile_terms(r, model, rule, tokens, has_dense)
    return terms


def _mla_profile_workspace(r: Resolved, model: ModelSpec, rule: MLAProfileWorkspace, q_heads: float,
                           act: int) -> Term:
    """The worst-case `kv_b_proj` output latent attention allocates in the profile run (memory_accounting
    `mla_profile_workspace`, cited in kit/data/vllm.yaml)."""
    block = r.block_size
    rows = min(max(int(rule.rows_per_max_model_len) * r.max_model_len,
                   int(rule.blocks_per_seq) * r.max_num_seqs * block), int(rule.max_rows))
    rows = -(-max(rows, block) // block) * block
    per_head = (model.qk_nope_head_dim or 0) + (model.v_head_dim or 0)
    return Term(figure="activation", name="MLA prefill workspace (profile run)", phase="attention",
                bytes=rows * q_heads * per_head * act,
                source=f"vllm/model_executor/layers/attention/mla_attention.py: [min(max(8 x max_model_len, 4 x "
                       f"max_num_seqs x block_size), 64 Ki) = {rows} rows, heads / TP, qk_nope_head_dim + "
                       f"v_head_dim] in the model dtype, allocated when the profile run has no attention metadata")


def _cold_compile_terms(r: Resolved, model: ModelSpec, rule: FoldedMemoryAccounting, tokens: int,
                        has_dense: bool) -> list[Term]:
    """What a first profile run on a cold compile cache holds beyond the warm one (the plan charges the first start;
    a warm cache gives it back). From 0.33 both parts are sized from the model's shapes (kit/data/vllm.yaml
    `memory_accounting`): inductor's first-run MLP buffers beside the forward pass, and a floor the size of the
    vocabulary-wide weight; earlier releases have one fitted constant."""
    act = DTYPE_BYTES[r.dtype]
    tp = r.tensor_parallel_size
    terms: list[Term] = []
    # memory_accounting.compile_cold_phase "forward": the buffers live beside the forward pass's (the sampler phase
    # after it does not see them); absent: on top of the whole peak (the 0.26 fit).
    phase = ("mlp" if has_dense else "moe") if rule.compile_cold_phase == "forward" else None
    buffers = float(rule.compile_cold_mlp_buffers or 0.0)
    if buffers:
        inter = (model.intermediate_size if has_dense else
                 (model.moe_intermediate_size or model.intermediate_size) * (model.num_experts_per_tok or 1)) / tp
        terms.append(Term(
            figure="activation", name="torch.compile, cold cache: MLP buffers (fitted count)", phase=phase,
            bytes=buffers * tokens * inter * act, fitted=True,
            source=f"memory_accounting.compile_cold_mlp_buffers ({buffers:g}) x [tokens, intermediate / TP] in the "
                   "model dtype: inductor's first run keeps the MLP's gate_up and activation outputs apart from the "
                   "eager ones (measured at 2048-8192 tokens on Qwen3, Llama and Phi-3.5)"))
    constant = float(rule.compile_cold_gib or 0.0)
    if constant:
        terms.append(Term(figure="activation", name="torch.compile, cold cache (fitted)", bytes=constant * GIB,
                          fitted=True, phase=phase,
                          source="memory_accounting.compile_cold_gib: inductor's buffers in the first profile run on "
                                 "a cold compile cache"))
    copies = float(rule.compile_cold_floor_vocab_copies or 0.0)
    floor = float(rule.compile_cold_floor_gib or 0.0)
    if copies or floor:
        # measured at TP 1 only; with TP > 1 the whole vocabulary's size is charged, not the rank's shard (the safe
        # side until a tensor-parallel cold start is measured)
        vocab = padded_vocab(model.vocab_size) * model.hidden_size * act * copies
        # a phase of its own: the peak is the larger of it and the others
        terms.append(Term(
            figure="activation", name="torch.compile, cold cache: the first run's floor", phase="compile",
            bytes=vocab + floor * GIB, fitted=bool(floor),
            source=(f"memory_accounting.compile_cold_floor_vocab_copies ({copies:g}) x [vocab, hidden] in the "
                    "model dtype, the size of the embedding: a cold first run peaks at no less, whatever the token "
                    "budget (Phi-3.5 0.20, Llama-3.1-8B 1.04, Qwen3-8B 1.19, Qwen2.5-14B 1.49 GiB measured; the "
                    "allocation itself is not located in vLLM's or inductor's source; measured at TP 1 only, so the whole "
                    "vocabulary is charged with TP > 1)" if copies else
                    "memory_accounting.compile_cold_floor_gib")
            + (f" + compile_cold_floor_gib {floor:g} GiB (fitted)" if copies and floor else "")))
    return terms


def activation_bytes(r: Resolved, model: ModelSpec, layers: range, last: bool) -> float:
    """The profile run's peak activation on one rank (the terms of ``activation_terms`` at their peak)."""
    return peak_bytes([t for t in activation_terms(r, model, layers, last) if t.figure == "activation"])


def sampler_bytes_per_logit(vllm_version: str, dtype: str) -> float:
    """Bytes the dummy sampler run holds per element of its [rows, vocab] logits at ``vllm_version`` in ``dtype``."""
    sampler = rules_for(vllm_version).memory_accounting.sampler
    return (DTYPE_BYTES[dtype] * bool(sampler.logits_in_model_dtype) + 4 * bool(sampler.fp32_copy)
            + 8 * bool(sampler.flashinfer_topk_mask_and_probs)
            + float(sampler.residual_bytes_per_logit or 0.0))
