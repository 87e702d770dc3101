"""Pre-register the planner's answers for a calibration matrix before any of its engines runs.

Plans every case of bench/gpu_calibration.py's matrix with the rules as they stand in this checkout and writes them
(with the commit they were made at) as JSON. Committing that file before the GPU runs is the proof that the figures
the accuracy report later compares were not fitted to the runs.
Planner inputs: the case's flags; GPU total 139.80 GiB (torch's total for the lent H200); the GPU planned is the
H200 (with CALIB_GPU=h100-80gb: the H100, 79.19 GiB, as bench/gpu_calibration.py scales the budgets to it), except
where a case disables Machete so the H200 takes a smaller card's Marlin path: then that card (`MARLIN_CARDS`, by the
budget the case emulates).
Run: python bench/preregister.py --matrix 0.34.0 [--cases NAME,NAME] OUT.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_calibration as calib

from kit.config.modelinfo import load_model_spec
from kit.memory import plan as planner

# The card a Machete-disabled case is planned as, by the budget it emulates (compute capability 8.x: Marlin).
MARLIN_CARDS = {calib.C16: "rtx4080", calib.C24: "rtx4090", calib.C48: "rtx-a6000"}
FLAG_FIELDS = ("dtype", "quantization", "kv_cache_dtype", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
               "gpu_memory_utilization")


def disabled_kernels(case: dict) -> tuple[str, ...]:
    return tuple(n for n in case.get("env", {}).get("VLLM_DISABLED_KERNELS", "").split(",") if n)


def card_of(case: dict) -> str:
    """The H200, unless only Machete is disabled (then vLLM 0.33 runs Humming, and the case was planned as the card
    whose Marlin path it stood for). With Humming disabled too the H200 runs Marlin itself and is planned as the
    H200, with the kernels disabled (PlanInputs.disabled_kernels)."""
    disabled = disabled_kernels(case)
    if "MacheteLinearKernel" not in disabled or "HummingLinearKernel" in disabled:
        return calib.HOST_GPU
    util = case["flags"].get("gpu_memory_utilization")
    for gib, name in MARLIN_CARDS.items():
        if util in (calib.card_util(gib, 0.92), calib.card_util(gib, 0.90)):
            return name
    raise SystemExit(f"no card for a Machete-disabled case at utilization {util}")


def preset_inputs(case: dict) -> planner.PlanInputs:
    """A preset case: the preset's own plan inputs (with the case's overrides), on the H200 that runs it."""
    from kit.config.presetload import load_preset
    from kit.memory.preset_plan import plan_inputs_for

    _name, _path, preset = load_preset(case["preset"], case.get("overrides", []))
    inputs = plan_inputs_for(preset)
    if inputs is None:
        raise SystemExit(f"{case['preset']}: no plan inputs")
    return inputs.model_copy(update={"gpu_name": card_of(case), "gpu_memory_gib": calib.HOST_TOTAL_GIB,
                                     "disabled_kernels": disabled_kernels(case)})


def plan_case(case: dict, version: str) -> dict:
    if "preset" in case:
        inputs = preset_inputs(case)
    else:
        flags = case["flags"]
        raw = {k: flags[k] for k in FLAG_FIELDS if k in flags}
        if "enable_extensible_kv_cache" in flags:
            raw["extensible_kv_cache"] = bool(flags["enable_extensible_kv_cache"])
        inputs = planner.PlanInputs(model=load_model_spec(case["model"]), vllm_version=version,
                                    gpu_name=card_of(case), gpu_memory_gib=calib.HOST_TOTAL_GIB,
                                    enforce_eager=not case.get("graphs"), disabled_kernels=disabled_kernels(case),
                                    **raw)
    plan = planner.plan(inputs, suggest=False).to_json()
    keep = ("weights_gib", "activation_gib", "non_torch_gib", "cuda_graph_gib", "kv_cache_gib", "kv_cache_tokens",
            "fits", "approximate")
    return {**{k: plan[k] for k in keep if k in plan}, "gpu_name": card_of(case)}


def main() -> int:
    cli = argparse.ArgumentParser()
    cli.add_argument("--matrix", default="0.34.0", choices=sorted(calib.MATRICES))
    cli.add_argument("--cases", type=lambda s: s.split(","), metavar="NAME,NAME",
                     help="only these cases (a later round: the ones that have not run yet)")
    cli.add_argument("--presets", action="store_true",
                     help="plan preset cases too (the preset's plan inputs, on the H200)")
    cli.add_argument("out", type=Path)
    args = cli.parse_args()
    unknown = set(args.cases or ()) - set(calib.MATRICES[args.matrix])
    if unknown:
        raise SystemExit(f"--cases: not in matrix {args.matrix}: {', '.join(sorted(unknown))}")
    version = args.matrix.split("-")[0]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    plans = {}
    for name, case in calib.MATRICES[args.matrix].items():
        if case["model"] == "tiny" or (args.cases and name not in args.cases):
            continue
        if "preset" in case and not args.presets:
            continue
        plans[name] = plan_case(case, version)
    args.out.write_text(json.dumps({
        "about": f"Plans of {'these cases' if args.cases else 'every case'} in bench/gpu_calibration.py matrix "
                 f"{args.matrix}, made with the rules at "
                 f"commit {commit} before any of these engines ran (pre-registration); bench/preregister.py.",
        "plans": plans}, indent=1) + "\n")
    for name, p in plans.items():
        print(f"{name:22} {p['gpu_name']:10} weights {p['weights_gib']:6.2f}  kv {p['kv_cache_gib']:6.2f} GiB "
              f"{p['kv_cache_tokens']:8d} tokens  fits={p['fits']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
