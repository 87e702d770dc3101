"""The memory planner: calibration against real vLLM logs, KV arithmetic, defaults, errors."""

import json
import struct

import pytest
import yaml
from click.testing import CliRunner

from kit.config.modelinfo import ModelSpec, load_model_spec, spec_from_config
from kit.core.errors import PlanError
from kit.memory import plan as planner
from kit.memory import inputs as plan_inputs
from kit.memory import rules
from kit.memory import shape
from kit.memory import weights
from kit.memory.kv import kv_bytes_per_token_per_layer
from kit.memory.inputs import resolve
from kit.memory.plan import PlanInputs, plan

QWEN7B = "Qwen/Qwen2.5-7B-Instruct"
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"

TINY_LLAMA = {  # the shape of kit/config/tinymodel.py's model, as transformers writes its config.json
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "num_hidden_layers": 2,
    "vocab_size": 512, "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "float32",
}


def inputs(model: str | ModelSpec, **kw) -> PlanInputs:
    spec = load_model_spec(model) if isinstance(model, str) else model
    gpu = kw.pop("gpu", None)
    if gpu:
        info = plan_inputs.find_gpu(gpu)
        kw.setdefault("gpu_memory_gib", info.memory_gib)
        kw["gpu_name"] = info.key
    return PlanInputs(model=spec, **kw)


def tiny_spec(**overrides) -> ModelSpec:
    return spec_from_config({**TINY_LLAMA, **overrides}, name="tiny-llama", source="test")


# --------------------------------------------------------------------------- calibration (real start-up logs, kit/data/calibration.yaml)
@pytest.mark.parametrize(
    "model, kw, weights, kv_gib, tokens",
    [
        (QWEN7B, dict(gpu="h100-80gb", gpu_memory_utilization=0.95, max_model_len=8192, vllm_version="0.19.0"),
         14.25, 58.53, 1_096_000),
        (LLAMA8B, dict(gpu="h100-80gb", tensor_parallel_size=2, gpu_memory_utilization=0.95, max_model_len=8192,
                       vllm_version="0.19.0"), 7.51, 63.76, 1_044_688),
        (LLAMA8B, dict(gpu="a100-40gb", gpu_memory_utilization=0.90, enforce_eager=True, vllm_version="0.15.1",
                       entrypoint="llm"), 14.99, 19.28, 157_936),
    ],
    ids=["h100-qwen2.5-7b", "h100-llama-8b-tp2", "a100-40gb-llama-8b-eager"],
)
def test_knowledge_calibration_points(model, kw, weights, kv_gib, tokens):
    result = plan(inputs(model, **kw))
    assert result.fits
    assert result.weights_gib == pytest.approx(weights, rel=0.03)
    assert result.kv_cache_gib == pytest.approx(kv_gib, rel=0.05)
    assert result.kv_cache_tokens == pytest.approx(tokens, rel=0.05)


# Per case, the bench's median targets (bench/plan_accuracy.py): today's worst case is under 1%.
CALIBRATION_TOLERANCE = {"weights_gib": 0.03, "kv_cache_gib": 0.05, "kv_cache_tokens": 0.05}


def test_calibration_file_cases_plan_to_what_vllm_logged(repo):
    cases = yaml.safe_load((repo / "kit" / "data" / "calibration.yaml").read_text())["cases"]
    assert len(cases) >= 3
    for case in cases:
        assert case["source"] and case["actual"]
        raw = dict(case["inputs"])
        kw = {k: v for k, v in raw.items() if k != "model"}
        kw["vllm_version"] = str(kw.get("vllm_version", rules.DEFAULT_VLLM_VERSION))
        predicted = plan(inputs(raw["model"], **kw)).to_json()
        for metric, actual in case["actual"].items():
            if "compare_stage" in case and metric != "weights_gib":
                continue  # the log is one pipeline stage's; the plan reports the binding stage's KV
            assert predicted[metric] == pytest.approx(actual, rel=CALIBRATION_TOLERANCE[metric]), (case["id"], metric)


# --------------------------------------------------------------------------- KV arithmetic
def test_kv_bytes_per_token_exact_for_known_shapes():
    llama, qwen = load_model_spec(LLAMA8B), load_model_spec(QWEN7B)
    # 2 (K and V) * kv_heads * head_dim * 2 bytes, per layer
    assert kv_bytes_per_token_per_layer(llama, 1, 2) * llama.num_layers == 131_072
    assert kv_bytes_per_token_per_layer(qwen, 1, 2) * qwen.num_layers == 57_344
    small = load_model_spec("Qwen/Qwen2.5-0.5B-Instruct")
    assert kv_bytes_per_token_per_layer(small, 1, 2) * small.num_layers == 12_288  # 12 KiB


def test_tp_splits_kv_heads_then_replicates():
    llama = load_model_spec(LLAMA8B)  # 8 KV heads
    per = [kv_bytes_per_token_per_layer(llama, tp, 2) for tp in (1, 2, 4, 8, 16, 32)]
    assert per == [4096, 2048, 1024, 512, 512, 512]  # one head per rank at least: replicated past 8


def test_tp_tokens_double_when_kv_heads_split():
    one = plan(inputs(LLAMA8B, gpu_memory_gib=80, gpu_memory_utilization=0.9, max_model_len=8192, vllm_version="0.19.0"))
    two = plan(inputs(LLAMA8B, gpu_memory_gib=80, gpu_memory_utilization=0.9, max_model_len=8192, vllm_version="0.19.0",
                      tensor_parallel_size=2))
    # per rank: half the KV bytes per token, and more free memory (half the weights, more non-torch)
    assert two.kv_cache_tokens > 2 * one.kv_cache_tokens
    assert two.weights_gib == pytest.approx(one.weights_gib / 2, rel=0.01)


