"""kit.memory.vllmlog.parse, one step at a time: which line wins when a figure is logged twice, what one step leaves
for the next on the same line, and what every recorded start-up log (kit/data/calibration/) reads as."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest

from kit.memory import vllmlog

pytestmark = pytest.mark.unit

CALIBRATION = Path(__file__).resolve().parents[2] / "kit" / "data" / "calibration"
RECORDED = sorted(CALIBRATION.rglob("*.log.xz"))
PID = "(EngineCore pid=7) {level} 12-03 10:{stamp} [x.py:1] "


def line(stamp: str, message: str, level: str = "INFO") -> str:
    return PID.format(level=level, stamp=stamp) + message


def read(path: Path) -> str:
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        return handle.read()


def test_warnings_are_kept_once_and_the_time_to_ready_runs_from_the_first_stamp_to_the_last() -> None:
    log = vllmlog.parse("\n".join([
        "plain text before vLLM's logger starts",
        line("00:05", "Loading weights"),
        line("00:07", "max_num_seqs is deprecated", level="WARNING"),
        line("00:08", "max_num_seqs is deprecated", level="WARNING"),
        line("00:09", "some other warning", level="WARNING"),
        line("01:10", "Starting server"),
        "INFO:     Application startup complete.",
        line("02:00", "a request"),
        "INFO:     Application startup complete.",
    ]))
    assert log.warnings == ["max_num_seqs is deprecated", "some other warning"]
    assert log.deprecations == ["max_num_seqs is deprecated"]
    assert log.ready and log.log_seconds_to_ready == 65.0  # the first ready line's; the later stamp is not counted


def test_ready_without_any_stamp_has_no_time_to_ready() -> None:
    log = vllmlog.parse("INFO:     Application startup complete.")
    assert log.ready and log.log_seconds_to_ready is None
    assert log.fatal is None  # ready, but no KV cache size: the error reader runs and finds nothing


def test_the_first_weights_kv_and_concurrency_lines_win() -> None:
    log = vllmlog.parse("\n".join([
        line("00:01", "Model loading took 15.27 GiB and 3.2 seconds"),
        line("00:02", "Model loading took 99.00 GiB memory and 9.9 seconds"),
        line("00:03", "Available KV cache memory: 100.50 GiB"),
        line("00:04", "Available KV cache memory: 1.00 GiB"),
        line("00:05", "GPU KV cache size: 1,234 tokens"),
        line("00:06", "CPU KV cache size: 99 tokens"),
        line("00:07", "Maximum concurrency for 4,096 tokens per request: 3.5x"),
        line("00:08", "Maximum concurrency for 8 tokens per request: 9.0x"),
        line("00:09", "init engine (profile, create kv cache, warmup model) took 12.5 s (compilation: 7.25 s)"),
        line("00:10", "init engine (profile, create kv cache, warmup model) took 99.0 s"),
        line("00:11", "vLLM API server version 0.26.0"),
        line("00:12", "Initializing a V1 LLM engine (v0.99.0) with config"),
    ]))
    assert (log.weights_gib, log.weights_seconds, log.model_runner) == (15.27, 3.2, "V2")
    assert (log.kv_cache_gib, log.kv_device, log.kv_cache_tokens) == (100.5, "GPU", 1234)
    assert (log.concurrency_len, log.max_concurrency) == (4096, 3.5)
    assert (log.init_engine_seconds, log.compile_seconds) == (12.5, 7.25)
    assert log.vllm_version == "0.26.0"
    assert vllmlog.parse(line("00:01", "Initializing a V1 LLM engine (v0.33.0) with config")).vllm_version == "0.33.0"
    no_compile = vllmlog.parse(line("00:01", "init engine (profile, create kv cache, warmup model) took 3.0 s"))
    assert (no_compile.init_engine_seconds, no_compile.compile_seconds) == (3.0, None)


def test_the_runner_named_outright_overrides_the_weights_lines_wording() -> None:
    weights_v1 = line("00:01", "Model loading took 15.27 GiB memory and 3.2 seconds")
    assert vllmlog.parse(weights_v1).model_runner == "V1"
    assert vllmlog.parse(weights_v1 + "\n" + line("00:02", "Using V2 Model Runner")).model_runner == "V2"
    fallback = line("00:02", "MoE models are not supported, using the V1 model runner instead")
    assert vllmlog.parse(line("00:00", "Using V2 Model Runner") + "\n" + fallback).model_runner == "V1"
    # the runner stays what was said last, whatever the weights line says after it
    later_weights = line("00:03", "Model loading took 15.27 GiB and 3.2 seconds")
    assert vllmlog.parse(fallback + "\n" + later_weights).model_runner == "V1"


SUMMARY_026 = ("Free memory on device (139.28/139.81 GiB) on startup. Desired GPU memory utilization is (0.9, 125.83 "
               "GiB). Actual usage is {weights} GiB for weight, 2.5 GiB for peak activation, 0.6 GiB for non-torch "
               "memory, and {graphs} GiB for CUDAGraph memory. Replace ...")
SUMMARY_033 = ("Free memory on device (139.28/139.81 GiB) on startup. Desired GPU memory utilization is (0.9, 125.83 "
               "GiB). Actual usage is 16.00 GiB for consumed memory (weights + non-torch), {peak} GiB for peak "
               "activation, and 0.45 GiB for CUDAGraph memory. Replace ...")


def test_the_pre_033_summary_fills_the_weights_only_when_no_weights_line_did() -> None:
    alone = vllmlog.parse(line("00:01", SUMMARY_026.format(weights="14.90", graphs="0.75")))
    assert (alone.weights_gib, alone.peak_activation_gib, alone.non_torch_gib, alone.cuda_graph_gib) == (
        14.9, 2.5, 0.6, 0.75)
    assert (alone.free_at_start_gib, alone.total_gib, alone.gpu_memory_utilization, alone.requested_gib) == (
        139.28, 139.81, 0.9, 125.83)
    after = vllmlog.parse("\n".join([line("00:01", "Model loading took 15.27 GiB and 3.2 seconds"),
                                     line("00:02", SUMMARY_026.format(weights="14.90", graphs="0.75"))]))
    assert after.weights_gib == 15.27


def test_cuda_graph_figures_come_from_the_summary_first_then_the_capture_line() -> None:
    capture = line("00:01", "Graph capturing finished in 12 secs, took 0.53 GiB")
    assert vllmlog.parse(capture).cuda_graph_gib == 0.53
    summary_then_capture = "\n".join([line("00:00", SUMMARY_026.format(weights="14.90", graphs="0.75")), capture])
    assert vllmlog.parse(summary_then_capture).cuda_graph_gib == 0.75
    # the capture line fills the figure when it comes first; a later summary still replaces it
    capture_then_summary = "\n".join([capture, line("00:02", SUMMARY_026.format(weights="14.90", graphs="0.75"))])
    assert vllmlog.parse(capture_then_summary).cuda_graph_gib == 0.75


def test_the_graph_estimate_prefers_the_estimate_line_to_the_pool_line() -> None:
    pool = line("00:01", "CUDA graph pool memory: 0.40 GiB (actual), 0.52 GiB (estimated)")
    estimate = line("00:02", "Estimated CUDA graph memory: 0.61 GiB total")
    assert vllmlog.parse(pool).cuda_graph_estimate_gib == 0.52
    assert vllmlog.parse(pool + "\n" + estimate).cuda_graph_estimate_gib == 0.61
    assert vllmlog.parse(estimate + "\n" + pool).cuda_graph_estimate_gib == 0.61
    assert not vllmlog.parse(estimate).cuda_graph_charged
    assert vllmlog.parse(estimate + "\n" + line("00:03", "CUDA graph memory profiling is enabled")).cuda_graph_charged


@pytest.mark.parametrize("charged", [False, True])
def test_033s_consumed_memory_splits_into_non_torch_and_activation(charged: bool) -> None:
    lines = [line("00:01", "Model loading took 15.27 GiB and 3.2 seconds"),
             line("00:02", "Estimated CUDA graph memory: 0.61 GiB total"),
             line("00:03", SUMMARY_033.format(peak="3.00"))]
    if charged:
        lines.insert(0, line("00:00", "CUDA graph memory profiling is enabled"))
    log = vllmlog.parse("\n".join(lines))
    assert log.non_torch_gib == pytest.approx(0.73) and log.cuda_graph_gib == 0.45
    assert log.peak_activation_gib == pytest.approx(2.39 if charged else 3.0)
    # no weights line: no non-torch figure, but the activation still stands
    alone = vllmlog.parse(line("00:03", SUMMARY_033.format(peak="3.00")))
    assert alone.weights_gib is None and alone.non_torch_gib is None and alone.peak_activation_gib == 3.0


def test_the_kv_capacity_is_the_size_before_the_first_extension() -> None:
    log = vllmlog.parse("\n".join([
        line("00:01", "Available KV cache memory: 20.00 GiB"),
        line("00:02", "Extended KV cache to 100 blocks (5.00 GiB)."),
        line("00:03", "Extended KV cache to 300 blocks (15.00 GiB)."),
    ]))
    assert (log.kv_capacity_gib, log.kv_cache_gib, log.kv_blocks) == (20.0, 15.0, 300)
    unsized = vllmlog.parse(line("00:02", "Extended KV cache to 100 blocks (5.00 GiB)."))
    assert (unsized.kv_capacity_gib, unsized.kv_cache_gib) == (None, 5.0)


@pytest.mark.parametrize("path", RECORDED, ids=[p.relative_to(CALIBRATION).as_posix() for p in RECORDED])
def test_every_recorded_log_reads_consistently(path: Path) -> None:
    text = read(path)
    log = vllmlog.parse(text)
    assert log.vllm_version and log.vllm_version in text
    assert len(set(log.warnings)) == len(log.warnings) and set(log.deprecations) <= set(log.warnings)
    assert all(warning in text for warning in log.warnings)
    if log.ready:
        assert log.log_seconds_to_ready is not None and log.log_seconds_to_ready >= 0
    if log.ready and log.kv_cache_tokens is not None:  # the error reader runs only on a start that did not finish
        assert log.fatal is None
    if log.kv_capacity_gib is not None:  # 0.34's extensible cache: extended within what it reserved
        assert log.kv_blocks and log.kv_cache_gib <= log.kv_capacity_gib
    if log.weights_gib is not None:
        assert log.model_runner in ("V1", "V2") and log.weights_seconds is not None
    if log.kv_cache_tokens is not None:
        assert log.kv_device in ("GPU", "CPU") and log.kv_cache_tokens > 0
    # one log, read twice, reads the same: no state survives a parse
    assert vllmlog.parse(text) == log


def test_recorded_logs_cover_every_wording() -> None:
    """The recorded logs between them exercise each step: both summaries, the extended cache, a failed start."""
    logs = [vllmlog.parse(read(path)) for path in RECORDED]
    assert len(logs) >= 50
    assert any(log.non_torch_gib is not None and log.free_after_warmup_gib is None for log in logs)
    assert any(log.kv_capacity_gib is not None for log in logs)
    assert any(log.cuda_graph_charged for log in logs) and any(not log.cuda_graph_charged for log in logs)
    assert any(log.fatal for log in logs) and any(log.ready for log in logs)
    assert {log.model_runner for log in logs} >= {"V1", "V2"}
    assert any(log.compile_seconds for log in logs) and any(log.warnings for log in logs)
