"""Read what vLLM measured at start-up out of its server log.

One reader for `kit smoke` (the KV cache size it compares with the plan), `kit probe` (the whole memory
profile beside the plan) and the calibration data (raw logs parsed by tests and `make bench-plan`).
The patterns follow vLLM's own messages (0.26.0: vllm/v1/worker/gpu_worker.py `determine_available_memory`
and `compile_or_warm_up_model`, gpu_model_runner.py / gpu/model_runner.py `load_model` and `capture_model`,
v1/core/kv_cache_utils.py, v1/engine/core.py); older and newer releases print the same figures, partly
with other words, and a figure the log lacks stays None.

Pure: text in, a StartupLog out.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

_NUM = r"([\d.]+)"

# "Model loading took 15.27 GiB memory and 3.2 seconds" (V1 runner) / "Model loading took 15.27 GiB and 3.2 seconds" (V2)
WEIGHTS = re.compile(r"Model loading took " + _NUM + r" GiB( memory)? and " + _NUM + " seconds")
AVAILABLE_KV = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")
KV_TOKENS = re.compile(r"(CPU|GPU) KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
# compile_or_warm_up_model's summary (one line, after CUDA graph capture or warm-up):
USAGE = re.compile(
    r"Free memory on device \(" + _NUM + "/" + _NUM + r" GiB\) on startup\. Desired GPU memory utilization is "
    r"\(" + _NUM + ", " + _NUM + r" GiB\)\. Actual usage is " + _NUM + r" GiB for weight, " + _NUM
    + r" GiB for peak activation, " + _NUM + r" GiB for non-torch memory, and " + _NUM + r" GiB for CUDAGraph memory"
)
# The same summary from 0.33 on (vllm/v1/worker/gpu_worker.py compile_or_warm_up_model at v0.33.0): weights and
# non-torch memory as one "consumed" figure (mem_get_info's drop since the worker started), and the peak activation
# with the CUDA-graph estimate included when it was charged (`peak_activation_memory = transient_peak_headroom +
# cudagraph_memory_estimate_applied` in determine_available_memory).
USAGE_CONSUMED = re.compile(
    r"Free memory on device \(" + _NUM + "/" + _NUM + r" GiB\) on startup\. Desired GPU memory utilization is "
    r"\(" + _NUM + ", " + _NUM + r" GiB\)\. Actual usage is " + _NUM + r" GiB for consumed memory \(weights \+ "
    r"non-torch\), " + _NUM + r" GiB for peak activation, and " + _NUM + r" GiB for CUDAGraph memory"
)
# 0.34's extensible KV cache (vllm/v1/worker/extensible_kv_cache.py at v0.34.0): "Available KV cache memory" is then
# the reserved capacity before warm-up, and the cache's size is what `measure_kv_cache_blocks` and `extend_kv_cache`
# log after CUDA-graph capture.
KV_AFTER_WARMUP = re.compile(
    r"Memory after warmup: " + _NUM + r" GiB free, " + _NUM + r" GiB committed to the KV cache, " + _NUM
    + r" GiB kept for transient activations \(" + _NUM + r" GiB allocated at peak, " + _NUM
    + r" GiB of torch reservation growth\); (\d+) KV cache blocks \(" + _NUM + r" GiB\) fit within the requested "
    + _NUM + " GiB"
)
KV_EXTENDED = re.compile(r"Extended KV cache to (\d+) blocks \(" + _NUM + r" GiB\)")
GRAPH_ESTIMATE = re.compile(r"Estimated CUDA graph memory: " + _NUM + " GiB total")
# FlashInfer compiling a module just in time (flashinfer/jit/core.py: "Building JIT module NAME; this can take several
# minutes on first use."): minutes on a first start that an image compiled ahead of time never spends.
JIT_BUILD = re.compile(r"Building JIT module ([\w.\-]+)")
GRAPH_POOL = re.compile(r"CUDA graph pool memory: " + _NUM + r" GiB \(actual\), " + _NUM + r" GiB \(estimated\)")
GRAPH_CAPTURE = re.compile(r"Graph capturing finished in " + _NUM + " secs, took " + _NUM + " GiB")
GRAPH_CHARGED = re.compile(r"CUDA graph memory profiling is enabled")
INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _NUM + r" s"
                         r"(?: \(compilation: " + _NUM + " s)?")
RUNNER_V2 = re.compile(r"Using V2 Model Runner")
RUNNER_V1_FALLBACK = re.compile(r"using the V1 model runner instead")
READY = re.compile(r"Application startup complete")
VERSION = re.compile(r"vLLM API server version ([\w.+-]+)|Initializing a V1 LLM engine \(v([\w.+-]+)\)")
# vLLM's prefix: "INFO 12-01 03:20:11 [file.py:12] message", possibly behind "(EngineCore pid=7) ".
LEVEL = re.compile(r"(?:^|\) )(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[[^\]]*\] (.*)$")
# The message line that ends a Python traceback ("ValueError: No available memory ...").
EXCEPTION = re.compile(r"(?:^|\) )((?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception)): (.+)$")
DEPRECATION = re.compile(r"deprecated", re.IGNORECASE)
# The prefixes of a line: its process ("(EngineCore pid=7) ") and vLLM's logger ("ERROR 12-01 03:29:29 [core.py:1] ").
PROCESS = re.compile(r"(\([^()]*pid=\d+\)) ")
LEVEL_PREFIX = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ")
TRACEBACK = "Traceback (most recent call last):"
# The interpreter's own complaint when it cannot even start the module ("/usr/bin/python3: No module named vllm").
INTERPRETER = re.compile(r"^\S*python[\d.]*: (.+)$")
EMBEDDED_EXCEPTION = re.compile(r"\(((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): [^()]+)\)\s*$")

# Known memory errors first: they are the reason, the generic lines around them are consequences.
_FATAL_HINTS = ("No available memory for the cache blocks", "To serve at least one request",
                "Free memory on device", "CUDA out of memory", "OutOfMemoryError")


@dataclass
class StartupLog:
    """What one server start logged; None where the log did not say."""

    weights_gib: float | None = None
    weights_seconds: float | None = None
    peak_activation_gib: float | None = None
    non_torch_gib: float | None = None
    cuda_graph_gib: float | None = None  # CUDA graph memory actually captured ("Actual usage ... CUDAGraph")
    cuda_graph_estimate_gib: float | None = None  # profiled estimate ("Estimated CUDA graph memory")
    cuda_graph_charged: bool = False  # the estimate was subtracted from the KV budget
    kv_cache_gib: float | None = None  # "Available KV cache memory"; 0.34's extensible cache: its extended size
    # 0.34's extensible KV cache, sized after warm-up ("Memory after warmup: ..."); None where the log has no such line
    kv_capacity_gib: float | None = None  # the reserved capacity ("Available KV cache memory" before warm-up)
    free_after_warmup_gib: float | None = None
    kv_fit_after_warmup_gib: float | None = None  # "N KV cache blocks (X GiB) fit within the requested ..."
    kept_for_transients_gib: float | None = None  # max(transient peak, torch's reservation growth)
    transient_peak_gib: float | None = None
    torch_reserve_growth_gib: float | None = None
    kv_blocks: int | None = None
    kv_cache_tokens: int | None = None
    kv_device: str | None = None  # GPU or CPU
    max_concurrency: float | None = None
    concurrency_len: int | None = None
    total_gib: float | None = None  # the device's total memory as vLLM saw it
    free_at_start_gib: float | None = None
    requested_gib: float | None = None
    gpu_memory_utilization: float | None = None
    model_runner: str | None = None  # "V1" or "V2"
    init_engine_seconds: float | None = None
    compile_seconds: float | None = None
    log_seconds_to_ready: float | None = None  # first timestamp to "Application startup complete"
    ready: bool = False
    fatal: str | None = None
    warnings: list[str] = field(default_factory=list)
    deprecations: list[str] = field(default_factory=list)
    vllm_version: str | None = None
    jit_modules: list[str] = field(default_factory=list)  # FlashInfer modules this start compiled just in time

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _stamp(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, "%m-%d %H:%M:%S")
    except ValueError:
        return None


def _body(line: str) -> tuple[str, bool, str]:
    """(the process's prefix, whether vLLM's logger wrote it, the message): "(EngineCore pid=7) ERROR 12-01
    03:29:29 [core.py:1330] text" is ("(EngineCore pid=7)", True, "text"). vLLM logs a traceback through its
    logger too, with the prefix on every line of it."""
    prefix, rest = "", line
    if m := PROCESS.match(line):
        prefix, rest = m.group(1), line[m.end():]
    if lm := LEVEL_PREFIX.match(rest):
        return prefix, True, rest[lm.end():]
    return prefix, False, rest


def _exception_line(body: str) -> str:
    """ "vllm.v1.engine.exceptions.EngineDeadError: text" as "EngineDeadError: text"."""
    name, sep, message = body.partition(": ")
    if re.fullmatch(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*", name):
        name = name.rsplit(".", 1)[-1]
    return f"{name}{sep}{message.strip()}"


def _fatal(lines: list[str]) -> str | None:
    """The engine's first error, by one rule: a known memory error wherever it is (the lines around it are its
    consequences); else the last line of the first Python traceback (its exception: with several processes
    interleaved, each process's traceback is followed on its own prefix); else the first exception line outside
    a traceback; else vLLM's first ERROR or CRITICAL line; else the interpreter's own complaint
    ("python: Error while finding module specification ... (ModuleNotFoundError: No module named 'vllm')")."""
    tracebacks: list[str] = []  # each traceback's last line, in the order they ended
    exceptions: list[str] = []  # exception lines outside any traceback
    errors: list[str] = []
    interpreter: list[str] = []
    open_traceback: set[tuple[str, bool]] = set()  # (process prefix, logged) of each traceback being read
    for line in lines:
        prefix, logged, body = _body(line)
        if body.startswith(TRACEBACK):
            open_traceback.add((prefix, logged))
            continue
        if (prefix, logged) in open_traceback:
            if not body.strip() or body[0].isspace():
                continue  # a frame, its code, a caret line
            open_traceback.discard((prefix, logged))
            tracebacks.append(_exception_line(body.strip()))
            continue
        if m := EXCEPTION.search(line):
            exceptions.append(f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}")
        lm = LEVEL.search(line)
        if lm and lm.group(1) in ("ERROR", "CRITICAL"):
            errors.append(lm.group(3).strip())
        if m := INTERPRETER.match(line):
            embedded = EMBEDDED_EXCEPTION.search(m.group(1))
            interpreter.append(_exception_line(embedded.group(1)) if embedded else m.group(1).strip())
    for candidates in (tracebacks + exceptions, errors):
        for hint in _FATAL_HINTS:
            for text in candidates:
                if hint in text:
                    return text
    for candidates in (tracebacks, exceptions, errors, interpreter):
        if candidates:
            return candidates[0]
    return None


@dataclass
class _Reading:
    """What `parse` carries from one line to the next: the StartupLog it fills, and the figures it combines at the
    end (0.33's consumed memory and peak activation) or across lines (the first and latest timestamps)."""

    out: StartupLog
    consumed: float | None = None
    peak_with_graphs: float = 0.0
    first_stamp: datetime | None = None
    last_stamp: datetime | None = None


def _read_logger_line(reading: _Reading, line: str) -> None:
    """vLLM's logger prefix: the timestamps, and each distinct warning (and deprecation) once."""
    lm = LEVEL.search(line)
    if not lm:
        return
    out = reading.out
    stamp = _stamp(lm.group(2))
    if reading.first_stamp is None:
        reading.first_stamp = stamp
    if lm.group(1) == "WARNING":
        message = lm.group(3).strip()
        if message not in out.warnings:
            out.warnings.append(message)
        if DEPRECATION.search(message) and message not in out.deprecations:
            out.deprecations.append(message)
    if stamp:
        reading.last_stamp = stamp


def _read_ready(reading: _Reading, line: str) -> None:
    out = reading.out
    if READY.search(line) and not out.ready:
        out.ready = True  # uvicorn's line has no timestamp: the last vLLM line's stands in
        if reading.last_stamp and reading.first_stamp:
            out.log_seconds_to_ready = (reading.last_stamp - reading.first_stamp).total_seconds()


def _read_weights_and_kv_cache(reading: _Reading, line: str) -> None:
    """The first of each: weights loaded, KV cache memory, its size in tokens, the concurrency it allows."""
    out = reading.out
    if out.weights_gib is None and (m := WEIGHTS.search(line)):
        out.weights_gib, out.weights_seconds = float(m.group(1)), float(m.group(3))
        if out.model_runner is None:
            out.model_runner = "V1" if m.group(2) else "V2"
    if out.kv_cache_gib is None and (m := AVAILABLE_KV.search(line)):
        out.kv_cache_gib = float(m.group(1))
    if out.kv_cache_tokens is None and (m := KV_TOKENS.search(line)):
        out.kv_device, out.kv_cache_tokens = m.group(1), int(m.group(2).replace(",", ""))
    if out.max_concurrency is None and (m := CONCURRENCY.search(line)):
        out.concurrency_len, out.max_concurrency = int(m.group(1).replace(",", "")), float(m.group(2))


def _read_usage_summary(reading: _Reading, line: str) -> None:
    """compile_or_warm_up_model's summary, in either wording (before 0.33 and from 0.33 on); the last one counts."""
    out = reading.out
    if m := USAGE.search(line):
        (out.free_at_start_gib, out.total_gib, out.gpu_memory_utilization, out.requested_gib) = (
            float(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4)))
        out.peak_activation_gib, out.non_torch_gib = float(m.group(6)), float(m.group(7))
        out.cuda_graph_gib = float(m.group(8))
        if out.weights_gib is None:
            out.weights_gib = float(m.group(5))
    if m := USAGE_CONSUMED.search(line):
        (out.free_at_start_gib, out.total_gib, out.gpu_memory_utilization, out.requested_gib) = (
            float(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4)))
        reading.consumed, reading.peak_with_graphs = float(m.group(5)), float(m.group(6))
        out.cuda_graph_gib = float(m.group(7))


