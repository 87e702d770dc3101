"""A record you can steer (issue 36): `--unset KEY` drops one recorded override (or the recorded --base-image),
`--allow-no-fit` is for one command unless `--always-allow-no-fit` records it and `--check-fit` turns that off, a
moved preset is re-pointed with its overrides kept, and a compose stack that runs keeps its folder from switching to
--target k8s. Through the real CLI, no Docker: the running-stack probe's answer is injected."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.datafiles import PRESETS_DIR
from kit.deploy.record import RECORD_FILE, read_record, target_switch_refusal

pytestmark = pytest.mark.unit

NO_FIT = ["engine.max_model_len=40960", "engine.max_num_seqs=256", "engine.gpu_memory_utilization=0.5"]


def kit(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_unset_drops_one_recorded_override_or_the_base_image(tmp_path):
    out = str(tmp_path / "d")
    assert kit("render", "preset=cpu", "runtime.port=8123", "engine.max_num_seqs=4", "--base-image",
               "debian:12", "--out", out).exit_code == 0
    result = kit("render", "--out", out, "--unset", "engine.max_num_seqs")
    assert result.exit_code == 0, result.output
    record = read_record(Path(out))
    assert record.overrides == ("runtime.port=8123",) and record.base_image == "debian:12"
    command = yaml.safe_load((Path(out) / "compose.yaml").read_text())["services"]["vllm"]["command"]
    assert command[command.index("--max-num-seqs") + 1] == "8"  # the preset's own value again, not 4
    assert kit("render", "--out", out, "--unset", "base_image").exit_code == 0
    assert read_record(Path(out)).base_image is None and read_record(Path(out)).overrides == ("runtime.port=8123",)


def test_unset_of_what_is_not_recorded_is_refused_naming_what_is(tmp_path):
    out = str(tmp_path / "d")
    assert kit("render", "preset=cpu", "runtime.port=8123", "--out", out).exit_code == 0
    before = (tmp_path / "d" / RECORD_FILE).read_text()
    unknown = kit("render", "--out", out, "--unset", "engine.max_num_seqs")
    assert unknown.exit_code == 1 and "it records: runtime.port" in unknown.stderr, unknown.output
    both = kit("render", "--out", out, "--unset", "runtime.port", "runtime.port=9000")
    assert both.exit_code == 2, both.output
    fresh = kit("render", "preset=cpu", "--out", str(tmp_path / "new"), "--unset", "runtime.port")
    assert fresh.exit_code == 1 and "nothing is recorded here" in fresh.stderr
    assert (tmp_path / "d" / RECORD_FILE).read_text() == before


def test_allow_no_fit_is_for_one_render_and_always_is_recorded_until_check_fit(tmp_path):
    out = str(tmp_path / "d")
    once = kit("render", "preset=rtx4090-awq", *NO_FIT, "--allow-no-fit", "--out", out)
    assert once.exit_code == 0, once.output
    assert read_record(Path(out)).allow_no_fit is False
    again = kit("render", "--out", out)
    assert again.exit_code == 1 and "does not fit in memory" in again.stderr  # the check is on again
    always = kit("render", "--out", out, "--always-allow-no-fit")
    assert always.exit_code == 0 and read_record(Path(out)).allow_no_fit is True
    assert kit("render", "--out", out).exit_code == 0  # recorded on purpose: it stays
    checked = kit("render", "--out", out, "--check-fit")
    assert checked.exit_code == 1 and "does not fit in memory" in checked.stderr
    fixed = kit("render", "--out", out, "--check-fit", "engine.max_model_len=8192")
    assert fixed.exit_code == 0, fixed.output
    assert read_record(Path(out)).allow_no_fit is False
    assert kit("render", "--out", out, "engine.max_model_len=40960").exit_code == 1
    assert kit("render", "--out", out, "--check-fit", "--always-allow-no-fit").exit_code == 2
    assert kit("render", "--out", out, "--check-fit", "--allow-no-fit").exit_code == 2


def test_a_recorded_allow_no_fit_of_an_older_kit_is_turned_off_by_check_fit(tmp_path):
    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--out", str(out)).exit_code == 0
    path = out / RECORD_FILE
    path.write_text(path.read_text().replace("allow_no_fit: false", "allow_no_fit: true"))
    assert read_record(out).allow_no_fit is True
    assert kit("render", "--out", str(out), "--check-fit", "--force").exit_code == 0
    assert read_record(out).allow_no_fit is False


def test_a_moved_preset_is_re_pointed_with_its_overrides_kept(tmp_path):
    first = tmp_path / "p" / "mine.yaml"
    first.parent.mkdir()
    shutil.copy(PRESETS_DIR / "cpu.yaml", first)
    out = str(tmp_path / "d")
    assert kit("render", f"preset={first}", "runtime.port=8123", "--out", out).exit_code == 0
    moved = tmp_path / "q" / "mine.yaml"
    moved.parent.mkdir()
    first.rename(moved)
    result = kit("render", f"preset={moved}", "--out", out)
    assert result.exit_code == 0, result.output
    record = read_record(Path(out))
    assert record.overrides == ("runtime.port=8123",) and record.preset == "../q/mine.yaml"
    # Another preset is still another deployment: refused without --replace.
    other = tmp_path / "q" / "other.yaml"
    other.write_text((PRESETS_DIR / "rtx4090-awq.yaml").read_text())
    moved.unlink()
    assert kit("render", f"preset={other}", "--out", out).exit_code == 1


RUNNING = [{"project": "d", "service": "vllm", "state": "running"}]


def test_the_target_switch_decision():
    out = Path("d")
    compose = read_record_of("compose")
    assert target_switch_refusal(out, compose, "k8s", []) is None
    assert target_switch_refusal(out, compose, "compose", RUNNING) is None
    assert target_switch_refusal(out, None, "k8s", RUNNING) is None
    assert target_switch_refusal(out, read_record_of("k8s"), "k8s", RUNNING) is None
    refusal = target_switch_refusal(out, compose, "k8s", RUNNING)
    assert refusal is not None and "vllm (d)" in refusal.message and "kit down --out d" in (refusal.hint or "")


def read_record_of(target: str):
    from kit.deploy.record import Record

    return Record(preset="cpu", preset_name="cpu", preset_sha256="", target=target)


@pytest.mark.parametrize("running", [RUNNING, []])
def test_render_asks_the_probe_before_switching_to_k8s(tmp_path, monkeypatch, running):
    from kit.run import ops

    out = tmp_path / "d"
    assert kit("render", "preset=cpu", "--out", str(out)).exit_code == 0
    asked = []
    monkeypatch.setattr(ops, "running_services", lambda folder: asked.append(folder) or running)
    assert kit("render", "--out", str(out), "--dry-run", "--target", "k8s").exit_code == 0 and not asked
    result = kit("render", "--out", str(out), "--target", "k8s", "image.repository=registry.test/kit/cpu")
    assert asked == [out]
    if running:
        assert result.exit_code == 1 and "compose stack of this folder is running" in result.stderr
        assert (out / "compose.yaml").is_file() and read_record(out).target == "compose"
    else:
        assert result.exit_code == 0, result.output
        assert not (out / "compose.yaml").exists() and read_record(out).target == "k8s"
        assert yaml.safe_load((out / "k8s" / "kustomization.yaml").read_text())
