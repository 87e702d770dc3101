"""Releases from the user's side (kit/core/userdata.py): a flag snapshot and a version row in
$XDG_CONFIG_HOME/vllm-kit/ let `kit upgrade --to` reach a release the installed kit does not ship."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config import flagsnap
from kit.config.flags import load_snapshot
from kit.core.datafiles import DATA_DIR, load_yaml
from kit.deploy.record import read_record
from tests.unit.kit_process import run_kit

pytestmark = pytest.mark.unit

NEW = "0.35.0"  # a release the kit does not ship (tests/unit/test_upgrade.py: refused without the user's files)


def kit(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def snapshot_of(version: str, based_on: str = "0.33.0") -> dict:
    data = json.loads((DATA_DIR / "flags" / f"vllm-{based_on}.json").read_text(encoding="utf-8"))
    data["vllm"]["version"] = version
    return data


def row_of(version: str, based_on: str = "0.33.0") -> dict:
    row = json.loads(json.dumps(load_yaml("vllm.yaml")["versions"][based_on]))
    row["pip"] = f"vllm=={version}"
    row["official_image"] = f"vllm/vllm-openai:v{version}"
    return row


@pytest.fixture
def config(tmp_path, monkeypatch) -> Path:
    """An XDG config home of this test's, holding the snapshot and row of NEW; returns its vllm-kit folder."""
    home = tmp_path / "xdg"
    folder = home / "vllm-kit"
    (folder / "flags").mkdir(parents=True)
    (folder / "flags" / f"vllm-{NEW}.json").write_text(json.dumps(snapshot_of(NEW)), encoding="utf-8")
    (folder / "vllm.yaml").write_text(yaml.safe_dump({"versions": {NEW: row_of(NEW)}}), encoding="utf-8")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return folder


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith(("hint:", "note:"))]


def test_a_user_snapshot_and_row_let_upgrade_reach_an_unshipped_release(config):
    assert not (DATA_DIR / "flags" / f"vllm-{NEW}.json").exists()
    assert NEW not in load_yaml("vllm.yaml")["versions"]
    result = kit("upgrade", "--to", NEW, "preset=rtx4090-awq")
    assert result.exit_code == 0, result.output
    assert f"vLLM 0.33.0 -> {NEW}" in result.stdout
    assert f"+vllm=={NEW}" in result.stdout
    assert f"clean: `kit render preset=rtx4090-awq image.vllm_version={NEW}`" in result.stderr
    assert load_snapshot(NEW).version == NEW


def test_a_real_kit_process_applies_the_upgrade_from_the_users_folder(config, tmp_path):
    out = tmp_path / "dep"
    assert kit("render", "preset=rtx4090-awq", "--out", str(out)).exit_code == 0
    run = run_kit(["upgrade", "--to", NEW, "--out", str(out), "--apply"],
                  env={"XDG_CONFIG_HOME": str(config.parent)})
    assert run.code == 0, run.stderr
    assert f"upgraded to vLLM {NEW}" in run.stderr
    assert f"image.vllm_version={NEW}" in read_record(out).overrides
    assert f"vllm=={NEW}" in (out / "requirements.txt").read_text()
    # Without the user's folder the same release is refused: the files above are what made it work.
    empty = tmp_path / "empty-xdg"
    empty.mkdir()
    refused = run_kit(["upgrade", "--to", NEW, "preset=rtx4090-awq"], env={"XDG_CONFIG_HOME": str(empty)})
    assert refused.code == 1 and f"no vLLM flag snapshot for {NEW}" in refused.stderr
    assert str(empty / "vllm-kit" / "flags") in refused.stderr  # the hint names where the snapshot goes


def _not_json(folder: Path) -> tuple[Path, str]:
    path = folder / "flags" / f"vllm-{NEW}.json"
    path.write_text('{"format": 1,', encoding="utf-8")
    return path, "not JSON at line 1"


def _bad_kind(folder: Path) -> tuple[Path, str]:
    path = folder / "flags" / f"vllm-{NEW}.json"
    data = snapshot_of(NEW)
    data["flags"]["max_model_len"]["kind"] = "sometimes"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, "flags.max_model_len.kind: is 'sometimes'"


def _wrong_version(folder: Path) -> tuple[Path, str]:
    path = folder / "flags" / f"vllm-{NEW}.json"
    path.write_text(json.dumps(snapshot_of("0.36.0")), encoding="utf-8")
    return path, "vllm.version: is '0.36.0', but the file name says 0.35.0"