def test_mla_kv_is_latent_not_split_by_tp():
    ds = load_model_spec("deepseek-ai/DeepSeek-V2-Lite-Chat")
    assert ds.is_mla
    assert kv_bytes_per_token_per_layer(ds, 1, 2) == (512 + 64) * 2  # no factor 2 for K and V
    assert kv_bytes_per_token_per_layer(ds, 2, 2) == kv_bytes_per_token_per_layer(ds, 1, 2)
    result = plan(inputs(ds, gpu="h100-80gb", max_model_len=8192, vllm_version="0.19.0"))
    assert result.fits
    per_token = (512 + 64) * 2 * 27
    assert result.kv_cache_tokens == int(result.kv_cache_gib * plan_inputs.GIB // (16 * per_token)) * 16


def test_fp8_kv_cache_halves_bytes_per_token():
    kw = dict(gpu="h100-80gb", gpu_memory_utilization=0.95, max_model_len=8192, vllm_version="0.19.0")
    auto = plan(inputs(QWEN7B, **kw))
    fp8 = plan(inputs(QWEN7B, kv_cache_dtype="fp8", **kw))
    assert fp8.kv_cache_gib == pytest.approx(auto.kv_cache_gib)
    assert abs(fp8.kv_cache_tokens - 2 * auto.kv_cache_tokens) <= 16


def test_blocks_are_whole_and_concurrency_counts_blocks_per_request():
    result = plan(inputs(QWEN7B, gpu="rtx4090", max_model_len=10000, vllm_version="0.19.0"))
    blocks_per_request = -(-10000 // 16)
    num_blocks = int(round(result.max_concurrency * blocks_per_request))
    assert result.kv_cache_tokens == int(num_blocks / blocks_per_request * 10000)


# --------------------------------------------------------------------------- weights
def test_awq_weights_are_about_a_quarter_plus_unquantised_embeddings():
    dense = plan(inputs("Qwen/Qwen3-8B", gpu="h100-80gb", vllm_version="0.19.0"))
    awq = plan(inputs("Qwen/Qwen3-8B-AWQ", gpu="h100-80gb", vllm_version="0.19.0"))
    spec = load_model_spec("Qwen/Qwen3-8B")
    embeddings = 2 * spec.vocab_size * spec.hidden_size * 2 / plan_inputs.GIB  # embed + lm_head, fp16
    linear16 = dense.weights_gib - embeddings
    assert awq.weights_gib == pytest.approx(embeddings + linear16 * (0.5 + 2.5 / 128) / 2, rel=0.02)
    assert awq.inputs["quantization"] == "awq" and awq.inputs["dtype"] == "float16"


MiB = 1 << 20


@pytest.mark.parametrize(("size", "counted"), [
    (100, 512),                              # every block is a multiple of 512 B
    (6 * MiB, 6 * MiB),                      # under 10 MiB: split out of a shared 20 MiB segment
    (int(24.5 * MiB), int(24.5 * MiB)),      # Qwen2.5-7B o_proj: the 1.5 MiB tail is split off and stays free
    (259 * MiB, 260 * MiB),                  # Qwen2.5-7B gate_up: a 1 MiB tail is not split, so it is counted
    (135 * MiB, 136 * MiB),                  # Qwen2.5-14B down_proj: likewise
    (256 * MiB, 256 * MiB),                  # Qwen3-8B's matrices are whole 2 MiB multiples: nothing added
])
def test_allocator_counts_segment_tails_of_one_mib_or_less(size, counted):
    assert weights.allocator_block_bytes(size) == counted


@pytest.mark.parametrize(("size", "counted"), [
    (int(24.5 * MiB), 26 * MiB),             # 20 MiB or more: never split, the 1.5 MiB tail is counted
    (int(52.5 * MiB), 54 * MiB),             # Qwen2.5-1.5B gate_up
    (int(16.625 * MiB), int(16.625 * MiB)),  # Qwen2.5-0.5B gate_up: under 20 MiB, its 1.375 MiB tail is split off
    (6 * MiB, 6 * MiB),
])
def test_load_time_max_split_keeps_whole_segments_from_20_mib(size, counted):
    assert weights.allocator_block_bytes(size, weights.load_max_split_bytes("0.26.0")) == counted


def test_max_split_applies_to_the_releases_that_set_it():
    """Qwen2.5-7B's 28 o_proj matrices (24.5 MiB) each keep a 1.5 MiB tail under 0.26's load-time max_split;
    the 0.19 logs (14.25 GiB) show none."""
    spec = load_model_spec(QWEN7B)
    new = planner._compute(inputs(spec, gpu="h200", vllm_version="0.26.0", max_model_len=8192))[1][0].weights
    old = planner._compute(inputs(spec, gpu="h200", vllm_version="0.19.0", max_model_len=8192))[1][0].weights
    assert new - old == 28 * int(1.5 * MiB)


def test_weights_include_the_allocator_tails_of_each_layer():
    """Qwen2.5-14B on 0.26: 48 down_proj tails of 1 MiB (135 MiB in a 136 MiB segment), and the embedding's and
    lm_head's (1485 MiB each in 1486 MiB segments); its other matrices are whole 2 MiB multiples."""
    spec = load_model_spec("Qwen/Qwen2.5-14B-Instruct")
    base = dict(gpu="h200", vllm_version="0.26.0", max_model_len=8192, enforce_eager=True)
    r, stages, _ = planner._compute(inputs(spec, **base))
    counts = weights.stage_counts(spec, 1, range(spec.num_layers), True, True, 1)
    raw = weights.stage_weight_bytes(r, spec, counts, rope=True)
    assert stages[0].weights - raw == 48 * MiB + 2 * MiB


def test_machete_keeps_awq_zero_points_in_the_activation_dtype():
    """On compute capability 9.0 AWQ runs through Machete, which stores each group's zero point as fp16 (2 B)
    instead of a packed 4-bit value (0.5 B): 1.5 B more per group and output column, plus the fitted residual per
    quantised linear layer (kit/data/vllm.yaml machete_awq_residual_mib_per_linear) and whatever the allocator
    replay finds different."""
    spec = load_model_spec("Qwen/Qwen3-8B-AWQ")
    hopper = plan(inputs(spec, gpu="h200", vllm_version="0.26.0", max_model_len=8192))
    ada = plan(inputs(spec, gpu="l40s", vllm_version="0.26.0", max_model_len=8192))
    dense = load_model_spec("Qwen/Qwen3-8B")
    linear = weights.stage_counts(dense, 1, range(dense.num_layers), True, True, 1).linear
    group = spec.quantization.group_size
    residual = rules.rules_for("0.26.0").machete_awq_residual_mib_per_linear
    assert residual > 0
    expected = linear * 1.5 / group + 4 * dense.num_layers * residual * (1 << 20)
    assert (hopper.weights_gib - ada.weights_gib) * plan_inputs.GIB == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize(("gpu", "version", "kernel"), [
    ("h200", "0.33.0", "machete"), ("h100", "0.26.0", "machete"), ("rtx4090", "0.33.0", "marlin"),
    ("a100-80gb", "0.33.0", "marlin"), ("l40s", "0.26.0", "marlin")])
def test_the_mixed_precision_kernel_follows_vllms_order(gpu, version, kernel):
    """vLLM 0.33.0 kernels/linear/__init__.py: Machete on 9.0, Marlin on 7.5-8.x (Humming only outranks Marlin on
    9.0, where Machete is there first unless disabled)."""
    r, _, _ = resolve(inputs(load_model_spec("Qwen/Qwen3-8B-AWQ"), gpu=gpu, vllm_version=version, max_model_len=8192))
    assert weights.mixed_precision_kernel(r, 128) == kernel


def test_humming_is_preferred_on_9_0_where_machete_cannot_take_the_group_size():
    r, _, _ = resolve(inputs(load_model_spec("Qwen/Qwen3-8B-AWQ"), gpu="h200", vllm_version="0.33.0",
                          max_model_len=8192))
    assert weights.mixed_precision_kernel(r, 32) == "humming"
    r26, _, _ = resolve(inputs(load_model_spec("Qwen/Qwen3-8B-AWQ"), gpu="h200", vllm_version="0.26.0",
                         max_model_len=8192))
    assert weights.mixed_precision_kernel(r26, 32) == "marlin"  # humming_capability from 0.33.0 only


@pytest.mark.parametrize(("disabled", "kernel"), [
    ((), "machete"), (("MacheteLinearKernel",), "humming"),
    (("MacheteLinearKernel", "HummingLinearKernel"), "marlin"), (("HummingLinearKernel",), "machete")])
def test_vllm_disabled_kernels_are_skipped_in_vllms_order(disabled, kernel):
    """choose_mp_linear_kernel (0.33.0) skips a class VLLM_DISABLED_KERNELS names: with Machete and Humming both
    disabled an H200 runs Marlin, and plans as an RTX 4090 does at the same budget (the card-dependent Marlin
    buffers, SMs x 4 int32 of locks, are under a KiB apart)."""
    spec = load_model_spec("Qwen/Qwen3-8B-AWQ")
    r, _, _ = resolve(inputs(spec, gpu="h200", vllm_version="0.33.0", max_model_len=8192, disabled_kernels=disabled))
    assert weights.mixed_precision_kernel(r, 128) == kernel
    if kernel == "marlin":
        h200 = plan(inputs(spec, gpu="h200", gpu_memory_gib=139.8, gpu_memory_utilization=0.15, max_model_len=8192,
                           vllm_version="0.33.0", disabled_kernels=disabled))
        ada = plan(inputs(spec, gpu="rtx4090", gpu_memory_gib=139.8, gpu_memory_utilization=0.15,
                          max_model_len=8192, vllm_version="0.33.0"))
        assert (h200.weights_gib, h200.kv_cache_tokens) == (ada.weights_gib, ada.kv_cache_tokens)


def test_a_presets_runtime_env_disables_kernels_in_its_plan():
    from kit.config.presetload import load_preset
    from kit.memory.preset_plan import plan_inputs_for

    _n, _p, preset = load_preset("rtx4090-awq", ["runtime.env.VLLM_DISABLED_KERNELS=MacheteLinearKernel,X"])
    assert plan_inputs_for(preset).disabled_kernels == ("MacheteLinearKernel", "X")


def test_humming_keeps_a_lock_buffer_per_quantised_linear_and_marlin_none():
    """vllm/utils/humming.py create_humming_locks at 0.33.0: SMs x 8 int32 per layer (H200: 132 SMs, 4,224 B in a
    4,608 B block); qkv, o, gate_up and down are the quantised linears of a dense layer."""
    spec = load_model_spec("Qwen/Qwen3-8B-AWQ")
    g32 = spec.model_copy(update={"quantization": spec.quantization.model_copy(update={"group_size": 32})})
    r, _, _ = resolve(inputs(g32, gpu="h200", vllm_version="0.33.0", max_model_len=8192))
    assert weights.humming_lock_bytes(r, g32, range(g32.num_layers)) == 4 * g32.num_layers * 4608
    assert weights.humming_lock_bytes(r, spec, range(spec.num_layers)) == 0  # group 128: Machete
    r8, _, _ = resolve(inputs(spec, gpu="rtx4090", vllm_version="0.33.0", max_model_len=8192))
    assert weights.humming_lock_bytes(r8, spec, range(spec.num_layers)) == 0  # Marlin: one shared workspace


def test_gptq_zero_points_stay_on_machete_and_go_on_marlin():
    """auto_gptq.py registers and loads qzeros for a symmetric checkpoint; Machete never touches them, Marlin
    replaces them with an empty tensor (marlin_make_empty)."""
    r9, _, _ = resolve(inputs(load_model_spec("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"), gpu="h200", vllm_version="0.33.0",
                        max_model_len=8192))
    r8, _, _ = resolve(inputs(load_model_spec("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"), gpu="rtx4090", vllm_version="0.33.0",
                        max_model_len=8192))
    assert weights.mixed_precision_kept_bytes(r9, "gptq", 4, 128, 2) == pytest.approx(0.5 + 2.5 / 128)
    assert weights.mixed_precision_kept_bytes(r8, "gptq", 4, 128, 2) == pytest.approx(0.5 + 2 / 128)
    assert weights.mixed_precision_kept_bytes(r8, "awq", 4, 128, 2) == pytest.approx(0.5 + 2.5 / 128)
    assert weights.mixed_precision_kept_bytes(r9, "awq", 4, 128, 2) == pytest.approx(0.5 + 4 / 128)


def test_the_large_pool_hands_a_fragment_of_1_mib_or_less_whole():
    """CUDACachingAllocator should_split: a request under max_split_size splits its block only when more than 1 MiB
    would remain; one of max_split_size or more keeps its 2 MiB-rounded segment whole."""
    mib = 1 << 20
    pool = weights._LargePool(20 * mib)
    assert pool.alloc(6 * mib) == 6 * mib  # from a new 20 MiB segment, 14 MiB left free
    assert pool.alloc(13.5 * mib) == 14 * mib  # 0.5 MiB would remain: the whole fragment is taken
    assert pool.alloc(25 * mib) == 26 * mib  # its own segment, never split at max_split_size and above
    assert pool.counted - pool.requested == pytest.approx(1.5 * mib)


def test_tile_padding_is_zero_for_catalog_shapes_and_counts_odd_ones():
    spec = load_model_spec("Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4")
    r, _, _ = resolve(inputs(spec, gpu="rtx4090", vllm_version="0.33.0", max_model_len=8192))
    assert weights.tile_padding_bytes(r, spec, 1, range(spec.num_layers)) == 0
    odd = spec.model_copy(update={"intermediate_size": spec.intermediate_size + 32})
    assert weights.tile_padding_bytes(r, odd, 1, range(spec.num_layers)) > 0


def test_exact_weights_bytes_from_local_safetensors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    header = json.dumps({"w": {"dtype": "F32", "shape": [10, 10], "data_offsets": [0, 400]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 400)
    assert load_model_spec(str(tmp_path)).weights_bytes == 400
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1234}}))
    assert load_model_spec(str(tmp_path / "config.json")).weights_bytes == 1234


