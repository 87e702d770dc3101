"""FlashInfer's JIT toolchain in slim images: the CUDA compiler wheels pinned to torch's toolkit, laid out as a
CUDA_HOME (images/cuda_jit_layout.sh), g++ at run time. The image-level proof (the sampler compiles inside the
built image) is tests/integration/test_slim_gpu_image.py; the GPU proof is kit/data/floor/."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from kit.core.datafiles import IMAGES_DIR, vllm_table
from kit.deploy import deployment as dep
from kit.deploy.pipeline import prepare
from kit.image.wheelhouse import missing_wheels

pytestmark = pytest.mark.unit

LAYOUT = IMAGES_DIR / dep.JIT_LAYOUT_FILE


def test_slim_release_pins_the_compiler_to_torchs_toolkit_and_sets_cuda_home():
    prepared = prepare("rtx4090-awq")
    d = prepared.deployment
    toolchain = vllm_table()["versions"][d.image.vllm_version]["jit_toolchain"]
    assert toolchain["pip"] in d.image.requirements and toolchain["pip"].startswith("cuda-toolkit[")
    assert d.image.cuda_jit == toolchain["cuda_jit"] == "cu" + d.image.cuda.split(".")[0]
    assert d.image.image_env == {"CUDA_HOME": f"{dep.VENV}/cuda", "FLASHINFER_WORKSPACE_BASE": dep.VLLM_CACHE}
    assert f"vllm-cache:{dep.VLLM_CACHE}" in prepared.files["compose.yaml"]  # where FlashInfer's builds persist
    assert "g++" in d.image.runtime_packages and "gcc" in d.image.runtime_packages
    files = prepared.files
    assert files[dep.JIT_LAYOUT_FILE] == LAYOUT.read_text()
    assert f"!{dep.JIT_LAYOUT_FILE}" in files[".dockerignore"].splitlines()
    dockerfile = files["Dockerfile"]
    assert f"COPY {dep.JIT_LAYOUT_FILE} /jit/" in dockerfile  # the inputs stage, bind-mounted at /mnt
    assert f'sh /mnt/jit/cuda_jit_layout.sh "$site/nvidia/{d.image.cuda_jit}"' in dockerfile
    assert "CUDA_HOME=\"/opt/venv/cuda\"" in dockerfile
    # The layout runs after the prune step (which would otherwise see the links) and before the byte-code purge.
    assert dockerfile.index("prune_site.py /mnt/prune") < dockerfile.index("cuda_jit_layout.sh \"$site")


def test_the_layout_script_is_part_of_the_image_tag():
    prepared = prepare("rtx4090-awq")
    changed = dict(prepared.files, **{dep.JIT_LAYOUT_FILE: prepared.files[dep.JIT_LAYOUT_FILE] + "# edit\n"})
    assert replace(prepared, files=changed).image_ref != prepared.image_ref


@pytest.mark.parametrize(("name", "overrides"), [("a100x8", []), ("cpu", []), ("orin", []),
                                                ("rtx4090-awq", ["image.vllm_version=0.16.0", 'image.cuda="12.9"'])])
def test_other_strategies_and_cuda_builds_have_no_jit_toolchain(name, overrides):
    # The pin is the toolkit of the release's own torch build; another CUDA brings another torch and toolkit.
    prepared = prepare(name, overrides=overrides)
    d = prepared.deployment
    assert d.image.cuda_jit is None and "CUDA_HOME" not in d.image.image_env and "g++" not in d.image.runtime_packages
    assert dep.JIT_LAYOUT_FILE not in prepared.files
    assert not [r for r in d.image.requirements if r.startswith("cuda-toolkit")]


def test_the_sampler_is_compiled_into_slim_images_of_gpus_that_sample_with_flashinfer():
    """images/flashinfer_aot.py compiles FlashInfer's sampler while a slim image is built, for the preset's compute
    capability, where vLLM samples with FlashInfer (8.0-12.1, more than 16 SMs): RTX 4090 yes, a T4 (7.5) no, and no
    other strategy or CUDA build (no toolchain, no arch). The script is part of the image's tag."""
    prepared = prepare("rtx4090-awq")
    d, files = prepared.deployment, prepared.files
    assert d.image.flashinfer_aot == ["sampling"] and d.image.prune_arch == "8.9"
    assert files[dep.FLASHINFER_AOT_FILE] == (IMAGES_DIR / dep.FLASHINFER_AOT_FILE).read_text()
    assert f"!{dep.FLASHINFER_AOT_FILE}" in files[".dockerignore"].splitlines()
    dockerfile = files["Dockerfile"]
    run = "/opt/venv/bin/python /mnt/aot/flashinfer_aot.py --arch 8.9 --root /opt/kit-aot sampling"
    # in a stage of its own on the venv's (the runtime's g++ and Python headers), copied onto the image's root after
    # the byte-code, before the user switch
    assert (dockerfile.index("FROM runtime AS venv") < dockerfile.index("FROM venv AS kit-aot") < dockerfile.index(run)
            < dockerfile.index("COPY --from=kit-aot /opt/kit-aot/ /") < dockerfile.index("USER 10001"))
    changed = dict(files, **{dep.FLASHINFER_AOT_FILE: files[dep.FLASHINFER_AOT_FILE] + "# edit\n"})
    assert replace(prepared, files=changed).image_ref != prepared.image_ref
    t4 = prepare("rtx4090-awq", overrides=["hardware.gpu=t4"]).deployment
    assert t4.image.cuda_jit and t4.image.flashinfer_aot == []
    for name, overrides in [("a100x8", []), ("cpu", []), ("orin", []),
                            ("rtx4090-awq", ["image.vllm_version=0.16.0", 'image.cuda="12.9"'])]:
        other = prepare(name, overrides=overrides)
        assert other.deployment.image.flashinfer_aot == [] and dep.FLASHINFER_AOT_FILE not in other.files, name


