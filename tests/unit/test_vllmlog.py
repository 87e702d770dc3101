"""kit.memory.vllmlog on real vLLM 0.26.0 and 0.33.0 start-up logs (kit/data/calibration/h200-vllm-*, an H200), and the
planner against what those logs say. Figures come from parsing the logs here, never from copied numbers."""

from __future__ import annotations

import json
import lzma
import statistics
from pathlib import Path

import pytest
import yaml

from kit.config.modelinfo import load_model_spec
from kit.memory import plan as planner
from kit.memory import kv
from kit.memory import inputs as plan_inputs
from kit.memory import rules
from kit.memory import vllmlog

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[2] / "kit" / "data"
ALL_CASES = yaml.safe_load((DATA / "calibration.yaml").read_text())["gpu_cases"]
CASES = [c for c in ALL_CASES if str(c["inputs"].get("vllm_version", "0.26.0")) == "0.26.0"]
STARTED = [c for c in CASES if not c.get("expect_error") and not c.get("start_failed")]
CASES_033 = [c for c in ALL_CASES if str(c["inputs"].get("vllm_version")) == "0.33.0"]
STARTED_033 = [c for c in CASES_033 if not c.get("expect_error") and not c.get("start_failed")]


def text_of(case: dict) -> str:
    with lzma.open(DATA / "calibration" / case["log"], "rt", encoding="utf-8") as handle:
        return handle.read()


def case(case_id: str) -> dict:
    return next(c for c in ALL_CASES if c["id"] == case_id)


@pytest.mark.parametrize("entry", STARTED + STARTED_033, ids=[c["id"] for c in STARTED + STARTED_033])
def test_started_engines_log_a_whole_memory_profile(entry: dict) -> None:
    log = vllmlog.parse(text_of(entry))
    assert log.ready and log.fatal is None
    assert log.vllm_version == str(entry["inputs"].get("vllm_version", "0.26.0")) and log.kv_device == "GPU"
    for field in ("weights_gib", "peak_activation_gib", "non_torch_gib", "kv_cache_gib", "total_gib"):
        assert getattr(log, field) is not None, field
    # vLLM's own identity: available = requested - weights - activation - non-torch - charged graph estimate
    charged = log.cuda_graph_estimate_gib if log.cuda_graph_charged else 0.0
    rebuilt = log.requested_gib - log.weights_gib - log.peak_activation_gib - log.non_torch_gib - charged
    assert rebuilt == pytest.approx(log.kv_cache_gib, abs=0.04)
    # "Maximum concurrency for L tokens per request" = tokens / L
    assert log.concurrency_len == entry["inputs"]["max_model_len"]
    assert log.max_concurrency == pytest.approx(log.kv_cache_tokens / log.concurrency_len, abs=0.01)
    assert log.requested_gib == pytest.approx(log.total_gib * entry["inputs"]["gpu_memory_utilization"], abs=0.01)


def test_v2_runner_for_dense_models_charges_no_graph_memory_and_v1_for_qwen3_moe() -> None:
    dense = vllmlog.parse(text_of(case("h200-qwen3-8b-bf16-graphs-cold")))
    moe = vllmlog.parse(text_of(case("h200-qwen3-30b-a3b-moe-graphs")))
    assert dense.model_runner == "V2" and not dense.cuda_graph_charged and dense.cuda_graph_gib > 0
    assert moe.model_runner == "V1" and moe.cuda_graph_charged and moe.cuda_graph_estimate_gib > 0
    version = rules.parse_version("0.26.0")
    assert rules.model_runner_for(load_model_spec("Qwen/Qwen3-8B"), version) == dense.model_runner
    assert rules.model_runner_for(load_model_spec("Qwen/Qwen3-30B-A3B"), version) == moe.model_runner


