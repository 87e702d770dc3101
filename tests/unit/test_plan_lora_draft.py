"""The planner's LoRA buffers and speculative draft terms, against numbers worked out by hand."""

from __future__ import annotations

import json

import pytest

from kit.config.modelinfo import load_model_spec
from kit.config.presetload import load_preset
from kit.memory.inputs import GIB, DraftInputs, LoraInputs, PlanInputs
from kit.memory.plan import plan
from kit.memory.preset_plan import plan_preset

pytestmark = pytest.mark.unit

LLAMA = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")  # 32 layers, H 4096, 32/8 heads, hd 128, I 14336, V 128256
QWEN2 = load_model_spec("Qwen/Qwen2.5-7B-Instruct")  # Qwen2ForCausalLM: no embedding_modules in vLLM
BASE = dict(gpu_memory_gib=79.19, gpu_memory_utilization=0.9, max_model_len=8192, vllm_version="0.33.0")


def _pair(model, tp=1, **extra):
    without = plan(PlanInputs(model=model, tensor_parallel_size=tp, **BASE))
    with_ = plan(PlanInputs(model=model, tensor_parallel_size=tp, **BASE, **extra))
    return without, with_


def test_lora_buffers_llama_tp1_by_hand():
    # Per layer and slot, rank 16: qkv A 3*16*4096 + B 16*(4096+1024+1024) = 294,912; o_proj 16*4096*2 = 131,072;
    # gate_up A 2*16*4096 + B 16*2*14336 = 589,824; down 16*14336 + 16*4096 = 294,912 -> 1,310,720.
    # 32 layers x 4 slots = 167,772,160; embed_tokens and lm_head 4 * 16 * (128256 + 4096) each = 8,470,528.
    elements = 32 * 4 * 1_310_720 + 2 * 8_470_528
    without, with_ = _pair(LLAMA, lora=LoraInputs(max_loras=4))
    assert with_.lora_gib * GIB == pytest.approx(elements * 2)  # bf16 (lora_dtype auto = model dtype)
    assert (with_.weights_gib - without.weights_gib) * GIB == pytest.approx(elements * 2)
    assert (without.kv_cache_gib - with_.kv_cache_gib) * GIB == pytest.approx(elements * 2)
    assert with_.to_json()["lora_gib"] == round(elements * 2 / GIB, 3)
    assert "lora_gib" not in without.to_json()


def test_lora_buffers_split_by_tensor_parallel_but_not_the_vocab_ones():
    # TP 2 per layer and slot: qkv 3*16*4096 + 16*(2048+512+512) = 245,760; o_proj 16*2048 + 16*4096 = 98,304;
    # gate_up 2*16*4096 + 16*2*7168 = 360,448; down 16*7168 + 16*4096 = 180,224 -> 884,736.
    elements = 32 * 4 * 884_736 + 2 * 8_470_528
    _, with_ = _pair(LLAMA, tp=2, lora=LoraInputs(max_loras=4))
    assert with_.lora_gib * GIB == pytest.approx(elements * 2)


def test_lora_rank_and_slots_scale_linearly_and_cpu_loras_stay_off_the_gpu():
    _, one = _pair(LLAMA, lora=LoraInputs(max_loras=1, max_lora_rank=8))
    _, many = _pair(LLAMA, lora=LoraInputs(max_loras=3, max_lora_rank=64))
    assert many.lora_gib == pytest.approx(one.lora_gib * 3 * 8)
    _, cached = _pair(LLAMA, lora=LoraInputs(max_loras=1, max_lora_rank=8, max_cpu_loras=64))
    assert cached.lora_gib == one.lora_gib and cached.kv_cache_tokens == one.kv_cache_tokens


def test_lora_on_an_architecture_without_embedding_modules_counts_linear_layers_only():
    # Qwen2.5-7B: 28 layers, H 3584, 28/4 heads, hd 128, I 18944. Per layer and slot, rank 16:
    # qkv 3*16*3584 + 16*(3584+512+512) = 245,760; o_proj 2*16*3584 = 114,688;
    # gate_up 2*16*3584 + 16*2*18944 = 720,896; down 16*18944 + 16*3584 = 360,448 -> 1,441,792.
    _, with_ = _pair(QWEN2, lora=LoraInputs())
    assert with_.lora_gib * GIB == pytest.approx(28 * 1_441_792 * 2)
    assert "not in kit/data/lora.yaml" in with_.approximate["reason"]


def test_draft_weights_and_kv_share_the_block_pool():
    # A draft with 4 layers, 2 KV heads of 64 dims: 2 * 2 * 64 * 2 B * 4 layers = 2,048 B per token, added to the
    # target's 2 * 8 * 128 * 2 B * 32 layers = 131,072 B; its checkpoint bytes (1 GiB) split over TP 2.
    draft = LLAMA.model_copy(update={"name": "tiny-draft", "num_layers": 4, "num_kv_heads": 2, "head_dim": 64,
                                     "num_attention_heads": 2, "weights_bytes": GIB})
    without, with_ = _pair(LLAMA, tp=2, draft=DraftInputs(ref="org/tiny-draft", spec=draft))
    assert with_.draft_weights_gib == pytest.approx(0.5)
    assert with_.weights_gib - without.weights_gib == pytest.approx(0.5)
    per_token_tp2 = 2 * 4 * 128 * 2 * 32 + 2 * 1 * 64 * 2 * 4  # KV heads per rank: 8/2 and max(2/2, 1)
    assert with_.kv_cache_tokens == int(with_.kv_cache_gib * GIB // (16 * per_token_tp2)) * 16
    assert with_.kv_cache_tokens < without.kv_cache_tokens
    assert not with_.approximate["value"]


def test_unknown_draft_and_eagle_drafts_are_marked_approximate():
    _, unknown = _pair(LLAMA, draft=DraftInputs(ref="org/not-in-catalog"))
    assert unknown.approximate["value"] and "org/not-in-catalog" in unknown.approximate["reason"]
    assert unknown.draft_weights_gib == 0
    _, eagle = _pair(LLAMA, draft=DraftInputs(ref="org/eagle", method="eagle3", spec=LLAMA.model_copy(
        update={"num_layers": 1})))
    assert "upper bound" in eagle.approximate["reason"]


def test_preset_engine_flags_reach_the_planner():
    spec = json.dumps({"model": "Qwen/Qwen2.5-0.5B-Instruct", "num_speculative_tokens": 4})
    _, _, preset = load_preset("rtx4090-awq", ["engine.enable_lora=true", "engine.max_loras=2",
                                               "engine.max_lora_rank=32", f"engine.speculative_config={spec}"])
    result, problems = plan_preset("presets/rtx4090-awq.yaml", preset)
    assert not problems and result is not None
    assert result.inputs["lora"]["max_loras"] == 2 and result.inputs["lora"]["max_lora_rank"] == 32
    assert result.inputs["draft"] == {"model": "Qwen/Qwen2.5-0.5B-Instruct", "method": None, "known": True}
    assert result.lora_gib > 0 and result.draft_weights_gib > 0
    _, _, plain = load_preset("rtx4090-awq", ["engine.max_loras=2"])  # no enable_lora: vLLM builds no LoRA config
    assert "lora" not in plan_preset("p", plain)[0].inputs