# --------------------------------------------------------------------------- version defaults
def test_cuda_graph_memory_charged_only_from_0_21():
    kw = dict(gpu="h100-80gb", gpu_memory_utilization=0.9, max_model_len=8192)
    old = plan(inputs(QWEN7B, vllm_version="0.19.0", **kw))
    # 0.21.0 has no row in the kit's tables: planned only when asked to, and then marked approximate.
    new = plan(inputs(QWEN7B, vllm_version="0.21.0", approximate_version=True, **kw))
    eager = plan(inputs(QWEN7B, vllm_version="0.21.0", enforce_eager=True, approximate_version=True, **kw))
    assert new.approximate["value"] and "nearest older known release, 0.19.0" in new.approximate["reason"]
    assert old.cuda_graph_gib == 0 and eager.cuda_graph_gib == 0
    assert 0.2 < new.cuda_graph_gib < 2
    assert new.kv_cache_gib == pytest.approx(old.kv_cache_gib - new.cuda_graph_gib, abs=0.01)
    assert eager.kv_cache_gib == pytest.approx(old.kv_cache_gib, abs=0.01)


def test_v2_model_runner_charges_no_cuda_graph_memory():
    """0.26's V2 runner (dense models, a few MoE architectures) estimates 0 for CUDA graphs; V1 (Qwen3-MoE) charges."""
    kw = dict(gpu="h200", gpu_memory_utilization=0.9, max_model_len=8192, vllm_version="0.26.0")
    dense = plan(inputs("Qwen/Qwen3-8B", **kw))
    moe = plan(inputs("Qwen/Qwen3-30B-A3B", **kw))
    assert dense.cuda_graph_gib == 0 and dense.inputs["cuda_graph_charged"] is False
    assert moe.cuda_graph_gib > 0.1 and moe.inputs["cuda_graph_charged"] is True
    version = rules.parse_version("0.26.0")
    assert rules.model_runner_for(load_model_spec("deepseek-ai/DeepSeek-V2-Lite-Chat"), version) == "V2"
    assert rules.model_runner_for(load_model_spec("Qwen/Qwen3-30B-A3B"), version) == "V1"
    assert rules.model_runner_for(load_model_spec("Qwen/Qwen3-8B"), rules.parse_version("0.25.0")) == "V1"