def _read_kv_cache_after_warm_up(reading: _Reading, line: str) -> None:
    """0.34's extensible KV cache: sized after warm-up, then extended (the size before becomes its capacity)."""
    out = reading.out
    if m := KV_AFTER_WARMUP.search(line):
        (out.free_after_warmup_gib, _, out.kept_for_transients_gib, out.transient_peak_gib,
         out.torch_reserve_growth_gib) = (float(m.group(i)) for i in range(1, 6))
        out.kv_blocks, out.kv_fit_after_warmup_gib = int(m.group(6)), float(m.group(7))
    if m := KV_EXTENDED.search(line):
        out.kv_capacity_gib = out.kv_capacity_gib if out.kv_capacity_gib is not None else out.kv_cache_gib
        out.kv_blocks, out.kv_cache_gib = int(m.group(1)), float(m.group(2))


def _read_cuda_graphs(reading: _Reading, line: str) -> None:
    """CUDA graph memory: the profiled estimate, whether it was charged, what capture took."""
    out = reading.out
    if m := GRAPH_ESTIMATE.search(line):
        out.cuda_graph_estimate_gib = float(m.group(1))
    if (m := GRAPH_POOL.search(line)) and out.cuda_graph_estimate_gib is None:
        out.cuda_graph_estimate_gib = float(m.group(2))
    if out.cuda_graph_gib is None and (m := GRAPH_CAPTURE.search(line)):
        out.cuda_graph_gib = float(m.group(2))
    if GRAPH_CHARGED.search(line):
        out.cuda_graph_charged = True


