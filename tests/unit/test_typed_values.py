"""Values are read by the field's type: text fields take the text typed, engine integers what `vllm serve` takes at
the pinned version, and a mistake is a usage error (malformed KEY=VALUE, exit 2) or names the override (exit 1)."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.flags import available_versions, engine_to_argv, load_snapshot
from kit.config.presetload import load_preset
from kit.core.datafiles import PRESETS_DIR
from kit.config.vllmint import CONVERTERS, read_vllm_int
from kit.core.errors import PresetError

pytestmark = pytest.mark.unit


def kit(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


# ------------------------------------------------------------------------------------------- vLLM's reader

# What vLLM's human_readable_int(_or_auto) returns (vllm/utils/argparse_utils.py, v0.26.0-v0.33.0; its docstring's
# examples first), and what its plain type=int returns.
READ = [
    ("1k", "human_readable_int", 1000), ("1K", "human_readable_int", 1024), ("25.6k", "human_readable_int", 25600),
    ("16k", "human_readable_int", 16000), ("1M", "human_readable_int", 1 << 20), ("1m", "human_readable_int", 10**6),
    ("2g", "human_readable_int", 2 * 10**9), ("1G", "human_readable_int", 1 << 30), ("1t", "human_readable_int", 10**12),
    ("1T", "human_readable_int", 1 << 40), (" 8192 ", "human_readable_int", 8192), ("1_000", "human_readable_int", 1000),
    ("+5", "human_readable_int", 5), ("0.5k", "human_readable_int", 500),
    ("auto", "human_readable_int_or_auto", -1), ("AUTO", "human_readable_int_or_auto", -1),
    ("-1", "human_readable_int_or_auto", -1), (" 16K", "human_readable_int_or_auto", 16384),
    ("16384", "int", 16384), (" 7 ", "int", 7), ("-3", "int", -3),
]
REFUSED = [
    ("1.5K", "human_readable_int"),  # vLLM: "Decimals are not allowed with binary suffixes like K"
    ("1e3", "human_readable_int"), ("0x400", "human_readable_int"), ("16kb", "human_readable_int"),
    ("1.5", "human_readable_int"), ("auto", "human_readable_int"), ("", "human_readable_int"),
    ("16k", "int"), ("1_000.0", "int"), ("auto", "int"), ("16384.0", "human_readable_int_or_auto"),
]


@pytest.mark.parametrize(("text", "converter", "value"), READ)
def test_the_reader_reads_what_vllm_reads(text, converter, value):
    assert read_vllm_int(text, converter) == value


@pytest.mark.parametrize(("text", "converter"), REFUSED)
def test_the_reader_refuses_what_vllm_refuses(text, converter):
    with pytest.raises(ValueError, match="expects an integer"):
        read_vllm_int(text, converter)


def test_a_decimal_with_a_binary_suffix_gets_vllms_advice():
    with pytest.raises(ValueError, match=r"did you mean 1\.5k\?"):
        read_vllm_int("1.5K", "human_readable_int")


def test_every_integer_converter_in_the_snapshots_is_one_the_reader_knows():
    # A converter a new vLLM adds would otherwise be read as plain int without anyone noticing.
    for version in available_versions():
        for key, spec in load_snapshot(version).flags.items():
            if spec.type == "int":
                assert spec.type_detail in (None, *CONVERTERS), (version, key, spec.type_detail)
        assert load_snapshot(version).flags["max_model_len"].type_detail == "human_readable_int_or_auto", version


# The reader against vLLM's own converters (READ and REFUSED run there): tests/integration/test_vllm_parser.py.


# ------------------------------------------------------------------------------------------- overrides by type


def test_text_fields_take_the_text_as_typed():
    preset = load_preset("rtx4090-awq", ["image.vllm_version=0.16.0", "image.cuda=12.9", "model.served_model_name=0.33",
                                         "runtime.env.NOTE=true", "runtime.env.N=1e3", "model.revision=1.10"])[2]
    assert preset.image.cuda == "12.9" and preset.model.served_model_name == "0.33"
    assert preset.runtime.env == {"NOTE": "true", "N": "1e3"} and preset.model.revision == "1.10"
    # quotes keep YAML's meaning, null unsets, numbers and booleans elsewhere are read as in the file
    assert load_preset("rtx4090-awq", ["model.served_model_name='null'"])[2].model.served_model_name == "null"
    assert load_preset("a100x8", ["image.cuda=null"])[2].image.cuda is None
    typed = load_preset("cpu", ["runtime.port=8123", "engine.enforce_eager=false"])[2]
    assert typed.runtime.port == 8123 and typed.engine.enforce_eager is False


def test_a_list_of_text_takes_its_items_as_text():
    preset = load_preset("rtx3090x2-fp16", ["hardware.device_ids=[0, 1]"])[2]
    assert preset.hardware.device_ids == ["0", "1"]


def test_the_presets_own_advice_validates():
    result = kit("validate", "preset=rtx3090x2-fp16", "image.vllm_version=0.16.0")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("text", "value", "rendered"), [
    ("16k", 16000, "16000"), ("25.6k", 25600, "25600"), ("16K", 16384, "16384"), ("auto", -1, "auto"),
    ("-1", -1, "auto"), ("8192", 8192, "8192")])
def test_max_model_len_takes_what_vllm_takes_and_renders_what_vllm_accepts(text, value, rendered, tmp_path):
    preset = load_preset("rtx4090-awq", [f"engine.max_model_len={text}"])[2]
    assert preset.engine.max_model_len == value
    result = kit("render", "preset=rtx4090-awq", f"engine.max_model_len={text}", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    command = yaml.safe_load((tmp_path / "compose.yaml").read_text())["services"]["vllm"]["command"]
    at = command.index("--max-model-len")
    assert command[at + 1] == rendered
    assert read_vllm_int(command[at + 1], "human_readable_int_or_auto") == value  # what vLLM then reads


def test_other_integer_flags_follow_their_converter():
    assert load_preset("cpu", ["engine.max_num_batched_tokens=4K"])[2].engine.max_num_batched_tokens == 4096
    assert load_preset("cpu", ["engine.max_num_scheduled_tokens=2k"])[2].engine.flags()["max_num_scheduled_tokens"] == 2000
    for override in ("engine.max_num_seqs=16k", "engine.tensor_parallel_size=2.0", "engine.seed=1k"):
        result = kit("validate", "preset=cpu", override)  # plain type=int in vLLM: no suffix, no decimals
        assert result.exit_code == 1
        assert result.stderr.startswith(f"override {override.partition('=')[0]}: expects an integer"), result.stderr


def test_a_preset_file_takes_vllms_integers_too(tmp_path):
    text = (PRESETS_DIR / "cpu.yaml").read_text().replace("max_model_len: 1024", "max_model_len: 1k")
    assert "max_model_len: 1k" in text
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    assert load_preset(str(path))[2].engine.max_model_len == 1000
    path.write_text(text.replace("max_model_len: 1k", "max_model_len: 1.5K"))
    with pytest.raises(PresetError) as caught:
        load_preset(str(path))
    assert "mine.yaml: engine.max_model_len: expects an integer" in caught.value.lines()[0]


def test_argv_of_auto_at_every_pinned_version():
    for version in available_versions():
        assert engine_to_argv({"max_model_len": -1}, version) == ["--max-model-len", "auto"]


# ------------------------------------------------------------------------------------------- mistakes


@pytest.mark.parametrize("bad", ["=3", "engine.=3", ".x=1", "engine..x=1", "engine. =1", "novalue"])
@pytest.mark.parametrize("command", [["validate"], ["render", "--dry-run"], ["plan"], ["doctor"], ["presets", "show"]])
def test_a_malformed_override_is_a_usage_error_on_every_command(command, bad):
    result = kit(*command, "preset=cpu", bad)
    assert result.exit_code == 2, (command, bad, result.output)


@pytest.mark.parametrize("command", [["validate"], ["render", "--dry-run"], ["plan"], ["presets", "show"]])
def test_a_bad_value_names_the_override_and_exits_1(command):
    result = kit(*command, "preset=cpu", "engine.max_model_len=abc")
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("override engine.max_model_len: expects an integer"), result.stderr
    assert "presets/cpu.yaml" not in result.stderr


def test_a_bad_value_in_the_envelope_has_no_file_and_its_field():
    result = kit("validate", "preset=cpu", "engine.max_model_len=abc", "--json")
    [problem] = json.loads(result.stdout)["problems"]
    assert result.exit_code == 1 and problem["file"] is None and problem["field"] == "engine.max_model_len"


def test_a_bad_value_in_the_file_still_names_the_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text((PRESETS_DIR / "cpu.yaml").read_text().replace("max_model_len: 1024", "max_model_len: abc"))
    result = kit("validate", f"preset={path}", "runtime.port=8123")  # an override of another field
    assert result.exit_code == 1
    assert "mine.yaml: engine.max_model_len: expects an integer" in result.stderr
    assert "override" not in result.stderr


def test_a_section_an_override_brings_in_is_the_overrides():
    result = kit("validate", "preset=cpu", "engin.max_model_len=1")
    assert result.exit_code == 1
    assert result.stderr.startswith("override engin.max_model_len: unknown field"), result.stderr


def test_kit_plans_integer_options_take_what_vllm_takes():
    base = ["plan", "--model", "Qwen/Qwen3-8B-AWQ", "--gpu", "rtx4090", "--json"]
    plan = json.loads(kit(*base, "--max-model-len", "16k", "--max-num-batched-tokens", "4K").stdout)["data"]
    assert (plan["inputs"]["max_model_len"], plan["inputs"]["max_num_batched_tokens"]) == (16000, 4096)
    # auto at a memory fraction where the model's 40960 do not fit: the longest that does, as the plan's own fix
    tight = [*base, "--gpu-memory-utilization", "0.5", "--max-num-seqs", "256"]
    fix = json.loads(kit(*tight).stdout)["data"]["suggestions"][0]
    assert fix["kind"] == "max_model_len"
    auto = json.loads(kit(*tight, "--max-model-len", "auto").stdout)["data"]
    assert auto["fits"] and auto["inputs"]["max_model_len"] == fix["change"]["max_model_len"] < 40960
    for bad in ("1.5K", "0", "16kb"):
        assert kit(*base, "--max-model-len", bad).exit_code == 2, bad


def test_auto_without_the_models_config_says_vllm_resolves_it():
    # No config.json (the local model is not made yet): the kit cannot tell what auto comes to, and says so.
    result = kit("validate", "preset=cpu", "model.generate=null", "engine.max_model_len=auto")
    assert result.exit_code == 0
    assert "no memory plan" in result.stderr and "engine.max_model_len auto is then vLLM's to resolve" in result.stderr
