"""vLLM 0.34.0's KV sizing as the planner models it from the release's source (kit/data/vllm.yaml `kv_sizing`): the
extensible KV cache is on by default on CUDA, gpu_memory_utilization defaults to 1.0, the cache is sized after
warm-up and CUDA-graph capture with a margin of max(1 GiB, 0.75 x the transient peak), blocks are 64 tokens, and the
plan says it is approximate, naming the terms no 0.34 start-up has calibrated yet."""

from __future__ import annotations

import pytest

from kit.config.modelinfo import load_model_spec
from kit.core.datafiles import load_yaml
from kit.memory.inputs import GIB, find_gpu
from kit.memory.plan import PlanInputs, plan
from kit.memory.rules import rules_for

pytestmark = pytest.mark.unit

QWEN8B = "Qwen/Qwen3-8B"


def inputs(gpu: str = "h200", **kw) -> PlanInputs:
    info = find_gpu(gpu)
    return PlanInputs(model=load_model_spec(QWEN8B), gpu_name=info.key, gpu_memory_gib=info.memory_gib,
                      vllm_version="0.34.0", **kw)


def test_the_release_row_says_what_the_wheel_says():
    row = load_yaml("vllm.yaml")["versions"]["0.34.0"]
    assert (row["torch"], row["cuda"], row["pip"]) == ("2.14.0", "13.0", "vllm==0.34.0")
    rules = rules_for("0.34.0")
    assert rules.gpu_memory_utilization == 1.0 and rules.block_size == 64
    sizing = rules.kv_sizing
    assert sizing is not None
    assert (sizing.margin_floor_gib, sizing.margin_fraction, sizing.utilization_when_off) == (1.0, 0.75, 0.92)
    # 0.33 keeps its own rules: nothing of 0.34 leaks backwards
    assert rules_for("0.33.0").kv_sizing is None and rules_for("0.33.0").block_size == 16


def test_default_utilization_is_one_and_the_margin_not_the_fraction_binds():
    result = plan(inputs())
    i = result.inputs
    assert i["gpu_memory_utilization"] == 1.0 and i["extensible_kv_cache"] and i["block_size"] == 64
    total = i["gpu_memory_gib"]
    peak = result.activation_gib
    margin = max(1.0, 0.75 * peak)
    sizing = rules_for("0.34.0").kv_sizing
    assert sizing is not None
    baseline, allowance = sizing.startup_baseline_gib, sizing.post_warmup_allowance_gib
    assert baseline > 0 and allowance > 0  # measured (kit/data/calibration/h200-vllm-0.34.0)
    resident = resident_chunk_gib(i)
    non_kv = result.weights_gib + result.non_torch_gib + result.cuda_graph_gib
    # measure_kv_cache_bytes at utilization 1.0: the device term (free at vLLM's first snapshot) binds, the margin
    # comes off beside the peak, then the prompt-logprobs chunk the sizing step leaves reserved and the measured
    # post-warm-up allowance
    assert result.kv_cache_gib == pytest.approx(total - baseline - non_kv - margin - peak - resident - allowance,
                                                abs=1e-6)
    assert result.kv_reserve_gib == pytest.approx(baseline + margin + resident + allowance, abs=1e-6)
    assert result.kv_cache_tokens % 64 == 0 or result.max_concurrency > 0
    assert result.to_json()["kv_reserve_gib"] == pytest.approx(baseline + margin + resident + allowance, abs=0.01)


def resident_chunk_gib(i: dict) -> float:
    """One chunk of the sizing step's prompt logits, [min(1024, prompt), padded vocab] in bf16 (vllm/v1/worker/gpu/
    sample/prompt_logprob.py CHUNK_SIZE; Qwen3-8B's vocabulary 151,936 is a multiple of 64 already)."""
    rows = min(1024, i["max_num_batched_tokens"], i["max_model_len"])
    return rows * 151936 * 2 / GIB


