"""What one CUDA graph costs in device memory by node count and kernel kind, measured as vLLM samples it (torch only).

vLLM 0.33 charges the CUDA graphs to the KV budget as the profiling capture plus (n_full - 2) x the second FULL
graph's free-memory drop (vllm/v1/worker/gpu/cudagraph_utils.py `profile_cudagraph_memory`,
`_extrapolate_full_graph_memory`). For Qwen2.5-7B-GPTQ on Marlin that sample was 7.4 MiB, 0.266 MiB a layer, against
0.13-0.22 MiB a layer for the dense models (issue 33; bench/graph_split.py), and no model quantity predicts it. This
captures graphs of K kernel launches (K in 64, 256, 1024) of three kinds: an elementwise torch op on a small tensor,
torch.mm (cuBLAS) on 64x64 fp16, and a small Triton kernel (skipped when triton does not import). Each kind runs
eagerly first; then, per K, two captures into one pool from torch.cuda.graph_pool_handle(), each sampled as vLLM does:
synchronize, free memory from torch.cuda.mem_get_info(), capture, synchronize, free memory again. torch's reservation
(torch.cuda.memory_reserved()) is read around each capture too, so the free-memory drop splits into the pool's growth
and the rest, the driver's (graph nodes, executable graph). If the driver's part per node differs by kind, the
sample depends on what the model's graph is made of (Marlin's kernels, GPTQ's extra nodes), not on its shapes.
The caching allocator's cache is emptied before each reading, as torch.cuda.graph does on entry.

Run on the GPU machine (torch with CUDA; no vLLM needed): python bench/graph_node_memory.py --out graph-nodes.json
Not run yet (prepared 2026-12-04, with the campaign of matrix 0.33.0-split in bench/gpu_calibration.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import triton
    import triton.language as tl
except ImportError:  # the kind is skipped, with a note
    triton = None

MIB = 1024 * 1024
SIZES = (64, 256, 1024)
Step = Callable[[], Any]

if triton is not None:

    @triton.jit
    def _add_one(x_ptr, y_ptr, n, block: tl.constexpr):  # Triton reads the annotations: none but constexpr
        offsets = tl.program_id(0) * block + tl.arange(0, block)
        mask = offsets < n
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


def kinds(torch: Any) -> tuple[dict[str, Callable[[int], Step]], list[str]]:
    """Each kind: K -> a step that launches K kernels (out of place, as a model's forward pass does)."""
    x = torch.randn(4096, device="cuda", dtype=torch.float16)
    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    b = torch.eye(64, device="cuda", dtype=torch.float16)

    def elementwise(k: int) -> Step:
        def step() -> Any:
            y = x
            for _ in range(k):
                y = y * 1.0001
            return y
        return step

    def mm(k: int) -> Step:
        def step() -> Any:
            y = a
            for _ in range(k):
                y = torch.mm(y, b)
            return y
        return step

    out: dict[str, Callable[[int], Step]] = {"elementwise": elementwise, "torch.mm 64x64 fp16": mm}
    notes: list[str] = []
    if triton is None:
        notes.append("triton does not import: the Triton kind is skipped")
    else:
        def triton_add(k: int) -> Step:
            def step() -> Any:
                y = x
                for _ in range(k):
                    z = torch.empty_like(y)
                    _add_one[(triton.cdiv(y.numel(), 1024),)](y, z, y.numel(), block=1024)
                    y = z
                return y
            return step
        out["triton add"] = triton_add
    return out, notes


def sample(torch: Any, step: Step, pool: Any, keep: list[Any]) -> dict[str, float]:
    """One capture as vLLM's profile_cudagraph_memory samples it, with torch's reservation read beside it."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    free_before, reserved_before = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        keep.append(step())  # the output stays alive, as vLLM keeps its graphs' outputs
    torch.cuda.synchronize()
    free_after, reserved_after = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
    keep.append(graph)
    drop, pool_growth = (free_before - free_after) / MIB, (reserved_after - reserved_before) / MIB
    return {"free_drop_mib": drop, "reserved_growth_mib": pool_growth, "driver_mib": drop - pool_growth}


def measure(torch: Any) -> dict[str, Any]:
    made, notes = kinds(torch)
    rows: list[dict[str, Any]] = []
    for kind, make in made.items():
        for k in SIZES:
            step = make(k)
            for _ in range(3):  # eager warm-up: kernels loaded, cuBLAS handle and workspace made
                step()
            torch.cuda.synchronize()
            pool, keep = torch.cuda.graph_pool_handle(), []
            for capture in (1, 2):
                got = sample(torch, step, pool, keep)
                rows.append({"kind": kind, "launches": k, "capture": capture, **got,
                             "driver_kib_per_launch": got["driver_mib"] * 1024 / k})
            del keep, pool
            gc.collect()
            torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": getattr(triton, "__version__", None), "notes": notes, "rows": rows}


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--out", type=Path, help="write the table as JSON here")
    args = cli.parse_args()
    try:
        import torch
    except ImportError:
        print("graph_node_memory: torch is not installed; run this on the GPU machine", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("graph_node_memory: no CUDA device (torch.cuda.is_available() is false); run this on the GPU machine",
              file=sys.stderr)
        return 2
    result = measure(torch)
    print(f"{result['device']}, torch {result['torch']}, CUDA {result['cuda']}, triton {result['triton']}")
    for note in result["notes"]:
        print(f"note: {note}")
    print(f"{'kind':22} {'launches':>8} {'capture':>7} {'free drop MiB':>13} {'pool MiB':>9} {'driver MiB':>10} "
          f"{'driver KiB/launch':>17}")
    for r in result["rows"]:
        print(f"{r['kind']:22} {r['launches']:8d} {r['capture']:7d} {r['free_drop_mib']:13.2f} "
              f"{r['reserved_growth_mib']:9.2f} {r['driver_mib']:10.2f} {r['driver_kib_per_launch']:17.2f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
