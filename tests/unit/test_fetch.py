"""The one-shot fetch takes what vLLM reads: weight selection on fake repo listings, and the artefact list."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.config.fetchscript import fetch_script
from kit.config.hubfetch import artefact_problems, artefacts_for, fetch_rules, fetch_spec
from kit.config.presetload import load_preset
from kit.core.errors import PresetError
from kit.deploy.checks import check_preset
from kit.deploy.deployment import FETCH_FILE, FETCH_SCRIPT_PATH, fetch_command_for, plan_deployment
from kit.deploy.render import content_tag, render
from kit.launch.fetch_files import select_files

pytestmark = pytest.mark.unit

RULES = fetch_rules()
COMMON = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "README.md"]

# meta-llama/Llama-3.1-8B-Instruct's layout: sharded safetensors with an index, and the original checkpoint.
LLAMA = COMMON + [
    "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors",
    "model-00004-of-00004.safetensors", "model.safetensors.index.json",
    "original/consolidated.00.pth", "original/params.json", "original/tokenizer.model",
]
LLAMA_MAP = {f"layer.{i}": f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)}


def host_command(name, preset, model_arg, tmp_path):
    """The model-fetch argv as the image runs it, with the rendered fetch_files.py in place of the image's copy."""
    script = tmp_path / FETCH_FILE
    script.write_text(render(plan_deployment(name, preset))[FETCH_FILE])
    command = fetch_command_for(preset, sys.executable, model_arg)
    assert command[1] == FETCH_SCRIPT_PATH
    return [command[0], str(script), *command[2:]]


def pick(files, **kw):
    return select_files(files, RULES, **kw)[0]


def test_llama_gets_the_indexed_shards_and_no_original_checkpoint():
    chosen = pick(LLAMA, weight_map=LLAMA_MAP)
    assert [f for f in chosen if f.endswith(".safetensors")] == sorted(LLAMA_MAP.values())
    assert "original/consolidated.00.pth" not in chosen
    assert {"config.json", "tokenizer.json", "model.safetensors.index.json"} <= set(chosen)


def test_default_ignore_pattern_drops_nested_original_files_as_the_hub_matches_it():
    # huggingface_hub matches "original/**/*" with fnmatch: only paths with a further "/" under original/.
    files = COMMON + ["model.safetensors", "original/sub/extra.json", "original/params.json"]
    chosen = pick(files)
    assert "original/sub/extra.json" not in chosen
    assert "original/params.json" in chosen


def test_safetensors_preferred_over_bin_when_both_exist():
    files = COMMON + ["model.safetensors", "pytorch_model.bin"]
    chosen, note = select_files(files, RULES)
    assert "model.safetensors" in chosen and "pytorch_model.bin" not in chosen
    assert "*.safetensors" in note


def test_only_bin_takes_the_shards_and_skips_training_files():
    files = COMMON + ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
                      "pytorch_model.bin.index.json", "training_args.bin", "flax_model.msgpack"]
    chosen = pick(files)
    assert [f for f in chosen if f.endswith(".bin")] == ["pytorch_model-00001-of-00002.bin",
                                                         "pytorch_model-00002-of-00002.bin"]
    assert "pytorch_model.bin.index.json" in chosen and "flax_model.msgpack" not in chosen


def test_index_filters_a_consolidated_file_beside_shards_when_load_format_is_safetensors():
    # Mistral-7B-Instruct-v0.3 ships both; with load_format auto vLLM picks its mistral format instead.
    files = COMMON + ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                      "model.safetensors.index.json", "consolidated.safetensors", "params.json"]
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    hf = pick(files, load_format="safetensors", weight_map=weight_map)
    assert "consolidated.safetensors" not in hf and "model-00002-of-00002.safetensors" in hf
    auto, note = select_files(files, RULES, weight_map=weight_map)
    assert [f for f in auto if f.endswith(".safetensors")] == ["consolidated.safetensors"]
    assert "mistral" in note


def test_load_format_pt_and_dummy_and_an_unknown_loader():
    files = COMMON + ["model.safetensors", "model.pt"]
    assert [f for f in pick(files, load_format="pt") if f.endswith((".pt", ".safetensors"))] == ["model.pt"]
    assert not any(f.endswith((".pt", ".safetensors")) for f in pick(files, load_format="dummy"))
    assert set(pick(files, load_format="gguf")) == set(files)


def test_user_ignore_patterns_replace_the_default():
    files = COMMON + ["model.safetensors", "original/sub/x.json", "README.md"]
    chosen = pick(files, ignore_patterns=["*.md"])
    assert "README.md" not in chosen and "original/sub/x.json" in chosen


def test_no_weights_is_an_error_naming_the_patterns():
    with pytest.raises(LookupError, match=r"\*\.safetensors"):
        pick(COMMON, load_format="safetensors")


def test_tokenizer_mode_takes_no_weights_and_all_mode_takes_everything():
    files = COMMON + ["model.safetensors"]
    assert "model.safetensors" not in pick(files, mode="tokenizer")
    assert pick(["adapter_config.json", "adapter_model.safetensors", "original/x/y"], mode="all") == [
        "adapter_config.json", "adapter_model.safetensors", "original/x/y"]


def _preset(*overrides: str):
    return load_preset("rtx4090-awq", list(overrides))[2]


