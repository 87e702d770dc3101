"""Fuzz every render with hostile preset strings and print the figures issue 11 asks for (point 1).

Runs the cases of tests/unit/test_injection.py many more times than the unit suite does: one hostile string
(every kind of line break, quotes, `$`, backticks, `#`, YAML's typed words, leading dashes, controls, long and
odd Unicode) at one preset string field or engine flag, rendered for compose (one node, a Ray pair, two
presets side by side) and Kubernetes. Each case is refused with the kit's one-line error or renders files whose structure equals the
benign render's. Prints cases tried, refused, tracebacks (must be 0), structure changes (must be 0), and the
slowest input's time. Exit 1 when either count is not 0.

Run: python bench/fuzz_render.py [--examples N]   (make fuzz)
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings

from tests.unit import test_injection as cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="generated cases")
    args = parser.parse_args()
    counts = {"tried": 0, "refused": 0, "same": 0, "no-baseline": 0, "tracebacks": 0, "structure changes": 0}
    slowest = (0.0, None)
    first_failure: list[str] = []

    @settings(max_examples=args.examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=cases.hostile_case)
    def run(case):
        nonlocal slowest
        (preset, target, extra, beside), path, value = case
        counts["tried"] += 1
        start = time.perf_counter()
        try:
            counts[cases.check_case(preset, target, extra, path, value, beside)] += 1
        except AssertionError:
            counts["structure changes"] += 1
            first_failure.append(f"structure change: {'+'.join((preset, *beside))} {target} {path}={value!r}")
        except Exception:  # noqa: BLE001 - any other exception is a traceback the user would see
            counts["tracebacks"] += 1
            first_failure.append(f"traceback: {'+'.join((preset, *beside))} {target} {path}={value!r}\n{traceback.format_exc()}")
        took = time.perf_counter() - start
        if took > slowest[0]:
            slowest = (took, f"{'+'.join((preset, *beside))} {target} {path}={value[:40]!r}")

    run()
    for name, value in counts.items():
        print(f"{name:18} {value}")
    print(f"slowest input      {slowest[0]:.3f} s ({slowest[1]})")
    for line in first_failure[:3]:
        print(line)
    return 1 if counts["tracebacks"] or counts["structure changes"] else 0


if __name__ == "__main__":
    sys.exit(main())
