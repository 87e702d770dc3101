"""bench/family_holdout.py: a constant is refit against the figure its term feeds, not against every figure.

Leave-one-family-out measures the procedure that made the committed constants. Fitted jointly on every figure's
residuals, Machete's AWQ residual (a weights term) soaked up the KV cache's misses and came out at 0.26-0.29 MiB per
linear layer with or without any family, where the committed 0.16 is what the weights vLLM logged give; held out by
family that planned Qwen2.5-1.5B-AWQ's weights 1.14 % high.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import yaml

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import family_holdout  # noqa: E402
import plan_accuracy  # noqa: E402

VERSION = "0.33.0"
MACHETE = [j for j, (path, _, _) in enumerate(family_holdout.FITTED) if path[-1] == "machete_awq_residual_mib_per_linear"][0]
# AWQ on Machete (the H200's default kernel for AWQ at 0.33): Qwen3-8B-AWQ and Qwen2.5-1.5B-AWQ
AWQ_MACHETE = ("h200-033-rtx4090-awq-preset-24g", "h200-033-orin-engine-61g")


@pytest.fixture(scope="module")
def runs() -> list[family_holdout.Run]:
    cases = yaml.safe_load(plan_accuracy.CALIBRATION.read_text())["gpu_cases"]
    chosen = [c for c in cases if c["id"] in AWQ_MACHETE]
    assert len(chosen) == len(AWQ_MACHETE)
    return plan_accuracy.family_runs(chosen, VERSION)


def only(runs: list[family_holdout.Run], *metrics: str) -> list[family_holdout.Run]:
    return [dataclasses.replace(r, actual={m: v for m, v in r.actual.items() if m in metrics}) for r in runs]


def test_every_fitted_constant_names_a_figure_vllm_logs():
    assert {feeds for _, _, feeds in family_holdout.FITTED} <= set(family_holdout.METRICS)
    assert family_holdout.FITTED[MACHETE][2] == "weights_gib"


def test_a_weights_constant_is_not_moved_by_the_kv_cache_residuals(runs):
    """With only the KV cache logged, no run informs the weights term: it goes back to its unfitted value (0), where
    the joint fit had moved it to cover the KV figure's misses."""
    start = family_holdout.committed(VERSION)
    values = family_holdout.refit(VERSION, only(runs, "kv_cache_gib"), start)
    assert values[MACHETE] == 0.0


def test_the_committed_machete_residual_is_what_the_logged_weights_give(runs):
    start = family_holdout.committed(VERSION)
    values = family_holdout.refit(VERSION, only(runs, "weights_gib"), start)
    assert values[MACHETE] == pytest.approx(start[MACHETE], abs=0.03)  # MiB per linear layer
    with family_holdout.constants(VERSION, values):
        for run in runs:
            assert family_holdout.predicted(run)["weights_gib"] == pytest.approx(run.actual["weights_gib"], abs=0.01)