def test_the_sizing_steps_resident_chunk_scales_with_the_vocabulary_and_the_prompt():
    sizing = rules_for("0.34.0").kv_sizing
    assert sizing.prompt_logprobs_chunks_resident == 1  # a measured count: the allocator keeps it, not vLLM
    terms = {t["name"]: t["gib"] for t in plan(inputs()).terms if t["figure"] == "kv_reserve"}
    chunk = [gib for name, gib in terms.items() if "prompt-logprobs chunk left reserved" in name]
    assert chunk == [pytest.approx(1024 * 151936 * 2 / GIB, abs=1e-4)]
    # a prompt shorter than CHUNK_SIZE rows holds fewer rows
    short = plan(inputs(max_num_batched_tokens=512, max_model_len=512))
    assert [t["gib"] for t in short.terms if "left reserved" in t["name"]] == [
        pytest.approx(512 * 151936 * 2 / GIB, abs=1e-4)]
    # with the extensible cache off there is no sizing warm-up, so no such term
    assert not [t for t in plan(inputs(extensible_kv_cache=False)).terms if "left reserved" in t["name"]]


def test_a_lower_utilization_binds_and_keeps_no_margin_beyond_it():
    result = plan(inputs(gpu_memory_utilization=0.9))
    non_kv = result.weights_gib + result.non_torch_gib + result.cuda_graph_gib
    allowance = rules_for("0.34.0").kv_sizing.post_warmup_allowance_gib
    resident = resident_chunk_gib(result.inputs)
    # 10 % of an H200 is more than the 1 GiB margin: the utilization's budget is the smaller term; only the chunk the
    # sizing step leaves reserved and the measured post-warm-up allowance are kept beyond it
    assert result.kv_cache_gib == pytest.approx(0.9 * result.inputs["gpu_memory_gib"] - non_kv - result.activation_gib
                                                - resident - allowance, abs=1e-6)
    assert result.kv_reserve_gib == pytest.approx(resident + allowance, abs=1e-6)


def test_turned_off_it_plans_as_0_33_did_with_the_0_92_default():
    result = plan(inputs(extensible_kv_cache=False))
    assert result.inputs["gpu_memory_utilization"] == 0.92 and not result.inputs["extensible_kv_cache"]
    non_kv = result.weights_gib + result.non_torch_gib + result.cuda_graph_gib
    assert result.kv_cache_gib == pytest.approx(0.92 * result.inputs["gpu_memory_gib"] - non_kv - result.activation_gib,
                                                abs=1e-6)
    assert "kv_reserve_gib" not in result.to_json()


def test_the_plan_is_approximate_and_names_what_is_not_calibrated():
    reason = plan(inputs()).approximate
    assert reason["value"] is True
    sizing = rules_for("0.34.0").kv_sizing
    assert sizing is not None and sizing.uncalibrated
    for term in sizing.uncalibrated:
        assert term in reason["reason"]
    assert "extensible KV cache" in reason["reason"]
    # 0.33 stays confident where it was
    assert "extensible" not in (plan(inputs().model_copy(update={"vllm_version": "0.33.0"})).approximate["reason"] or "")


def test_a_context_that_does_not_fit_gets_0_34s_own_error_text():
    tight = inputs(gpu="rtx4090", max_model_len=40960, max_num_seqs=1).model_copy(update={"gpu_memory_gib": 20.0})
    result = plan(tight)  # 16-bit 8B weights and 5.6 GiB for one 40,960-token request on a 20 GiB budget
    assert not result.fits and result.kv_cache_gib > 0
    assert "The extensible KV cache already takes all device memory left after the model, its activations, CUDA " \
           "graphs and warmup" in result.error
    assert result.error.endswith("Decreasing `max_model_len` also reduces what is needed.")


