"""CUDA graphs: the memory estimate vLLM charges to the KV budget where its model runner profiles graph capture.

From 0.21 gpu_worker.py `determine_available_memory` subtracts the model runner's estimate while
VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on (vllm/envs.py: default "1"); 0.33's V2 runner measures it in
vllm/v1/worker/gpu/cudagraph_utils.py `profile_cudagraph_memory` (graphs captured into a throwaway pool). Whether the
release charges it, and the estimate's fixed and per-graph parts, are kit/data/vllm.yaml rules (kit/memory/rules.py).
"""

from __future__ import annotations

from kit.config.modelinfo import ModelSpec
from kit.memory.inputs import GIB, Resolved
from kit.memory.rules import rules_for
from kit.memory.shape import moe_layers_in
from kit.memory.terms import Term


def cuda_graph_count(max_num_seqs: int, vllm_version: str) -> int:
    """Graphs vLLM captures by default (vllm/config/vllm.py `_set_cudagraph_sizes`; kit/data/vllm.yaml
    `cuda_graph_capture`): piecewise for every capture size up to the largest, full ones up to max_num_seqs."""
    capture = rules_for(vllm_version)["cuda_graph_capture"]
    largest = min(int(capture["max_size"]), int(capture["max_num_seqs_factor"]) * max_num_seqs)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, largest + 1, 16))
    piecewise = [s for s in sizes if s <= largest]
    full = [s for s in piecewise if s <= max_num_seqs]
    return len(piecewise) + len(full)


def cuda_graph_terms(r: Resolved, model: ModelSpec | None = None, layers: range | None = None) -> list[Term]:
    """The CUDA-graph estimate charged to the KV budget on one rank (none where nothing is charged). A stage with
    fused-MoE layers takes `per_graph_gib_moe` where the release has one: its graphs keep the MoE path's buffers."""
    if not r.cuda_graph_charged:
        return []
    estimate = rules_for(r.vllm_version)["memory_accounting"]["cuda_graph_estimate"]
    count = cuda_graph_count(r.max_num_seqs, r.vllm_version)
    moe = model is not None and layers is not None and moe_layers_in(model, layers) > 0
    key = "per_graph_gib_moe" if moe and "per_graph_gib_moe" in estimate else "per_graph_gib"
    fixed = [Term(figure="cuda_graph", name="graph pool, fixed part (fitted)", bytes=estimate["base_gib"] * GIB,
                  fitted=True, source="memory_accounting.cuda_graph_estimate.base_gib")] if estimate["base_gib"] else []
    return [
        *fixed,
        Term(figure="cuda_graph", name=f"graph pool, {count} graphs (fitted)",
             bytes=estimate[key] * count * GIB, fitted=True,
             source=f"memory_accounting.cuda_graph_estimate.{key} x the graphs captured by default "
                    "(piecewise up to 512 tokens, full up to max_num_seqs)"),
    ]
