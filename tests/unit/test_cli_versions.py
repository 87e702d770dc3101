"""One version comparator (packaging.version): release candidates, post and dev releases order as pip orders them."""

import pytest

from kit.config import flags
from kit.core.errors import PlanError
from kit.core.versions import release_at_least, version
from kit.deploy import compat
from kit.host import doctor
from kit.memory import rules

pytestmark = pytest.mark.unit

PEP440_ORDER = ["0.25.0", "0.26.0.dev3", "0.26.0rc1", "0.26.0", "0.26.0.post1", "0.26.1"]


def test_flag_snapshots_sort_with_prereleases(tmp_path):
    # The old key split "0.26.0rc1" into (0, 26, "0rc1") and crashed comparing "0rc1" with 0 (TypeError).
    for name in reversed(PEP440_ORDER):
        (tmp_path / f"vllm-{name}.json").write_text("{}")
    assert flags.available_versions(tmp_path) == PEP440_ORDER


def test_compat_rows_and_planner_follow_pep440():
    # A release candidate is before its release: a "since 0.21.0" row does not apply to 0.21.0rc1 yet.
    rows = [{"since": "0.1.0", "value": "old"}, {"since": "0.21.0", "value": "new"}]
    assert compat.versioned(rows, "0.21.0rc1") == "old"
    assert compat.versioned(rows, "0.21.0.post1") == "new"
    assert compat.versioned(rows, "v0.21.0") == "new"
    assert rules.parse_version("0.26.0rc2") < rules.parse_version("0.26.0") < rules.parse_version("0.26.0.post1")
    assert rules.default_gpu_memory_utilization("0.33.0rc1") == rules.default_gpu_memory_utilization("0.33.0")
    with pytest.raises(PlanError, match="is not a version"):
        rules.parse_version("latest")
    with pytest.raises(PlanError, match="is not a version"):
        rules.parse_version("1" * 5000)  # refused before any int() of thousands of digits


def test_host_tool_versions():
    # Docker, Compose and driver spellings that PEP 440 refuses compare by their leading release.
    assert doctor.version_key("20.10.24+dfsg1") < doctor.version_key("28.5.1")
    assert doctor.version_key("24.0.7-ce") == version("24.0.7")
    assert doctor.version_key("v2.40.3") > doctor.version_key("2.24.0")
    assert doctor.version_key("575.51.03") < doctor.version_key("580.65.06")
    assert doctor.version_key("garbage") < doctor.version_key("0.0.1")  # unreadable: "too old", never a crash
    assert release_at_least("0.21.0", (0, 21)) and not release_at_least("0.20.9", (0, 21))
