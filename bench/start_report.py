"""Where a start goes, from recorded logs (`make bench-start`, issue 24): each start cut into phases by
kit/run/startphases.py, with seconds to /health and to the first token of a streamed completion.

GPU: kit/data/startup/h200-vllm-0.33.0/, written by bench/start_timing.py on the lent H200 (vLLM 0.33.0 and the slim
image's package set, scripts/floor/; random weights with the models' true shapes in a hub cache on that machine).
GPU, vLLM 0.34.0: kit/data/startup/h200-vllm-0.34.0/, the same harness (--vllm-version 0.34.0 --quick-setup) with
FlashInfer's sampler compiled ahead of time as a slim image ships it (images/flashinfer_aot.py), first start, restart,
and restart with the engine core forked (VLLM_WORKER_MULTIPROC_METHOD=fork, kit/data/startcache.yaml).
CPU: kit/data/startup/cpu-vllm-0.32.0/, written by bench/start_cpu.py here (the cpu preset's compose stack).
Figures, not assertions.
"""

from __future__ import annotations

import json
import lzma
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit.run.startphases import PHASES, breakdown, docker_lines, harness_lines, unix_time

DATA = Path(__file__).resolve().parents[1] / "kit" / "data" / "startup"
GPU = DATA / "h200-vllm-0.33.0"
GPU34 = DATA / "h200-vllm-0.34.0"
CPU = DATA / "cpu-vllm-0.32.0"
GPU34_CASES = [
    ("q8-first", "Qwen3-8B bf16: first start (caches empty, page cache dropped), sampler compiled ahead of time"),
    ("q8-restart", "restart, the kit's volumes, `vllm serve`'s own spawn of the engine core"),
    ("q8-restart-fork", "restart, the kit's volumes and VLLM_WORKER_MULTIPROC_METHOD=fork (what the kit renders now)"),
]
# The second GPU session (2026-12-04): starts as the kit renders GPU presets (engine core forked, FlashInfer's sampler
# compiled ahead of time), each set with a spawned start beside it on the same machine.
GPU33_FORK = DATA / "h200-vllm-0.33.0-fork"
GPU34_R2 = DATA / "h200-vllm-0.34.0-r2"
FORK_CASES = [
    ("q8-first", "Qwen3-8B bf16: first start (caches empty, page cache dropped), engine core spawned"),
    ("q8-first-fork", "Qwen3-8B bf16: first start, engine core forked (what the kit renders)"),
    ("q8-restart", "restart, the kit's volumes, spawned"),
    ("q8-restart-fork", "restart, the kit's volumes, forked (what the kit renders)"),
    ("awq-first", "rtx4090-awq's model and flags: first start, spawned"),
    ("awq-first-fork", "rtx4090-awq's model and flags: first start, forked"),
    ("awq-restart-fork", "rtx4090-awq's model and flags: restart, forked"),
]
# Issue 37's targets for the 8B on a GPU: seconds to /health on a first start, to the first token on a restart.
FIRST_TARGET_S, RESTART_TOKEN_TARGET_S = 110.0, 40.0

# What each GPU case is (bench/start_timing.py CASES says how each was started).
GPU_CASES = [
    ("q8-first", "Qwen3-8B bf16: first start (caches empty, page cache dropped)"),
    ("q8-restart-today", "restart as the kit rendered it before: no byte-code, Triton/inductor caches lost, profiled"),
    ("q8-restart", "restart, the kit's volumes now (all caches, startup plan), page cache warm"),
    ("q8-restart-dropped", "same, page cache dropped"),
    ("q8-fastsafetensors", "same, page cache dropped, --load-format fastsafetensors"),
    ("q8-instanttensor", "same, page cache dropped, --load-format instanttensor"),
    ("q8-runai", "same, page cache dropped, --load-format runai_streamer"),
    ("awq-first", "rtx4090-awq's model and flags: first start (FlashInfer's build borrowed from the 8B's)"),
    ("awq-restart", "restart, kit volumes, but no FlashInfer build in its cache set (it JIT-compiles again)"),
]
SHORT = {"import": "import", "model config": "config", "engine process": "engine", "engine setup": "setup",
         "weights": "weights", "compile": "compile", "memory profile": "profile", "kv cache": "kv",
         "graph capture": "graphs", "engine ready": "warmup", "api start": "api"}


def read_xz(path: Path) -> str:
    with lzma.open(path, "rt", errors="replace") as fh:
        return fh.read()


def row(label: str, phases, ready: float | None, first_token: float | None, jit: float) -> str:
    cells = [f"{p.seconds:8.1f}" for p in phases]
    show = lambda v: f"{v:7.1f}" if v is not None else "      -"  # noqa: E731
    return f"  {label:<20}" + "".join(cells) + f" {show(ready)} {show(first_token)} {jit:6.1f}"


def header() -> str:
    return f"  {'case':<20}" + "".join(f"{SHORT[name]:>8}" for name, *_rest in PHASES) + \
        f" {'ready':>7} {'token':>7} {'jit':>6}"


def gpu_table(folder: Path, title: str, cases: list[tuple[str, str]],
              notes: Callable[[dict[str, Any]], list[str]]) -> list[str]:
    """One recorded GPU set (``folder``, bench/start_timing.py): a row per case it holds a log of, what each case is,
    then ``notes``."""
    results = json.loads((folder / "results.json").read_text())
    cases = [(name, what) for name, what in cases if (folder / f"{name}.log.xz").is_file()]
    lines = [title, "  seconds from process start; jit: FlashInfer JIT inside the phases", header()]
    for name, _what in cases:
        r = results.get(name, {})
        b = breakdown(harness_lines(read_xz(folder / f"{name}.log.xz")))
        lines.append(row(name, b.phases, r.get("ready_s"), (r.get("completion") or {}).get("first_token_at"), b.jit_s))
    lines.append("")
    lines += [f"  {name:<20} {what}" for name, what in cases]
    return lines + [""] + notes(results)


