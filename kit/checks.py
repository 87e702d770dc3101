"""Preset -> problems: everything that makes a validated preset unfit to deploy.

Public entry point: ``check_preset(name, path, preset) -> CheckReport``. Each check returns problems
(errors) and warnings; every one names the preset file and field and says how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kit.compat import check_compat
from kit.errors import Problem
from kit.preset import Preset, display_path


@dataclass
class CheckReport:
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    plan: object | None = None  # the memory plan, when the planner ran
    plan_lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def check_flags(where: str, preset: Preset) -> tuple[list[Problem], list[Problem]]:
    from kit.flags import FlagError, check_engine

    errors, warnings = [], []
    try:
        found = check_engine(preset.engine.flags(), preset.image.vllm_version)
    except FlagError as exc:
        return [Problem(f"{where}: image.vllm_version", exc.message, exc.hint)], []
    for p in found:
        (warnings if p.severity == "warning" else errors).append(Problem(f"{where}: {p.field}", p.message, p.hint))
    return errors, warnings


def check_parallelism(where: str, preset: Preset) -> list[Problem]:
    hw, eng = preset.hardware, preset.engine
    problems = []
    ranks = eng.tp * eng.pp
    if hw.gpu is not None:
        gpus = hw.count * hw.nodes
        if ranks > gpus:
            problems.append(Problem(
                f"{where}: engine.tensor_parallel_size",
                f"tensor x pipeline parallel = {eng.tp} x {eng.pp} = {ranks} GPUs, but the hardware has "
                f"{hw.count} per node x {hw.nodes} node(s) = {gpus}",
                "lower the parallel sizes or raise hardware.count / hardware.nodes",
            ))
        elif ranks < gpus:
            problems.append(Problem(
                f"{where}: engine.tensor_parallel_size",
                f"only {ranks} of the {gpus} GPUs mapped into the stack would be used",
                "raise tensor_parallel_size (or pipeline_parallel_size), or lower hardware.count",
            ))
        if hw.nodes > 1 and eng.distributed_executor_backend not in (None, "ray"):
            problems.append(Problem(f"{where}: engine.distributed_executor_backend",
                                    "more than one node needs the ray backend", "set it to ray"))
    return problems


def check_memory(where: str, preset: Preset, report: CheckReport, force: bool) -> None:
    from kit.preset_plan import plan_preset, summary_lines

    result, warnings = plan_preset(where, preset)
    report.warnings += warnings
    if result is None:
        return
    report.plan = result
    report.plan_lines = summary_lines(result)
    if not result.fits:
        fixes = "; ".join(s["message"] for s in result.suggestions[:3]) or None
        problem = Problem(f"{where}: engine", f"does not fit in memory: vLLM would fail with: {result.error}", fixes)
        (report.warnings if force else report.errors).append(problem)


def check_preset(name: str, path: Path, preset: Preset, *, force: bool = False) -> CheckReport:
    """``force`` turns a memory misfit into a warning (the flags and parallelism must still be right)."""
    where = display_path(path)
    report = CheckReport()
    flag_errors, flag_warnings = check_flags(where, preset)
    report.errors += flag_errors
    report.warnings += flag_warnings
    report.errors += check_parallelism(where, preset)
    compat_errors, compat_warnings = check_compat(where, preset)
    report.errors += compat_errors
    report.warnings += compat_warnings
    if not report.errors:
        check_memory(where, preset, report, force)
    return report