def _too_large(folder: Path) -> tuple[Path, str]:
    path = folder / "flags" / f"vllm-{NEW}.json"
    limit = load_yaml("input_limits.yaml")["files"]["user_snapshot_max_bytes"]
    path.write_text(json.dumps(snapshot_of(NEW)) + " " * limit, encoding="utf-8")
    return path, f"larger than the {limit} bytes a flag snapshot may have"


def _row_unknown_cuda(folder: Path) -> tuple[Path, str]:
    path = folder / "vllm.yaml"
    path.write_text(yaml.safe_dump({"versions": {NEW: {**row_of(NEW), "cuda": "11.0"}}}), encoding="utf-8")
    return path, f"versions.{NEW}.cuda: '11.0' is not a CUDA release the kit knows"


def _row_missing_field(folder: Path) -> tuple[Path, str]:
    path = folder / "vllm.yaml"
    row = row_of(NEW)
    del row["official_layout"]
    path.write_text(yaml.safe_dump({"versions": {NEW: row}}), encoding="utf-8")
    return path, f"versions.{NEW}.official_layout: is required"


def _table_other_key(folder: Path) -> tuple[Path, str]:
    path = folder / "vllm.yaml"
    path.write_text(yaml.safe_dump({"versions": {NEW: row_of(NEW)}, "cuda": {}}), encoding="utf-8")
    return path, "cuda: the file holds only a `versions:` mapping"


@pytest.mark.parametrize("spoil", [_not_json, _bad_kind, _wrong_version, _too_large, _row_unknown_cuda,
                                   _row_missing_field, _table_other_key])
def test_a_malformed_user_file_is_one_error_line_naming_file_and_field(config, spoil):
    path, expected = spoil(config)
    result = kit("upgrade", "--to", NEW, "preset=rtx4090-awq")
    assert result.exit_code == 1
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{path}: ") and expected in lines[0], lines[0]
    assert "Traceback" not in result.output


