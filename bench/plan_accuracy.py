"""Planner accuracy against real vLLM start-up logs (kit/data/calibration.yaml).

Two sets: `cases` (public logs; figures transcribed with their source) and `gpu_cases` (engines the kit started
on a real GPU with `kit probe`; the figures are parsed here from the committed raw logs by kit.memory.vllmlog).
Prints predicted vs actual weights GiB, KV cache GiB and KV tokens per case, then the errors; for the GPU runs, per
vLLM version, the runs its rules were fitted on and the held-out ones apart, with activation and the CUDA-graph
memory charged to the KV budget as well.
Targets: public logs median <= 3% (weights), <= 5% (KV); measured GPU runs: KV tokens median <= 1% and every
case <= 3%, weights every case <= 1%.
Run: python bench/plan_accuracy.py (make bench-plan)
"""

from __future__ import annotations

import json
import lzma
import statistics
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit.memory import vllmlog
from kit.config.modelinfo import load_model_spec
from kit.memory import plan as planner
from kit.memory import inputs as plan_inputs
from kit.memory import rules

import family_holdout  # bench/ is on sys.path when this script runs

CALIBRATION = Path(__file__).resolve().parents[1] / "kit" / "data" / "calibration.yaml"
LOG_DIR = CALIBRATION.parent / "calibration"
GPU_METRICS = ("weights_gib", "kv_cache_gib", "kv_cache_tokens")


def read_log(case: dict) -> vllmlog.StartupLog:
    with lzma.open(LOG_DIR / case["log"], "rt", encoding="utf-8") as handle:
        return vllmlog.parse(handle.read())


GPU_ROW_METRICS = ("kv_cache_tokens", "kv_cache_gib", "weights_gib", "activation_gib", "cuda_graph_gib")
SETS = (("fit", "fitted"), ("held_out", "held out"))


def case_version(case: dict) -> str:
    return str(case["inputs"].get("vllm_version", "0.26.0"))


def gpu_inputs_for(case: dict, log: vllmlog.StartupLog) -> planner.PlanInputs:
    """A measured case: the GPU's memory as vLLM saw it (the log's total), vLLM 0.26.0 unless the case says."""
    raw = dict(case["inputs"])
    model = load_model_spec(raw.pop("model"))
    raw["vllm_version"] = case_version(case)
    raw.setdefault("gpu_name", "h200")
    return planner.PlanInputs(model=model, gpu_memory_gib=log.total_gib or plan_inputs.find_gpu("h200").memory_gib, **raw)


def measured(log: vllmlog.StartupLog) -> dict[str, float | None]:
    """What vLLM logged, in the planner's terms. CUDA graph memory is the estimate charged to the KV budget (0 when
    nothing was charged), or with 0.34's extensible cache the pool as captured (the cache is sized after capture);
    activation excludes it (kit.memory.vllmlog)."""
    charged = (log.cuda_graph_estimate_gib or 0.0) if log.cuda_graph_charged else 0.0
    if log.free_after_warmup_gib is not None:  # 0.34's extensible cache: sized after capture, the pool as captured
        charged = log.cuda_graph_gib or 0.0
    return {"kv_cache_tokens": log.kv_cache_tokens, "kv_cache_gib": log.kv_cache_gib, "weights_gib": log.weights_gib,
            "activation_gib": log.peak_activation_gib, "cuda_graph_gib": charged}


def gpu_rows(version: str | None = None, which: str | None = None) -> list[tuple[str, str, float, float]]:
    """(case, metric, predicted, actual) for every measured engine that started, of one vLLM version and set
    (``which``: "fit" or "held_out"; a case without `set` was fitted)."""
    rows = []
    for case in yaml.safe_load(CALIBRATION.read_text())["gpu_cases"]:
        if case.get("expect_error") or case.get("start_failed"):
            continue
        if version is not None and case_version(case) != version:
            continue
        if which is not None and case.get("set", "fit") != which:
            continue
        log = read_log(case)
        # unrounded: vLLM's figure is already rounded to 0.01 GiB, rounding ours too would double that error
        predicted = planner.plan(gpu_inputs_for(case, log))
        actual_by_metric = measured(log)
        for metric in GPU_ROW_METRICS:
            actual = actual_by_metric[metric]
            value = float(getattr(predicted, metric))
            if actual is None or (metric == "weights_gib" and not actual):  # the tiny model logs 0.0 GiB
                continue
            if metric == "cuda_graph_gib" and not actual and not value:
                continue  # nothing charged, nothing planned
            rows.append((case["id"], metric, value, float(actual)))
    return rows


