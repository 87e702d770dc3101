"""Rules that had drifted from vLLM 0.33 (issue 34), one test each, each against the upstream line it follows.

Read in the vllm-0.33.0 wheel (2026-12-03); the file and line are in each test's docstring and in the data file
that holds the rule.
"""

from __future__ import annotations

import pytest

from kit.config.modelinfo import load_model_spec
from kit.config.presetload import load_preset
from kit.core.datafiles import load_yaml
from kit.core.releaserules import quantization_min_cc
from kit.deploy.compat import check_compat, gpu_rules
from kit.memory import rules
from kit.memory.activation import activation_terms
from kit.memory.cudagraph import cuda_graph_counts
from kit.memory.inputs import PlanInputs, resolve

pytestmark = pytest.mark.unit


def test_cpu_serve_defaults_to_128_sequences_per_rank():
    """vllm/engine/arg_utils.py:3028-3037 get_batch_defaults: on the CPU, `vllm serve` takes 2048 x world batched
    tokens and 128 x world sequences, the LLM class 4096 and 256 (0.32 and 0.33)."""
    v = rules.parse_version("0.33.0")
    assert rules.batch_defaults(v, "cpu", None, "", "serve") == (2048, 128)
    assert rules.batch_defaults(v, "cpu", None, "", "llm") == (4096, 256)
    assert rules.batch_defaults(v, "cpu", None, "", "serve", world_size=2) == (4096, 256)
    assert rules.batch_defaults(rules.parse_version("0.32.0"), "cpu", None, "", "serve") == (2048, 128)
    # The GPU tiers are untouched.
    assert rules.batch_defaults(v, "cuda", 23.6, "NVIDIA GeForce RTX 4090", "serve") == (2048, 256)
    # And the plan of the cpu preset (vLLM 0.32.0, no max_num_seqs set) takes it.
    spec = load_model_spec("Qwen/Qwen2.5-0.5B-Instruct")
    resolved, _, _ = resolve(PlanInputs(model=spec, device="cpu", cpu_kvcache_space_gib=1, vllm_version="0.32.0",
                                        tensor_parallel_size=2))
    assert (resolved.max_num_batched_tokens, resolved.max_num_seqs) == (4096, 256)


def _sampler_term_names(gpu: str) -> set[str]:
    spec = load_model_spec("Qwen/Qwen3-8B")
    resolved, _, _ = resolve(PlanInputs(model=spec, gpu_name=gpu, vllm_version="0.33.0"))
    return {t.name for t in activation_terms(resolved, spec, range(spec.num_layers), last=True)}


def test_flashinfer_sampler_memory_only_where_vllm_uses_it():
    """vllm/v1/sample/ops/topk_topp_sampler.py:102-139 flashinfer_sampler_supported: compute capability 8.0-12.1
    (FlashInferBackend.supports_compute_capability, vllm/v1/attention/backends/flashinfer.py:696-704) and more than
    16 SMs; elsewhere its top-k mask and probabilities are never allocated."""
    flashinfer = {"top-k masked logits", "top-k probabilities"}
    assert flashinfer <= _sampler_term_names("h200")          # 9.0, 132 SMs
    assert flashinfer <= _sampler_term_names("rtx5090")       # 12.0, 170 SMs
    assert not flashinfer & _sampler_term_names("t4")         # 7.5: below the backend's floor
    assert not flashinfer & _sampler_term_names("jetson-agx-orin-64gb")  # 8.7 but exactly 16 SMs
    # The catalog holds every GPU's SM count, from which the 16-SM rule reads.
    assert all(isinstance(gpu.get("sm_count"), int) for gpu in load_yaml("gpus.yaml")["gpus"].values())


def test_cuda_graph_sizes_are_capped_by_batched_tokens_and_interactivity_captures_1_to_32():
    """vllm/config/vllm.py _set_cudagraph_sizes: min(2 x max_num_seqs, 512) (line 2468), then capped by
    max_num_batched_tokens (line 2552); interactivity captures 1-32 (lines 2573-2577); max_num_batched_tokens
    (line 2595) and max_num_seqs (line 2549) join the list."""
    # The calibrated cases keep their counts: 51 + 35 (256 seqs), 51 + 51 (1024), 7 + 5 (16 seqs).
    assert cuda_graph_counts(256, "0.33.0", 2048) == (51, 35)
    assert cuda_graph_counts(1024, "0.33.0", 8192) == (51, 51)
    assert cuda_graph_counts(16, "0.33.0", 2048) == (7, 5)
    # 64 batched tokens: nothing above 64 is captured (1, 2, 4, 8..64).
    assert cuda_graph_counts(256, "0.33.0", 64) == (11, 11)
    # interactivity: every size 1-32, then 40, 48, ... as before.
    assert cuda_graph_counts(16, "0.33.0", 2048, "interactivity") == (32, 16)
    assert cuda_graph_counts(256, "0.33.0", 2048, "interactivity") == (51 - 4 + 32 - 3, 35 - 4 + 32 - 3)
    # max_num_seqs itself (100 is not on the grid of 8).
    assert cuda_graph_counts(100, "0.33.0", 2048) == (29, 16)
    # 0.26 was not re-read: its count is the grid alone.
    assert cuda_graph_counts(256, "0.26.0", 64) == (51, 35)


