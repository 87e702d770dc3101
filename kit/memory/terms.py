"""One named term of a plan: bytes on one rank, what it is, and the source it follows (kit plan --explain)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Term(BaseModel):
    """A named part of one of the plan's figures (weights, activation, non-torch, CUDA graphs, KV cache).

    ``phase`` groups activation terms that are alive at the same time: the profile run's peak is the terms without a
    phase plus the largest phase (the forward pass's buffers are freed before the dummy sampler run)."""

    model_config = ConfigDict(frozen=True)

    figure: str  # weights | activation | non_torch | cuda_graph
    name: str
    bytes: float
    source: str
    phase: str | None = None
    fitted: bool = False  # an empirical residual (kit/data/vllm.yaml names the runs it came from)

    def to_json(self, on_peak: bool = True) -> dict[str, object]:
        return {"figure": self.figure, "name": self.name, "gib": round(self.bytes / (1 << 30), 4),
                "phase": self.phase, "on_peak": on_peak, "fitted": self.fitted, "source": self.source}


def _phase_sums(terms: list[Term]) -> dict[str, float]:
    sums: dict[str, float] = {}
    for t in terms:
        if t.phase is not None:
            sums[t.phase] = sums.get(t.phase, 0.0) + t.bytes
    return sums


def peak_bytes(terms: list[Term]) -> float:
    """The profile run's peak of ``terms``: those without a phase, plus the largest phase (each phase's buffers are
    freed before the next one runs)."""
    phases = _phase_sums(terms)
    return sum(t.bytes for t in terms if t.phase is None) + (max(phases.values()) if phases else 0.0)


def peak_phase(terms: list[Term]) -> str | None:
    """The phase that sets the peak (the first of equals), or None without phases."""
    phases = _phase_sums(terms)
    return max(phases, key=lambda p: phases[p]) if phases else None