def test_v2_model_runner_charges_cuda_graphs_from_0_32():
    """0.32/0.33: V2 for every model, MoE included, and its graph estimate comes out of the KV budget (vllm.yaml)."""
    kw = dict(gpu="h200", gpu_memory_utilization=0.9, max_model_len=8192)
    for version in ("0.32.0", "0.33.0"):
        for model in ("Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B"):
            graphs = plan(inputs(model, vllm_version=version, **kw))
            eager = plan(inputs(model, vllm_version=version, enforce_eager=True, **kw))
            assert graphs.inputs["cuda_graph_charged"] is True and graphs.cuda_graph_gib > 0.2
            assert eager.cuda_graph_gib == 0 and eager.inputs["cuda_graph_charged"] is False
            assert rules.model_runner_for(load_model_spec(model), rules.parse_version(version)) == "V2"
    # 0.33's measured accounting: the sampler's per-request state is charged per max_num_seqs row
    few = plan(inputs("Qwen/Qwen3-8B", vllm_version="0.33.0", max_num_seqs=16, **kw))
    many = plan(inputs("Qwen/Qwen3-8B", vllm_version="0.33.0", max_num_seqs=1024, **kw))
    state = (1024 - 16) * 151936 * 4.125 / plan_inputs.GIB
    assert many.non_torch_gib - few.non_torch_gib == pytest.approx(state, rel=1e-6)
    # 0.26 keeps its own (no sampler state term)
    old = plan(inputs("Qwen/Qwen3-8B", vllm_version="0.26.0", max_num_seqs=1024, **kw))
    assert old.non_torch_gib == pytest.approx(0.22)


