"""Non-torch memory: what vLLM counts as consumed on one rank besides the weights and the profile run's peak.

vllm/utils/mem_utils.py `memory_profiling`: non-KV memory is mem_get_info's drop since the worker started
("consumed") plus the transient peak; consumed less the weights is the non-torch figure, which holds the CUDA
context's growth, cuBLAS workspaces, NCCL and custom all-reduce buffers with TP > 1, and (V2 runner, 0.33) the
sampler's persistent per-request state, allocated after the weights are measured and before the profile run.
The per-release figures are kit/data/vllm.yaml `memory_accounting` (through kit/memory/rules.py).
"""

from __future__ import annotations

from kit.config.modelinfo import ModelSpec
from kit.memory.inputs import GIB, QUANT_FAMILY, Resolved
from kit.memory.rules import rules_for
from kit.memory.terms import Term
from kit.memory.weights import mixed_precision_kernel


def non_torch_terms(r: Resolved, model: ModelSpec) -> list[Term]:
    """The non-torch figure of one rank, as named terms."""
    rule = rules_for(r.vllm_version).memory_accounting
    tp, pp = r.tensor_parallel_size, r.pipeline_parallel_size
    if tp > 1:
        base = Term(figure="non_torch", name="NCCL and custom all-reduce buffers (fitted)",
                    bytes=rule.non_torch_gib_tp * GIB, fitted=True,
                    source="memory_accounting.non_torch_gib_tp (TP > 1; v0.19 logs: 2.06-2.17 GiB)")
    elif pp > 1:
        base = Term(figure="non_torch", name="CUDA context and pipeline buffers (fitted)",
                    bytes=rule.non_torch_gib_pp_only * GIB, fitted=True,
                    source="memory_accounting.non_torch_gib_pp_only (PP without TP; v0.19 logs: 0.07 GiB)")
    else:
        base = Term(figure="non_torch", name="CUDA context and cuBLAS workspaces (fitted)",
                    bytes=rule.non_torch_gib_single * GIB, fitted=True,
                    source="memory_accounting.non_torch_gib_single (one GPU, measured per release)")
    terms = [base]
    marlin = float(rule.non_torch_marlin_gib or 0.0)
    q = model.quantization
    group = (q.group_size if q else None) or 0
    if marlin and r.device == "cuda" and QUANT_FAMILY.get(r.quantization or "", r.quantization) in ("awq", "gptq") \
            and mixed_precision_kernel(r, group) != "machete":
        terms.append(Term(figure="non_torch", name="Marlin/Humming kernels (fitted)", bytes=marlin * GIB, fitted=True,
                          source="memory_accounting.non_torch_marlin_gib: AWQ/GPTQ where Machete does not run leaves "
                                 "this much more after the profile run (measured on Humming, fitted; approximate)"))
    gptq = float(rule.non_torch_gptq_gib or 0.0)
    if gptq and r.device == "cuda" and QUANT_FAMILY.get(r.quantization or "", r.quantization) == "gptq":
        terms.append(Term(figure="non_torch", name="GPTQ checkpoint (fitted)", bytes=gptq * GIB, fitted=True,
                          source="memory_accounting.non_torch_gptq_gib: GPTQ leaves this much more than AWQ after "
                                 "the profile run on every kernel measured (Machete, Marlin; fitted on Qwen2.5, "
                                 "approximate)"))
    per_entry = rule.sampler_state_bytes_per_vocab_entry
    if per_entry and r.runner != "pooling" and r.device == "cuda":
        terms.append(Term(
            figure="non_torch", name="sampler per-request state", bytes=r.max_num_seqs * model.vocab_size * per_entry,
            source="vllm/v1/worker/gpu/sample/penalties.py PenaltiesState: output_bin_counts [max_num_reqs, vocab] "
                   "int32 and prompt_bin_mask [max_num_reqs, vocab / 32] int32 "
                   f"(memory_accounting.sampler_state_bytes_per_vocab_entry: {per_entry:g})"))
    return terms
