"""Preset loading and validation: every error names the file and field, and nothing else leaks through."""

from pathlib import Path

import pytest
import yaml

from kit.config.overrides import parse_override
from kit.config.preset_files import preset_names
from kit.config.presetload import load_preset
from kit.core.errors import PresetError

GOOD = """\
hardware: {gpu: rtx4090, count: 1}
model: {id: Qwen/Qwen3-8B-AWQ}
engine: {max_model_len: 8192}
image: {vllm_version: "0.33.0", strategy: slim}
"""


def write(tmp_path: Path, text: str, name: str = "mine.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def problems(exc: PresetError) -> list[str]:
    return exc.lines()


def test_seed_presets_are_the_five_from_the_issue():
    # the five from the issue, plus cpu-embed (issue 13: an embedding server beside the chat server)
    assert set(preset_names()) == {"rtx4090-awq", "rtx3090x2-fp16", "a100x8", "orin", "cpu", "cpu-embed"}


def test_user_preset_file_loads(tmp_path):
    name, _, preset = load_preset(write(tmp_path, GOOD))
    assert name == "mine"
    assert preset.hardware.gpu == "rtx4090"
    assert preset.engine.max_model_len == 8192


def test_unknown_preset_suggests_close_names():
    with pytest.raises(PresetError) as info:
        load_preset("a100x9")
    assert "a100x8" in info.value.hint


def test_unknown_key_names_file_and_field_with_suggestion(tmp_path):
    path = write(tmp_path, GOOD.replace("count: 1", "cuont: 1"))
    with pytest.raises(PresetError) as info:
        load_preset(path)
    (line,) = problems(info.value)
    assert "mine.yaml: hardware.cuont: unknown field" in line
    assert "hardware.count" in line


def test_wrong_type_and_out_of_range_are_all_listed_at_once(tmp_path):
    text = GOOD.replace("max_model_len: 8192", "max_model_len: lots, gpu_memory_utilization: 1.5, tensor_parallel_size: 0")
    with pytest.raises(PresetError) as info:
        load_preset(write(tmp_path, text))
    lines = "\n".join(problems(info.value))
    assert "engine.max_model_len" in lines
    assert "engine.gpu_memory_utilization" in lines and "less than or equal to 1" in lines
    assert "engine.tensor_parallel_size" in lines and "greater than or equal to 1" in lines


def test_utilization_zero_is_refused(tmp_path):
    with pytest.raises(PresetError) as info:
        load_preset(write(tmp_path, GOOD), ["engine.gpu_memory_utilization=0"])
    assert "greater than 0" in "\n".join(problems(info.value))


def test_malformed_yaml_names_the_line(tmp_path):
    with pytest.raises(PresetError) as info:
        load_preset(write(tmp_path, "hardware: {gpu: rtx4090\nmodel: [\n"))
    assert "mine.yaml:" in info.value.message and "line" in info.value.message


def test_override_applies_and_is_validated_like_the_file(tmp_path):
    _, _, preset = load_preset(write(tmp_path, GOOD), ["engine.max_model_len=16384", "runtime.port=9000"])
    assert preset.engine.max_model_len == 16384
    assert preset.runtime.port == 9000
    with pytest.raises(PresetError) as info:
        load_preset(write(tmp_path, GOOD), ["hardware.gpuu=rtx4090"])
    assert "override hardware.gpuu: unknown field" in problems(info.value)[0]


def test_override_syntax_errors():
    with pytest.raises(PresetError):
        parse_override("engine.max_model_len")
    with pytest.raises(PresetError):
        parse_override("=3")
    assert parse_override("engine.enforce_eager=true") == (["engine", "enforce_eager"], True)
    # device_ids is a list of text (ids or UUIDs): its unquoted items are read as text, as the field takes them
    assert parse_override("hardware.device_ids=[0, 1]") == (["hardware", "device_ids"], ["0", "1"])


def test_unknown_gpu_suggests(tmp_path):
    with pytest.raises(PresetError) as info:
        load_preset(write(tmp_path, GOOD.replace("rtx4090", "rtx4909")))
    assert "unknown GPU" in problems(info.value)[0]


def test_latest_and_untagged_bases_are_refused(tmp_path):
    for ref in ("nvidia/cuda:latest", "nvidia/cuda"):
        with pytest.raises(PresetError) as info:
            load_preset(write(tmp_path, GOOD), [f"image.base={ref}"])
        assert "image.base" in problems(info.value)[0]


def test_unknown_vllm_version_is_refused(tmp_path):
    with pytest.raises(PresetError) as info:
        load_preset(write(tmp_path, GOOD.replace("0.33.0", "0.99.0")))
    assert "image.vllm_version" in problems(info.value)[0]


def test_secrets_are_refused_in_runtime_env(tmp_path):
    with pytest.raises(PresetError) as info:
        load_preset(write(tmp_path, GOOD), ["runtime.env.HF_TOKEN=hf_abc"])
    line = problems(info.value)[0]
    assert "secret" in line and "hf_abc" not in line


def test_cross_field_rules(tmp_path):
    with pytest.raises(PresetError):
        load_preset(write(tmp_path, GOOD), ["image.strategy=cpu"])
    with pytest.raises(PresetError):
        load_preset(write(tmp_path, GOOD), ["hardware.device_ids=[0, 1]"])


def test_empty_and_non_mapping_files(tmp_path):
    with pytest.raises(PresetError) as info:
        load_preset(write(tmp_path, "- a\n- b\n"))
    assert "mapping" in info.value.message
    with pytest.raises(PresetError) as info:
        load_preset(write(tmp_path, ""))
    assert "required field is missing" in "\n".join(problems(info.value))


# Docker's size grammar (docker/go-units size.go RAMInBytes): one parser, used by the preset, k8s, doctor, smoke.
@pytest.mark.parametrize("text, expected", [
    ("10.24g", 10995116277),  # vLLM's run_cluster.sh: truncated to whole bytes, as Go's int64() does
    ("4G", 4 << 30), ("4g", 4 << 30), ("4gb", 4 << 30), ("4GB", 4 << 30), ("4GiB", 4 << 30), ("4gib", 4 << 30),
    ("4096m", 4 << 30), ("4096M", 4 << 30), ("512k", 512 << 10), ("1t", 1 << 40), ("1p", 1 << 50),
    ("1073741824", 1 << 30), (1073741824, 1 << 30), ("100b", 100), ("100B", 100),
    ("4 GiB", 4 << 30), ("4 g", 4 << 30), ("4 ", 4),  # one space between number and unit
    ("4.g", 4 << 30), (".5k", 512), ("+2k", 2048), ("1e3", 1000), ("1.5e3k", 1500 << 10),
    ("1_024", 1024), ("0x1p10", 1024), ("0", 0),
])
def test_ram_in_bytes_reads_every_form_docker_reads(text, expected):
    from kit.core.units import ram_in_bytes

    assert ram_in_bytes(text) == expected


@pytest.mark.parametrize("text", [
    "", "g", "gb", "-1", "-1g", "4x", "4kbb", "4bb", "4bi", "4gi", "4mib ", " 4g", "4  g", "4 g b", "4g4",
    "4..5g", "1__0", "_10", "0x10", "inf", "inf g", "nan g", "1e30g", "4,5g", True, 4.5, None,
])
def test_ram_in_bytes_refuses_what_docker_refuses(text):
    from kit.core.units import ram_in_bytes

    with pytest.raises(ValueError):
        ram_in_bytes(text)


@pytest.mark.parametrize("size", ["10.24g", "4G", "4gb", "4096m", "4294967296"])
def test_shm_size_accepts_docker_forms_and_renders_them(size):
    from kit.core.units import ram_in_bytes
    from kit.deploy.k8s import k8s_quantity
    from kit.deploy.pipeline import prepare

    prepared = prepare("rtx4090-awq", [f"runtime.shm_size={size}"])
    assert prepared.deployment.runtime.shm.shm_size == size  # compose reads it with the same parser
    compose = yaml.safe_load(prepared.files["compose.yaml"])
    assert compose["services"]["vllm"]["shm_size"] == size
    quantity = k8s_quantity(size)  # the emptyDir gets the same byte count
    units = {"Gi": 1 << 30, "Mi": 1 << 20, "Ki": 1 << 10}
    number, unit = (quantity[:-2], quantity[-2:]) if quantity[-2:] in units else (quantity, "")
    assert int(number) * units.get(unit, 1) == ram_in_bytes(size)


@pytest.mark.parametrize("size", ["4x", "10.24.1g", "-4g", "0", "4 g b"])
def test_bad_shm_size_names_the_override_and_field(size):
    with pytest.raises(PresetError) as caught:
        load_preset("rtx4090-awq", [f"runtime.shm_size={size}"])
    lines = problems(caught.value)
    assert any(line.startswith("override runtime.shm_size: ") for line in lines), lines


@pytest.mark.parametrize("preset, small, sized", [("rtx3090x2-fp16", "64m", "3072m"), ("cpu", "1g", "4096m")])
def test_a_shm_size_below_what_the_kit_sizes_is_warned_of_on_every_render(preset, small, sized):
    """Docker's 64 MiB /dev/shm under tensor parallel (vLLM #1710, #6574): a preset that sets less than the kit's own
    size renders, with a warning naming the field, the kit's size and why; as much or more, or ipc host, is quiet."""
    from kit.deploy.pipeline import prepare

    def shm_warnings(overrides):
        return [w for w in prepare(preset, overrides).report.warnings if "runtime.shm_size" in w.where]

    [warning] = shm_warnings([f"runtime.shm_size={small}"])
    assert warning.where.endswith("runtime.shm_size") and f"({sized}: " in warning.message
    assert f"runtime.shm_size={sized}" in warning.hint
    assert shm_warnings([f"runtime.shm_size={sized}"]) == shm_warnings([]) == []
    assert shm_warnings([f"runtime.shm_size={small}", "runtime.ipc=host"]) == []