def test_gptq_marlin_floor_is_auto_gptq_config_at_0_33():
    """vllm/model_executor/layers/quantization/__init__.py:168-169 maps gptq and gptq_marlin to AutoGPTQConfig,
    whose get_min_capability() returns 60 (auto_gptq.py:182-183)."""
    assert quantization_min_cc("gptq_marlin", "0.33.0") == "6.0"
    assert quantization_min_cc("gptq", "0.33.0") == "6.0"
    assert quantization_min_cc("gptq_marlin", "0.26.0") == "7.5"  # GPTQMarlinConfig then
    rule = load_yaml("compat.yaml")["quantization"]["gptq_marlin"]
    assert "AutoGPTQConfig" in rule["source"] and "auto_gptq.py:182-183" in rule["source"]


def test_bf16_check_is_cited_where_vllm_makes_it():
    """vllm/platforms/cuda.py:638-656 check_if_supports_dtype raises 'Bfloat16 is only supported on GPUs with compute
    capability of at least 8.0' (called from gpu_worker.py:498), not config/model.py's _check_valid_dtype."""
    bf16 = load_yaml("compat.yaml")["dtype"]["bfloat16"]
    assert bf16["source"].startswith("vllm/platforms/cuda.py:638-656 CudaPlatformBase.check_if_supports_dtype")
    from kit.core.datafiles import gpu_catalog

    rows = gpu_rules(gpu_catalog()["t4"], vllm_version="0.33.0", dtype="bfloat16", checkpoint_dtype="bfloat16",
                     quantization=None, quantization_set=False, kv_cache_dtype=None)
    assert [(r[0], r[1]) for r in rows] == [("error", "engine.dtype")]


def test_disable_log_requests_is_accepted_by_0_33_not_called_removed():
    """vllm/utils/argparse_utils.py:121-127 pairs --enable-x with --disable-x, so 0.33 takes --disable-log-requests
    as enable_log_requests false (vllm/engine/arg_utils.py:3259-3262)."""
    from kit.config.flags import check_engine
    from kit.deploy.upgrade import flag_changes

    [problem] = check_engine({"disable_log_requests": True}, "0.33.0")
    assert problem.message == "is the command-line form of enable_log_requests: false"
    [change] = [c for c in flag_changes({"disable_log_requests": True}, "0.16.0", "0.33.0")
                if c.flag == "disable_log_requests"]
    assert "removed" not in change.message and "accepts it" in change.message
    assert change.hint == "write engine.enable_log_requests: false"  # not enable_log_requests (true)
    # 0.32.0's parser has no such option: there it is a rename.
    [change] = [c for c in flag_changes({"disable_log_requests": True}, "0.16.0", "0.32.0")
                if c.flag == "disable_log_requests"]
    assert change.message.startswith("renamed by vLLM 0.32.0")


@pytest.mark.parametrize("preset", ["cpu", "cpu-embed", "rtx4090-awq", "rtx3090x2-fp16", "a100x8"])
def test_bitsandbytes_is_refused_from_0_32_on_every_preset(preset):
    """QuantizationMethods (vllm/model_executor/layers/quantization/__init__.py:15-49) has no bitsandbytes from 0.32:
    refused on the CPU presets as on the GPU ones."""
    _, _, loaded = load_preset(preset, ["engine.quantization=bitsandbytes"])
    errors, _ = check_compat("preset", loaded)
    [problem] = [p for p in errors if p.where.endswith("engine.quantization")]
    assert "vLLM removed quantization method bitsandbytes in 0.32.0" in problem.message
    # On the CPU no older release is suggested: none of them has a CPU build.
    assert ("image.vllm_version" in problem.hint) == (loaded.hardware.gpu is not None)
