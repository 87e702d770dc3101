"""Leave-one-family-out: the planner's fitted constants refit without a model family, then that family planned.

A rule fitted on a set of start-ups and checked on more start-ups of the same models proves little (issue 33: 0.06 %
inside the fit, 19 % on families it never met). Here every measured vLLM engine of one release is labelled with its
model family (the config's `model_type`), and for each family F:

1. the constants kit/data/vllm.yaml marks as fitted for that release (FITTED below: the sampler's residual bytes, the
   cold-compile buffers and floor, the one-GPU non-torch figure, the CUDA-graph rates and MoE scale, Machete's AWQ
   residual) are refit by least squares on every other family's runs, each against the figure vLLM logs for its
   term (a few damped Gauss-Newton steps, constants kept >= 0), in stages: the weights constant on the weights, then
   the activation's on the peak activation, the graphs' on the CUDA-graph charge, and last the non-torch figures on
   the KV cache, the only figure that holds them;
2. a constant that no remaining run informs (its column of the Jacobian is zero: no MoE left, no cold compile left)
   falls back to its unfitted value (PRIOR), so nothing learnt from F leaks back in;
3. F's runs are planned with those constants and compared with their logs.

Nothing here changes the committed constants; bench/plan_accuracy.py prints this table beside the fitted one.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.core.datafiles import vllm_table
from kit.memory import plan as planner
from kit.memory import rules

# (path under versions.<release>.defaults, unfitted value, the figure vLLM logs that the constant's term feeds): each
# constant vllm.yaml says was fitted, not derived. The non-torch figures are logged only inside the KV cache's (the
# budget less everything else), so KV GiB is theirs.
FITTED: tuple[tuple[tuple[str, ...], float, str], ...] = (
    (("memory_accounting", "sampler", "residual_bytes_per_logit"), 0.0, "activation_gib"),
    (("memory_accounting", "compile_cold_mlp_buffers"), 0.0, "activation_gib"),
    (("memory_accounting", "compile_cold_floor_vocab_copies"), 0.0, "activation_gib"),
    (("memory_accounting", "compile_cold_floor_gib"), 0.0, "activation_gib"),
    (("memory_accounting", "non_torch_gib_single"), 0.0, "kv_cache_gib"),
    (("memory_accounting", "non_torch_marlin_gib"), 0.0, "kv_cache_gib"),
    (("memory_accounting", "non_torch_gptq_gib"), 0.0, "kv_cache_gib"),
    (("memory_accounting", "cuda_graph_estimate", "per_graph_gib"), 0.0, "cuda_graph_gib"),
    (("memory_accounting", "cuda_graph_estimate", "per_full_graph_gib"), 0.0, "cuda_graph_gib"),
    (("memory_accounting", "cuda_graph_estimate", "moe_scale"), 1.0, "cuda_graph_gib"),
    (("machete_awq_residual_mib_per_linear",), 0.0, "weights_gib"),
)
# The order the stages of a refit take: each figure's constants are fitted with those of the figures before it fixed
METRICS = ("weights_gib", "activation_gib", "cuda_graph_gib", "kv_cache_gib")


@dataclass(frozen=True)
class Run:
    """One measured engine: its id, family, planner inputs and what vLLM logged (planner's terms)."""

    case_id: str
    family: str
    inputs: planner.PlanInputs
    actual: dict[str, float | None]


def _defaults(version: str) -> dict[str, Any]:
    return vllm_table()["versions"][version].setdefault("defaults", {})


def _get(rules_at: object, path: tuple[str, ...], fallback: float) -> float:
    """The folded rule at ``path`` (kit/core/tables.py Rules, attribute by attribute); ``fallback`` where unset."""
    node = rules_at
    for key in path:
        node = getattr(node, key, None)
        if node is None:
            return fallback
    return float(node)  # type: ignore[arg-type]


def committed(version: str) -> np.ndarray:
    folded = rules.rules_for(version)
    return np.array([_get(folded, path, prior) for path, prior, _ in FITTED])


def _refold() -> None:
    """Drop the rules folded from the data table, so the next plan reads it as it stands now."""
    rules._entries.cache_clear()
    rules._rules_at.cache_clear()


@contextlib.contextmanager
def constants(version: str, values: np.ndarray) -> Iterator[None]:
    """Plan with ``values`` for the FITTED constants of ``version`` (the data table is restored afterwards)."""
    defaults = _defaults(version)
    saved: list[tuple[dict[str, Any], str, Any, bool]] = []
    for (path, _, _), value in zip(FITTED, values, strict=True):
        node = defaults
        for key in path[:-1]:
            node = node.setdefault(key, {})
        saved.append((node, path[-1], node.get(path[-1]), path[-1] in node))
        node[path[-1]] = float(value)
    _refold()
    try:
        yield
    finally:
        for node, key, old, present in reversed(saved):
            if present:
                node[key] = old
            else:
                node.pop(key, None)
        _refold()


@contextlib.contextmanager
def without_facts_of(version: str, family: str) -> Iterator[None]:
    """Plan as if ``family`` had never been measured: its own recorded CUDA-graph factor (full_rate_by_model_type)
    is set aside, and it leaves the architectures measured with graphs (measured_model_types), while its runs are
    planned; so a plan says "approximate" where it would for an architecture no start has measured."""
    estimate = _defaults(version).get("memory_accounting", {}).get("cuda_graph_estimate", {})
    table = estimate.get("full_rate_by_model_type") or {}
    saved = table.pop(family, None)
    measured = estimate.get("measured_model_types")
    if measured is not None:
        estimate["measured_model_types"] = [m for m in measured if m != family]
    _refold()
    try:
        yield
    finally:
        if saved is not None:
            table[family] = saved
        if measured is not None:
            estimate["measured_model_types"] = measured
        _refold()


def predicted(run: Run) -> dict[str, float]:
    plan = planner.plan(run.inputs)
    return {m: float(getattr(plan, m)) for m in METRICS} | {"kv_cache_tokens": float(plan.kv_cache_tokens),
                                                            "approximate": float(bool(plan.approximate["value"]))}


def residuals(runs: list[Run], metrics: tuple[str, ...] = METRICS) -> np.ndarray:
    out: list[float] = []
    for run in runs:
        got = predicted(run)
        for metric in metrics:
            actual = run.actual.get(metric)
            if actual is None or (metric == "weights_gib" and not actual):
                continue
            out.append(got[metric] - float(actual))
    return np.array(out)


def refit(version: str, runs: list[Run], start: np.ndarray, steps: int = 6) -> np.ndarray:
    """Each constant refit against the figure its term feeds (FITTED's third field), in METRICS' order with the
    constants of the figures before fixed: weights first, then the peak activation, the CUDA-graph charge, and last the
    non-torch figures against the KV cache (the only figure that holds them). A constant fitted to another figure's
    residuals would soak up the errors of terms it does not model: Machete's AWQ residual, fitted jointly, took the KV
    cache's misses and came out at 0.26-0.29 MiB per linear, where the weights vLLM logged give about 0.16."""
    values = start.copy()
    for metric in METRICS:
        columns = [j for j, (_, _, feeds) in enumerate(FITTED) if feeds == metric]
        values = _refit_stage(version, runs, values, columns, (metric,), steps)
    return values


def _refit_stage(version: str, runs: list[Run], values: np.ndarray, columns: list[int], metrics: tuple[str, ...],
                 steps: int) -> np.ndarray:
    """Damped Gauss-Newton on the GiB residuals of ``metrics`` over ``columns``; uninformed ones go back to their
    PRIOR, so nothing learnt from a held-out family leaks back in."""
    values = values.copy()
    priors = np.array([prior for _, prior, _ in FITTED])
    informed = np.zeros(len(values), dtype=bool)
    for _ in range(steps):
        with constants(version, values):
            base = residuals(runs, metrics)
        if not len(base):  # no run logs this figure
            break
        jac = np.zeros((len(base), len(values)))
        for j in columns:
            step = max(1e-3, 0.05 * abs(values[j]))
            moved = values.copy()
            moved[j] += step
            with constants(version, moved):
                jac[:, j] = (residuals(runs, metrics) - base) / step
        informed |= np.abs(jac).max(axis=0) > 1e-9
        cols = np.flatnonzero(informed)
        if not len(cols):
            break
        sub = jac[:, cols]
        damping = 1e-3 * np.eye(len(cols))
        delta = np.linalg.solve(sub.T @ sub + damping, -sub.T @ base)
        values[cols] = np.maximum(values[cols] + delta, 0.0)
        if np.abs(delta).max() < 1e-5:
            break
    uninformed = np.array([j in columns and not informed[j] for j in range(len(values))])
    values[uninformed] = priors[uninformed]
    return values


def errors(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        got = predicted(run)
        row: dict[str, Any] = {"case": run.case_id, "family": run.family, "approximate": bool(got["approximate"])}
        tokens = run.actual.get("kv_cache_tokens")
        if tokens:
            row["kv_tokens_pct"] = (got["kv_cache_tokens"] - tokens) / tokens * 100
        weights = run.actual.get("weights_gib")
        if weights:
            row["weights_pct"] = (got["weights_gib"] - weights) / weights * 100
        rows.append(row)
    return rows


def leave_one_family_out(version: str, runs: list[Run]) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    """Per family: the constants refit without it, and its runs' errors under them."""
    start = committed(version)
    fits: dict[str, np.ndarray] = {}
    rows: list[dict[str, Any]] = []
    for family in sorted({r.family for r in runs}):
        train = [r for r in runs if r.family != family]
        values = refit(version, train, start)
        fits[family] = values
        with constants(version, values), without_facts_of(version, family):
            rows += errors([r for r in runs if r.family == family])
    return fits, rows


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    kv = [r["kv_tokens_pct"] for r in rows if "kv_tokens_pct" in r]
    weights = [abs(r["weights_pct"]) for r in rows if "weights_pct" in r]
    return {"n": len(kv), "kv_median_abs": statistics.median(abs(x) for x in kv) if kv else 0.0,
            "kv_max_abs": max((abs(x) for x in kv), default=0.0), "kv_max_over": max(kv, default=0.0),
            "weights_max_abs": max(weights, default=0.0),
            "kv_max_over_confident": max((r["kv_tokens_pct"] for r in rows
                                          if "kv_tokens_pct" in r and not r.get("approximate")), default=0.0)}
