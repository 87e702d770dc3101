"""image.leave_out: a slim preset leaves out the packages of features it does not use (kit/data/prune.yaml)."""

from __future__ import annotations

import json

import pytest

from kit.config.preset_files import display_path
from kit.config.presetload import load_preset
from kit.core.datafiles import DATA_DIR, prune_rules
from kit.core.errors import PresetError
from kit.deploy.checks import check_leave_out, feature_use
from kit.deploy.pipeline import prepare

pytestmark = pytest.mark.unit

FEATURES = list(prune_rules()["features"])


def problems(*overrides: str) -> list[str]:
    _, path, preset = load_preset("rtx4090-awq", list(overrides))
    return [str(p) for p in check_leave_out(display_path(path), preset)]


def test_every_feature_says_why_what_it_removes_and_what_uses_it():
    rules = prune_rules()
    always = {d["name"] for d in rules["distributions"]}
    seen: set[str] = set()
    for name, spec in rules["features"].items():
        assert len(spec["reason"]) > 40 and spec["distributions"] and spec["uses"], name
        assert not set(spec["distributions"]) & (always | seen), f"{name}: a distribution listed twice"
        seen |= set(spec["distributions"])
        assert set(spec["uses"]) <= {"speculative_methods", "flags_true", "flags_equal", "model"}, name


def test_nothing_is_left_out_unless_the_preset_asks():
    every_feature_dist = {n for spec in prune_rules()["features"].values() for n in spec["distributions"]}
    prepared = prepare("rtx4090-awq", ["image.leave_out=[]"])
    assert not every_feature_dist & set(prepared.deployment.image.exclude_packages)
    # rtx4090-awq asks for all of them (served together on the H200: kit/data/floor/proof-h200-vllm-0.33.0.json).
    prepared = prepare("rtx4090-awq")
    assert sorted(prepared.preset.image.leave_out) == sorted(FEATURES)
    assert every_feature_dist <= set(prepared.deployment.image.exclude_packages)


def test_left_out_features_join_the_uninstall_list_and_the_rendered_rules():
    prepared = prepare("rtx4090-awq", ["image.leave_out=[ngram-speculation,deepseek-kernels]"])
    for name in ("numba", "llvmlite", "tokenspeed-mla", "tokenspeed-triton", "tilelang", "z3-solver"):
        assert name in prepared.deployment.image.exclude_packages
    rendered = {d["name"]: d for d in json.loads(prepared.files["prune-rules.json"])["distributions"]}
    assert rendered["numba"]["feature"] == "ngram-speculation"
    assert rendered["numba"]["reason"].startswith("feature ngram-speculation left out: ")
    assert "pip uninstall -y" in prepared.files["Dockerfile"] and " numba " in prepared.files["Dockerfile"]


def test_a_text_preset_may_leave_out_every_feature():
    assert problems(f"image.leave_out=[{','.join(FEATURES)}]") == []


@pytest.mark.parametrize(("feature", "overrides", "why"), [
    ("ngram-speculation", ['engine.speculative_config={"method": "ngram", "num_speculative_tokens": 3}'],
     "engine.speculative_config uses method ngram"),
    ("fast-loaders", ["engine.load_format=fastsafetensors"], "engine.load_format is fastsafetensors"),
    ("expert-parallel-comm", ["engine.enable_expert_parallel=true", "model.id=Qwen/Qwen3-30B-A3B",
                              "engine.quantization=null", "engine.dtype=bfloat16", "engine.max_model_len=2048"],
     "engine.enable_expert_parallel is set"),
    ("deepseek-kernels", ["model.id=deepseek-ai/DeepSeek-V2-Lite-Chat", "engine.quantization=null",
                          "engine.dtype=bfloat16", "engine.max_model_len=2048"],
     "deepseek-ai/DeepSeek-V2-Lite-Chat uses multi-head latent attention"),
])
def test_a_preset_cannot_leave_out_a_feature_it_uses(feature, overrides, why):
    found = problems(f"image.leave_out=[{feature}]", *overrides)
    assert found == [f"presets/rtx4090-awq.yaml: image.leave_out[0]: leaves out {feature}, which this preset uses: "
                     f"{why} (hint: drop {feature} from image.leave_out)"]
    assert problems("image.leave_out=[]", *overrides) == []
    assert feature_use(feature, load_preset("rtx4090-awq", list(overrides))[2]) == why


def test_a_vision_model_keeps_cudnn_attention(tmp_path):
    model = tmp_path / "vl"
    model.mkdir()
    config = json.loads((DATA_DIR / "models" / "Qwen--Qwen2.5-7B-Instruct.json").read_text())
    config = {k: v for k, v in config.items() if not k.startswith("_")}
    config["vision_config"] = {"depth": 32, "hidden_size": 1280}
    (model / "config.json").write_text(json.dumps(config))
    assert problems("image.leave_out=[cudnn-attention]", f"model.host_path={model}", "model.id=vl")[0].endswith(
        "has a vision encoder (hint: drop cudnn-attention from image.leave_out)")
    del config["vision_config"]
    (model / "config.json").write_text(json.dumps(config))
    assert problems("image.leave_out=[cudnn-attention]", f"model.host_path={model}", "model.id=vl") == []


@pytest.mark.parametrize(("overrides", "message"), [
    (["image.leave_out=[nope]"], "no such feature 'nope'"),
    (["image.leave_out=[fast-loaders,fast-loaders]"], "a feature is named twice"),
])
def test_bad_leave_out_names_the_file_and_field(overrides, message):
    with pytest.raises(PresetError) as caught:
        load_preset("rtx4090-awq", overrides)
    text = str(caught.value) + " ".join(str(p) for p in caught.value.problems)
    assert "presets/rtx4090-awq.yaml" in text and "leave_out" in text and message in text


def test_leave_out_on_another_strategy_warns_and_changes_nothing():
    # rtx4090-awq leaves features out; on the official image (one override) nothing is cut.
    prepared = prepare("rtx4090-awq", overrides=["image.strategy=official"])
    warned = [str(w) for w in prepared.report.warnings if "image.leave_out" in str(w)]
    assert warned and "presets/rtx4090-awq.yaml" in warned[0] and "only slim images are cut" in warned[0]
    assert prepared.deployment.image.exclude_packages == [] and "prune-rules.json" not in prepared.files
    assert check_leave_out("p.yaml", prepared.preset) == []
