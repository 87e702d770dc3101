"""Fuzz the kit's inputs and print the figures issue 11 asks for (points 3 and 4).

Runs the generated cases of tests/unit/test_hostile_inputs.py many more times than the unit suite does:
hostile model configs and number options for `kit plan`, hostile names and paths (presets, models, GPUs,
versions), hostile override strings and preset files for `kit validate`, switches that open the server or load code,
GPU ids and model ids, and large presets of every shape (at the size cap and at 1 MiB), each through the real click
command. Prints cases tried, tracebacks (must be 0: a
traceback or "internal error" is any exception other than the kit's one-line errors), the slowest
input's CPU and wall time, and the planner's cost at 4 and at 4096 layers (it must not grow). Exit 1 when any case printed a traceback.

Run: python bench/fuzz.py [--examples N]   (make fuzz)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit import test_hostile_inputs as cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="generated cases per input kind")
    args = parser.parse_args()
    outcomes: dict[str, list[cases.Outcome]] = {}
    config = settings(max_examples=args.examples, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))

    def record(kind: str, outcome: cases.Outcome) -> None:
        outcomes.setdefault(kind, []).append(outcome)

    @config
    @given(config=cases.model_configs(), options=cases.plan_options)
    def plan_configs(config, options):
        record("plan: model configs", cases.plan_case(config, options))

    @config
    @given(option=cases.number_option)
    def plan_numbers(option):
        record("plan: number options", cases.run_kit(["plan", "--model", "Qwen/Qwen3-8B", "--gpu", "h100", *option]))

    @config
    @given(argv=cases.reference_argv)
    def references(argv):
        record("names and paths", cases.run_kit(argv))

    @config
    @given(preset=cases.preset_name, overrides=st.lists(cases.override, min_size=1, max_size=3))
    def validate_overrides(preset, overrides):
        record("validate: overrides", cases.validate_case(overrides, preset=preset))

    @config
    @given(text=cases.preset_texts())
    def validate_files(text):
        record("validate: preset files", cases.validate_case([], text))

    @config
    @given(argv=cases.switch_argv)
    def validate_switches(argv):
        record("validate: switches, ids", cases.switch_case(argv))

    for run in (plan_configs, plan_numbers, references, validate_overrides, validate_files, validate_switches):
        run()
    # Large presets (issue 23): each shape just under the size cap, and at 1 MiB (refused before it is parsed).
    from kit.core.inputfiles import input_limits

    cap = input_limits()["files"]["preset_max_bytes"]
    for size in (cap, 1 << 20):
        for shape, text in cases.large_presets(size).items():
            record(f"validate: {size >> 10} KiB", cases.validate_case([], text))
            outcomes[f"validate: {size >> 10} KiB"][-1].argv = [f"{shape}, {len(text.encode())} bytes"]

    every = [o for group in outcomes.values() for o in group]
    print(f"{'input kind':<26}{'cases':>7}{'exit 0/1/2':>14}{'tracebacks':>12}{'slowest CPU s':>15}{'slowest wall s':>16}")
    for kind, group in outcomes.items():
        exits = "/".join(str(sum(o.exit_code == code for o in group)) for code in (0, 1, 2))
        print(f"{kind:<26}{len(group):>7}{exits:>14}{sum(o.traceback for o in group):>12}"
              f"{max(o.cpu_s for o in group):>15.3f}{max(o.wall_s for o in group):>16.3f}")
    tracebacks = [o for o in every if o.traceback]
    slowest = max(every, key=lambda o: o.cpu_s)
    print(f"cases tried: {len(every)}")
    print(f"tracebacks: {len(tracebacks)}")
    print(f"slowest input: {slowest.cpu_s:.3f} s CPU, {slowest.wall_s:.3f} s wall: {ascii(slowest.argv)[:200]}")
    for outcome in tracebacks[:5]:
        print(f"  traceback: {ascii(outcome.argv)[:200]} -> {ascii(outcome.output[-300:])}")
    with tempfile.TemporaryDirectory() as tmp:
        few, many = (cases.plan_cpu_seconds(layers, Path(tmp)) for layers in (4, 4096))
    print(f"planner, 10 plans of a MoE model: {few:.4f} s CPU at 4 layers, {many:.4f} s at 4096 layers")
    return 1 if tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())