def test_warm_compile_cache_starts_faster() -> None:
    cold = vllmlog.parse(text_of(case("h200-qwen3-8b-bf16-graphs-cold")))
    warm = vllmlog.parse(text_of(case("h200-qwen3-8b-bf16-graphs-warm")))
    eager = vllmlog.parse(text_of(case("h200-qwen3-8b-bf16-eager")))
    assert cold.compile_seconds > 2 * warm.compile_seconds
    assert cold.init_engine_seconds > warm.init_engine_seconds
    assert eager.compile_seconds is None and eager.cuda_graph_gib == 0
    # the cold compile's profile run holds more memory than the warm one (what the planner charges for)
    assert cold.peak_activation_gib > warm.peak_activation_gib


def test_failed_starts_report_vllms_own_error() -> None:
    oom = vllmlog.parse(text_of(case("h200-qwen3-8b-16g-out-of-memory")))
    assert not oom.ready and oom.kv_cache_tokens is None and oom.kv_cache_gib < 0
    assert oom.fatal.startswith("ValueError: No available memory for the cache blocks")
    mla = vllmlog.parse(text_of(case("h200-deepseek-v2-lite-mla")))
    assert not mla.ready and "num_expert_group and topk_group" in mla.fatal


def test_planner_predicts_the_out_of_memory_start() -> None:
    entry = case("h200-qwen3-8b-16g-out-of-memory")
    log = vllmlog.parse(text_of(entry))
    result = planner.plan(_inputs(entry, log))
    assert not result.fits and result.error == kv.NO_MEMORY_ERROR
    assert result.kv_cache_gib == pytest.approx(log.kv_cache_gib, abs=0.1)
    assert result.suggestions  # the fixes kit probe prints


def _inputs(entry: dict, log: vllmlog.StartupLog) -> planner.PlanInputs:
    raw = dict(entry["inputs"])
    model = load_model_spec(raw.pop("model"))
    return planner.PlanInputs(model=model, gpu_name="h200", gpu_memory_gib=log.total_gib or 139.8,
                              vllm_version="0.26.0", **raw)


def test_planner_meets_the_kv_targets_on_every_measured_engine() -> None:
    """Issue 12's targets: KV tokens median <= 1 %, every case <= 3 %."""
    token_errors, weight_errors = [], {}
    for entry in STARTED:
        log = vllmlog.parse(text_of(entry))
        result = planner.plan(_inputs(entry, log))
        token_errors.append(abs(result.kv_cache_tokens - log.kv_cache_tokens) / log.kv_cache_tokens)
        if log.weights_gib:
            weight_errors[entry["id"]] = abs(result.weights_gib - log.weights_gib) / log.weights_gib
    assert len(token_errors) >= 12
    assert statistics.median(token_errors) <= 0.01
    assert max(token_errors) <= 0.03
    # weights: every case within 1 % (allocator segment tails and Machete's zero points included, docs/gpu-planning.md)
    assert len(weight_errors) >= 12
    for case_id, error in weight_errors.items():
        assert error <= 0.01, case_id