def fake_toolkit(root: Path) -> Path:
    home = root / "nvidia" / "cu13"
    (home / "bin").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (home / "bin" / "nvcc").chmod(0o755)
    (home / "lib" / "libcudart.so.13").write_bytes(b"")
    return home


def test_layout_gives_the_wheels_the_paths_flashinfers_link_line_uses(tmp_path):
    home = fake_toolkit(tmp_path)
    subprocess.run(["sh", str(LAYOUT), str(home)], check=True)
    assert (home / "lib64").is_symlink() and (home / "lib64").resolve() == (home / "lib").resolve()
    assert (home / "lib" / "libcudart.so").resolve() == (home / "lib" / "libcudart.so.13").resolve()
    assert "INPUT(libcuda.so.1)" in (home / "lib64" / "stubs" / "libcuda.so").read_text()
    subprocess.run(["sh", str(LAYOUT), str(home)], check=True)  # idempotent: a rebuilt layer runs it again


def test_layout_refuses_a_folder_without_the_compiler(tmp_path):
    home = fake_toolkit(tmp_path)
    (home / "bin" / "nvcc").unlink()
    run = subprocess.run(["sh", str(LAYOUT), str(home)], capture_output=True, text=True)
    assert run.returncode != 0 and f"no nvcc in {home}/bin" in run.stderr


def test_the_driver_stub_links_a_module_against_libcuda_so_1(tmp_path):
    # The linker script in lib64/stubs stands for the driver library the container runtime mounts: a module linked
    # with FlashInfer's flags (-L$CUDA_HOME/lib64/stubs -lcuda) records libcuda.so.1 as NEEDED. The driver is
    # played by a library of that soname in a folder on the search path, as the distribution's library folder is.
    home = fake_toolkit(tmp_path)
    subprocess.run(["sh", str(LAYOUT), str(home)], check=True)
    driver = tmp_path / "driver"
    driver.mkdir()
    (tmp_path / "cuda.c").write_text("int cuInit(unsigned flags) { return (int) flags; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(driver / "libcuda.so.1"),
                    str(tmp_path / "cuda.c")], check=True)
    (tmp_path / "module.c").write_text("int cuInit(unsigned); int init(void) { return cuInit(0); }\n")
    module = tmp_path / "module.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(module), str(tmp_path / "module.c"),
                    f"-L{home}/lib64/stubs", f"-L{driver}", "-Wl,--as-needed", "-lcuda"], check=True)
    dynamic = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True, check=True).stdout
    assert "Shared library: [libcuda.so.1]" in dynamic


def test_missing_wheels_counts_every_version_a_reused_wheelhouse_holds(tmp_path):
    for name in ("nvidia_nvvm-13.5.37-py3-none-any.whl", "nvidia_nvvm-13.0.88-py3-none-any.whl",
                 "torch-2.14.0+cpu-cp311-cp311-linux_x86_64.whl"):
        (tmp_path / name).write_bytes(b"")
    pins = {"nvidia-nvvm": "13.0.88", "torch": "2.14.0", "nvidia-cuda-nvcc": "13.0.88"}
    assert missing_wheels(tmp_path, pins) == ["nvidia-cuda-nvcc==13.0.88"]


