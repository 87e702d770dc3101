"""Where a vLLM start went: a server's log, each line with a time, cut into phases at the lines vLLM prints.

Two sources: a log written by bench/start_timing.py (`[+SECONDS] line`, seconds from the process start) and
`docker logs --timestamps` (RFC 3339 times; the origin is the container's start). Each phase ends at the first line
after the previous phase's end that matches its marker (vLLM 0.32 and 0.33's own messages); a phase whose marker
never comes (torch.compile in eager mode) takes no time. A FlashInfer JIT build inside a phase is counted as its own
span, as seen from the line that announces it to the line after.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from kit.memory.vllmlog import JIT_BUILD

# (phase, what it covers, end marker[, fallback marker]). Order is vLLM's start-up order. A fallback is looked for
# only where the marker never comes (the CPU worker reports loading its weights, not the model).
PHASES: list[tuple[str, ...]] = [
    ("import", "Python imports of the API server, up to vLLM's banner",
     r"█ +version \d+\.\d+|vLLM API server version"),
    ("model config", "model config; on a first start the model-registry inspection subprocess",
     r"Resolved architecture:"),
    ("engine process", "the engine core process: its start and imports",
     r"Initializing a V1 LLM engine"),
    ("engine setup", "device, distributed and platform set-up",
     r"Loading model from scratch|Starting to load model|Loading weights|Loading safetensors checkpoint"),
    ("weights", "model init and weight load, as vLLM reports it",
     r"Model loading took", r"Loading weights took"),
    ("compile", "torch.compile: Dynamo and inductor, or the AOT artefacts loaded",
     r"torch\.compile took|\[backbone\] torch\.compile"),
    ("memory profile", "profile run and CUDA-graph memory estimate (skipped with a startup plan)",
     r"Available KV cache memory|skipped memory profiling|Free memory on device"),
    ("kv cache", "KV cache allocated",
     r"GPU KV cache size|KV cache size:"),
    ("graph capture", "FlashInfer autotune and CUDA-graph capture",
     r"Graph capturing finished|init engine \(profile"),
    ("engine ready", "warm-up done, engine reports",
     r"init engine \(profile"),
    ("api start", "routes, uvicorn",
     r"Application startup complete"),
]
JIT_START = JIT_BUILD  # one pattern for FlashInfer's JIT line: kit/memory/vllmlog.py reads its module names


@dataclass
class Phase:
    name: str
    what: str
    start: float
    end: float
    jit_s: float = 0.0

    @property
    def seconds(self) -> float:
        return round(self.end - self.start, 3)


@dataclass
class StartBreakdown:
    phases: list[Phase] = field(default_factory=list)
    last_line_s: float | None = None

    def seconds(self, name: str) -> float:
        return sum(p.seconds for p in self.phases if p.name == name)

    @property
    def jit_s(self) -> float:
        return round(sum(p.jit_s for p in self.phases), 3)

    @property
    def ends_at(self) -> float:
        return self.phases[-1].end if self.phases else 0.0


_HARNESS = re.compile(r"^\[\+(\d+(?:\.\d+)?)\] ?(.*)$")
_DOCKER = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:\d\d) ?(.*)$")


def harness_lines(text: str) -> list[tuple[float, str]]:
    out = []
    for raw in text.splitlines():
        found = _HARNESS.match(raw)
        if found:
            out.append((float(found.group(1)), found.group(2)))
    return out


def _parse_rfc3339(stamp: str, zone: str) -> datetime:
    whole, _, frac = stamp.partition(".")
    base = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return base.replace(microsecond=int((frac + "000000")[:6])) if frac else base


def unix_time(stamp: str) -> float:
    """An RFC 3339 time as Docker prints it (nanoseconds, Z) as Unix seconds."""
    found = _DOCKER.match(stamp.strip() + " x")
    if not found:
        raise ValueError(f"not an RFC 3339 time: {stamp!r}")
    return _parse_rfc3339(found.group(1), found.group(2)).timestamp()


def docker_lines(text: str, started_at: str) -> list[tuple[float, str]]:
    """`docker logs --timestamps` lines as seconds after ``started_at`` (the container's State.StartedAt)."""
    origin = datetime.fromtimestamp(unix_time(started_at), tz=timezone.utc)
    out = []
    for raw in text.splitlines():
        hit = _DOCKER.match(raw)
        if hit:
            at = _parse_rfc3339(hit.group(1), hit.group(2))
            out.append(((at - origin).total_seconds(), hit.group(3)))
    return out


def breakdown(lines: list[tuple[float, str]]) -> StartBreakdown:
    result = StartBreakdown(last_line_s=lines[-1][0] if lines else None)
    start = 0.0
    index = 0
    for name, what, *markers in PHASES:
        end_index = None
        for marker in markers:
            pattern = re.compile(marker)
            end_index = next((i for i in range(index, len(lines)) if pattern.search(lines[i][1])), None)
            if end_index is not None:
                break
        if end_index is None:
            result.phases.append(Phase(name, what, start, start))
            continue
        end = lines[end_index][0]
        jit = 0.0
        for i in range(index, end_index):
            if JIT_START.search(lines[i][1]):
                jit += lines[i + 1][0] - lines[i][0]
        result.phases.append(Phase(name, what, start, end, round(jit, 3)))
        start, index = end, end_index + 1
    return result