def inputs_for(case: dict) -> planner.PlanInputs:
    raw = dict(case["inputs"])
    model = load_model_spec(raw.pop("model"))
    gpu = raw.pop("gpu", None)
    if gpu:
        info = plan_inputs.find_gpu(gpu)
        raw.setdefault("gpu_memory_gib", info.memory_gib)
        raw["gpu_name"] = info.key
    raw["vllm_version"] = str(raw.get("vllm_version", rules.DEFAULT_VLLM_VERSION))
    return planner.PlanInputs(model=model, **raw)


def predict(case: dict) -> dict[str, float]:
    inputs = inputs_for(case)
    if "compare_stage" in case:
        r, stages, _ = planner._compute(inputs)  # one named stage, not the binding one
        stage = stages[case["compare_stage"]]
        return {"weights_gib": stage.weights / plan_inputs.GIB, "kv_cache_gib": stage.kv_bytes / plan_inputs.GIB}
    return planner.plan(inputs).to_json()


def pct(predicted: float, actual: float) -> float:
    return (predicted - actual) / actual * 100


def main() -> int:
    cases = yaml.safe_load(CALIBRATION.read_text())["cases"]
    errors: dict[str, list[float]] = {"weights_gib": [], "kv_cache_gib": [], "kv_cache_tokens": []}
    cw = max(40, *(len(case["id"]) + 1 for case in cases))
    header = f"{'case':<{cw}}{'metric':<17}{'predicted':>14}{'actual':>14}{'error':>9}"
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
            print(f"{case['id']:<{cw}}{metric:<17}{shown:>14}{real:>14}{err:>+8.2f}%")
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
    ok &= gpu_report()
    return 0 if ok else 1


def _shown(metric: str, value: float) -> str:
    return f"{value:,.0f}" if metric == "kv_cache_tokens" else f"{value:.2f}"