def test_a_release_row_names_only_modules_the_script_compiles():
    """The modules a release row lists go into the Dockerfile's RUN line: the user-row check allows only the ones
    images/flashinfer_aot.py has a generator for, and the kit's own rows use no others."""
    import ast

    from kit.core.tables import FLASHINFER_AOT_MODULES

    tree = ast.parse((IMAGES_DIR / dep.FLASHINFER_AOT_FILE).read_text())
    [generators] = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    and any(getattr(t, "id", None) == "GENERATORS" for t in node.targets)]
    assert tuple(ast.literal_eval(generators)) == FLASHINFER_AOT_MODULES
    for version, row in vllm_table()["versions"].items():
        assert set(row.get("flashinfer_aot") or []) <= set(FLASHINFER_AOT_MODULES), version


def test_the_image_compiles_the_sampler_exactly_where_the_planner_charges_flashinfers_buffers():
    """One rule (kit/memory/rules.py flashinfer_sampler_used) decides both: the slim image's FlashInfer modules and
    the planner's top-k sampler terms. Its edges: the compute capability range is inclusive, the SM floor is not."""
    from kit.core.datafiles import gpu_catalog
    from kit.core.tables import SamplerRule
    from kit.memory.rules import flashinfer_sampler_used, rules_for

    preset = prepare("rtx4090-awq").preset
    sampler = rules_for(preset.image.vllm_version).memory_accounting.sampler
    for name, gpu in gpu_catalog().items():
        used = flashinfer_sampler_used(sampler, str(gpu["compute_capability"]), gpu.get("sm_count"))
        assert ("sampling" in dep.flashinfer_aot_modules(preset, gpu)) == used, name
    when = SamplerRule.model_validate({"flashinfer_when": {"min_cc": "8.0", "max_cc": "12.1", "more_than_sms": 16}})
    assert flashinfer_sampler_used(when, "8.0", 17) and flashinfer_sampler_used(when, "12.1", None)
    assert not flashinfer_sampler_used(when, "7.5", 40) and not flashinfer_sampler_used(when, "12.2", 40)
    assert not flashinfer_sampler_used(when, "8.7", 16)  # the floor itself: not more than 16 SMs
    assert flashinfer_sampler_used(when, None, 16) and flashinfer_sampler_used(SamplerRule(), "7.0", 1)  # unknown: taken to


def test_deepseeks_scaled_rope_is_compiled_into_its_image_and_no_other_models():
    """vLLM applies DeepSeek's scaled RoPE with FlashInfer's rope module (kit/memory/rules.py flashinfer_rope_used,
    read in 0.33.0 and 0.34.0): a DeepSeek-V2-Lite preset's slim image compiles it beside the sampler; the same
    preset with a Llama or Qwen model does not, and its image is the one it was."""
    from kit.memory.rules import flashinfer_rope_used

    base = ["hardware.gpu=h100-80gb", "image.leave_out=[]"]
    deepseek = prepare("rtx4090-awq", overrides=[*base, "model.id=deepseek-ai/DeepSeek-V2-Lite-Chat",
                                                 "engine.quantization=null", "engine.dtype=bfloat16"])
    assert deepseek.deployment.image.flashinfer_aot == ["sampling", "rope"]
    assert "/mnt/aot/flashinfer_aot.py --arch 9.0 --root /opt/kit-aot sampling rope" in deepseek.files["Dockerfile"]
    qwen = prepare("rtx4090-awq", overrides=base)
    assert qwen.deployment.image.flashinfer_aot == ["sampling"] and qwen.image_ref != deepseek.image_ref
    yarn = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}
    assert flashinfer_rope_used("DeepseekV2ForCausalLM", yarn, 64)
    assert flashinfer_rope_used("DeepseekV3ForCausalLM", {"rope_type": "yarn", "factor": 40}, 64)
    assert not flashinfer_rope_used("DeepseekV2ForCausalLM", None, 64)  # unscaled: the plain rotary embedding
    assert not flashinfer_rope_used("DeepseekV2ForCausalLM", {"rope_type": "default"}, 64)
    assert not flashinfer_rope_used("DeepseekV2ForCausalLM", yarn, 96)  # a head FlashInfer's rope does not take
    assert not flashinfer_rope_used("LlamaForCausalLM", {"rope_type": "llama3", "factor": 8.0}, 128)


def test_a_model_the_kit_cannot_read_gets_no_rope_module(tmp_path):
    """The rope module follows the model the planner reads; a model id that is nowhere the kit looks (no catalog
    entry, no folder, no cache) leaves the image as before, and its first start compiles what it needs."""
    preset = prepare("rtx4090-awq").preset
    model = preset.model.model_copy(update={"id": "nobody/no-such-model", "local_path": None})
    unknown = preset.model_copy(update={"model": model})
    gpu = {"compute_capability": "9.0", "sm_count": 132}
    assert dep.flashinfer_aot_modules(unknown, gpu) == ["sampling"]
