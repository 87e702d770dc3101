"""The folder's record is checked, not trusted (issue 35, item 4): its preset path must be in the folder, the shipped
presets or a presets folder of the user's (a file elsewhere only while it is the very file rendered), a change to
the user's preset is shown and needs --accept-preset-change, and the record has a size cap."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from kit.core.datafiles import PRESETS_DIR
from kit.deploy.record import PRESET_COPY, RECORD_FILE, read_record
from tests.unit.test_record import kit

pytestmark = pytest.mark.unit


@pytest.fixture()
def project(tmp_path):
    """A project as docs/guide/presets.md lays it out: presets/mine.yaml and deploy/ rendered from the project's root."""
    mine = tmp_path / "presets" / "mine.yaml"
    mine.parent.mkdir()
    shutil.copy(PRESETS_DIR / "cpu.yaml", mine)
    result = kit("render", "preset=presets/mine.yaml", "--out", "deploy", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    return tmp_path, mine, tmp_path / "deploy"


def point_record(out: Path, ref: str) -> None:
    data = yaml.safe_load((out / RECORD_FILE).read_text())
    data["preset"]["ref"] = ref
    (out / RECORD_FILE).write_text(yaml.safe_dump(data))


@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_a_record_pointing_outside_is_refused_and_the_file_not_used(project, tmp_path, how):
    root, _, out = project
    hostile = tmp_path / "elsewhere" / "x.yaml"
    hostile.parent.mkdir()
    hostile.write_text((PRESETS_DIR / "cpu.yaml").read_text().replace("max_num_seqs: 8", "max_num_seqs: 3"))
    point_record(out, os.path.relpath(hostile, out) if how == "relative" else str(hostile))
    before = (out / "compose.yaml").read_text()
    for cwd in (root, out):
        result = kit("render", "--out", str(out), cwd=cwd)
        assert result.exit_code == 1, result.output
        assert f"{out / RECORD_FILE}: preset.ref: " in result.output
        assert f"resolves to {hostile}, outside this folder, the shipped presets and your presets folders" in \
            result.output
        assert "it is not the file this folder was rendered from" in result.output
    assert (out / "compose.yaml").read_text() == before


def test_a_record_pointing_at_a_fifo_or_device_does_not_hang(project, tmp_path):
    _, _, out = project
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    for target in (str(fifo), "/dev/zero"):
        point_record(out, target)
        started = time.monotonic()
        result = kit("render", "--out", str(out))
        assert result.exit_code == 1 and "preset.ref: " in result.output, result.output
        assert time.monotonic() - started < 10


def test_a_changed_preset_is_shown_and_needs_accept_preset_change(project):
    root, mine, out = project
    assert (out / PRESET_COPY).read_text() == mine.read_text()  # the copy a change is shown against
    mine.write_text(mine.read_text().replace("max_num_seqs: 8", "max_num_seqs: 6"))
    result = kit("render", "--out", str(out), cwd=root)
    assert result.exit_code == 1, result.output
    assert f"{out / RECORD_FILE}: preset.sha256: ../presets/mine.yaml changed since this folder was rendered" in \
        result.output
    # the diff as lines of its own, not escaped into the error's one line
    lines = result.output.splitlines()
    assert "-  max_num_seqs: 8" in lines and "+  max_num_seqs: 6" in lines, result.output
    assert "\\n" not in result.output
    assert "--accept-preset-change" in result.output
    assert '"8"' in (out / "compose.yaml").read_text()  # nothing rendered
    accepted = kit("render", "--out", str(out), "--accept-preset-change", cwd=root)
    assert accepted.exit_code == 0, accepted.output
    assert '"6"' in (out / "compose.yaml").read_text()
    assert kit("render", "--out", str(out), cwd=root).exit_code == 0  # the new sha256 is recorded
    # naming the preset on the command line is the user's own choice: no question asked
    mine.write_text(mine.read_text().replace("max_num_seqs: 6", "max_num_seqs: 5"))
    assert kit("render", "preset=presets/mine.yaml", "--out", "deploy", cwd=root).exit_code == 0


def test_a_preset_beside_and_inside_the_folder_and_a_shipped_one_pass(project):
    root, mine, out = project
    assert kit("render", "--out", str(out), cwd=out).exit_code == 0  # ../presets beside the folder
    inside = out / "mine.yaml"
    shutil.copy(mine, inside)
    assert kit("render", "preset=deploy/mine.yaml", "--replace", "--out", "deploy", cwd=root).exit_code == 0
    assert read_record(out).preset == "mine.yaml"
    assert kit("render", "--out", str(out), cwd=out.parent.parent).exit_code == 0


def test_a_record_larger_than_the_cap_is_refused_before_it_is_read(project):
    _, _, out = project
    data = yaml.safe_load((out / RECORD_FILE).read_text())
    data["overrides"] = [f"runtime.unsafe_env.V{i}=" + "x" * 60 for i in range(110_000)]  # about 7 MB
    (out / RECORD_FILE).write_text(yaml.safe_dump(data))
    started = time.monotonic()
    result = kit("render", "--out", str(out))
    assert result.exit_code == 1
    assert f"{out / RECORD_FILE}: " in result.output
    assert "larger than the 65536 bytes a deployment record may have" in result.output
    assert time.monotonic() - started < 5


def test_a_preset_kept_beside_the_folder_and_edited_is_rendered_by_naming_it(tmp_path):
    """The walk: a copy of presets/cpu.yaml in the working folder (not ./presets), rendered with an override and a
    base image, then edited. Re-rendering from the record is refused (a file outside the presets folders is read only
    while it is the very text rendered), and the hint said `preset=PATH --replace`, which drops what the folder
    records. Naming the file alone renders it as it is now and keeps the override and the base image."""
    mine = tmp_path / "mine.yaml"
    shutil.copy(PRESETS_DIR / "cpu.yaml", mine)
    out = tmp_path / "deploy"
    first = kit("render", "preset=mine.yaml", "engine.max_num_seqs=2", "--base-image", "vllm-kit/base:bookworm",
                "--out", str(out), cwd=tmp_path)
    assert first.exit_code == 0, first.output
    mine.write_text(mine.read_text().replace("max_model_len: 1024", "max_model_len: 1536"))
    refused = kit("render", "--out", str(out), "--accept-preset-change", cwd=tmp_path)
    assert refused.exit_code == 1
    assert "another file, or yours edited since" in refused.output and "--replace" not in refused.output
    assert "name it on the command line (preset=PATH; the folder's recorded overrides" in refused.output
    named = kit("render", "--out", str(out), "preset=mine.yaml", cwd=tmp_path)
    assert named.exit_code == 0, named.output
    record = read_record(out)
    assert list(record.overrides) == ["engine.max_num_seqs=2"]
    assert record.base_image == "vllm-kit/base:bookworm"
    assert '"1536"' in (out / "compose.yaml").read_text()