def test_artefacts_from_engine_flags():
    preset = _preset(
        'engine.lora_modules=["sql=org/sql-lora", "{\\"name\\": \\"chat\\", \\"path\\": \\"/adapters/chat\\"}"]',
        'engine.speculative_config={"model": "org/draft-0.5B", "revision": "v1", "num_speculative_tokens": 4}',
        "engine.tokenizer=org/tok", "engine.tokenizer_revision=abc",
    )
    arts = {a.role: a for a in artefacts_for(preset, preset.model.id)}
    assert list(arts) == ["model", "tokenizer", "lora sql", "lora chat", "draft model"]
    assert (arts["tokenizer"].ref, arts["tokenizer"].revision, arts["tokenizer"].mode) == ("org/tok", "abc", "tokenizer")
    assert (arts["lora sql"].ref, arts["lora sql"].revision, arts["lora sql"].mode) == ("org/sql-lora", None, "all")
    assert arts["lora chat"].is_local and arts["lora chat"].marker == "adapter_config.json"
    assert (arts["draft model"].ref, arts["draft model"].revision) == ("org/draft-0.5B", "v1")


def test_a_tokenizer_revision_alone_fetches_the_model_repos_tokenizer_at_it():
    preset = _preset("engine.tokenizer_revision=tok-v2")
    extra = artefacts_for(preset, preset.model.id)[1:]
    assert [(a.ref, a.revision, a.mode) for a in extra] == [(preset.model.id, "tok-v2", "tokenizer")]


@pytest.mark.parametrize("spec", [
    {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
    {"method": "mtp", "num_speculative_tokens": 1},
    {"model": "ngram", "num_speculative_tokens": 3},
])
def test_speculative_methods_without_a_draft_checkpoint_fetch_nothing_more(spec):
    preset = _preset(f"engine.speculative_config={json.dumps(spec)}")
    assert [a.role for a in artefacts_for(preset, preset.model.id)] == ["model"]


def test_bad_lora_entry_names_the_field():
    preset = _preset('engine.lora_modules=["just-a-name"]')
    with pytest.raises(PresetError, match="engine.lora_modules"):
        artefacts_for(preset, "x")
    report = check_preset("rtx4090-awq", Path("presets/rtx4090-awq.yaml"), preset)
    assert [p.where for p in report.errors] == ["presets/rtx4090-awq.yaml: engine.lora_modules"]
    assert "sql=org/sql-lora" in report.errors[0].hint
    bad_spec = _preset("engine.speculative_config={not json")
    assert [p.where for p in artefact_problems("f.yaml", bad_spec)] == ["f.yaml: engine.speculative_config"]


def test_spec_carries_load_format_and_ignore_patterns():
    spec = json.loads(fetch_spec(_preset("engine.load_format=safetensors", 'engine.ignore_patterns=["*.pth"]'), "m"))
    assert spec["load_format"] == "safetensors" and spec["ignore_patterns"] == ["*.pth"]
    assert "ignore_patterns" not in json.loads(fetch_spec(_preset(), "m"))


def test_rendered_fetch_command_runs_and_checks_local_paths(tmp_path):
    """The model-fetch service's argv (the model at its host path, not the container's), run here."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    preset = load_preset("cpu", [f"model.host_path={model}", "model.id=model", "model.generate=null",
                                 f'engine.lora_modules=["a={tmp_path}/missing-lora"]'])[2]
    assert plan_deployment("cpu", preset).serve.fetch_command[2] == fetch_command_for(preset, "py", "/models/model")[2]
    command = host_command("cpu", preset, str(model), tmp_path)
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "lora a" in result.stderr and "no adapter_config.json" in result.stderr
    assert result.stdout.strip() == f"model not fetched: {tmp_path}/missing-lora (engine.lora_modules): missing"
    (tmp_path / "missing-lora").mkdir()
    (tmp_path / "missing-lora" / "adapter_config.json").write_text("{}")
    assert subprocess.run(command, capture_output=True, timeout=60).returncode == 0


def test_spec_survives_compose_interpolation():
    # compose expands $VAR in every value: a `$` in the spec reaches the script only because it is doubled.
    preset = _preset('engine.ignore_patterns=["$HOME/*.pth"]')
    d = plan_deployment("rtx4090-awq", preset)
    entrypoint = yaml.safe_load(render(d)["compose.yaml"])["services"]["model-fetch"]["entrypoint"]
    assert entrypoint[:2] == [d.serve.python, FETCH_SCRIPT_PATH]
    assert "$$HOME" in entrypoint[2] and re.sub(r"\$\$", "$", entrypoint[2]) == d.serve.fetch_command[2]
    assert json.loads(fetch_spec(preset, "m"))["ignore_patterns"] == ["$HOME/*.pth"]
    # Kubernetes reads `$$` as `$` in a container's command; the init container runs the same argv.
    manifests = [text for path, text in render(d, target="k8s").items() if path.endswith(".yaml")]
    pods = [doc for text in manifests for doc in yaml.safe_load_all(text)
            if isinstance(doc, dict) and doc.get("kind") == "Deployment"]
    init = pods[0]["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert init[1] == FETCH_SCRIPT_PATH and init[2].replace("$$", "$") == d.serve.fetch_command[2] != init[2]


@pytest.mark.parametrize("name", ["cpu", "rtx4090-awq", "rtx3090x2-fp16", "orin"])
def test_every_image_carries_the_fetch_script(name):
    files = render(plan_deployment(name, load_preset(name)[2]))
    assert files[FETCH_FILE] == fetch_script()
    assert f"\nCOPY {FETCH_FILE} {FETCH_SCRIPT_PATH}\n" in files["Dockerfile"]
    assert f"!{FETCH_FILE}" in files[".dockerignore"].splitlines()
    assert "exec(" not in files.get("compose.yaml", "")


def test_a_fetch_script_change_changes_the_image_tag():
    assert content_tag("D", "R", "print(1)") != content_tag("D", "R", "print(2)")
    assert content_tag("D", "R", "S") == content_tag("D", "R", "S")
