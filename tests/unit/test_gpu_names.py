"""One GPU resolver (kit/core/gpus.py): every name a person or nvidia-smi gives lands on the same catalog entry
through every caller: preset validation, `kit plan --gpu`, the fit search and `kit doctor`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kit.cli.plan import plan_inputs_from_options
from kit.config.preset import Hardware
from kit.core.datafiles import gpu_catalog
from kit.core.errors import PlanError
from kit.core.gpus import gpu_key, near_gpu_names, normalised_gpu_name
from kit.host.doctor import parse_nvidia_smi
from kit.memory import fit
from kit.memory import inputs as planner

pytestmark = pytest.mark.unit

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # a shape kit/data/models knows offline


def _spellings() -> list[tuple[str, str]]:
    """(name, catalog key) for every key, alias and full (nvidia-smi) name in the catalog, and the spellings
    people write them in: upper case, spaces for dashes, a vendor prefix."""
    cases = []
    for key, entry in gpu_catalog().items():
        for name in {key, entry["name"], *entry.get("aliases", [])}:
            cases += [(name, key), (name.upper(), key), (name.replace("-", " "), key)]
        cases.append((f"NVIDIA GeForce {entry['name'].removeprefix('NVIDIA ').removeprefix('GeForce ')}", key))
    return sorted(set(cases))


SPELLINGS = _spellings()
# The spellings of the finding and of nvidia-smi, written out so a catalog edit cannot quietly drop them.
KNOWN = [
    ("RTX 4090", "rtx4090"), ("rtx4090", "rtx4090"), ("rtx-4090", "rtx4090"), ("rtx_4090", "rtx4090"),
    ("4090", "rtx4090"), ("NVIDIA GeForce RTX 4090", "rtx4090"), ("GeForce RTX 4090", "rtx4090"),
    ("NVIDIA H100 80GB HBM3", "h100-80gb"), ("H100", "h100-80gb"), ("Tesla T4", "t4"), ("T4", "t4"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("a100", "a100-80gb"), ("NVIDIA H200", "h200"),
    ("Tesla V100-SXM2-16GB", "v100-16gb"), ("RTX A6000", "rtx-a6000"), ("Jetson AGX Orin 64GB", "jetson-agx-orin-64gb"),
    ("  orin  ", "jetson-agx-orin-64gb"), ("NVIDIA RTX 6000 Ada Generation", "rtx6000-ada"),
]


def test_no_two_catalog_entries_share_a_normalised_name():
    owners: dict[str, set[str]] = {}
    for key, entry in gpu_catalog().items():
        for name in (key, entry["name"], *entry.get("aliases", [])):
            owners.setdefault(normalised_gpu_name(name), set()).add(key)
    shared = {name: keys for name, keys in owners.items() if len(keys) > 1}
    assert not shared, f"catalog names that stand for two GPUs: {shared}"


@pytest.mark.parametrize(("name", "key"), SPELLINGS + KNOWN)
def test_every_caller_resolves_a_name_to_the_same_entry(name, key):
    assert gpu_key(name) == key
    assert Hardware(gpu=name).gpu == key  # preset validation: hardware.gpu
    assert planner.find_gpu(name).key == key  # kit plan --gpu and the fit search (fit imports the planner's)
    assert fit.find_gpu is planner.find_gpu
    inputs = plan_inputs_from_options(model=MODEL, gpu=name)  # what `kit plan --gpu NAME` builds
    assert inputs.gpu_name == key and inputs.gpu_memory_gib == gpu_catalog()[key]["memory_gib"]


@pytest.mark.parametrize("key", sorted(gpu_catalog()))
def test_doctor_maps_each_catalog_name_as_nvidia_smi_prints_it(key):
    entry = gpu_catalog()[key]
    mib = round(entry["memory_gib"] * 1024 * 1.02)  # nvidia-smi's total sits a little above CUDA's
    [found] = parse_nvidia_smi(f"{entry['name']}, {mib}, 580.65.06\n")
    assert found.catalog_key == key == Hardware(gpu=entry["name"]).gpu == planner.find_gpu(entry["name"]).key


def test_memory_decides_between_cards_of_one_name():
    assert gpu_key("NVIDIA GeForce RTX 4060 Ti", 16380) == "rtx4060ti-16gb"
    assert gpu_key("NVIDIA GeForce RTX 4060 Ti", 8188) is None  # the 8 GB card is not in the catalog
    assert gpu_key("NVIDIA GeForce RTX 4060 Ti") == "rtx4060ti-16gb"  # a name alone (a preset) takes the catalog's


@pytest.mark.parametrize("name", ["RTX 4909", "rtx4909", "NVIDIA GeForce RTX 4909"])
def test_an_unknown_name_is_refused_alike_with_near_matches(name):
    assert gpu_key(name) is None
    assert "rtx4090" in near_gpu_names(name)
    with pytest.raises(ValidationError, match=r"unknown GPU .*did you mean .*rtx4090"):
        Hardware(gpu=name)
    with pytest.raises(PlanError, match="unknown GPU") as info:
        planner.find_gpu(name)
    assert "rtx4090" in (info.value.hint or "") and "--gpu-memory-gib" in (info.value.hint or "")


def test_a_name_near_nothing_points_at_the_catalog():
    assert near_gpu_names("zzzzzzzz") == []
    with pytest.raises(ValidationError, match="kit gpus"):
        Hardware(gpu="zzzzzzzz")
    assert gpu_key("") is None and gpu_key("NVIDIA") is None
