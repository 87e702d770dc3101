"""Planner accuracy against real vLLM start-up logs (kit/data/calibration.yaml).

Prints predicted vs actual weights GiB, KV cache GiB and KV tokens per case, then the
median absolute % errors. Targets: median <= 3% on weights, <= 5% on KV tokens.
Run: python bench/plan_accuracy.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit import plan as planner  # noqa: E402
from kit.modelinfo import load_model_spec  # noqa: E402

CALIBRATION = Path(__file__).resolve().parents[1] / "kit" / "data" / "calibration.yaml"


def inputs_for(case: dict) -> planner.PlanInputs:
    raw = dict(case["inputs"])
    model = load_model_spec(raw.pop("model"))
    gpu = raw.pop("gpu", None)
    if gpu:
        info = planner.find_gpu(gpu)
        raw.setdefault("gpu_memory_gib", info.memory_gib)
        raw["gpu_name"] = info.key
    raw["vllm_version"] = str(raw.get("vllm_version", planner.DEFAULT_VLLM_VERSION))
    return planner.PlanInputs(model=model, **raw)


def predict(case: dict) -> dict[str, float]:
    inputs = inputs_for(case)
    if "compare_stage" in case:
        r, stages, _ = planner._compute(inputs)  # one named stage, not the binding one
        stage = stages[case["compare_stage"]]
        return {"weights_gib": stage.weights / planner.GIB, "kv_cache_gib": stage.kv_bytes / planner.GIB}
    return planner.plan(inputs).to_json()


def pct(predicted: float, actual: float) -> float:
    return (predicted - actual) / actual * 100


def main() -> int:
    cases = yaml.safe_load(CALIBRATION.read_text())["cases"]
    errors: dict[str, list[float]] = {"weights_gib": [], "kv_cache_gib": [], "kv_cache_tokens": []}
    header = f"{'case':<40}{'metric':<17}{'predicted':>14}{'actual':>14}{'error':>9}"
    print(header)
    print("-" * len(header))
    for case in cases:
        predicted = predict(case)
        for metric, actual in case["actual"].items():
            value = predicted[metric]
            err = pct(value, actual)
            errors[metric].append(abs(err))
            shown = f"{value:,.0f}" if metric == "kv_cache_tokens" else f"{value:.2f}"
            real = f"{actual:,.0f}" if metric == "kv_cache_tokens" else f"{actual:.2f}"
            print(f"{case['id']:<40}{metric:<17}{shown:>14}{real:>14}{err:>+8.2f}%")
    print()
    targets = {"weights_gib": 3.0, "kv_cache_gib": 5.0, "kv_cache_tokens": 5.0}
    ok = True
    for metric, values in errors.items():
        median = statistics.median(values) if values else 0.0
        worst = max(values) if values else 0.0
        met = median <= targets[metric]
        ok &= met
        print(f"median |error| {metric:<16} {median:6.2f}%  (max {worst:6.2f}%, n={len(values)}, "
              f"target <= {targets[metric]:.0f}%: {'met' if met else 'MISSED'})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