def _read_engine(reading: _Reading, line: str) -> None:
    """The engine's start-up time, its model runner (a later line overrides the weights line's guess), vLLM's version."""
    out = reading.out
    if out.init_engine_seconds is None and (m := INIT_ENGINE.search(line)):
        out.init_engine_seconds = float(m.group(1))
        out.compile_seconds = float(m.group(2)) if m.group(2) else None
    if RUNNER_V2.search(line):
        out.model_runner = "V2"
    elif RUNNER_V1_FALLBACK.search(line):
        out.model_runner = "V1"
    if out.vllm_version is None and (m := VERSION.search(line)):
        out.vllm_version = m.group(1) or m.group(2)


# Every line goes through every step, in this order: a later step reads what an earlier one set from the same line
# (the ready line's stamp, the runner the weights line implied, the KV cache size an extension replaces).
def _read_jit_build(reading: _Reading, line: str) -> None:
    if (m := JIT_BUILD.search(line)) and m.group(1) not in reading.out.jit_modules:
        reading.out.jit_modules.append(m.group(1))


_LINE_STEPS = (_read_logger_line, _read_ready, _read_weights_and_kv_cache, _read_usage_summary,
               _read_kv_cache_after_warm_up, _read_cuda_graphs, _read_engine, _read_jit_build)


