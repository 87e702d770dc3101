"""vLLM 0.33's CUDA-graph estimate split in two from the start-up logs, and graph-term forms held out by family.

vllm/v1/worker/gpu/cudagraph_utils.py `profile_cudagraph_memory` charges the free-memory drop of the profiling
`capture_model` (every PIECEWISE graph and the two largest FULL graphs; model_runner.py logs it first as "Graph
capturing finished in N secs, took X GiB") with the sampled FULL cost swapped for first + (n - 1) x second
(`_extrapolate_full_graph_memory`). So the logged estimate is that drop plus (n - 2) x the second FULL sample, and
the sample is (estimate - capture) / (n - 2). Both are logged to 0.01 GiB.

The forms below are refit by least squares on the logged estimates of every other family, then the family is
planned (graph GiB only; bench/family_holdout.py refits the planner's constants on the whole plan). Issue 33;
docs/gpu-planning.md quotes this output. Run: python bench/graph_split.py
"""

from __future__ import annotations

import lzma
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kit.memory.cudagraph import cuda_graph_counts

ROOT = Path(__file__).resolve().parent.parent / "kit" / "data" / "calibration"
VERSION = "0.33.0"
# (log under kit/data/calibration, family, layers, hidden size, intermediate size: the models' config.json);
# moe: fused-MoE layers (the planner scales those by moe_scale, so no dense form is fitted to them)
CASES: tuple[tuple[str, str, int, int, int, bool], ...] = (
    ("h200-vllm-0.33.0/q8-48g-graphs", "qwen3", 36, 4096, 12288, False),
    ("h200-vllm-0.33.0/q8fp8-80g-graphs", "qwen3", 36, 4096, 12288, False),
    ("h200-vllm-0.33.0/q8-8k-graphs-16seqs", "qwen3", 36, 4096, 12288, False),
    ("h200-vllm-0.33.0/rtx4090-awq-preset", "qwen3", 36, 4096, 12288, False),
    ("h200-vllm-0.33.0/llama8b-80g-graphs", "llama", 32, 4096, 14336, False),
    ("h200-vllm-0.33.0/llama8b-4k-graphs-16seqs", "llama", 32, 4096, 14336, False),
    ("h200-vllm-0.33.0-families/phi35-24g-graphs", "phi3", 32, 3072, 8192, False),
    ("h200-vllm-0.33.0-families/q14-48g-graphs", "qwen2", 48, 5120, 13824, False),
    ("h200-vllm-0.33.0-marlin/q7gptq-12g-graphs-marlin", "qwen2", 28, 3584, 18944, False),
    ("h200-vllm-0.33.0-split/q7gptq-12g-graphs-marlin-repeat", "qwen2", 28, 3584, 18944, False),
    ("h200-vllm-0.33.0-split/q7gptq-12g-graphs-machete", "qwen2", 28, 3584, 18944, False),
    ("h200-vllm-0.33.0-split/q7gptq-12g-graphs-marlin-128seqs", "qwen2", 28, 3584, 18944, False),
    ("h200-vllm-0.33.0-split/q7-24g-graphs", "qwen2", 28, 3584, 18944, False),
    ("h200-vllm-0.33.0-check/q3-32awq-32g-graphs-marlin", "qwen3", 64, 5120, 25600, False),
    ("h200-vllm-0.33.0/moe-q30a3b-80g-graphs", "qwen3_moe", 48, 2048, 6144, True),
    ("h200-vllm-0.33.0/dsv2lite-80g-graphs", "deepseek_v2", 27, 2048, 10944, True),
)
TOOK = re.compile(r"Graph capturing finished in \d+ secs, took ([0-9.]+) GiB")
ESTIMATE = re.compile(r"CUDA graph pool memory: [0-9.]+ GiB \(actual\), ([0-9.]+) GiB \(estimated\)")
SEQS = re.compile(r"'max_num_seqs': (\d+)")
TOKENS = re.compile(r"'max_num_batched_tokens': (\d+)")
Row = dict[str, float | int | str | bool]
FORMS: dict[str, Callable[[Row], list[float]]] = {
    "piecewise x layers, full past two x layers (committed)": lambda r: [
        r["pw"] * r["layers"] / 36, max(r["full"] - 2, 0) * r["layers"] / 36],
    "piecewise x layers, full past two unscaled": lambda r: [r["pw"] * r["layers"] / 36, max(r["full"] - 2, 0)],
    "piecewise x layers, full past two x layers x intermediate (planned the check, dropped)": lambda r: [
        r["pw"] * r["layers"] / 36, max(r["full"] - 2, 0) * r["layers"] * r["intermediate"] / (36 * 12288)],
    "both rates x layers / 36 (until 2026-12-05)": lambda r: [r["pw"] * r["layers"] / 36, r["full"] * r["layers"] / 36],
    "both rates unscaled": lambda r: [r["pw"], r["full"]],
    "piecewise x layers, full unscaled": lambda r: [r["pw"] * r["layers"] / 36, r["full"]],
    "piecewise x layers, full x layers x intermediate": lambda r: [
        r["pw"] * r["layers"] / 36, r["full"] * r["layers"] * r["intermediate"] / (36 * 12288)],
    "piecewise x layers, full x layers x hidden": lambda r: [
        r["pw"] * r["layers"] / 36, r["full"] * r["layers"] * r["hidden"] / (36 * 4096)],
}
# The Qwen3-8B runs kit/data/calibration.yaml marks `set: fit`: the committed rates are fitted on these alone (its
# Qwen2.5, Llama and Phi-3.5 graph runs, also `set: fit`, set their architectures' full_rate_by_model_type only:
# printed below)
FIT_SET = ("q8-48g-graphs", "q8fp8-80g-graphs", "q8-8k-graphs-16seqs", "rtx4090-awq-preset")