def gpu_report() -> bool:
    """The measured GPU runs, parsed from their raw logs: per vLLM version, the runs the version's rules were fitted
    on and the held-out runs (chosen before their errors were seen, kit/data/calibration.yaml)."""
    cases = yaml.safe_load(CALIBRATION.read_text())["gpu_cases"]
    versions = sorted({case_version(c) for c in cases}, key=rules.parse_version)
    # (median target, every-case target) from issues 12 and 22, on KV and weights; activation and graph memory
    # are reported, not targeted (they are inside the KV figure)
    targets = {"weights_gib": (1.0, 1.0), "kv_cache_gib": (1.0, 3.0), "kv_cache_tokens": (1.0, 3.0)}
    ok = True
    for version in versions:
        for which, label in SETS:
            rows = gpu_rows(version, which)
            if not rows:
                print(f"\nvLLM {version}, {label}: no runs")
                continue
            print()
            print(f"vLLM {version} on an H200, {label} runs (kit/data/calibration/h200-vllm-{version}, parsed from the raw logs)")
            cw = max(40, *(len(r[0]) + 1 for r in rows))  # a space after the longest case id
            header = f"{'case':<{cw}}{'metric':<17}{'predicted':>14}{'actual':>14}{'error':>9}{'GiB off':>9}"
            print(header)
            print("-" * len(header))
            errors: dict[str, list[float]] = {m: [] for m in GPU_ROW_METRICS}
            gib_off: dict[str, list[float]] = {m: [] for m in GPU_ROW_METRICS}
            for case_id, metric, value, actual in rows:
                err = pct(value, actual) if actual else float("inf")
                off = "" if metric == "kv_cache_tokens" else f"{value - actual:+.2f}"
                if actual:
                    errors[metric].append(abs(err))
                if metric != "kv_cache_tokens":
                    gib_off[metric].append(abs(value - actual))
                print(f"{case_id:<{cw}}{metric:<17}{_shown(metric, value):>14}{_shown(metric, actual):>14}"
                      f"{err:>+8.2f}%{off:>9}")
            print()
            for metric in GPU_ROW_METRICS:
                values = errors[metric]
                if not values:
                    continue
                median, worst = statistics.median(values), max(values)
                line = (f"{version} {label:<9} median |error| {metric:<16} {median:6.2f}%  (max {worst:6.2f}%, "
                        f"n={len(values)}")
                if gib_off[metric]:
                    line += f", max {max(gib_off[metric]):.2f} GiB off"
                line += ")"
                if metric in targets:
                    met = median <= targets[metric][0] and worst <= targets[metric][1]
                    line += (f"  target median <= {targets[metric][0]:.0f}%, max <= {targets[metric][1]:.0f}%: "
                             f"{'met' if met else 'MISSED'}")
                    ok &= met
                print(line)
    ok &= verdict_report(cases)
    ok &= family_report(cases)
    allowance_report(cases)
    preregistered_report("0.33.0")
    preregistered_report()
    cold = vllm_seconds("h200-qwen3-8b-bf16-graphs-cold")
    warm = vllm_seconds("h200-qwen3-8b-bf16-graphs-warm")
    if cold and warm:
        print(f"\ncold vs warm compile cache (Qwen3-8B, CUDA graphs, vLLM 0.26.0): init engine {cold[0]:.1f} s vs "
              f"{warm[0]:.1f} s (ratio {cold[0] / warm[0]:.2f}), torch.compile {cold[1]:.1f} s vs {warm[1]:.1f} s "
              f"(ratio {cold[1] / warm[1]:.2f})")
    return ok


def family_of(case: dict) -> str:
    """A run's model family: its config's model_type (MoE and MLA types are families of their own)."""
    return load_model_spec(case["inputs"]["model"]).model_type or "unknown"


def family_runs(cases: list[dict], version: str) -> list[family_holdout.Run]:
    runs = []
    for case in cases:
        if case.get("expect_error") or case.get("start_failed") or case_version(case) != version:
            continue
        log = read_log(case)
        runs.append(family_holdout.Run(case["id"], family_of(case), gpu_inputs_for(case, log),
                                       measured(log) | {"kv_cache_tokens": log.kv_cache_tokens}))
    return runs


def family_report(cases: list[dict], version: str = "0.33.0") -> bool:
    """Leave-one-family-out (bench/family_holdout.py): each family's runs planned with the committed (fitted)
    constants, and with the constants refit without that family. Targets (issue 33), on the held-out families: KV
    tokens within 3 % in every case, median within 1 %, never more than 1 % above vLLM; weights within 1 %."""
    runs = family_runs(cases, version)
    if not runs:
        return True
    fitted = {r["case"]: r for r in family_holdout.errors(runs)}
    fits, held = family_holdout.leave_one_family_out(version, runs)
    print(f"\nvLLM {version}: leave-one-family-out (constants refit without the family, then the family planned)")
    cw = max(52, *(len(r["case"]) + 1 for r in held))
    header = (f"{'family':<14}{'case':<{cw}}{'KV tok fitted':>14}{'KV tok held out':>16}{'weights':>9}  plan")
    print(header)
    print("-" * len(header))
    for row in held:
        base = fitted[row["case"]]
        print(f"{row['family']:<14}{row['case']:<{cw}}{base.get('kv_tokens_pct', 0):>+13.2f}%"
              f"{row.get('kv_tokens_pct', 0):>+15.2f}%{row.get('weights_pct', 0):>+8.2f}%  "
              f"{'approximate' if row['approximate'] else 'confident'}")
    print()
    names = [".".join(path[1:] if path[0] == "memory_accounting" else path) for path, _, _ in family_holdout.FITTED]
    print("constants refit without each family (committed first; then (all): the same refit with no family left out)")
    print(f"  {'committed':<14}" + "  ".join(f"{n.split('.')[-1]}={v:.4g}"
                                               for n, v in zip(names, family_holdout.committed(version), strict=True)))
    rows = {"(all)": family_holdout.refit(version, runs, family_holdout.committed(version))}
    rows |= {f"-{family}": values for family, values in fits.items()}
    for label, values in rows.items():
        print(f"  {label:<14}" + "  ".join(f"{n.split('.')[-1]}={v:.4g}" for n, v in zip(names, values, strict=True)))
    inside = family_holdout.summary(list(fitted.values()))
    outside = family_holdout.summary(held)
    for label, s in (("fitted on all", inside), ("family held out", outside)):
        print(f"{version} {label:<16} KV tokens: median |error| {s['kv_median_abs']:.2f}%, max {s['kv_max_abs']:.2f}%, "
              f"most over vLLM {s['kv_max_over']:+.2f}% ({s['kv_max_over_confident']:+.2f}% where the plan did not say "
              f"approximate; n={s['n']}); weights max |error| {s['weights_max_abs']:.2f}%")
    met = (outside["kv_median_abs"] <= 1.0 and outside["kv_max_abs"] <= 3.0 and outside["kv_max_over"] <= 1.0
           and outside["weights_max_abs"] <= 1.0)
    print(f"target on held-out families (median <= 1 %, every case <= 3 %, never > +1 %, weights <= 1 %): "
          f"{'met' if met else 'MISSED'}")
    return met