def _split_consumed(reading: _Reading) -> None:
    """0.33's summary in the kit's terms: non-torch = consumed - weights; activation without the charged graph
    estimate."""
    out = reading.out
    if reading.consumed is None:
        return
    if out.weights_gib is not None:
        out.non_torch_gib = round(reading.consumed - out.weights_gib, 2)
    charged = out.cuda_graph_estimate_gib if out.cuda_graph_charged and out.cuda_graph_estimate_gib else 0.0
    out.peak_activation_gib = round(reading.peak_with_graphs - charged, 2)


def parse(text: str) -> StartupLog:
    """Parse one server log (all processes' lines interleaved, as vLLM writes them to one stream)."""
    reading = _Reading(StartupLog())
    lines = text.splitlines()
    for line in lines:
        for step in _LINE_STEPS:
            step(reading, line)
    _split_consumed(reading)
    out = reading.out
    if not out.ready or out.kv_cache_tokens is None:
        out.fatal = _fatal(lines)
    return out


def kv_cache_tokens(text: str) -> tuple[str, int] | None:
    """("GPU"|"CPU", tokens) from the log's KV cache size line, or None before the engine has sized it."""
    m = KV_TOKENS.search(text)
    return (m.group(1), int(m.group(2).replace(",", ""))) if m else None
