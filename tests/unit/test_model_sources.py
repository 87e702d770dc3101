"""Any Hugging Face model, planned offline: a local folder of real safetensors files, the Hugging Face cache layout,
config.json defaults as transformers fills them, and an unknown model_type marked approximate. The hub itself is
tests/unit/test_fetch_hub.py's stand-in."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.config.modelinfo import load_model_spec, spec_from_config
from kit.core.errors import PlanError
from kit.memory.inputs import GIB, PlanInputs
from kit.memory.plan import plan
from kit.memory.shape import padded_vocab

pytestmark = pytest.mark.unit

ELEMENT_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1}
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"

# Gemma-2 2B's shape as its config.json states it; transformers wrote that file without tie_word_embeddings, which
# equals the base and the class default (Gemma2Config: tie_word_embeddings True).
GEMMA2 = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "num_hidden_layers": 26,
    "vocab_size": 256000, "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "sliding_window": 4096,
}
# A Qwen2 AWQ layer as AutoAWQ stores it: int32 packs of eight 4-bit weights, fp16 scales per group of 128 and
# output column, int32-packed zero points; the embedding and lm_head stay fp16.
AWQ_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 1024,
    "max_position_embeddings": 4096, "torch_dtype": "float16", "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                            "version": "gemm"},
}
AWQ_TENSORS = {
    "model.embed_tokens.weight": ("F16", [1024, 256]),
    "model.layers.0.mlp.down_proj.qweight": ("I32", [512, 32]),
    "model.layers.0.mlp.down_proj.scales": ("F16", [4, 256]),
    "model.layers.0.mlp.down_proj.qzeros": ("I32", [4, 32]),
    "lm_head.weight": ("F16", [1024, 256]),
}


def safetensors_file(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A safetensors file as the format lays it out: an 8-byte little-endian header length, the JSON header (dtype,
    shape, data_offsets per tensor), then the tensors' bytes (zeros here)."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = ELEMENT_BYTES[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(raw)) + raw + b"\0" * offset


def stored_bytes(tensors: dict[str, tuple[str, list[int]]]) -> dict[str, int]:
    by_dtype: dict[str, int] = {}
    for dtype, shape in tensors.values():
        size = ELEMENT_BYTES[dtype]
        for dim in shape:
            size *= dim
        by_dtype[dtype] = by_dtype.get(dtype, 0) + size
    return by_dtype


def test_a_local_folder_counts_quantised_weights_as_stored_from_the_headers(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(AWQ_CONFIG))
    names = list(AWQ_TENSORS)
    first, second = {n: AWQ_TENSORS[n] for n in names[:3]}, {n: AWQ_TENSORS[n] for n in names[3:]}
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(safetensors_file(first))
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(safetensors_file(second))
    weight_map = {**dict.fromkeys(first, "model-00001-of-00002.safetensors"),
                  **dict.fromkeys(second, "model-00002-of-00002.safetensors")}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1},
                                                                       "weight_map": weight_map}))
    # a consolidated copy beside the shards (as some repos ship): vLLM loads the index's shards only
    (tmp_path / "consolidated.safetensors").write_bytes(safetensors_file(AWQ_TENSORS))
    spec = load_model_spec(str(tmp_path))
    expected = stored_bytes(AWQ_TENSORS)
    assert dict(spec.weights_bytes_by_dtype) == expected == {"F16": 2 * 1024 * 256 * 2 + 4 * 256 * 2,
                                                              "I32": 512 * 32 * 4 + 4 * 32 * 4}
    assert spec.weights_bytes == sum(expected.values())
    assert spec.stored_bytes_as_loaded("bfloat16") == spec.weights_bytes  # quantised: loaded as stored
    assert spec.config_defaults == "src/transformers/models/qwen2/configuration_qwen2.py"


def test_an_unquantised_checkpoint_is_counted_at_the_dtype_it_is_served_in(tmp_path):
    config = {**AWQ_CONFIG, "torch_dtype": "float32"}
    del config["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(safetensors_file({"a": ("F32", [64, 64]), "b": ("U8", [16])}))
    spec = load_model_spec(str(tmp_path / "config.json"))
    assert spec.weights_bytes == 64 * 64 * 4 + 16
    assert spec.stored_bytes_as_loaded("bfloat16") == 64 * 64 * 2 + 16  # floats cast, the rest as stored
    assert spec.stored_bytes_as_loaded("float32") == spec.weights_bytes


def hf_cache(root: Path, model_id: str, files: dict[str, bytes], ref: str = "main") -> Path:
    """The cache as huggingface_hub writes it: blobs by hash, snapshot files linking to them, refs/<ref>."""
    repo = root / ("models--" + model_id.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / ref).write_text(COMMIT)
    for index, (name, body) in enumerate(files.items()):
        blob = repo / "blobs" / f"blob{index}"
        blob.write_bytes(body)
        (snapshot / name).symlink_to(Path("../../blobs") / blob.name)
    return snapshot


def test_an_id_outside_the_catalog_is_planned_from_the_hugging_face_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    tensors = {"model.embed_tokens.weight": ("BF16", [256000, 2304])}
    hf_cache(tmp_path / "hub", "google/gemma-2-2b-it", {"config.json": json.dumps(GEMMA2).encode(),
                                                        "model.safetensors": safetensors_file(tensors)})
    spec = load_model_spec("google/gemma-2-2b-it")  # HF_HUB_OFFLINE=1 in the suite: the cache is enough
    assert spec.source == "hf-cache:google/gemma-2-2b-it"
    assert spec.weights_bytes == 256000 * 2304 * 2 and dict(spec.weights_bytes_by_dtype) == {"BF16": 256000 * 2304 * 2}
    assert load_model_spec("google/gemma-2-2b-it", revision=COMMIT).source == spec.source  # a pinned commit
    with pytest.raises(PlanError, match="not in the bundled catalog nor in the Hugging Face cache"):
        load_model_spec("google/gemma-2-2b-it", hub=True, revision="v2")  # no refs/v2: the hub, which is offline
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(PlanError, match=r"not in the Hugging Face cache \(.*elsewhere\)"):
        load_model_spec("google/gemma-2-2b-it")


def test_a_gemma2_config_without_the_tie_key_is_planned_tied():
    spec = spec_from_config(GEMMA2, name="gemma-2-2b", source="test")
    assert spec.tie_word_embeddings is True
    assert spec.config_defaults == "src/transformers/models/gemma2/configuration_gemma2.py"
    # Gemma2Config.__post_init__: layer i slides unless (i + 1) is even
    assert spec.layer_types[:4] == ("sliding_attention", "full_attention", "sliding_attention", "full_attention")
    untied = spec_from_config({**GEMMA2, "tie_word_embeddings": False}, name="gemma-2-2b", source="test")
    assert untied.tie_word_embeddings is False
    tied_plan, untied_plan = (plan(PlanInputs(model=s, gpu_name="rtx4090", gpu_memory_gib=23.64, max_model_len=4096))
                              for s in (spec, untied))
    head_gib = padded_vocab(256000) * 2304 * 2 / GIB  # the lm_head a tied model does not allocate
    assert untied_plan.weights_gib - tied_plan.weights_gib == pytest.approx(head_gib, abs=0.01)


@pytest.mark.parametrize("config, expected", [
    # LlamaConfig: head_dim None -> hidden // heads, num_key_value_heads None -> num_attention_heads, untied
    ({"model_type": "llama"}, (128, 32, False, None)),
    # GemmaConfig: head_dim 256 whatever the hidden size, tied
    ({"model_type": "gemma", "architectures": ["GemmaForCausalLM"]}, (256, 32, True, None)),
    # Qwen2Config: a window is in force only with use_sliding_window
    ({"model_type": "qwen2", "sliding_window": 4096}, (128, 32, False, None)),
    ({"model_type": "mistral", "architectures": ["MistralForCausalLM"]}, (128, 32, False, 4096)),
])
def test_keys_a_config_leaves_out_are_filled_as_transformers_fills_them(config, expected):
    base = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
            "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": 2, "vocab_size": 32000,
            "max_position_embeddings": 4096}
    spec = spec_from_config({**base, **config}, name="m", source="test")
    assert (spec.head_dim, spec.num_kv_heads, spec.tie_word_embeddings, spec.sliding_window) == expected


def test_an_unknown_model_type_is_planned_as_given_and_marked_approximate():
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "brand_new", "hidden_size": 1024,
              "intermediate_size": 4096, "num_attention_heads": 16, "num_hidden_layers": 4, "vocab_size": 32000,
              "max_position_embeddings": 4096}
    spec = spec_from_config(config, name="brand-new", source="test")
    assert spec.config_defaults is None and spec.tie_word_embeddings is False and spec.head_dim == 64
    result = plan(PlanInputs(model=spec, gpu_memory_gib=24))
    assert result.approximate["value"] is True
    assert "model_type brand_new is not in the kit's table of transformers' config defaults" in \
        result.approximate["reason"]
    known = spec_from_config({**config, "model_type": "llama"}, name="llama", source="test")
    assert plan(PlanInputs(model=known, gpu_memory_gib=24)).approximate["value"] is False


def test_every_model_defaults_row_names_its_transformers_source():
    from kit.core.datafiles import load_yaml

    rows = load_yaml("model_defaults.yaml")["model_types"]
    for model_type, row in rows.items():
        assert row["source"].startswith("src/transformers/models/") and row["source"].endswith(".py"), model_type
        if "text_model_type" not in row:
            assert {"tie_word_embeddings", "head_dim", "num_key_value_heads", "sliding_window"} <= set(row), model_type


def test_model_config_json_beside_a_preset_plans_that_model(tmp_path):
    from kit.cli.main import cli
    from kit.deploy.record import model_overrides

    config = {**GEMMA2, "num_hidden_layers": 2, "vocab_size": 1024, "max_position_embeddings": 2048}
    (tmp_path / "gemma").mkdir()
    (tmp_path / "gemma" / "config.json").write_text(json.dumps(config))
    target = str(tmp_path / "gemma" / "config.json")
    assert model_overrides(target)[:2] == (f"model.host_path={tmp_path / 'gemma'}", "model.id=gemma")
    assert model_overrides("./config.json")[0] == "model.host_path=./"
    result = CliRunner().invoke(cli, ["plan", "preset=cpu", "--model", target, "--json"])
    data = json.loads(result.stdout)["data"]
    assert data["inputs"]["model"] == "gemma", result.output
    assert "model.host_path=" + str(tmp_path / "gemma") in data["overrides"]
    assert result.exit_code == 0, result.output
