"""Preset -> problems: everything that makes a validated preset unfit to deploy.

Public entry point: ``check_preset(name, path, preset) -> CheckReport``. Each check returns problems
(errors) and warnings; every one names the preset file and field and says how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kit.deployment import KIT_OWNED_FLAGS
from kit.errors import Problem
from kit.preset import Preset, display_path


@dataclass
class CheckReport:
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    plan: object | None = None  # the memory plan, when the planner ran

    @property
    def ok(self) -> bool:
        return not self.errors


def check_flags(where: str, preset: Preset) -> list[Problem]:
    from kit.flags import check_engine

    problems = []
    for key in preset.engine.flags():
        if key in KIT_OWNED_FLAGS:
            problems.append(Problem(f"{where}: engine.{key}", "is set by the kit",
                                    "use model.id, model.served_model_name, model.revision or runtime.port; "
                                    "put an API key in .env as VLLM_API_KEY"))
    owned = set(KIT_OWNED_FLAGS)
    for p in check_engine({k: v for k, v in preset.engine.flags().items() if k not in owned}, preset.image.vllm_version):
        problems.append(Problem(f"{where}: {p.field}", p.message, p.hint))
    return problems


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


def check_preset(name: str, path: Path, preset: Preset) -> CheckReport:
    where = display_path(path)
    report = CheckReport()
    report.errors += check_flags(where, preset)
    report.errors += check_parallelism(where, preset)
    return report