def allowance_report(cases: list[dict], version: str = "0.34.0") -> None:
    """vLLM 0.34's post-warm-up allowance (kit/data/vllm.yaml kv_sizing.post_warmup_allowance_gib), held out by
    family: each run's shortfall is the plan's KV cache before the allowance less what vLLM found room for after
    warm-up ("N KV cache blocks (X GiB) fit"); each family is then planned with the largest shortfall of the other
    families. Reported, not targeted: the committed allowance is in-sample (the largest shortfall of all the runs)."""
    sizing = rules.rules_for(version).kv_sizing
    allowance = float((sizing.post_warmup_allowance_gib if sizing else None) or 0.0)
    runs = []
    for case in cases:
        if case_version(case) != version or case.get("start_failed"):
            continue
        log = read_log(case)
        if log.kv_fit_after_warmup_gib is None:
            continue  # the extensible cache was off: 0.33's estimate path, no allowance
        before = planner.plan(gpu_inputs_for(case, log)).kv_cache_gib + allowance
        runs.append((family_of(case), case["id"], before, log.kv_fit_after_warmup_gib))
    if not runs:
        return
    print(f"\nvLLM {version}: the post-warm-up allowance held out by family (committed {allowance:.2f} GiB, in-sample)")
    fw = max(10, *(len(r[0]) + 1 for r in runs))
    cw = max(36, *(len(r[1]) + 1 for r in runs))
    header = f"{'family':<{fw}}{'case':<{cw}}{'shortfall':>10}{'from others':>12}{'planned':>9}{'vLLM':>8}{'error':>9}"
    print(header)
    print("-" * len(header))
    errors = []
    for family, case_id, before, actual in runs:
        others = [b - a for f, _, b, a in runs if f != family]
        held = max(max(others, default=0.0), 0.0)
        planned = before - held
        errors.append((pct(planned, actual), family))
        print(f"{family:<{fw}}{case_id:<{cw}}{before - actual:>+9.2f} {held:>11.2f}{planned:>9.2f}{actual:>8.2f}"
              f"{pct(planned, actual):>+8.2f}%")
    over = sorted({family for error, family in errors if error > 0})
    print(f"{version} allowance, family held out: KV GiB error {min(errors)[0]:+.2f}% to {max(errors)[0]:+.2f}% "
          f"(n={len(errors)}); over vLLM: "
          f"{', '.join(over) or 'none'}")
    values = [error for error, _ in errors]
    median, worst, most_over = statistics.median(abs(v) for v in values), max(abs(v) for v in values), max(values)
    met = median <= 1.0 and worst <= 3.0 and most_over <= 1.0
    print(f"{version} allowance, family held out: median |error| {median:.2f}%, max {worst:.2f}%, most over vLLM "
          f"{most_over:+.2f}%; target (median <= 1 %, every case <= 3 %, never > +1 %): {'met' if met else 'MISSED'}")