def test_version_default_utilization_and_batch_sizes():
    old = plan(inputs(QWEN7B, gpu="h100-80gb", vllm_version="0.19.0")).inputs
    new = plan(inputs(QWEN7B, gpu="h100-80gb", vllm_version="0.33.0")).inputs
    assert old["gpu_memory_utilization"] == 0.9 and new["gpu_memory_utilization"] == 0.92
    assert (old["max_num_batched_tokens"], old["max_num_seqs"]) == (8192, 1024)  # >= 70 GiB, not A100
    a100 = plan(inputs(QWEN7B, gpu="a100-80gb", vllm_version="0.19.0")).inputs
    assert (a100["max_num_batched_tokens"], a100["max_num_seqs"]) == (2048, 256)
    assert old["max_model_len"] == 32768 and old["block_size"] == 16
    # 160 GiB and more (B200): 16384 batched tokens for the API server as well, from 0.32 (vllm/engine/arg_utils.py)
    b200 = plan(inputs(QWEN7B, gpu="b200", vllm_version="0.33.0")).inputs
    assert (b200["max_num_batched_tokens"], b200["max_num_seqs"]) == (16384, 1024)
    b200_old = plan(inputs(QWEN7B, gpu="b200", vllm_version="0.26.0")).inputs
    assert (b200_old["max_num_batched_tokens"], b200_old["max_num_seqs"]) == (8192, 1024)


# --------------------------------------------------------------------------- CPU backend
def test_cpu_kv_cache_tokens_for_the_tiny_llama():
    tiny = tiny_spec()
    # float32 checkpoint -> bf16 on CPU: 2 layers * 2 (K, V) * 1 KV head * 64 * 2 bytes = 512 B per token
    old = plan(PlanInputs(model=tiny, device="cpu", vllm_version="0.12.0", approximate_version=True))  # 4 GiB default
    assert old.inputs["dtype"] == "bfloat16" and old.inputs["block_size"] == 128
    assert old.kv_cache_tokens == 4 * plan_inputs.GIB // 512 == 8_388_608
    one = plan(PlanInputs(model=tiny, device="cpu", cpu_kvcache_space_gib=1, vllm_version="0.19.0"))
    assert one.kv_cache_tokens == 2_097_152
    assert one.max_concurrency == pytest.approx(2_097_152 / 2048)


def test_cpu_tokens_round_down_to_whole_blocks():
    small = load_model_spec("Qwen/Qwen2.5-0.5B-Instruct")  # 12 KiB per token
    result = plan(PlanInputs(model=small, device="cpu", cpu_kvcache_space_gib=2, max_model_len=2048,
                             vllm_version="0.13.0"))
    assert result.kv_cache_tokens == 174_720  # 2 GiB / 12 KiB = 174,762.7 -> 1,365 blocks of 128


def test_a_cpu_plan_names_its_kv_reservation_not_gpu_settings():
    """The walk's `kit plan preset=cpu` said "on cpu (-)", "utilization 0.92" and "CUDA graphs 0.00 GiB": none of
    them applies to the CPU backend, whose KV cache is the fixed VLLM_CPU_KVCACHE_SPACE reservation."""
    from kit.cli.main import cli

    result = CliRunner().invoke(cli, ["plan", "preset=cpu"])
    assert result.exit_code == 0, result.output
    heading, settings = result.stdout.splitlines()[:2]
    assert heading.startswith("tiny-llama on cpu (KV cache space 1 GiB, VLLM_CPU_KVCACHE_SPACE), TP=1 PP=1")
    assert "utilization" not in settings and "max_model_len 1024" in settings
    assert "CUDA graphs" not in result.stdout and "KV cache tokens" in result.stdout
    gpu = CliRunner().invoke(cli, ["plan", "preset=rtx4090-awq"])
    assert "utilization 0.9," in gpu.stdout and "CUDA graphs" in gpu.stdout


def test_cpu_auto_size_needs_host_memory():
    with pytest.raises(PlanError, match="host memory"):
        plan(PlanInputs(model=tiny_spec(), device="cpu", vllm_version="0.19.0"))


# --------------------------------------------------------------------------- does not fit
def test_does_not_fit_gives_vllms_message_and_a_max_model_len_that_fits():
    base = inputs(LLAMA8B, gpu="rtx4090", vllm_version="0.19.0")
    result = plan(base)
    assert not result.fits
    assert result.error.startswith("To serve at least one request with the model's max seq len (131072)")
    assert "estimated maximum model length is" in result.error
    by_kind = {s["kind"]: s for s in result.suggestions}
    length = by_kind["max_model_len"]["change"]["max_model_len"]
    assert length % 16 == 0 and str(length) in result.error
    assert plan(base.model_copy(update={"max_model_len": length})).fits
    assert not plan(base.model_copy(update={"max_model_len": length + 16})).fits
    for suggestion in result.suggestions:
        if suggestion["change"]:
            assert plan(base.model_copy(update=suggestion["change"])).fits, suggestion


