"""The prune rules (kit/data/prune.yaml) against the measured floor, and kit/image/prune.py on real directories."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from kit.core.datafiles import FLOOR_DIR, floor_files, prune_rules
from kit.image import prune

pytestmark = pytest.mark.unit

FLOOR_ARCH = "9.0"  # the floor was measured on an H200


FLOORS = ["vllm-0.26.0-h200", "vllm-0.33.0-h200"]  # kit/data/floor/: 0.26 on the machine's env, 0.33 on the slim set


@pytest.mark.parametrize("floor", FLOORS)
def test_no_rule_removes_a_file_the_floor_run_read(floor):
    compiled = prune.file_rules(prune_rules(), FLOOR_ARCH)
    site_files = [f for f in floor_files(floor) if f["where"] != "system"]
    assert len(site_files) > 5000  # the list is the real measurement, not an empty stand-in
    hits = [(f["path"], prune.matching_rule(f["path"], compiled)["pattern"]) for f in site_files
            if prune.matching_rule(f["path"], compiled)]
    assert hits == []


@pytest.mark.parametrize("floor", FLOORS)
def test_floor_holds_what_a_cuda_server_must_load(floor):
    paths = {f["path"] for f in floor_files(floor)}
    for needed in ("torch/lib/libtorch_cuda.so", "triton/_C/libtriton.so", "nvidia/cu13/lib/libcublasLt.so.13",
                   "triton/backends/nvidia/bin/ptxas", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"):
        assert needed in paths, needed
    # cuDNN's engine libraries were never read: the reason its rule exists.
    assert not [p for p in paths if p.startswith("nvidia/cudnn/lib/libcudnn_")]


def test_every_rule_says_why_and_distributions_are_not_floor_requirements():
    rules = prune_rules()
    for rule in rules["files"] + rules["keep"] + rules["distributions"]:
        assert len(rule["reason"]) > 20, rule
    names = {prune.normalise_name(d["name"]) for d in rules["distributions"]}
    assert "torchvision" not in names  # vLLM 0.26 imports it at start-up: the pruned run failed without it
    assert {"torchaudio", "opencv-python-headless"} <= names


def test_cuda_conditional_distributions_follow_the_images_cuda():
    every = {d["name"] for d in prune_rules()["distributions"]}
    assert "nvidia-cutlass-dsl-libs-cu12" in {d["name"] for d in prune_rules("13.0")["distributions"]}
    assert "nvidia-cutlass-dsl-libs-cu12" in {d["name"] for d in prune_rules("13.1")["distributions"]}
    older = {d["name"] for d in prune_rules("12.9")["distributions"]}
    assert "nvidia-cutlass-dsl-libs-cu12" not in older and older < every
    assert "torchaudio" in older


def test_the_rtx4090_image_leaves_the_cuda12_cute_dsl_out():
    from kit.deploy.pipeline import prepare

    prepared = prepare("rtx4090-awq")
    assert prepared.deployment.image.cuda == "13.0"
    assert "nvidia-cutlass-dsl-libs-cu12" in prepared.deployment.image.exclude_packages
    rendered = json.loads(prepared.files["prune-rules.json"])
    assert "nvidia-cutlass-dsl-libs-cu12" in {d["name"] for d in rendered["distributions"]}
    # On CUDA 12.9 (vLLM 0.16's own build: slim takes only a release's own CUDA) the cu12 flavour is the one the DSL
    # loads: kept, in the uninstall list and the rules alike.
    older = prepare("rtx4090-awq", overrides=["image.vllm_version=0.16.0"], allow_no_fit=True)
    assert older.deployment.image.cuda == "12.9"
    assert "nvidia-cutlass-dsl-libs-cu12" not in older.deployment.image.exclude_packages
    assert "nvidia-cutlass-dsl-libs-cu12" not in older.files["prune-rules.json"]


@pytest.mark.parametrize(("pattern", "path", "matches"), [
    ("**/*.a", "nvidia/x/lib/libfoo.a", True),
    ("**/*.a", "libfoo.a", True),
    ("**/*.a", "libfoo.abi3.so", False),
    ("nvidia/cudnn/lib/libcudnn_*.so*", "nvidia/cudnn/lib/libcudnn_adv.so.9", True),
    ("nvidia/cudnn/lib/libcudnn_*.so*", "nvidia/cudnn/lib/libcudnn.so.9", False),
    ("**/tests/**", "numpy/_core/tests/test_a.py", True),
    ("**/tests/**", "numpy/_core/testing/a.py", False),
    ("triton/backends/nvidia/lib/cupti*/**", "triton/backends/nvidia/lib/cupti-blackwell/libcupti.so", True),
    ("torch/bin/protoc*", "torch/binx/protoc", False),
])
def test_pattern_semantics(pattern, path, matches):
    assert bool(prune.pattern_regex(pattern).match(path)) is matches


def test_arch_conditions():
    rules = {r["pattern"]: r for r in prune_rules()["files"]}
    fa3, fa2 = rules["vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"], rules["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"]
    assert prune.rule_applies(fa3, "8.9") and not prune.rule_applies(fa3, "9.0")
    assert prune.rule_applies(fa2, "9.0") and not prune.rule_applies(fa2, "8.9") and not prune.rule_applies(fa2, "10.0")
    assert not prune.rule_applies(fa3, None)  # no GPU named: no family rule
    assert prune.rule_applies(rules["**/*.a"], None)


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    files = {
        "torchaudio/__init__.py": "x", "torchaudio/lib/libtorchaudio.so": "x" * 100,
        "torch/__init__.py": "x", "torch/fx/passes/tests/__init__.py": "", "torch/lib/libtorch_cuda.so": "y" * 50,
        "numpy/_core/tests/test_x.py": "z" * 10, "nvidia/cudnn/lib/libcudnn.so.9": "c",
        "nvidia/cudnn/lib/libcudnn_adv.so.9": "c" * 1000, "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so": "f" * 7,
    }
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    info = site / "torchaudio-2.11.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: torchaudio\n")
    (info / "RECORD").write_text("torchaudio/__init__.py,,\ntorchaudio/lib/libtorchaudio.so,,\n"
                                 "torchaudio-2.11.0.dist-info/RECORD,,\n")
    return site


def test_script_removes_by_record_and_pattern_and_keeps_the_rest(tmp_path):
    site = _site(tmp_path)
    rules_file = tmp_path / "rules.json"
    rules_file.write_text(json.dumps(prune_rules()))
    report = tmp_path / "report.json"
    # Run as the image runs it: the module file as a script, with nothing of the kit importable.
    subprocess.run([sys.executable, "-I", prune.__file__, str(rules_file), str(site), "--arch", "8.9",
                    "--report", str(report)], check=True, capture_output=True, cwd=tmp_path)
    left = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file())
    assert left == ["nvidia/cudnn/lib/libcudnn.so.9", "torch/__init__.py", "torch/fx/passes/tests/__init__.py",
                    "torch/lib/libtorch_cuda.so"]
    assert not (site / "torchaudio").exists() and not (site / "torchaudio-2.11.0.dist-info").exists()
    by_rule = json.loads(report.read_text())[str(site)]["by_rule"]
    assert by_rule["nvidia/cudnn/lib/libcudnn_*.so*"] == {"files": 1, "bytes": 1000}
    assert by_rule["distribution torchaudio"]["files"] == 4  # RECORD's files and the dist-info's
    assert by_rule["vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"]["bytes"] == 7


def test_dry_run_changes_nothing(tmp_path):
    site = _site(tmp_path)
    before = sorted(site.rglob("*"))
    rules_file = tmp_path / "rules.json"
    rules_file.write_text(json.dumps(prune_rules()))
    assert prune.main([str(rules_file), str(site), "--dry-run"]) == 0
    assert sorted(site.rglob("*")) == before


def test_the_pruned_environment_served_every_floor_model_on_the_gpu():
    # The record of the GPU runs (kit/data/floor/proof-*.json): the prune rules removed what they say, then the
    # floor run's three models (dense, AWQ, FP8) started and every request answered 200.
    proof = json.loads((FLOOR_DIR / "proof-h200-vllm-0.26.0.json").read_text())
    floor_models = {run["name"] for run in json.loads(lzma.open(FLOOR_DIR / "vllm-0.26.0-h200.json.xz").read())["runs"]}
    served = {run["name"] for run in proof["runs"] if run["answers"] and all(code == 200 for _, code in run["answers"])}
    assert served == floor_models == {"dense", "awq", "fp8"}
    assert proof["removed"]["site1"]["bytes"] > 10**9


def test_the_slim_set_served_every_floor_model_with_vllm_033_and_flashinfers_jit():
    # kit/data/floor/proof-h200-vllm-0.33.0.json: the rtx4090-awq lock (vLLM 0.33.0, torch 2.14.0) with every
    # image.leave_out feature left out and the rules applied at 9.0 served dense, AWQ and FP8 on the H200, and
    # FlashInfer's JIT built its sampler with the pinned wheel compiler through the image's CUDA_HOME layout.
    proof = json.loads((FLOOR_DIR / "proof-h200-vllm-0.33.0.json").read_text())
    floor = json.loads(lzma.open(FLOOR_DIR / "vllm-0.33.0-h200.json.xz").read())
    served = {run["name"] for run in proof["runs"] if run["answers"] and all(code == 200 for _, code in run["answers"])}
    assert served == {run["name"] for run in floor["runs"]} == {"dense", "awq", "fp8"}
    assert set(proof["left_out"]) == set(prune_rules()["features"])
    left_out = {prune.normalise_name(n) for names in proof["left_out"].values() for n in names}
    assert not {f["distribution"] for f in floor_files("vllm-0.33.0-h200")} & left_out  # none of them was there
    removed = proof["removed"]["before_carrying"]["bytes"] + proof["removed"]["on_the_machine"]["bytes"]
    assert removed > 1.5e9
    jit = proof["flashinfer_jit"]
    assert jit["has_flashinfer"] and jit["sampler_ok"] and jit["nvidia-cuda-nvcc"].startswith(jit["torch_cuda"] + ".")
    # The dense run started with an empty FlashInfer cache: the JIT's compiler and headers are in its floor.
    dense = {f["path"] for f in floor_files("vllm-0.33.0-h200") if "dense" in f["models"]}
    assert {"nvidia/cu13/bin/nvcc", "nvidia/cu13/nvvm/bin/cicc"} <= dense
    assert any(p.startswith("flashinfer/data/include/") for p in dense)
