"""CUDA graphs: the memory estimate vLLM charges to the KV budget where its model runner profiles graph capture.

From 0.21 gpu_worker.py `determine_available_memory` subtracts the model runner's estimate while
VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on (vllm/envs.py: default "1"); 0.33's V2 runner measures it in
vllm/v1/worker/gpu/cudagraph_utils.py `profile_cudagraph_memory` (graphs captured into a throwaway pool). Whether the
release charges it, and the estimate's fixed and per-graph parts, are kit/data/vllm.yaml rules (kit/memory/rules.py).
"""

from __future__ import annotations

from kit.config.modelinfo import ModelSpec
from kit.core.tables import CudaGraphEstimate
from kit.memory.inputs import GIB, Resolved
from kit.memory.rules import rules_for
from kit.memory.shape import moe_layers_in
from kit.memory.terms import Term


def cuda_graph_counts(max_num_seqs: int, vllm_version: str, max_num_batched_tokens: int | None = None,
                      performance_mode: str = "balanced") -> tuple[int, int]:
    """Graphs vLLM captures by default (vllm/config/vllm.py `_set_cudagraph_sizes`; kit/data/vllm.yaml
    `cuda_graph_capture`), as (piecewise, full): piecewise for every capture size, full ones for the sizes up to
    max_num_seqs. The largest size is min(max_size, factor x max_num_seqs), capped by max_num_batched_tokens where the
    release does; interactivity mode captures every size up to `interactivity_up_to`; a release may add
    max_num_batched_tokens and max_num_seqs themselves to the list."""
    capture = rules_for(vllm_version).cuda_graph_capture
    largest = min(int(capture.max_size), int(capture.max_num_seqs_factor) * max_num_seqs)
    decode_fits = max_num_seqs <= largest  # before the token cap: vLLM's uniform decode size test
    if capture.capped_by_batched_tokens and max_num_batched_tokens is not None:
        largest = min(largest, max_num_batched_tokens)
    interactive = capture.interactivity_up_to if performance_mode == "interactivity" else None
    sizes = set(range(1, min(largest, int(interactive)) + 1)) if interactive else {s for s in (1, 2, 4) if s <= largest}
    sizes |= set(range(8, min(largest + 1, 256), 8)) | set(range(256, largest + 1, 16))
    if max_num_batched_tokens is not None:
        if capture.adds_max_num_batched_tokens and max_num_batched_tokens <= largest:
            sizes.add(max_num_batched_tokens)
        if capture.adds_max_num_seqs and decode_fits and max_num_seqs <= max_num_batched_tokens:
            sizes.add(max_num_seqs)
    piecewise = sorted(sizes)
    full = [s for s in piecewise if s <= max_num_seqs]
    return len(piecewise), len(full)


def cuda_graph_count(max_num_seqs: int, vllm_version: str) -> int:
    """All the graphs vLLM captures by default (piecewise and full)."""
    return sum(cuda_graph_counts(max_num_seqs, vllm_version))