def test_v1_wording_cpu_variant_and_tracebacks() -> None:
    text = "\n".join([
        "INFO 11-30 10:00:00 [gpu_model_runner.py:1] Model loading took 14.25 GiB memory and 5.1 seconds",
        "INFO 11-30 10:00:05 [kv_cache_utils.py:1] CPU KV cache size: 174,720 tokens",
        "INFO 11-30 10:00:05 [kv_cache_utils.py:1] Maximum concurrency for 2,048 tokens per request: 85.31x",
        "(EngineCore pid=3) ERROR 11-30 10:00:06 [core.py:1] EngineCore failed to start.",
        "(EngineCore pid=3) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ])
    log = vllmlog.parse(text)
    assert (log.weights_gib, log.model_runner) == (14.25, "V1")
    assert (log.kv_device, log.kv_cache_tokens, log.concurrency_len) == ("CPU", 174720, 2048)
    assert log.fatal == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert vllmlog.kv_cache_tokens(text) == ("CPU", 174720)
    assert vllmlog.kv_cache_tokens("no such line") is None


def test_the_first_error_is_the_last_line_of_the_first_traceback() -> None:
    # Two processes interleaved; the engine's traceback is chained, and the API server's consequence comes last.
    text = "\n".join([
        "(EngineCore pid=7) ERROR 12-01 03:29:29 [core.py:1] EngineCore failed to start.",
        "(EngineCore pid=7) Traceback (most recent call last):",
        "(APIServer pid=5) INFO 12-01 03:29:29 [api_server.py:1] waiting for the engine",
        '(EngineCore pid=7)   File "/site/vllm/model_executor/models/deepseek_v2.py", line 9, in __init__',
        "(EngineCore pid=7)     raise KeyError(name)",
        "(EngineCore pid=7) KeyError: 'rope_scaling'",
        "(EngineCore pid=7) ",
        "(EngineCore pid=7) During handling of the above exception, another exception occurred:",
        "(EngineCore pid=7) Traceback (most recent call last):",
        "(EngineCore pid=7) ValueError: could not build the model",
        "(APIServer pid=5) Traceback (most recent call last):",
        "(APIServer pid=5) RuntimeError: Engine core initialization failed. See root cause above.",
    ])
    assert vllmlog.parse(text).fatal == "KeyError: 'rope_scaling'"
    # vLLM's logger writes a traceback with its prefix on every line; a dotted exception name loses its module
    logged = "\n".join([
        "ERROR 12-01 03:29:29 [core.py:1] Traceback (most recent call last):",
        'ERROR 12-01 03:29:29 [core.py:1]   File "/site/vllm/v1/engine/core.py", line 1, in run',
        "ERROR 12-01 03:29:29 [core.py:1] vllm.v1.engine.exceptions.EngineDeadError: the engine died",
    ])
    assert vllmlog.parse(logged).fatal == "EngineDeadError: the engine died"
    # no traceback: vLLM's first ERROR line
    assert vllmlog.parse("WARNING 12-01 03:29:29 [a.py:1] slow\nERROR 12-01 03:29:30 [b.py:2] no GPU found\n"
                         "ERROR 12-01 03:29:31 [b.py:3] giving up").fatal == "no GPU found"


@pytest.mark.parametrize("line", [
    "/opt/venv/bin/python3: Error while finding module specification for 'vllm.entrypoints.cli.main' "
    "(ModuleNotFoundError: No module named 'vllm')",
    "Traceback (most recent call last):\n  File \"<frozen runpy>\", line 1\nModuleNotFoundError: No module named 'vllm'",
])
def test_vllm_missing_is_named_whichever_way_python_says_it(line: str) -> None:
    assert vllmlog.parse(line).fatal == "ModuleNotFoundError: No module named 'vllm'"


def test_the_interpreters_own_complaint_stands_when_nothing_else_does() -> None:
    assert vllmlog.parse("/usr/bin/python3: No module named vllm").fatal == "No module named vllm"


# --------------------------------------------------------------------------- vLLM 0.33.0
def test_033_v2_runner_charges_its_cuda_graph_estimate_for_every_model() -> None:
    """0.33's V2 runner serves dense and MoE models and subtracts its captured-graph estimate from the KV budget
    (vllm/config/vllm.py use_v2_model_runner, vllm/v1/worker/gpu/cudagraph_utils.py profile_cudagraph_memory)."""
    graphs = vllmlog.parse(text_of(case("h200-033-qwen3-8b-48g-graphs")))
    eager = vllmlog.parse(text_of(case("h200-033-qwen3-8b-80g")))
    assert graphs.model_runner == "V2" and graphs.cuda_graph_charged and graphs.cuda_graph_estimate_gib > 0.3
    assert eager.model_runner == "V2" and not eager.cuda_graph_charged and eager.cuda_graph_gib == 0
    version = rules.parse_version("0.33.0")
    for model in ("Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V2-Lite-Chat"):
        assert rules.model_runner_for(load_model_spec(model), version) == "V2"
        assert rules.cuda_graphs_charged_by(load_model_spec(model), version)
    entry = case("h200-033-qwen3-8b-48g-graphs")
    result = planner.plan(_inputs_033(entry, graphs))
    assert result.inputs["cuda_graph_charged"] is True
    assert result.cuda_graph_gib == pytest.approx(graphs.cuda_graph_estimate_gib, abs=0.05)


def test_033_sampler_state_is_non_torch_memory_that_grows_with_max_num_seqs() -> None:
    """The V2 runner's penalty state ([max_num_seqs, vocab] int32 and a bit mask) is in vLLM's consumed memory."""
    small = vllmlog.parse(text_of(case("h200-033-llama3.1-8b-24g")))  # 256 seqs, vocabulary 128256
    big = vllmlog.parse(text_of(case("h200-033-qwen3-8b-80g")))  # 1024 seqs, vocabulary 151936
    state_small, state_big = (seqs * vocab * 4.125 / plan_inputs.GIB for seqs, vocab in ((256, 128256), (1024, 151936)))
    assert big.non_torch_gib - small.non_torch_gib == pytest.approx(state_big - state_small, abs=0.05)
    rule = rules.memory_accounting(rules.parse_version("0.33.0"))
    for log, state in ((small, state_small), (big, state_big)):
        assert log.non_torch_gib == pytest.approx(rule.non_torch_gib_single + state, abs=0.03)


def _inputs_033(entry: dict, log: vllmlog.StartupLog) -> planner.PlanInputs:
    raw = dict(entry["inputs"])
    model = load_model_spec(raw.pop("model"))
    return planner.PlanInputs(model=model, gpu_memory_gib=log.total_gib,
                             **{"gpu_name": "h200", **raw})


@pytest.mark.parametrize("which", ["fit", "held_out"])
def test_033_planner_meets_the_kv_targets_on_fitted_and_held_out_runs(which: str) -> None:
    """Issue 22's targets on 0.33.0: every case within 3 % of vLLM's KV tokens, median within 1 %; weights 1 %."""
    entries = [e for e in STARTED_033 if e.get("set", "fit") == which]
    assert entries
    token_errors = {}
    for entry in entries:
        log = vllmlog.parse(text_of(entry))
        result = planner.plan(_inputs_033(entry, log))
        assert result.fits, entry["id"]
        token_errors[entry["id"]] = (result.kv_cache_tokens - log.kv_cache_tokens) / log.kv_cache_tokens
        assert abs(result.weights_gib - log.weights_gib) / log.weights_gib <= 0.01, entry["id"]
    assert statistics.median(abs(e) for e in token_errors.values()) <= 0.01
    # Every case within 3 % (the Qwen2.5-7B runs with CUDA graphs, 4.5-7.2 % over before Qwen2's full-graph factor,
    # are fitted cases since; bench/plan_accuracy.py's family-held-out table shows them planned without it)
    assert {name: error for name, error in token_errors.items() if abs(error) > 0.03} == {}


def test_a_0_34_log_reads_the_kv_cache_sized_after_warm_up() -> None:
    # vLLM 0.34.0's lines (extensible_kv_cache.py measure_kv_cache_blocks and extend_kv_cache, gpu_worker.py
    # determine_available_memory, kv_cache_utils.py update_kv_cache_capacity), filled in as they print: the hook the
    # 0.34 calibration runs are read with. "Available KV cache memory" is the capacity reserved before warm-up there.
    pid = "(EngineCore pid=7) INFO 12-03 10:00:0{} [x.py:1] "
    text = "\n".join([
        pid.format(1) + "Model loading took 15.27 GiB and 3.1 seconds",
        pid.format(2) + "Available KV cache memory: 121.97 GiB",
        pid.format(3) + "Free memory on device (139.28/139.81 GiB) on startup. Desired GPU memory utilization is "
                        "(1.0, 139.81 GiB). Actual usage is 15.98 GiB for consumed memory (weights + non-torch), "
                        "2.11 GiB for peak activation, and 0.45 GiB for CUDAGraph memory. Replace ...",
        pid.format(4) + "Memory after warmup: 121.30 GiB free, 0.01 GiB committed to the KV cache, 2.30 GiB kept for "
                        "transient activations (2.30 GiB allocated at peak, 1.90 GiB of torch reservation growth); "
                        "8421 KV cache blocks (117.00 GiB) fit within the requested 139.81 GiB. Torch may reserve up "
                        "to 19.50 GiB.",
        pid.format(5) + "Extended KV cache to 8421 blocks (117.04 GiB).",
        pid.format(6) + "GPU KV cache size: 538,944 tokens, Maximum concurrency for 40,960 tokens per request: 13.16x",
    ])
    log = vllmlog.parse(text)
    assert (log.kv_capacity_gib, log.kv_cache_gib, log.kv_blocks) == (121.97, 117.04, 8421)
    assert (log.free_after_warmup_gib, log.kept_for_transients_gib, log.transient_peak_gib,
            log.torch_reserve_growth_gib) == (121.30, 2.30, 2.30, 1.90)
    assert log.kv_cache_tokens == 538944 and log.gpu_memory_utilization == 1.0 and log.kv_fit_after_warmup_gib == 117.0
    assert log.non_torch_gib == pytest.approx(0.71) and log.peak_activation_gib == 2.11
    # a 0.33 log has none of it
    assert vllmlog.parse(pid.format(2) + "Available KV cache memory: 100.00 GiB").kv_capacity_gib is None


CASES_034 = [c for c in ALL_CASES if str(c["inputs"].get("vllm_version")) == "0.34.0"]


def test_034_runs_on_the_h200_read_as_vllm_sized_them() -> None:
    """The seventeen 0.34.0 start-ups (kit/data/calibration/h200-vllm-0.34.0): with the extensible cache the KV cache
    is what fitted after warm-up; Gemma-2's refusals are read with the room they had (2.38 and 2.58 GiB for 2.64 GiB
    needed); vLLM keeps the larger of the allocated peak and torch's reservation growth."""
    logs = {c["id"]: vllmlog.parse(text_of(c)) for c in CASES_034 if c["log"].startswith("h200-vllm-0.34.0/")}
    assert len(logs) == 17
    gemma64 = logs["h200-034-gemma2-9b-24g-64seqs"]
    assert not gemma64.ready and gemma64.kv_fit_after_warmup_gib == 2.58 and "2.64 GiB KV cache is needed" in gemma64.fatal
    moe = logs["h200-034-qwen3-30b-a3b-moe-80g"]  # the allocated peak outgrew the reservation growth
    assert (moe.transient_peak_gib, moe.torch_reserve_growth_gib, moe.kept_for_transients_gib) == (2.07, 0.67, 2.07)
    assert (moe.kv_cache_tokens, moe.kv_cache_gib) == (136192, 12.47)
    llama = logs["h200-034-llama3.1-8b-24g"]
    assert (llama.kv_fit_after_warmup_gib, llama.kv_cache_gib, llama.kv_capacity_gib) == (5.75, 5.75, 6.08)
    assert (llama.transient_peak_gib, llama.torch_reserve_growth_gib, llama.free_at_start_gib) == (0.45, 0.5, 139.1)
    gemma = logs["h200-034-gemma2-9b-24g"]
    assert not gemma.ready and gemma.kv_fit_after_warmup_gib == 2.38 and "2.64 GiB KV cache is needed" in gemma.fatal
    off = logs["h200-034-qwen3-8b-24g-noext"]
    assert off.free_after_warmup_gib is None and off.kv_cache_tokens == 41536  # 0.33's estimate path


def test_034_round_two_was_planned_before_it_ran_and_every_verdict_held() -> None:
    """The second round's plans, committed before any of its engines ran (preregistered-plans-round2.json): every
    verdict is vLLM's (Gemma-2 at 64 sequences refused, the rest served) and no KV figure is above vLLM's."""
    plans = json.loads((DATA / "calibration" / "h200-vllm-0.34.0" / "preregistered-plans-round2.json").read_text())["plans"]
    by_log = {Path(c["log"]).name.removesuffix(".log.xz"): c for c in CASES_034}
    # DeepSeek did not reach /health within round two's call; it ran in round three (below).
    ran = {name: plan for name, plan in plans.items() if name in by_log and name != "dsv2lite-48g"}
    assert len(ran) == 9
    for name, plan in ran.items():
        log = vllmlog.parse(text_of(by_log[name]))
        assert plan["fits"] == bool(log.ready), name
        room = log.kv_fit_after_warmup_gib
        assert room is not None and plan["kv_cache_gib"] <= room + 0.01, name


def test_034_round_three_mla_was_planned_before_it_ran_held_and_compiled_nothing() -> None:
    """Round three (preregistered-plans-round3.json, made at 6102eee before the engines ran): DeepSeek-V2-Lite's MLA at
    three budgets, with FlashInfer's rope and sampler compiled ahead of time. Every engine served, every planned KV
    figure is below what vLLM committed (-9.1 % to -1.8 %), the weights within 0.2 %, and no log builds a JIT module
    (round two's start built `rope` and ran past its deadline)."""
    plans = json.loads((DATA / "calibration" / "h200-vllm-0.34.0" / "preregistered-plans-round3.json").read_text())
    assert "6102eee" in plans["about"]
    by_log = {Path(c["log"]).name.removesuffix(".log.xz"): c for c in CASES_034}
    assert set(plans["plans"]) == {"dsv2lite-40g", "dsv2lite-48g", "dsv2lite-80g-graphs"} <= set(by_log)
    for name, plan in plans["plans"].items():
        text = text_of(by_log[name])
        log = vllmlog.parse(text)
        assert plan["fits"] and log.ready, name
        assert "Building JIT module" not in text, name
        assert log.kv_cache_tokens is not None and 0.90 * log.kv_cache_tokens < plan["kv_cache_tokens"] < log.kv_cache_tokens
        assert abs(plan["weights_gib"] - log.weights_gib) / log.weights_gib < 0.002, name


def test_034_plans_are_never_above_what_vllm_found_room_for() -> None:
    """With the measured baseline and post-warm-up allowance, every 0.34.0 plan is within issue 33's "never more than
    1 % above vLLM" and every verdict is right (the allowance is in-sample: bench/plan_accuracy.py holds it out by
    family). One run is above vLLM's cache at all: Qwen2.5-7B at an 80 GiB card's batch defaults, whose sizing step
    left 0.63 GiB resident (two prompt-logprobs chunks' worth, one charged), 0.05 GiB above on 55 GiB (+0.09 %)."""
    above = []
    for entry in CASES_034:
        if entry.get("start_failed"):
            continue  # no memory verdict (h200-034f-qwen2.5-32b-awq-4090-marlin: Humming's NVRTC compile failed)
        log = vllmlog.parse(text_of(entry))
        result = planner.plan(_inputs_033(entry, log))
        assert result.fits == (not entry.get("expect_error")), entry["id"]
        room = log.kv_fit_after_warmup_gib if log.kv_fit_after_warmup_gib is not None else log.kv_cache_gib
        assert result.kv_cache_gib <= room * 1.01 + 0.01, entry["id"]
        if result.kv_cache_gib > room + 0.01:
            above.append(entry["id"])
    assert above == ["h200-034f-qwen2.5-7b-80g"]


def test_034_held_out_families_were_planned_before_they_ran_and_every_verdict_held() -> None:
    """Round four (h200-vllm-0.34.0-families/preregistered-plans.json, committed in 61def94 before the engines ran):
    Mistral and Qwen2.5, model types no 0.34 figure had seen, and new models of 0.34 families. Every engine that
    started served, as planned; the registered KV figures are -8.2 % to +0.1 % of vLLM's (below the issue's 3 %
    target in the median: the flat post-warm-up allowance, docs/gpu-planning.md). Qwen2.5-32B-AWQ did not start for a
    reason outside memory (Humming's NVRTC compile)."""
    folder = DATA / "calibration" / "h200-vllm-0.34.0-families"
    plans = json.loads((folder / "preregistered-plans.json").read_text())["plans"]
    by_log = {Path(c["log"]).name.removesuffix(".log.xz"): c for c in CASES_034
              if c["log"].startswith("h200-vllm-0.34.0-families/")}
    assert set(by_log) == set(plans)
    errors = {}
    for name, plan in plans.items():
        entry = by_log[name]
        log = vllmlog.parse(text_of(entry))
        if entry.get("start_failed"):
            assert name == "q32awq-4090" and "NVRTCCompiler failed" in (log.fatal or "")
            continue
        assert plan["fits"] and log.ready, name
        errors[name] = (plan["kv_cache_tokens"] - log.kv_cache_tokens) / log.kv_cache_tokens * 100
    assert len(errors) == 9
    assert min(errors.values()) > -8.3 and max(errors.values()) < 0.1


# The serve arguments a record states that the planner reads, each compared with what vLLM logged at start-up.
RECORDED_ARGS = ("dtype", "max_model_len", "quantization", "kv_cache_dtype", "gpu_memory_utilization", "max_num_seqs",
                 "max_num_batched_tokens", "enforce_eager", "tensor_parallel_size")


def engine_args(entry: dict) -> dict:
    """The arguments vLLM logged as it started ("non-default args: {...}", a Python literal: read, never run)."""
    import ast
    import re

    match = re.search(r"non-default args: (\{.*\})", text_of(entry))
    assert match, f"{entry['log']}: no non-default args line"
    return ast.literal_eval(match.group(1))


def resolved(entry: dict, drop: str = "") -> plan_inputs.Resolved:
    raw = {k: v for k, v in entry["inputs"].items() if k != drop}
    raw.setdefault("gpu_name", "h200")
    model = load_model_spec(raw.pop("model"))
    return plan_inputs.resolve(planner.PlanInputs(model=model, gpu_memory_gib=141.0, **raw))[0]


@pytest.mark.parametrize("entry", ALL_CASES, ids=[c["id"] for c in ALL_CASES])
def test_every_record_is_planned_with_the_arguments_its_engine_logged(entry: dict) -> None:
    """A record is planned as its engine ran. Each serve argument the planner reads is the one vLLM logged; one the log
    does not show is vLLM's default, which the record leaves out or states as the planner resolves it. The
    VLLM_DISABLED_KERNELS of the committed command line (the .sh beside the log) is the record's `disabled_kernels`."""
    import re

    logged, stated = engine_args(entry), entry["inputs"]
    for name in RECORDED_ARGS:
        if name in logged:
            assert stated.get(name, False if name == "enforce_eager" else None) == logged[name], name
        elif name in stated:
            assert getattr(resolved(entry, drop=name), name) == stated[name], f"{name}: not vLLM's default"
    command = (DATA / "calibration" / entry["log"]).with_name(Path(entry["log"]).name.removesuffix(".log.xz") + ".sh")
    if command.is_file():  # the real-weights starts of 0.33.0 were run by hand, their commands in the logs
        named = re.search(r"VLLM_DISABLED_KERNELS=(\S+)", command.read_text())
        assert tuple(entry["inputs"].get("disabled_kernels", ())) == (tuple(named.group(1).split(",")) if named else ())


QUANTISED_STARTED = [c for c in ALL_CASES if not c.get("start_failed") and "LinearKernel for mixed-precision" in text_of(c)]


@pytest.mark.parametrize("entry", QUANTISED_STARTED, ids=[c["id"] for c in QUANTISED_STARTED])
def test_every_quantised_record_is_planned_on_the_kernel_its_engine_used(entry: dict) -> None:
    """The AWQ/GPTQ kernel the planner picks for a record (Machete, Humming or Marlin, kit.memory.weights) is the one
    vLLM logged ("Using <Kernel>LinearKernel for mixed-precision linear"). Until 2026-12-05 the Machete-disabled runs
    were planned as consumer cards on Marlin while the H200 had run Humming."""
    import re

    from kit.memory import weights

    used = re.search(r"Using (\w+)LinearKernel for mixed-precision linear", text_of(entry)).group(1)
    assert weights.mixed_precision_kernel(resolved(entry)) == used.lower()