def test_the_preset_flags_that_size_the_cache_by_hand_turn_it_off():
    from kit.config.presetload import load_preset
    from kit.memory.preset_plan import extensible_kv_cache_for, plan_inputs_for

    base = ["image.vllm_version=0.34.0"]
    assert extensible_kv_cache_for(load_preset("rtx4090-awq", base)[2]) is None
    for extra in ("engine.enable_extensible_kv_cache=false", f"engine.kv_cache_memory_bytes={8 * GIB}",
                  "engine.num_gpu_blocks_override=100"):
        preset = load_preset("rtx4090-awq", [*base, extra])[2]
        assert extensible_kv_cache_for(preset) is False, extra
        assert plan_inputs_for(preset).extensible_kv_cache is False


def test_the_calibration_hooks_change_the_plan(monkeypatch):
    """`startup_baseline_gib` comes off the device's side and an emptied `uncalibrated` list drops
    the plan's "approximate": the hooks the GPU runs fill in are read, not decorative."""
    import copy

    from kit.core import datafiles
    from kit.memory import rules

    table = copy.deepcopy(datafiles.vllm_table())
    sizing = table["versions"]["0.34.0"]["defaults"]["kv_sizing"]
    sizing["startup_baseline_gib"], sizing["uncalibrated"] = sizing["startup_baseline_gib"] + 0.5, []
    before = plan(inputs())
    monkeypatch.setattr(datafiles, "vllm_table", lambda: table)
    rules._entries.cache_clear()
    rules._rules_at.cache_clear()
    try:
        after = plan(inputs())
    finally:
        monkeypatch.undo()
        rules._entries.cache_clear()
        rules._rules_at.cache_clear()
    assert before.kv_cache_gib - after.kv_cache_gib == pytest.approx(0.5, abs=1e-6)
    assert after.kv_reserve_gib == pytest.approx(before.kv_reserve_gib + 0.5, abs=1e-6)
    assert before.approximate["value"] and not after.approximate["value"]


def test_the_sizing_warm_up_peak_counts_where_it_passes_the_profiles():
    """0.34's sizing warm-up asks for prompt logprobs on one prompt of the token budget: its logits, 1024 rows at a
    time in the model dtype, twice where the model caps them (Gemma-2). vLLM logged 0.99 GiB "allocated at peak" for
    Gemma-2-9B at 2048 tokens (kit/data/calibration/h200-vllm-0.34.0/gemma2-9b-24g.log.xz) against a 0.87 GiB profile;
    for Llama-3.1-8B the profile's 0.45 GiB stayed the peak. Neither figure was fitted: the term is from the source."""
    def planned(model: str, util: float = 0.1556):
        spec = load_model_spec(model)
        result = plan(PlanInputs(model=spec, gpu_name="h200", gpu_memory_gib=139.8, vllm_version="0.34.0",
                                 dtype="bfloat16", max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=2048,
                                 gpu_memory_utilization=util, enforce_eager=True))
        extra = [t for t in result.terms if t["name"].startswith("of which: the sizing warm-up")]
        return spec, result, (float(extra[0]["gib"]) if extra else 0.0)

    gemma, result, extra = planned("google/gemma-2-9b-it")
    assert gemma.final_logit_softcapping == 30.0
    assert result.activation_gib + extra == pytest.approx(0.99, abs=0.01)
    llama, _, none = planned("meta-llama/Llama-3.1-8B-Instruct")
    assert llama.final_logit_softcapping is None and none == 0.0


def test_gemma2s_logit_cap_is_read_as_transformers_defaults_it():
    """A Gemma-2 config.json written with only the non-default values has no final_logit_softcapping: transformers'
    Gemma2Config fills in 30.0 (kit/data/model_defaults.yaml), which vLLM's LogitsProcessor applies."""
    from kit.config.modelinfo import spec_from_config

    cfg = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 3584,
           "num_attention_heads": 16, "num_hidden_layers": 42, "intermediate_size": 14336, "vocab_size": 256000,
           "max_position_embeddings": 8192}
    assert spec_from_config(cfg, name="g", source="config.json").final_logit_softcapping == 30.0
    capped = spec_from_config({**cfg, "final_logit_softcapping": None}, name="g", source="config.json")
    assert capped.final_logit_softcapping is None  # written as null: no cap