def preregistered_report(version: str = "0.34.0") -> None:
    """Each start-up of ``version`` planned before it ran (a ``preregistered-plans*.json`` beside its log, written by
    bench/preregister.py and committed before the GPU run): the KV tokens and verdict planned then against vLLM's
    log. The plans are as registered, not replanned with today's rules."""
    cases = {case["log"]: case for case in yaml.safe_load(CALIBRATION.read_text())["gpu_cases"]
             if case_version(case) == version}
    folders = sorted({Path(log).parent for log in cases})
    rows = []
    for folder in folders:
        for path in sorted((LOG_DIR / folder).glob("preregistered-plans*.json")):
            for name, planned in json.loads(path.read_text())["plans"].items():
                case = cases.get(str(folder / f"{name}.log.xz"))
                if case is None:
                    continue  # planned, never run
                rows.append((path.name, folder.name, case, planned))
    if not rows:
        return
    print(f"\nvLLM {version}: plans registered before the engines ran, against vLLM (KV tokens; verdict)")
    lw = max(48, *(len(f"{folder}/{file}") for file, folder, _, _ in rows))
    cw = max(48, *(len(case["id"]) + 1 for _, _, case, _ in rows))
    header = f"{'registered in':<{lw}} {'case':<{cw}}{'planned':>11}{'vLLM':>11}{'error':>9}  verdict"
    print(header)
    print("-" * len(header))
    for file, folder, case, planned in rows:
        label = f"{folder}/{file}"
        if case.get("start_failed"):
            print(f"{label:<{lw}} {case['id']:<{cw}}{planned['kv_cache_tokens']:>11,}{'-':>11}{'':>9}  did not start "
                  "(not a memory verdict)")
            continue
        log = read_log(case)
        started = not case.get("expect_error")
        verdict = "right" if bool(planned["fits"]) == started else "WRONG"
        if log.kv_cache_tokens:
            error = f"{pct(planned['kv_cache_tokens'], log.kv_cache_tokens):+8.2f}%"
            actual = f"{log.kv_cache_tokens:,}"
        else:
            error, actual = "", "refused"
        print(f"{label:<{lw}} {case['id']:<{cw}}{planned['kv_cache_tokens']:>11,}{actual:>11}{error:>9}  {verdict}")


def verdict_report(cases: list[dict]) -> bool:
    """Fit or no fit, per measured engine: the plan's verdict against what vLLM did (started and served, or refused
    with an out-of-memory error). A run that did not finish for another reason (`start_failed`) has no verdict."""
    print("\nfit / no-fit verdicts (every measured engine): plan says, vLLM did")
    wrong = []
    counted = 0
    for case in cases:
        if case.get("start_failed"):
            continue
        log = read_log(case)
        planned = planner.plan(gpu_inputs_for(case, log)).fits
        started = not case.get("expect_error")
        counted += 1
        if planned != started:
            wrong.append(case["id"])
            print(f"  WRONG {case['id']}: plan {'fits' if planned else 'does not fit'}, vLLM "
                  f"{'started' if started else 'refused'}")
    refused = sum(1 for c in cases if c.get("expect_error"))
    print(f"verdicts right: {counted - len(wrong)}/{counted} ({refused} refused by vLLM)  target every one: "
          f"{'met' if not wrong else 'MISSED'}")
    return not wrong


def vllm_seconds(case_id: str) -> tuple[float, float] | None:
    for case in yaml.safe_load(CALIBRATION.read_text())["gpu_cases"]:
        if case["id"] == case_id:
            log = read_log(case)
            if log.init_engine_seconds and log.compile_seconds:
                return log.init_engine_seconds, log.compile_seconds
    return None


if __name__ == "__main__":
    raise SystemExit(main())