def test_a_link_out_of_the_users_folder_is_refused(config, tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    path = config / "flags" / f"vllm-{NEW}.json"
    path.replace(elsewhere)
    path.symlink_to(elsewhere)
    result = kit("upgrade", "--to", NEW, "preset=rtx4090-awq")
    assert result.exit_code == 1
    lines = error_lines(result.stderr)
    assert lines == [f"{path}: is a link to {elsewhere}, outside {config}; the kit reads the user's data only "
                     "inside that folder"]
    # a link that stays inside the folder is the user's own arrangement: read
    inside = config / "flags" / "kept.json"
    elsewhere.replace(inside)
    path.unlink()
    path.symlink_to(inside.name)
    assert kit("upgrade", "--to", NEW, "preset=rtx4090-awq").exit_code == 0


def test_the_shipped_snapshot_and_row_win_over_a_users_copy(config):
    shipped = DATA_DIR / "flags" / "vllm-0.33.0.json"
    mine = config / "flags" / "vllm-0.33.0.json"
    mine.write_text("not even JSON", encoding="utf-8")
    table = config / "vllm.yaml"
    table.write_text(yaml.safe_dump({"versions": {"0.33.0": {**row_of("0.33.0"), "cuda": "11.0"},
                                                  NEW: row_of(NEW)}}), encoding="utf-8")
    result = kit("upgrade", "--to", "0.33.0", "preset=rtx4090-awq", "image.vllm_version=0.32.0")
    assert result.exit_code == 0, result.output
    # not silently: the upgrade names both files it did not read
    assert f"note: {mine} is not read: the kit ships the snapshot of vLLM 0.33.0, which wins" in result.stderr
    assert f"note: {table}: versions.0.33.0: not read: the kit ships the row of vLLM 0.33.0" in result.stderr
    assert load_snapshot("0.33.0").flags == load_snapshot("0.33.0", shipped.parent).flags
    from kit.core.datafiles import vllm_table

    assert vllm_table()["versions"]["0.33.0"]["cuda"] == "13.0" and NEW in vllm_table()["versions"]


def test_every_shipped_row_passes_the_check_a_users_row_gets():
    from kit.core.tables import version_row_problems

    table = load_yaml("vllm.yaml")
    for version, row in table["versions"].items():
        assert version_row_problems(version, row, table) == [], version
    assert version_row_problems("0.35", row_of(NEW), table) == [("versions.0.35", "is not a release X.Y.Z "
                                                                "(quote it: \"0.34.0\")")]
    assert ("versions.0.35.0.pip", "is 'vllm==0.33.0', not vllm==0.35.0") in version_row_problems(
        NEW, {**row_of(NEW), "pip": "vllm==0.33.0"}, table)
    assert ("versions.0.35.0.defaults.gpu_memory_utilisation", "is not a planner rule the kit knows "
            "(kit/data/vllm.yaml rule_changes)") in version_row_problems(
        NEW, {**row_of(NEW), "defaults": {"gpu_memory_utilisation": 0.9}}, table)


def test_regenerate_writes_into_the_users_folder_never_the_package(tmp_path, monkeypatch):
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", "/somewhere/site-packages")
    ran: list[tuple[list[str], dict]] = []

    def fake_run(argv, check=False, **kwargs):  # pip install, then the generator in the venv
        ran.append((argv, kwargs))
        if "pip" not in argv:
            out = Path(argv[2])
            assert out.is_relative_to(home), f"the generator was told to write {out}"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(flagsnap.dumps_snapshot(snapshot_of(NEW)), encoding="utf-8")
        return subprocess.CompletedProcess(argv, 0)

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    monkeypatch.setattr(flagsnap.subprocess, "run", fake_run)
    assert flagsnap.main(["--regenerate", NEW, "--venv", str(venv)]) == 0
    written = home / "vllm-kit" / "flags" / f"vllm-{NEW}.json"
    assert json.loads(written.read_text())["vllm"]["version"] == NEW
    assert not (flagsnap.SNAPSHOT_DIR / f"vllm-{NEW}.json").exists()
    generator, kwargs = ran[-1]
    # A copy of the stdlib-only generator, not the kit's folder on PYTHONPATH (a wheel's whole site-packages).
    assert generator[1] == str(venv / "kit_flagsnap.py") and "PYTHONPATH" not in kwargs["env"]


def test_regenerate_refuses_to_write_into_an_installed_kit(tmp_path, monkeypatch, capsys):
    package = tmp_path / "site-packages" / "kit"
    (package / "data" / "flags").mkdir(parents=True)
    monkeypatch.setattr(flagsnap, "PACKAGE_DIR", package)  # no pyproject.toml beside it: a wheel install
    out = package / "data" / "flags" / f"vllm-{NEW}.json"
    assert flagsnap.main(["--regenerate", NEW, str(out)]) == 1
    assert f"{out}: inside the installed kit" in capsys.readouterr().err
    assert not out.exists() and os.listdir(package / "data" / "flags") == []


def test_the_venvs_copy_of_the_generator_writes_into_a_config_folder_beside_it(tmp_path):
    # regenerate() runs a copy of flagsnap.py in the throwaway venv; with the venv and $XDG_CONFIG_HOME both under
    # one folder (/tmp), the copy took that folder for an installed kit and refused to write (found making the 0.34.0
    # snapshot). Run the real copy: it must get past the OUT check to vLLM's import (none here).
    import sys

    venv = tmp_path / "venv"
    venv.mkdir()
    copy = venv / "kit_flagsnap.py"
    copy.write_text(Path(flagsnap.__file__).read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "xdg" / "vllm-kit" / "flags" / f"vllm-{NEW}.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run([sys.executable, str(copy), str(out)], capture_output=True, text=True, timeout=120,
                         cwd=venv, env=env)
    assert ran.returncode == 1
    assert "inside the installed kit" not in ran.stderr
    assert "vllm is not importable here" in ran.stderr


def test_skip_requirement_installs_the_release_without_the_pin_the_index_lacks():
    # The list the venv's Python prints for `--skip-requirement` (vLLM 0.34.0 pins flashinfer-python==0.7.3, which
    # the index lacks), run for real on an installed distribution: markers for extras and other platforms left out.
    import sys

    listed = subprocess.run([sys.executable, "-c", flagsnap._REQUIREMENTS_SCRIPT, "pydantic", "Typing_Extensions"],
                            capture_output=True, text=True, timeout=60, check=True)
    names = [line.split(">")[0].split("=")[0].split("<")[0] for line in listed.stdout.split()]
    assert "annotated-types" in names and "pydantic-core" in names
    assert "typing-extensions" not in names  # skipped, whatever its spelling
    assert "email-validator" not in names and "tzdata" not in names  # extras only
    assert "--skip-requirement PKG" in subprocess.run([sys.executable, "-m", "kit.config.flagsnap", "--help"],
                                                      capture_output=True, text=True, timeout=60).stdout