def read(log: str) -> tuple[float, float, int, int]:
    """(profiling capture GiB, estimate GiB, max_num_seqs, max_num_batched_tokens) from one start-up log."""
    with lzma.open(ROOT / f"{log}.log.xz", "rt") as handle:
        text = handle.read()
    took, estimate = TOOK.search(text), ESTIMATE.search(text)
    seqs, tokens = SEQS.search(text), TOKENS.search(text)
    assert took and estimate and seqs and tokens, log
    return float(took.group(1)), float(estimate.group(1)), int(seqs.group(1)), int(tokens.group(1))


def rows() -> list[Row]:
    out: list[Row] = []
    for log, family, layers, hidden, intermediate, moe in CASES:
        took, estimate, seqs, tokens = read(log)
        pw, full = cuda_graph_counts(seqs, VERSION, tokens)
        sample_mib = (estimate - took) / (full - 2) * 1024 if full > 2 else float("nan")
        out.append({"case": Path(log).name, "family": family, "layers": layers, "hidden": hidden,
                    "intermediate": intermediate, "moe": moe, "seqs": seqs, "pw": pw, "full": full,
                    "took": took, "estimate": estimate, "sample_mib": sample_mib})
    return out


def held_out(dense: list[Row], form: Callable[[Row], list[float]]) -> dict[str, float]:
    """Each case's graph GiB error (plan - vLLM) with the form refit without its family."""
    x = np.array([form(r) for r in dense])
    y = np.array([float(r["estimate"]) for r in dense])
    errors: dict[str, float] = {}
    for family in sorted({str(r["family"]) for r in dense}):
        keep = np.array([r["family"] != family for r in dense])
        coef, *_ = np.linalg.lstsq(x[keep], y[keep], rcond=None)
        for i, r in enumerate(dense):
            if r["family"] == family:
                errors[str(r["case"])] = float(x[i] @ coef - y[i])
    return errors


def main() -> None:
    table = rows()
    print(f"{'case':44} {'family':12} {'layers':>6} {'graphs':>8} {'capture':>8} {'MiB/layer':>9} "
          f"{'2nd FULL MiB':>12} {'MiB/layer':>9} {'estimate':>8}")
    for r in table:
        layers, sample = int(r["layers"]), float(r["sample_mib"])
        print(f"{r['case']:44} {r['family']:12} {layers:6d} {r['pw']:>3} + {r['full']:<3} {r['took']:8.2f} "
              f"{float(r['took']) * 1024 / layers:9.1f} {sample:12.1f} {sample / layers:9.3f} {r['estimate']:8.2f}")
    dense = [r for r in table if not r["moe"]]
    print("\nheld out by family, graph GiB, plan - vLLM (dense runs; 16-sequence runs fitted but their samples "
          "are good only to about 3 MiB):")
    for name, form in FORMS.items():
        errors = held_out(dense, form)
        print(f"  {name:50} " + "  ".join(f"{case}={err:+.3f}" for case, err in errors.items()
                                            if not case.endswith(("16seqs", "preset"))))
    committed = next(iter(FORMS))
    fit = [r for r in dense if r["case"] in FIT_SET]
    coef, *_ = np.linalg.lstsq(np.array([FORMS[committed](r) for r in fit]),
                               np.array([float(r["estimate"]) for r in fit]), rcond=None)
    print(f"\n{committed}, fitted on the fit set ({', '.join(FIT_SET)}):")
    print(f"  per_graph_gib={coef[0]:.5f}  per_full_graph_gib={coef[1]:.5f}  (kit/data/vllm.yaml 0.33.0)")
    print("  every other run planned with them, graph GiB, plan - vLLM:")
    print("  " + "  ".join(f"{r['case']}={float(np.array(FORMS[committed](r)) @ coef) - float(r['estimate']):+.3f}"
                           for r in dense if r["case"] not in FIT_SET))
    print("  each architecture's full rate, least squares on its own runs with the piecewise part as planned "
          "(full_rate_by_model_type: recorded for each dense architecture; one with none is planned at the largest):")
    for family in sorted({str(r["family"]) for r in dense}):
        own = [r for r in dense if r["family"] == family]
        parts = [np.array(FORMS[committed](r)) * coef for r in own]
        full = np.array([p[1] for p in parts])
        rest = np.array([float(r["estimate"]) - p[0] for r, p in zip(own, parts, strict=True)])
        factor = float(full @ rest / (full @ full)) if full.any() else float("nan")
        sizes = len({int(r["layers"]) for r in own})
        print(f"    {family:8} {factor:.2f} ({len(own)} runs, {sizes} model size{'s' * (sizes > 1)})")
    moe = [r for r in table if r["moe"]]
    for r in moe:
        reference = float(np.array(FORMS[committed]({**r, "layers": 36})) @ coef)
        print(f"  {r['case']}: {r['estimate']:.2f} GiB charged, {r['estimate'] / reference:.3f} x the reference "
              f"figure ({reference:.3f} GiB at 36 layers): moe_scale")


if __name__ == "__main__":
    main()