def test_weights_larger_than_the_gpu_say_no_memory():
    result = plan(inputs("meta-llama/Llama-3.1-70B-Instruct", gpu="rtx4090", vllm_version="0.19.0"))
    assert not result.fits
    assert result.error.startswith("No available memory for the cache blocks")
    assert any(s["kind"] == "quantized_checkpoint" for s in result.suggestions)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "model, kw, match",
    [
        (QWEN7B, dict(tensor_parallel_size=8), "attention heads \\(28\\) must be divisible"),
        ("Qwen/Qwen2.5-14B-Instruct", dict(tensor_parallel_size=5), "KV heads"),
        (LLAMA8B, dict(pipeline_parallel_size=33), "larger than the number of layers"),
        (LLAMA8B, dict(max_model_len=200_000), "greater than the derived max_model_len"),
        ("Qwen/Qwen3-8B-AWQ", dict(quantization="gptq"), "does not match"),
        (LLAMA8B, dict(quantization="awq"), "needs a checkpoint quantised"),
    ],
)
def test_impossible_inputs_are_plan_errors(model, kw, match):
    with pytest.raises(PlanError, match=match):
        plan(inputs(model, gpu="h100-80gb", **kw))


def test_vocab_must_split_evenly():
    spec = tiny_spec(num_attention_heads=6, num_key_value_heads=6, hidden_size=384, head_dim=64,
                     intermediate_size=768, vocab_size=100)  # padded to 128, not divisible by 3
    with pytest.raises(PlanError, match="vocabulary"):
        shape.check_parallelism(spec, 3, 1)