def gpu033_notes(results: dict[str, Any]) -> list[str]:
    setup = results["setup"]
    ready_of = {name: results.get(name, {}).get("ready_s") for name, _what in GPU_CASES}
    lines = []
    first = ready_of["q8-first"] or 0
    for name in ("q8-restart", "q8-restart-dropped", "q8-fastsafetensors", "q8-instanttensor", "q8-runai"):
        if ready_of.get(name) and first:
            lines.append(f"  {name} / q8-first: {ready_of[name] / first:.3f} (target <= 0.3)")
    today = breakdown(harness_lines(read_xz(GPU / "q8-restart-today.log.xz")))
    engine_ready = next(p.end for p in today.phases if p.name == "engine ready")
    lines.append(f"  q8-restart-today: stopped by its call's budget while the API server was binding; its engine "
                 f"was ready at {engine_ready:.1f} s, {engine_ready / first:.2f} of the first start")
    awq = breakdown(harness_lines(read_xz(GPU / "awq-restart.log.xz")))
    if ready_of.get("awq-restart"):
        lines.append(f"  awq-restart without its FlashInfer build: {ready_of['awq-restart'] - awq.jit_s:.1f} s "
                     f"(ready {ready_of['awq-restart']:.1f} s less {awq.jit_s:.1f} s of JIT, derived)")
    lines += ["", "  byte-code (import of vLLM's server modules, `python -c`, seconds):",
              f"    without .pyc {setup['import_s_no_pyc']}, with {setup['import_s_pyc']}; compileall "
              f"{setup['compileall_s']} s on {setup['nproc']} cores; .pyc {setup['pyc_bytes_after'] / 2**20:.0f} MiB",
              f"  weights: {setup['weights_q8']['bytes'] / 2**30:.2f} GiB (Qwen3-8B) and "
              f"{setup['weights_awq']['bytes'] / 2**30:.2f} GiB (Qwen3-8B-AWQ), written in "
              f"{setup['weights_q8']['write_s']} s and {setup['weights_awq']['write_s']} s"]
    return lines


def gpu034_notes(results: dict[str, Any]) -> list[str]:
    first = results["q8-first"]["ready_s"]
    token = results["q8-restart-fork"]["completion"]["first_token_at"]
    return [f"  first start to /health: {first:.1f} s (target <= {FIRST_TARGET_S:g})",
            f"  restart to first token (fork): {token:.1f} s (target <= {RESTART_TOKEN_TARGET_S:g}); with spawn "
            f"{results['q8-restart']['completion']['first_token_at']:.1f} s"]


def fork_notes(results: dict[str, Any]) -> list[str]:
    first = results["q8-first-fork"]["ready_s"]
    token = results["q8-restart-fork"]["completion"]["first_token_at"]
    return [f"  first start to /health, as rendered (fork): {first:.1f} s (target <= {FIRST_TARGET_S:g}); spawned "
            f"{results['q8-first']['ready_s']:.1f} s",
            f"  restart to first token, as rendered (fork): {token:.1f} s (target <= {RESTART_TOKEN_TARGET_S:g})"]


def cpu_table() -> list[str]:
    path = CPU / "results.json"
    if not path.is_file():
        return ["CPU: no recording (python bench/start_cpu.py --out kit/data/startup/cpu-vllm-0.32.0)"]
    results = json.loads(path.read_text())
    lines = [f"CPU: the cpu preset's compose stack here ({results['image']}, recorded {results['recorded']})",
             "  seconds from the container's start; ready and token: through the front door, from the host", header()]
    first_ready = None
    for name in ("first", "restart"):
        r = results[name]
        text = read_xz(CPU / r["log"])
        b = breakdown(docker_lines(text, r["container_started_at"]))
        t0 = unix_time(r["container_started_at"])
        ready = r["ready_unix"] - t0 if r.get("ready_unix") else None
        token = (r.get("completion") or {}).get("first_token_unix")
        lines.append(row(name, b.phases, ready, token - t0 if token else None, b.jit_s))
        if name == "first":
            first_ready = ready
        elif ready and first_ready:
            lines.append(f"  restart / first: {ready / first_ready:.2f}")
    return lines


def main() -> int:
    print("\n".join(gpu_table(GPU, "GPU: one H200, vLLM 0.33.0 with the slim image's package set, native start "
                               "(kit/data/startup/h200-vllm-0.33.0)", GPU_CASES, gpu033_notes)))
    print()
    print("\n".join(gpu_table(GPU34, "GPU: one H200, vLLM 0.34.0, slim package set, FlashInfer sampler AOT "
                               "(kit/data/startup/h200-vllm-0.34.0)", GPU34_CASES, gpu034_notes)))
    print()
    print("\n".join(gpu_table(GPU33_FORK, "GPU: one H200, vLLM 0.33.0 (the presets' pin), as rendered: fork, sampler "
                               "AOT (kit/data/startup/h200-vllm-0.33.0-fork)", FORK_CASES,
                               fork_notes)))
    print()
    print("\n".join(gpu_table(GPU34_R2, "GPU: another H200, vLLM 0.34.0, as rendered: fork, sampler AOT "
                               "(kit/data/startup/h200-vllm-0.34.0-r2)", FORK_CASES, fork_notes)))
    print()
    print("\n".join(cpu_table()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
