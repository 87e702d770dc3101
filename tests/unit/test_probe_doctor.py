"""kit doctor on the real nvidia-smi output of the lent H200 (recorded there on 2026-12-01)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.config.presetload import load_preset
from kit.core.gpus import gpu_key
from kit.host import doctor

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"


def facts(smi: str) -> doctor.HostFacts:
    missing = doctor.CommandResult(["docker"], None, "", "docker: not found")
    return doctor.HostFacts(missing, missing, doctor.CommandResult(doctor.NVIDIA_SMI_QUERY, 0, smi))


def test_h200_is_named_from_the_catalog_and_its_driver_passes_cuda_13() -> None:
    smi = (FIXTURES / "nvidia-smi-h200-query.csv").read_text()
    gpus = doctor.parse_nvidia_smi(smi)
    assert [(g.name, g.memory_mib, g.driver) for g in gpus] == [("NVIDIA H200", 143771, "580.159.04")]
    assert gpu_key(gpus[0].name, gpus[0].memory_mib) == "h200"
    _name, _path, preset = load_preset("rtx4090-awq")
    check = doctor.check_driver(facts(smi), preset)
    assert check.status == doctor.PASS and "580.65.06" in check.detail
    gpu_checks = doctor.check_gpus(facts(smi), preset)
    assert any("H200" in c.detail for c in gpu_checks)


def test_the_human_nvidia_smi_table_matches_the_query() -> None:
    table = (FIXTURES / "nvidia-smi-h200.txt").read_text()
    assert "Driver Version: 580.159.04" in table and "CUDA Version: 13.0" in table and "143771MiB" in table