def test_missing_config_field_is_named(tmp_path):
    config = {k: v for k, v in TINY_LLAMA.items() if k != "num_hidden_layers"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(PlanError, match="num_hidden_layers"):
        load_model_spec(str(tmp_path))


def test_unknown_model_offline_says_how_to_pass_a_local_config():
    with pytest.raises(PlanError) as info:
        load_model_spec("nobody/no-such-model")
    assert "model folder or its config.json" in info.value.hint
    with pytest.raises(PlanError) as info:  # the suite runs with HF_HUB_OFFLINE=1 (tests/conftest.py)
        load_model_spec("nobody/no-such-model", hub=True)
    assert "nobody/no-such-model" in info.value.message and "HF_HUB_OFFLINE is set" in info.value.message
    assert "unset HF_HUB_OFFLINE" in info.value.hint


def test_every_catalog_model_loads_and_plans():
    from kit.config.modelinfo import catalog_ids

    ids = catalog_ids()
    for needed in ("Qwen/Qwen3-8B-AWQ", "Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen3-32B-AWQ", "Qwen/Qwen2.5-1.5B-Instruct-AWQ"):
        assert needed in ids
    for model_id in ids:
        result = plan(inputs(model_id, gpu="h200", max_model_len=4096, tensor_parallel_size=1))
        assert result.weights_gib > 0


def test_gpu_catalog_shape():
    catalog = plan_inputs.gpu_catalog()
    for key in ("v100-16gb", "t4", "l4", "a100-80gb", "h100-80gb", "rtx4090", "jetson-agx-orin-64gb"):
        assert key in catalog
    assert plan_inputs.find_gpu("H100").key == "h100-80gb"
    assert plan_inputs.find_gpu("orin").unified_memory
    with pytest.raises(PlanError, match="unknown GPU"):
        plan_inputs.find_gpu("voodoo2")


# --------------------------------------------------------------------------- CLI
def test_cli_plan_exit_codes_and_json():
    from kit.cli.plan import plan_command

    runner = CliRunner()
    ok = runner.invoke(plan_command, ["--model", "Qwen/Qwen3-8B-AWQ", "--gpu", "rtx4090", "--max-model-len", "8192",
                                      "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)["data"]
    assert set(data) == {"weights_gib", "activation_gib", "non_torch_gib", "cuda_graph_gib", "kv_cache_gib",
                         "kv_cache_tokens", "max_concurrency", "sequences_at_once", "fits", "error", "suggestions", "inputs", "approximate"}
    bad = runner.invoke(plan_command, ["--model", LLAMA8B, "--gpu", "rtx4090"])
    assert bad.exit_code == 1
    assert "To serve at least one request" in bad.stderr and "--max-model-len" in bad.stderr
    table = runner.invoke(plan_command, ["--model", QWEN7B, "--gpu-memory-gib", "79.19"])
    assert table.exit_code == 0 and "KV cache tokens" in table.stdout


def test_quantisation_needs_a_capable_gpu():
    with pytest.raises(PlanError, match="Minimum capability: 75. Current capability: 70"):
        plan(inputs("Qwen/Qwen3-8B-AWQ", gpu="v100-16gb"))
    assert plan(inputs("Qwen/Qwen3-8B-AWQ", gpu="t4", max_model_len=4096)).fits


def test_sliding_window_layers_are_laid_out_as_vllm_0_33_does_and_others_are_approximate():
    """vLLM 0.33 keeps min(window - 1 + in-flight tokens, max_model_len) tokens plus one block per request in a
    sliding-window layer (vllm/v1/kv_cache_interface.py SlidingWindowSpec) and groups full and sliding layers
    (kv_cache_planning.py): planned so on 0.33 (Gemma-2 and Phi-3.5 measured), approximate where the kit has no such
    rule (0.26) or a layer is of a kind it does not lay out."""
    windowed = tiny_spec(sliding_window=1024)
    full = plan(PlanInputs(model=tiny_spec(), gpu_memory_gib=16, max_model_len=2048))
    laid_out = plan(PlanInputs(model=windowed, gpu_memory_gib=16, max_model_len=2048))
    assert not full.approximate["value"] and not laid_out.approximate["value"]
    # 1023 + 2 x 2048 in-flight tokens reach max_model_len: every block of it and one more, per request
    assert laid_out.kv_cache_tokens == int(full.kv_cache_tokens * 128 / 129)
    older = plan(PlanInputs(model=windowed, gpu_memory_gib=16, max_model_len=2048, vllm_version="0.26.0"))
    assert older.approximate["value"] and "sliding-window" in older.approximate["reason"]
    layers = TINY_LLAMA["num_hidden_layers"]
    odd = tiny_spec(sliding_window=1024, layer_types=["linear_attention"] + ["full_attention"] * (layers - 1))
    result = plan(PlanInputs(model=odd, gpu_memory_gib=16, max_model_len=2048))
    assert result.approximate["value"]
    assert "layers that are not attention (layer_types linear_attention" in result.approximate["reason"]


@pytest.mark.parametrize(("keys", "named"), [
    (dict(attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16, mamba_expand=2),  # Jamba
     "config keys attn_layer_period, mamba_d_state, mamba_expand"),
    (dict(hybrid_override_pattern="M-M-M*-M-"), "config keys hybrid_override_pattern"),  # Nemotron-H
    (dict(layers_block_type=["mamba", "hybrid"] * 8), "config keys layers_block_type"),  # Zamba2
    (dict(layer_types=["conv", "full_attention"] * 8), "layer_types conv"),  # LFM2
])
def test_a_config_that_declares_layers_other_than_attention_is_planned_approximate_and_says_which(keys, named):
    """Issue 33: an architecture with state-space, linear-attention or convolution layers keeps no KV cache in them
    (vLLM sizes a per-request state instead), which the planner does not lay out: never a confident number, and the
    reason names what in the config declared them."""
    model = tiny_spec(**keys)
    result = plan(PlanInputs(model=model, gpu_memory_gib=16, max_model_len=2048))
    reason = result.approximate["reason"]
    assert result.approximate["value"] and f"layers that are not attention ({named}:" in reason
    assert "KV tokens are not vLLM's" in reason


def test_attention_only_configs_declare_no_other_layers():
    assert tiny_spec().non_attention_layers is None
    assert load_model_spec("google/gemma-2-9b-it").non_attention_layers is None  # sliding and full attention only
    assert "not attention" not in str(plan(inputs(QWEN7B, gpu="rtx4090")).approximate.get("reason"))


def test_gemma2_groups_its_full_and_sliding_layers():
    from kit.memory.kv import kv_layout

    gemma = load_model_spec("google/gemma-2-9b-it")
    assert gemma.tie_word_embeddings and gemma.layer_types.count("sliding_attention") == 21
    r = resolve(PlanInputs(model=gemma, gpu_name="rtx4090", max_model_len=8192, max_num_batched_tokens=2048,
                           max_num_seqs=256))[0]
    per_layer = 2 * 8 * 256 * 2
    layout = kv_layout(gemma, r, per_layer, gemma.num_layers)
    # two groups of 21 layers; a block spans one layer of each; 512 full blocks + (4095 + 4096 tokens -> 512) + 1
    assert layout is not None and (layout.groups, layout.sliding_groups) == (2, 1)
    assert layout.bytes_per_block == 16 * per_layer * 21 and layout.blocks_per_request == 512 + 513


def test_a_sliding_window_model_too_long_for_its_cache_is_told_vllms_estimate_and_offered_a_length_that_fits():
    """vLLM's estimate_max_model_len searches the lengths with every layer's own need (a sliding-window layer holds
    min(window - 1 + in-flight tokens, length) tokens and one block more), so for Gemma-2 it is not the budget over
    the bytes per token of all 42 layers. The kit printed that (6,576 on an RTX 4090 at 8,192 tokens), and since a
    length of 6,576 does not fit, offered no shorter context at all."""
    asked = PlanInputs(model=load_model_spec("google/gemma-2-9b-it"), gpu_name="rtx4090", dtype="bfloat16",
                       max_model_len=8192, max_num_seqs=16, gpu_memory_utilization=0.9)
    result = plan(asked)
    longest = planner.largest_max_model_len(asked)
    assert not result.fits and f"the estimated maximum model length is {longest}." in result.error
    assert plan(asked.model_copy(update={"max_model_len": longest})).fits
    assert not plan(asked.model_copy(update={"max_model_len": longest + 1})).fits
    assert {"max_model_len": longest} in [s["change"] for s in result.suggestions]
    # the whole-layer formula it replaced: one block of every layer per 16 tokens
    per_token = 2 * 8 * 256 * 2 * 42
    assert longest < int(result.kv_cache_gib * 2**30 // (16 * per_token)) * 16


@pytest.mark.parametrize(("version", "reserved"), [("0.33.0", True), ("0.26.0", False)])
def test_one_request_must_fit_the_budget_less_the_null_block_from_0_32(version, reserved):
    """vLLM 0.32+ checks one request of max_model_len against the KV budget less the block BlockPool holds back
    (kv_cache_planning.py `check_enough_kv_cache_memory`, "Reserve the null block"): a length whose blocks fill the
    budget exactly is refused there, not before (kit/data/vllm.yaml kv_check_reserves_null_block)."""
    asked = inputs(QWEN7B, gpu="rtx4090", vllm_version=version, max_model_len=4096, gpu_memory_utilization=0.72)
    whole = plan(asked, suggest=False)
    block = whole.inputs["block_size"]
    per_block = block * kv_bytes_per_token_per_layer(asked.model, 1, 2) * asked.model.num_layers
    blocks = int(whole.kv_cache_gib * 2**30 // per_block)
    filling = asked.model_copy(update={"max_model_len": blocks * block})
    assert plan(filling, suggest=False).fits is not reserved
    assert planner.largest_max_model_len(asked) == (blocks - reserved) * block


# --------------------------------------------------------------------------- releases outside the tables
@pytest.mark.parametrize(("version", "where"), [("0.6.4", "older than the oldest"), ("0.20.0", "between two"),
                                                ("0.40.0", "newer than the newest")])
def test_a_release_outside_the_tables_is_refused(version, where):
    with pytest.raises(PlanError) as caught:
        plan(inputs(QWEN7B, vllm_version=version, gpu="h100-80gb"))
    message = caught.value.message
    assert f"vLLM {version} is not in the kit's tables ({where}" in message
    for known in rules.planned_versions():
        assert known in message
    assert "--approximate-version" in caught.value.hint


def test_known_releases_are_planned_exactly():
    assert "0.33.0" in rules.planned_versions() and "0.19.0" in rules.planned_versions()
    assert not plan(inputs(QWEN7B, vllm_version="0.19", gpu="h100-80gb")).approximate["value"]  # 0.19 is 0.19.0


def test_approximate_version_plans_with_the_nearest_older_rules():
    result = plan(inputs(QWEN7B, vllm_version="0.6.4", gpu="h100-80gb", approximate_version=True))
    assert result.approximate["value"]
    assert "vLLM 0.6.4 is not in the kit's tables (older than the oldest" in result.approximate["reason"]
    between = plan(inputs(QWEN7B, vllm_version="0.30.0", gpu="h100-80gb", approximate_version=True))
    assert "nearest older known release, 0.26.0" in between.approximate["reason"]


def test_cli_refuses_0_6_4_and_plans_it_only_as_approximate():
    from click.testing import CliRunner

    from kit.cli.main import cli

    args = ["plan", "--model", QWEN7B, "--gpu", "h100-80gb", "--vllm-version", "0.6.4"]
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 1 and "not in the kit's tables" in refused.stderr and "0.33.0" in refused.stderr
    approx = CliRunner().invoke(cli, [*args, "--approximate-version", "--json"])
    assert approx.exit_code in (0, 1), approx.output
    data = json.loads(approx.stdout)["data"]
    assert data["approximate"]["value"] and "0.6.4" in data["approximate"]["reason"]
    with_preset = CliRunner().invoke(cli, ["plan", "preset=rtx4090-awq", "--approximate-version"])
    assert with_preset.exit_code == 2 and "--approximate-version" in with_preset.stderr


# --------------------------------------------------------------------------- batch sizes as vLLM settles them
def test_batch_sizes_are_settled_as_vllm_settles_them():
    """vllm/engine/arg_utils.py `_set_default_max_num_seqs_and_batched_tokens_args` (0.32.0, 0.33.0) on an RTX 4090
    (defaults 2048 tokens, 256 sequences): throughput mode doubles what was not given; a defaulted budget is raised
    to max_model_len with chunked prefill off and capped at max_num_seqs x max_model_len; a defaulted max_num_seqs is
    capped at the budget. Before 0.32 the kit takes none of it (not read there)."""
    def settled(version="0.33.0", **kw):
        r = resolve(inputs(QWEN7B, gpu="rtx4090", vllm_version=version, **kw))[0]
        return r.max_num_batched_tokens, r.max_num_seqs

    assert settled(max_model_len=8192) == (2048, 256)
    assert settled(max_model_len=8192, performance_mode="throughput") == (4096, 512)
    assert settled(max_model_len=8192, performance_mode="throughput", max_num_seqs=64) == (4096, 64)
    assert settled(max_model_len=8192, performance_mode="throughput", max_num_batched_tokens=1024) == (1024, 512)
    assert settled(max_model_len=256, max_num_seqs=4) == (1024, 4)  # 4 x 256 < 2048
    assert settled(max_model_len=8192, max_num_batched_tokens=128) == (128, 128)
    assert settled(max_model_len=8192, enable_chunked_prefill=False) == (8192, 256)
    assert settled(max_model_len=8192, performance_mode="throughput", version="0.26.0") == (2048, 256)
    assert settled(max_model_len=256, max_num_seqs=4, version="0.26.0") == (2048, 4)


@pytest.mark.parametrize("kw, message, field", [
    (dict(max_num_seqs=32, max_num_batched_tokens=8),
     "max_num_batched_tokens (8) must be greater than or equal to max_num_seqs (32).", "engine.max_num_batched_tokens"),
    (dict(max_num_seqs=4096), "max_num_batched_tokens (2048) must be greater than or equal to max_num_seqs (4096).",
     "engine.max_num_seqs"),
    (dict(enable_chunked_prefill=False, max_num_batched_tokens=4096),
     "max_num_batched_tokens (4096) is smaller than max_model_len (8192).", "engine.max_num_batched_tokens"),
])
def test_batch_sizes_vllm_refuses_are_refused_with_the_field(kw, message, field):
    """SchedulerConfig.verify_max_model_len's refusals (read at 0.33.0), in vLLM's words, with the field to change."""
    with pytest.raises(PlanError) as error:
        resolve(inputs(QWEN7B, gpu="rtx4090", max_model_len=8192, **kw))
    assert error.value.message.startswith(message)
    assert error.value.field == field


def test_a_token_budget_too_big_for_the_card_gets_the_largest_that_fits():
    """A budget copied from a datacenter card (65,536 on two RTX 3090s at TP 2): the fix names the largest budget
    that fits, proven by planning it and one more."""
    base = inputs("Qwen/Qwen2.5-14B-Instruct", gpu="rtx3090", tensor_parallel_size=2, dtype="float16",
                  max_model_len=4096, max_num_seqs=32, gpu_memory_utilization=0.9, max_num_batched_tokens=65536)
    result = plan(base)
    assert not result.fits
    [fix] = [s for s in result.suggestions if s["kind"] == "max_num_batched_tokens"]
    budget = fix["change"]["max_num_batched_tokens"]
    assert 32 <= budget < 65536
    assert plan(base.model_copy(update={"max_num_batched_tokens": budget})).fits
    assert not plan(base.model_copy(update={"max_num_batched_tokens": budget + 1})).fits
