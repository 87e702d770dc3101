"""Start-up time of the `kit` command line against `python -c pass`, measured in the same run.

Prints, for each case, the median wall time of N runs and its ratio to a bare interpreter start, with the
load average beside it (the figures are only comparable on a quiet machine). Targets (issue 14): --help,
CMD --help and completion within 0.25 s, a render within 0.6 s. Figures are printed, not asserted.

    python bench/cli_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

KIT = [sys.executable, "-m", "kit.cli.main"]


def cases(out_dir: str) -> list[tuple[str, list[str], dict[str, str], float | None]]:
    """(label, argv, extra environment, target seconds)."""
    def complete(words: str) -> dict[str, str]:
        # click's bash protocol: the words typed so far and the index of the one being completed.
        return {"_KIT_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}

    return [
        ("python -c pass", [sys.executable, "-c", "pass"], {}, None),
        ("kit --help", KIT + ["--help"], {}, 0.25),
        ("kit render --help", KIT + ["render", "--help"], {}, 0.25),
        ("complete: kit re", KIT, complete("kit re"), 0.25),
        ("complete: preset=", KIT, complete("kit render preset="), 0.25),
        ("complete: engine.", KIT, complete("kit render preset=cpu engine."), 0.25),
        ("kit render preset=cpu", KIT + ["render", "preset=cpu", "--out", out_dir], {}, 0.6),
    ]


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_seconds(argv: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    """Median wall and CPU (user + system) seconds; CPU time moves less than wall time on a busy shared machine."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu_before, start = children_cpu_seconds(), time.perf_counter()
        subprocess.run(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, timeout=120)
        walls.append(time.perf_counter() - start)
        cpus.append(children_cpu_seconds() - cpu_before)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="kit-bench-cli-") as out_dir:
        rows = []
        load_before = os.getloadavg()
        for label, argv, env, target in cases(out_dir):
            rows.append((label, *median_seconds(argv, env, runs), target))
        load_after = os.getloadavg()
    base_wall, base_cpu = rows[0][1], rows[0][2]
    print(f"median of {runs} runs; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"{os.cpu_count()} CPUs")
    print(f"{'case':<24}{'wall s':>8}{'x python':>10}{'cpu s':>8}{'x python':>10}{'target':>8}  wall verdict")
    for label, wall, cpu, target in rows:
        verdict = "" if target is None else ("ok" if wall <= target else "over")
        shown_target = "" if target is None else f"{target:.2f}"
        print(f"{label:<24}{wall:>8.3f}{wall / base_wall:>10.1f}{cpu:>8.3f}{cpu / base_cpu:>10.1f}{shown_target:>8}  "
              f"{verdict}")


if __name__ == "__main__":
    main()
