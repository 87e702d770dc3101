"""pyproject.toml lists packages by hand (a mapped folder cannot be found by setuptools' find): keep it whole."""

import fnmatch
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_under_kit_is_listed():
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "kit").rglob("__init__.py")}
    missing = found - set(SETUPTOOLS["packages"])
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml"


def test_top_level_folders_are_shipped_inside_the_package():
    mapped = SETUPTOOLS["package-dir"]
    assert {mapped[p] for p in ("kit._presets", "kit._images", "kit._compose")} == {"presets", "images", "compose"}
    for package, folder in mapped.items():
        assert package in SETUPTOOLS["packages"] and (REPO / folder).is_dir()
        patterns = SETUPTOOLS["package-data"][package]
        files = [p for p in (REPO / folder).iterdir() if p.is_file()]
        unshipped = [p.name for p in files if not any(p.match(pattern) for pattern in patterns)]
        assert not unshipped, f"{folder}/{unshipped} match no package-data pattern of {package}"


def test_every_data_file_in_kit_is_shipped():
    patterns = SETUPTOOLS["package-data"]["kit"]
    files = [p.relative_to(REPO / "kit").as_posix() for p in (REPO / "kit").rglob("*")
             if p.is_file() and p.suffix not in (".py", ".pyc")]
    unshipped = [f for f in files if not any(fnmatch.fnmatch(f, pattern) for pattern in patterns)]
    assert not unshipped, f"kit/{unshipped} match no package-data pattern in pyproject.toml"
