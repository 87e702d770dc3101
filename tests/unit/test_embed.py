"""Pooling servers (issue 13, point 4): the runner vLLM picks, the planner's pooling terms, the smoke checks a
pooling server gets, and an embedding server beside a chat server in one compose stack."""

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.modelinfo import load_model_spec, spec_from_config
from kit.config.pooling import pooling_profile, resolve_runner
from kit.core.datafiles import PRESETS_DIR
from kit.core.errors import PlanError, PresetError
from kit.deploy.pipeline import prepare
from kit.memory import activation
from kit.memory import inputs as plan_inputs
from kit.memory import shape
from kit.memory.plan import PlanInputs, plan
from kit.run.smoke import (
    CHAT,
    COMPLETION,
    EMBEDDINGS,
    RERANK,
    Check,
    format_table,
    kv_check_skip,
    select_api_checks,
)

QWEN3_SHAPE = {  # a Qwen3 decoder as the tiny embedding model has it, untied so the LM head counts
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 128, "intermediate_size": 256,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "num_hidden_layers": 2,
    "vocab_size": 4096, "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
BERT_SHAPE = {  # bge-small-en-v1.5's shape (config.json): an encoder, pooled by vLLM's BertEmbeddingModel
    "architectures": ["BertModel"], "model_type": "bert", "hidden_size": 384, "intermediate_size": 1536,
    "num_attention_heads": 12, "num_hidden_layers": 12, "vocab_size": 30522, "max_position_embeddings": 512,
    "torch_dtype": "float32",
}


def spec(shape: dict, **overrides):
    return spec_from_config({**shape, **overrides}, name="test", source="test")


def cpu_plan(model, **kw):
    kw.setdefault("max_model_len", 1024)
    return plan(PlanInputs(model=model, device="cpu", cpu_kvcache_space_gib=1, vllm_version="0.32.0", **kw))


def gpu_plan(model, **kw):
    return plan(PlanInputs(model=model, device="cuda", gpu_memory_gib=24, vllm_version="0.16.0",
                           max_model_len=512, **kw))


def gpu_plan26(model, **kw):
    kw = {"max_num_batched_tokens": 2048, "max_num_seqs": 256, **kw}
    return plan(PlanInputs(model=model, device="cuda", gpu_memory_gib=24, vllm_version="0.26.0",
                           max_model_len=512, **kw))


# --------------------------------------------------------------------------- which runner, which task
@pytest.mark.parametrize("architecture, runner, convert, expected", [
    ("Qwen3ForCausalLM", None, None, ("generate", None)),
    ("Qwen3ForCausalLM", "pooling", None, ("pooling", "embed")),  # Qwen3-Embedding: converted to embed
    ("Qwen3ForCausalLM", "pooling", "classify", ("pooling", "classify")),
    ("BertModel", None, None, ("pooling", "embed")),
    ("BertForSequenceClassification", "auto", "auto", ("pooling", "classify")),
    ("XLMRobertaModel", None, None, ("pooling", "embed")),
])
def test_runner_and_task_as_vllm_resolves_them(architecture, runner, convert, expected):
    assert resolve_runner(architecture, runner, convert) == expected


def test_profile_knows_encoder_only_and_score_routes():
    bert = pooling_profile({}, spec(BERT_SHAPE))
    assert (bert.task, bert.encoder_only, bert.score) == ("embed", True, "bi-encoder")
    decoder = pooling_profile({"runner": "pooling"}, spec(QWEN3_SHAPE))
    assert (decoder.task, decoder.encoder_only) == ("embed", False)
    bidirectional = pooling_profile({"runner": "pooling"}, spec(QWEN3_SHAPE, is_causal=False))
    assert bidirectional.encoder_only
    one_label = spec(BERT_SHAPE, architectures=["BertForSequenceClassification"], id2label={"0": "LABEL_0"})
    assert pooling_profile({}, one_label).score == "cross-encoder"
    two_labels = spec(BERT_SHAPE, architectures=["BertForSequenceClassification"], num_labels=2)
    assert pooling_profile({}, two_labels).score is None
    assert not pooling_profile({}, spec(QWEN3_SHAPE)).pooling


# --------------------------------------------------------------------------- planner
def test_decoder_embedder_keeps_its_kv_cache_and_drops_sampler_and_lm_head():
    model = spec(QWEN3_SHAPE)
    gen, pool = gpu_plan(model), gpu_plan(model, runner="pooling")
    assert pool.inputs["runner"] == "pooling" and pool.inputs["pooling_task"] == "embed"
    # The LM head (vocab x hidden, bf16) is never allocated by vLLM's pooling adapter.
    lm_head = shape.padded_vocab(4096) * 128 * 2 / plan_inputs.GIB
    assert gen.weights_gib - pool.weights_gib == pytest.approx(lm_head, rel=1e-9)
    # No dummy sampler run: the peak is the forward pass over 2048 batched tokens (residual, normed state, MLP).
    sampler = 256 * 4096 * activation.sampler_bytes_per_logit("0.16.0", "bfloat16") / plan_inputs.GIB
    forward = 2048 * (2 * 128 + 3 * 256) * 2 / plan_inputs.GIB
    assert gen.activation_gib == pytest.approx(sampler) and pool.activation_gib == pytest.approx(forward)
    assert forward < sampler
    # From vLLM 0.26 (measured accounting, kit/data/calibration/h200-vllm-0.26.0/): the same rule, the pooling
    # runner's peak is the forward pass alone; both carry the fixed and compile terms.
    gen26, pool26 = gpu_plan26(model), gpu_plan26(model, runner="pooling")
    sampler26 = 256 * 4096 * activation.sampler_bytes_per_logit("0.26.0", "bfloat16") / plan_inputs.GIB
    forward26 = 2048 * (4 * 128 + 3 * 256) * 2 / plan_inputs.GIB
    assert gen26.activation_gib - pool26.activation_gib == pytest.approx(max(sampler26, forward26) - forward26)
    long_rows = gpu_plan26(model, max_num_seqs=2048), gpu_plan26(model, runner="pooling", max_num_seqs=2048)
    sampler26 *= 2048 / 256  # 2048 rows of logits outweigh the forward pass: only the generating runner pays
    assert long_rows[0].activation_gib - long_rows[1].activation_gib == pytest.approx(sampler26 - forward26)
    assert sampler26 > forward26
    # A decoder keeps a KV cache: on the CPU backend it is exactly VLLM_CPU_KVCACHE_SPACE, as for generation.
    assert cpu_plan(model, runner="pooling").kv_cache_tokens == cpu_plan(model).kv_cache_tokens > 0


def test_tied_embedder_weights_unchanged():
    model = spec(QWEN3_SHAPE, tie_word_embeddings=True)
    assert gpu_plan(model, runner="pooling").weights_gib == pytest.approx(gpu_plan(model).weights_gib)


def test_encoder_only_model_has_no_kv_cache():
    result = cpu_plan(spec(BERT_SHAPE), max_num_seqs=8, max_model_len=512)
    assert result.fits and result.error is None
    assert result.kv_cache_tokens == 0 and result.kv_cache_gib == 0
    assert result.max_concurrency == 8  # the scheduler's limit, not the cache's
    assert result.inputs["encoder_only"] is True
    gpu = gpu_plan(spec(BERT_SHAPE))
    assert gpu.fits and gpu.kv_cache_tokens == 0


def test_tiny_embed_model_shape_is_known_before_it_exists():
    tiny = load_model_spec("kit:tiny-qwen3-embed")
    assert (tiny.architecture, tiny.hidden_size, tiny.head_dim, tiny.tie_word_embeddings, tiny.qk_norm) == \
        ("Qwen3ForCausalLM", 128, 64, True, True)
    with pytest.raises(PlanError, match="no such test model"):
        load_model_spec("kit:tiny-bert")


def test_cpu_embed_preset_plans_as_a_pooling_decoder():
    prepared = prepare("cpu-embed")
    assert prepared.report.plan.inputs["runner"] == "pooling"
    assert prepared.report.plan.kv_cache_tokens == 2_097_152  # 1 GiB / (2 layers x 2 x 64 x 2 bytes)
    args = prepared.deployment.serve.serve_args
    assert args[args.index("--runner") + 1] == "pooling" and args[args.index("--convert") + 1] == "embed"


# --------------------------------------------------------------------------- smoke check selection
def rows(profile):
    return dict(select_api_checks(profile))


def test_generating_server_gets_completion_checks_only():
    selected = rows(pooling_profile({}, spec(QWEN3_SHAPE)))
    assert selected == {COMPLETION: None, CHAT: None}
    assert kv_check_skip(pooling_profile({}, spec(QWEN3_SHAPE))) is None


def test_embedding_server_skips_completions_with_the_reason():
    selected = rows(pooling_profile({"runner": "pooling"}, spec(QWEN3_SHAPE)))
    assert "pooling" in selected[COMPLETION] and "no completions" in selected[CHAT]
    assert selected[EMBEDDINGS] is None and selected[RERANK] is None
    assert kv_check_skip(pooling_profile({"runner": "pooling"}, spec(QWEN3_SHAPE))) is None  # a decoder keeps one


def test_encoder_and_classifier_servers():
    bert = rows(pooling_profile({}, spec(BERT_SHAPE)))
    assert "no KV cache" in kv_check_skip(pooling_profile({}, spec(BERT_SHAPE))) and bert[EMBEDDINGS] is None
    classifier = rows(pooling_profile({}, spec(BERT_SHAPE, architectures=["BertForSequenceClassification"],
                                              num_labels=3)))
    assert "no /v1/embeddings" in classifier[EMBEDDINGS] and "one-label" in classifier[RERANK]
    cross = rows(pooling_profile({}, spec(BERT_SHAPE, architectures=["BertForSequenceClassification"],
                                         num_labels=1)))
    assert cross[RERANK] is None


def test_table_marks_skipped_rows():
    table = format_table([Check("a", True, "ok"), Check("b", True, "not here", skipped=True),
                          Check("c", False, "broken")])
    assert table.splitlines()[1].startswith("SKIP  b")
    assert table.splitlines()[-1] == "1 passed, 1 failed, 1 skipped"


# --------------------------------------------------------------------------- side by side
def test_side_by_side_stack_runs_both_servers_on_one_image():
    prepared = prepare("cpu", with_presets=["cpu-embed"])
    files = prepared.files
    main, other = yaml.safe_load(files["compose.yaml"]), yaml.safe_load(files["compose.cpu-embed.yaml"])
    assert main["include"] == ["compose.cpu-embed.yaml"]
    assert set(other["services"]) == {"model-make-cpu-embed", "model-fetch-cpu-embed", "vllm-cpu-embed",
                                      "door-cpu-embed"}
    server = other["services"]["vllm-cpu-embed"]
    assert server["image"] == main["services"]["vllm"]["image"] == prepared.image_ref
    assert server["depends_on"] == {"model-fetch-cpu-embed": {"condition": "service_completed_successfully"}}
    # Its own front door publishes its port; the server publishes none (kit/deploy/door.py).
    assert "ports" not in server and "/health" in server["healthcheck"]["test"][-1]
    assert other["services"]["door-cpu-embed"]["ports"] == ["127.0.0.1:8001:8000"]
    door_cfg = files["door/haproxy-cpu-embed.cfg"]
    assert "server api vllm-cpu-embed:8000" in door_cfg and "path /v1/embeddings" in door_cfg
    assert "path /v1/completions" not in door_cfg
    assert set(other["volumes"]) == {"hf-cache-cpu-embed", "vllm-cache-cpu-embed", "models-cpu-embed"}
    assert not set(other["volumes"]) & set(main["volumes"])
    companion = prepared.companions[0]
    assert companion.name == "cpu-embed" and companion.files is files
    assert companion.image_ref == prepared.image_ref  # no second build
    assert companion.deployment.preset.runtime.hf_cache_volume == "hf-cache-cpu-embed"
    # Alone, cpu-embed keeps its plain volume names.
    assert prepare("cpu-embed").preset.runtime.hf_cache_volume == "hf-cache"


def test_side_by_side_refuses_a_port_clash_naming_the_field(tmp_path):
    clash = tmp_path / "embed-8000.yaml"
    data = yaml.safe_load((PRESETS_DIR / "cpu-embed.yaml").read_text())
    data["runtime"]["port"] = 8000
    clash.write_text(yaml.safe_dump(data))
    with pytest.raises(PresetError) as info:
        prepare("cpu", with_presets=[str(clash)])
    assert any("runtime.port" in line and "8000" in line for line in info.value.lines())


def test_side_by_side_refuses_another_image_and_other_targets():
    with pytest.raises(PresetError) as info:
        prepare("cpu", with_presets=["rtx4090-awq"])
    assert any(": image: needs another image than cpu's" in line for line in info.value.lines())
    with pytest.raises(PresetError, match="compose target"):
        prepare("cpu", target="k8s", with_presets=["cpu-embed"])
    with pytest.raises(PresetError, match="already in this stack"):
        prepare("cpu", with_presets=["cpu"])


def test_render_cli_writes_the_side_by_side_files(tmp_path):
    result = CliRunner().invoke(cli, ["render", "preset=cpu", "--with-preset", "cpu-embed", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "compose.yaml").is_file() and (tmp_path / "compose.cpu-embed.yaml").is_file()
    # `docker compose config` resolving the include: tests/golden/test_tools.py


def test_side_by_side_on_one_gpu_must_share_its_memory(tmp_path):
    data = yaml.safe_load((PRESETS_DIR / "rtx4090-awq.yaml").read_text())
    data["runtime"] = {**data.get("runtime", {}), "port": 8001}
    data["engine"]["gpu_memory_utilization"] = 0.4
    second = tmp_path / "second.yaml"
    second.write_text(yaml.safe_dump(data))
    with pytest.raises(PresetError) as info:  # the main preset asks 0.90 of the same card
        prepare("rtx4090-awq", with_presets=[str(second)])
    assert any("engine.gpu_memory_utilization" in line and "0.4 plus rtx4090-awq's 0.9" in line
               for line in info.value.lines())
    fits = prepare("rtx4090-awq", ["engine.gpu_memory_utilization=0.6"], with_presets=[str(second)])
    assert set(yaml.safe_load(fits.files["compose.second.yaml"])["services"]) == {
        "model-fetch-second", "vllm-second", "door-second"}