def cuda_graph_terms(r: Resolved, model: ModelSpec | None = None, layers: range | None = None) -> list[Term]:
    """The CUDA-graph estimate charged to the KV budget on one rank (none where nothing is charged).

    A release with `per_full_graph_gib` charges piecewise and full graphs at their own rates. 0.33's estimate
    (cudagraph_utils.py `profile_cudagraph_memory`) is the free-memory drop of one profiling capture (every piecewise
    graph and the `full_samples` largest full graphs) plus (count - full_samples) x the last sample's drop
    (`_extrapolate_full_graph_memory`): with `full_samples` set, the piecewise rate carries the capture and the full
    rate only the extrapolated graphs. A dense stage scales both with its layers, and the full rate by its
    architecture's measured factor where one is recorded (`full_rate_by_model_type`; approximate elsewhere: the rate
    per layer varies by architecture, docs/gpu-planning.md). A stage with fused-MoE layers takes `moe_scale` times the
    reference figure."""
    if not r.cuda_graph_charged:
        return []
    estimate = rules_for(r.vllm_version).memory_accounting.cuda_graph_estimate
    piecewise, full = cuda_graph_counts(r.max_num_seqs, r.vllm_version, r.max_num_batched_tokens, r.performance_mode)
    moe = model is not None and layers is not None and moe_layers_in(model, layers) > 0
    scale = float(estimate.moe_scale if estimate.moe_scale is not None else 1.0) if moe else 1.0
    scaled = f" x moe_scale {scale:g} (fused-MoE layers)" if scale != 1.0 else ""
    reference = estimate.reference_layers
    if reference and not moe and layers is not None:
        # a piecewise graph is one piece per decoder layer (torch.compile splits at each attention op), and a full
        # graph holds each layer's kernels: both grow with the layers of the stage
        scale = len(layers) / float(reference)
        scaled = f" x {len(layers)} layers / {reference} (the layers the rates were measured on)"
    terms = [Term(figure="cuda_graph", name="graph pool, fixed part (fitted)", bytes=estimate.base_gib * GIB,
                  fitted=True, source="memory_accounting.cuda_graph_estimate.base_gib")] if estimate.base_gib else []
    if estimate.per_full_graph_gib is not None:
        samples = int(estimate.full_samples or 0)
        kind = model.model_type if model is not None and not moe else None
        architecture = architecture_factor(estimate, kind)
        own = kind in (estimate.full_rate_by_model_type or {})
        per_arch = "" if architecture == 1.0 else (
            f" x {architecture:g} for {kind} (full_rate_by_model_type: measured on that architecture)" if own
            else f" x {architecture:g}, the largest full_rate_by_model_type ({kind or 'this architecture'} has none)")
        counted = max(full - samples, 0)
        which = (f"{counted} of {full} full graphs, extrapolated past the {samples} sampled" if samples
                 else f"{full} full graphs")
        return [
            *terms,
            Term(figure="cuda_graph", name=f"graph pool, {piecewise} piecewise graphs (fitted)",
                 bytes=estimate.per_graph_gib * scale * piecewise * GIB, fitted=True,
                 source="memory_accounting.cuda_graph_estimate.per_graph_gib x the piecewise graphs captured by "
                        f"default (every capture size up to min(512, 2 x max_num_seqs)){scaled}"),
            Term(figure="cuda_graph", name=f"graph pool, {which} (fitted)",
                 bytes=estimate.per_full_graph_gib * scale * architecture * counted * GIB, fitted=True,
                 source=f"{FULL_GRAPH_SOURCE} x the full graphs captured by "
                        f"default (the capture sizes up to max_num_seqs){scaled}{per_arch}"),
        ]
    return [
        *terms,
        Term(figure="cuda_graph", name=f"graph pool, {piecewise + full} graphs (fitted)",
             bytes=estimate.per_graph_gib * scale * (piecewise + full) * GIB, fitted=True,
             source="memory_accounting.cuda_graph_estimate.per_graph_gib x the graphs captured by default "
                    f"(piecewise up to 512 tokens, full up to max_num_seqs){scaled}"),
    ]


def architecture_factor(estimate: CudaGraphEstimate, kind: str | None) -> float:
    """The full-graph rate's factor for a dense architecture (``kind``: its model_type): its own where one is recorded
    (`full_rate_by_model_type`); for one with none, the largest recorded where `unmeasured_full_rate` is "largest"
    (the side that promises less KV: vLLM's charge per layer differs by architecture and this one's is unknown), else
    1.0, the rate of the architecture the rates were fitted on."""
    recorded = estimate.full_rate_by_model_type or {}
    if not kind:
        return 1.0
    if kind in recorded:
        return float(recorded[kind])
    if estimate.unmeasured_full_rate == "largest" and recorded:
        return max(1.0, *(float(v) for v in recorded.values()))
    return 1.0


FULL_GRAPH_SOURCE = "memory_accounting.cuda_graph_estimate.per_full_graph_gib"


def full_graph_bytes(terms: list[Term]) -> float | None:
    """The full graphs' part of a stage's CUDA-graph terms (the term the per-full-graph rate made), or None where the
    release charges graphs with one rate (no full-graph term)."""
    found = [t.bytes for t in terms if t.figure == "cuda_graph" and t.source.startswith(FULL_GRAPH_SOURCE)]
    return found[0] if found else None


def unmeasured_architecture_note(r: Resolved, model: ModelSpec, full_graph_bytes: float, kv_bytes: float) -> str | None:
    """Why a plan is approximate where vLLM's CUDA-graph charge for this architecture was never measured and the
    spread measured across architectures (full graphs at up to `unmeasured_full_rate_up_to` x the reference rate,
    beyond the planned ``full_graph_bytes``) is more than 3 % of the KV cache; None where it was measured, nothing is
    charged, or the spread is small beside the cache."""
    estimate = rules_for(r.vllm_version).memory_accounting.cuda_graph_estimate
    if estimate is None or estimate.per_full_graph_gib is None:
        return None
    measured = estimate.measured_model_types or []
    up_to = float(estimate.unmeasured_full_rate_up_to or 1.0)
    if not measured or model.model_type in measured or kv_bytes <= 0:
        return None
    factor = architecture_factor(estimate, model.model_type)
    more = (up_to / factor - 1.0) * full_graph_bytes  # full_graph_bytes is planned at factor x the reference rate
    if more <= 0.03 * kv_bytes:
        return None
    return (f"CUDA graphs: vLLM's charge per layer differs by architecture, and {model.model_type or 'this model'}'s "
            f"was not measured ({', '.join(measured)} were); its full graphs may take up to {more / GIB:.2f} GiB "
            f"more than planned, {more / kv_bytes * 100:.0f} % of this KV cache (--enforce-eager charges none)")
