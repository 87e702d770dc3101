"""What a base image's probe says becomes the Python and glibc the wheels are resolved for (`kit wheelhouse`,
`kit lock`): the base's own python3 where it has one, else the python3 its distribution installs (the image's runtime
step installs it), and a base whose Python cannot be known is refused, naming it. No Docker: the probe's output is
given; tests/integration/test_base_probe.py runs it in real images."""

from __future__ import annotations

import pytest

from kit.core.datafiles import vllm_table
from kit.core.errors import KitError
from kit.image.lock import LockedTarget, target_mismatch
from kit.image.wheelhouse import DISTRIBUTION_PYTHON, BaseProbe, parse_base_probe

pytestmark = pytest.mark.unit


def test_python3_in_the_image_wins():
    probe = parse_base_probe("my/base:1", "os debian 12\nglibc 2.36\npython 3.12\n")
    assert (probe.python_version, probe.glibc, probe.python_from) == ("3.12", "2.36", "python3 in the image")


def test_without_python3_the_distributions_own():
    probe = parse_base_probe("nvidia/cuda:13.0.3-base-ubuntu24.04", "os ubuntu 24.04\nglibc 2.39\n")
    assert (probe.python_version, probe.glibc) == ("3.12", "2.39")
    assert probe.python_from == "the distribution's python3 (ubuntu 24.04)"


def test_an_unknown_distribution_without_python3_is_refused_naming_the_base():
    with pytest.raises(KitError) as refused:
        parse_base_probe("my/alma:9", "os almalinux 9.4\nglibc 2.34\n")
    assert "base image my/alma:9" in str(refused.value) and "almalinux 9.4" in str(refused.value)
    assert "--python-version" in refused.value.hint


def test_a_base_without_glibc_is_refused():
    with pytest.raises(KitError) as refused:
        parse_base_probe("alpine:3.20", "os alpine 3.20.3\nglibc \npython 3.12\n")
    assert "base image alpine:3.20: no glibc found" in str(refused.value)


def test_the_distribution_table_agrees_with_the_cuda_base_table():
    """Every CUDA base the kit picks has no python3 of its own, so the distribution table decides its Python: it
    must say what kit/data/vllm.yaml's CUDA table says for that base."""
    rows = vllm_table()["cuda"]
    checked = 0
    for row in rows.values():
        for (distro, version), python in DISTRIBUTION_PYTHON.items():
            if f"{distro}{version}" in row["base_image"]:
                assert row["python"] == python, row
                checked += 1
    assert checked >= 4


def test_a_locked_build_refuses_wheels_for_another_python_or_a_newer_glibc():
    # kit build --locked asks this of the probed base before anything is built
    base = BaseProbe("3.11", "2.36", "python3 in the image")
    assert target_mismatch(LockedTarget(python="3.11", glibc="2.36", machine="x86_64"), base) is None
    assert target_mismatch(LockedTarget(python="3.11", glibc="2.35", machine="x86_64"), base) is None
    assert target_mismatch(LockedTarget(python="3.12", glibc="2.36", machine="x86_64"), base) == (
        "target.python: the wheels are for CPython 3.12, the base runs Python 3.11 (python3 in the image)")
    assert target_mismatch(LockedTarget(python="3.11", glibc="2.39", machine="x86_64"), base) == (
        "target.glibc: the wheels are for glibc 2.39, the base has 2.36")
